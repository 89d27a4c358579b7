package integration

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
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
	deadline := time.Now().Add(testenv.Patience)
	for !isMountpoint(t, mnt) {
		select {
		case <-p.exited:
			t.Fatalf("ffcvfs mount exited before mounting (%s):\n%s", p.cmd.ProcessState, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not mounted in time:\n%s", mnt, p.stderr)
		}
	}
	if cred != nil {
		f := mountinfo(t, mnt)
		if len(f) == 0 || !strings.Contains(f[len(f)-1], "user_id=65534") {
			t.Errorf("mountinfo %q: not nobody's mount", f)
		}
	}

	checkReadAllAs(t, asUser, mnt, fixture)
	// The control file is the owner's to write.
	if out, err := asUser(debianPython(t), "-c", announcePy, control.Path(mnt, control.AnnounceFile), "imagefolder\n0\n1\n2\n").CombinedOutput(); err != nil || string(out) != "ok 3\n" {
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

// announcePy sends argv[2] to the announce socket at argv[1] (a mount's
// .ffcvfs/announce) and prints the reply: the README's one-liner.
const announcePy = `import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.path.realpath(sys.argv[1]))
s.sendall(sys.argv[2].encode())
s.shutdown(socket.SHUT_WR)
sys.stdout.write(s.makefile().read())`

// TestAllowOtherAsNobody: another user of an --allow-other mount (nobody's
// read of an order file once replaced the owner's plan). Nobody reads every sample byte for byte and may read
// orders, which become plans of its own; it cannot replace the owner's
// plan, reach the announce socket, write anything, or map a file
// writable.
func TestAllowOtherAsNobody(t *testing.T) {
	needFUSE(t)
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, to run a reader as another user")
	}
	dir, err := os.MkdirTemp("", "ffcvfs-other-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	p := launchMount(t, exec.Command(binary(t, "ffcvfs"), "mount", "--allow-other", fixture, mnt), mnt)
	waitServing(t, p)
	asNobody := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		return cmd
	}

	// The owner's plan, held by this process.
	if _, err := os.ReadFile(control.Path(mnt, control.OrdersDir, "random", "0", "0")); err != nil {
		t.Fatal(err)
	}
	ownerPlan := "order:uid-0:random/0/0-of-1"
	if got := readMountStats(t, mnt).PlanOwners[ownerPlan]; got != uint32(os.Getpid()) {
		t.Fatalf("plan_owners[%s] = %d, want this process, %d", ownerPlan, got, os.Getpid())
	}
	// Nobody's read of the next epoch is a plan of its own.
	out, err := asNobody("cat", control.Path(mnt, control.OrdersDir, "random", "0", "5")).Output()
	if err != nil || len(strings.Fields(string(out))) != 200 {
		t.Fatalf("nobody reading an order: %v, %d lines", err, len(strings.Fields(string(out))))
	}
	if got := readMountStats(t, mnt).PlanOwners[ownerPlan]; got != uint32(os.Getpid()) {
		t.Errorf("after nobody's read, plan_owners[%s] = %d, want this process, %d", ownerPlan, got, os.Getpid())
	}
	// Nobody reads every sample, byte for byte.
	checkReadAllAs(t, asNobody, mnt, fixture)
	// Nobody cannot announce, write or map writable.
	out, err = asNobody(debianPython(t), "-c", announcePy, control.Path(mnt, control.AnnounceFile), "0\n").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "PermissionError") {
		t.Errorf("nobody announcing: %v: %s, want a PermissionError", err, out)
	}
	out, err = asNobody(debianPython(t), "-c", `import mmap, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDWR)
except OSError as e:
    print(e.errno); sys.exit(0)
m = mmap.mmap(fd, 0); m[0:2] = b"XX"; m.flush()
print("written")`, filepath.Join(mnt, mountedFiles(t, mnt)[0])).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(int(syscall.EROFS)) && strings.TrimSpace(string(out)) != fmt.Sprint(int(syscall.EACCES)) {
		t.Errorf("nobody opening a sample O_RDWR: %v: %s, want EROFS or EACCES", err, out)
	}
	p.stop(t)
}

// waitServing waits until the mount of p serves its control files.
func waitServing(t *testing.T, p *mountProc) {
	t.Helper()
	for {
		if _, err := os.Stat(control.Path(p.mnt, control.StatsFile)); err == nil {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("ffcvfs mount exited before serving (%s):\n%s", p.cmd.ProcessState, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkReadAllAs reads every image of the mount at mnt with sha256sum, run
// by as, and checks the sums against the fixture's manifest.
func checkReadAllAs(t *testing.T, as func(string, ...string) *exec.Cmd, mnt, fixture string) {
	t.Helper()
	out, err := as("sh", "-c", `cd "$1" && find . -name '*.jpg' -type f -exec sha256sum {} +`, "sh", mnt).Output()
	if err != nil {
		t.Fatalf("reading the mount: %v", err)
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
}
