package transport

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// CheckMountpoint returns a clear error when dir cannot take a mount: it
// does not exist, is not a folder, is not empty, or is a mount already.
func CheckMountpoint(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("mountpoint %s does not exist; create it with mkdir -p %s", dir, dir)
		}
		return fmt.Errorf("mountpoint %s: %w (a stale mount? try: ffcvfs umount %s)", dir, err, dir)
	}
	if !st.IsDir() {
		return fmt.Errorf("mountpoint %s is not a folder", dir)
	}
	if mounted, _ := IsMounted(dir); mounted {
		return fmt.Errorf("%s is already a mountpoint; unmount it first (ffcvfs umount %s)", dir, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("mountpoint %s is not empty (it holds %s); mount on an empty folder", dir, ents[0].Name())
	}
	return nil
}

// IsMounted reports whether dir is a mountpoint, from /proc/self/mountinfo.
func IsMounted(dir string) (bool, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountinfo(f[4]) == abs {
			return true, nil
		}
	}
	return false, nil
}

func unescapeMountinfo(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// CheckFUSE returns a clear error when FUSE mounts cannot work here.
func CheckFUSE() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("/dev/fuse is missing (%v): load the fuse module (modprobe fuse) or, in a container, pass --device /dev/fuse", err)
	}
	if os.Getuid() != 0 {
		if _, err := fusermount(); err != nil {
			return err
		}
	}
	return nil
}

// fusermount returns the path of the setuid mount helper: fusermount3, or
// fusermount where only the older one is installed.
func fusermount() (string, error) {
	if p, err := exec.LookPath("fusermount3"); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("fusermount"); err == nil {
		return p, nil
	}
	return "", errors.New("fusermount3 not found: install the fuse3 package (apt-get install fuse3)")
}

// Unmount unmounts dir with fusermount3 -u (or umount when root), for a
// mount served by another process.
func Unmount(dir string) error { return unmount(dir, false) }

// UnmountLazy detaches the mount at dir at once, even while programs hold
// files of it (fusermount3 -u -z, umount -l): no new path resolves, and
// the mount goes when the last of those files is closed.
func UnmountLazy(dir string) error { return unmount(dir, true) }

func unmount(dir string, lazy bool) error {
	if mounted, err := IsMounted(dir); err == nil && !mounted {
		return fmt.Errorf("%s is not mounted", dir)
	}
	var cmd *exec.Cmd
	if p, err := exec.LookPath("fusermount3"); err == nil {
		cmd = exec.Command(p, "-u", dir)
		if lazy {
			cmd = exec.Command(p, "-u", "-z", dir)
		}
	} else if os.Getuid() == 0 {
		cmd = exec.Command("umount", dir)
		if lazy {
			cmd = exec.Command("umount", "-l", dir)
		}
	} else {
		return errors.New("fusermount3 not found: install the fuse3 package (apt-get install fuse3)")
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if !lazy && strings.Contains(strings.ToLower(msg), "busy") {
		hint := "close them, or detach the mount now with 'ffcvfs umount --lazy " + dir + "' (it goes once they are closed)"
		if hs := Holders(dir); len(hs) > 0 {
			return fmt.Errorf("%s is busy: %s %s files or folders in it; %s", dir, strings.Join(hs, ", "), plural(len(hs), "holds", "hold"), hint)
		}
		return fmt.Errorf("%s is busy: programs hold files or folders in it (see fuser -vm %s); %s", dir, dir, hint)
	}
	return fmt.Errorf("unmounting %s: %v: %s", dir, err, msg)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Holders names the processes ("comm (pid N)") with a file, a working
// folder or a root under dir, as far as /proc lets this user see. It reads
// only /proc: nothing under dir, which may be a mount whose server is gone.
func Holders(dir string) []string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	under := func(p string) bool { return p == abs || strings.HasPrefix(p, abs+"/") }
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		base := "/proc/" + e.Name()
		holds := false
		for _, l := range []string{"cwd", "root"} {
			if p, err := os.Readlink(base + "/" + l); err == nil && under(p) {
				holds = true
			}
		}
		if fds, err := os.ReadDir(base + "/fd"); err == nil && !holds {
			for _, fd := range fds {
				if p, err := os.Readlink(base + "/fd/" + fd.Name()); err == nil && under(p) {
					holds = true
					break
				}
			}
		}
		if holds {
			comm, _ := os.ReadFile(base + "/comm")
			out = append(out, fmt.Sprintf("%s (pid %d)", strings.TrimSpace(string(comm)), pid))
		}
		if len(out) >= 10 {
			out = append(out, "…")
			break
		}
	}
	return out
}
