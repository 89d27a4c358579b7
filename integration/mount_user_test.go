package integration

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// nobody is the user an unprivileged mount runs as when the tests run as
// root.
const nobody = 65534

// TestMountUnprivileged: a user who is not root mounts through the
// fusermount3 helper (the descriptor passed back over _FUSE_COMMFD), reads
// every sample byte-exact, announces an order, and SIGTERM unmounts with
// fusermount3 -u. As root the mount runs as nobody; /dev/fuse is then made
// usable by every user for the test's length, as Debian's udev rule has it
// (mode 0666), where a machine without udev left it 0600.
func TestMountUnprivileged(t *testing.T) {
	needFUSE(t)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: nobody, Gid: nobody}
		st, err := os.Stat("/dev/fuse")
		if err != nil {
			testenv.Missing(t, "/dev/fuse: %v", err)
		}
		if mode := st.Mode().Perm(); mode&0o006 != 0o006 {
			if err := os.Chmod("/dev/fuse", 0o666); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod("/dev/fuse", mode) })
		}
	}
	// A folder of the user's own with the binary, the beton and the
	// mountpoint; t.TempDir's folders are 0700 to others.
	dir, err := os.MkdirTemp("", "ffcvfs-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	bin, beton, mnt := filepath.Join(dir, "ffcvfs"), filepath.Join(dir, "data.beton"), filepath.Join(dir, "mnt")
	copyFile(t, binary(t, "ffcvfs"), bin, 0o755)
	copyFile(t, fixture, beton, 0o644)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		for _, p := range []string{dir, bin, beton, mnt} {
			if err := os.Chown(p, nobody, nobody); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	asUser := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}

	p := launchMount(t, asUser(bin, "mount", beton, mnt), mnt)
	// Root cannot look into another user's mount (no allow_other): wait for
	// it in the mount table, then read it as its user.
	deadline := time.Now().Add(20 * time.Second)
	for !isMountpoint(t, mnt) {
		select {
		case <-p.exited:
			t.Fatalf("ffcvfs mount exited before mounting (%s):\n%s", p.cmd.ProcessState, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not mounted after 20 s:\n%s", mnt, p.stderr)
		}
	}
	if cred != nil {
		f := mountinfo(t, mnt)
		if len(f) == 0 || !strings.Contains(f[len(f)-1], "user_id=65534") {
			t.Errorf("mountinfo %q: not nobody's mount", f)
		}
	}

	out, err := asUser("sh", "-c", `cd "$1" && find . -name '*.jpg' -type f -exec sha256sum {} +`, "sh", mnt).Output()
	if err != nil {
		t.Fatalf("reading the mount as its user: %v\n%s", err, p.stderr)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			got = append(got, f[0])
		}
	}
	_, images := fixtureManifest(t, fixture)
	var want []string
	for _, im := range images {
		want = append(want, im["image"].SHA256)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("read %d files; their SHA-256 sums differ from the %d samples' in the manifest", len(got), len(want))
	}
	// The control file is the owner's to write.
	if out, err := asUser("sh", "-c", `printf 'imagefolder\n0\n1\n2\n' > "$1/.ffcvfs/announce"`, "sh", mnt).CombinedOutput(); err != nil {
		t.Errorf("announcing as the mount's user: %v: %s", err, out)
	}

	// SIGTERM unmounts (with fusermount3 -u) and ends the process with
	// status 0.
	p.stop(t)
}

// copyFile copies src to dst with the given mode.
func copyFile(t *testing.T, src, dst string, mode fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}
