package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// TestMain runs the tests, then removes the folders they share (the
// programs built once, the venv, the wheels), which outlive any one test.
func TestMain(m *testing.M) {
	code := m.Run()
	shared.Lock()
	for _, dir := range shared.dirs {
		os.RemoveAll(dir)
	}
	shared.Unlock()
	os.Exit(code)
}

// shared are the folders made once for every test that needs them; TestMain
// removes them.
var shared struct {
	sync.Mutex
	dirs []string
}

// sharedTemp makes a folder for the whole run, removed when it ends.
func sharedTemp(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err == nil {
		shared.Lock()
		shared.dirs = append(shared.dirs, dir)
		shared.Unlock()
	}
	return dir, err
}

// binary builds the named command of the repository once per test run and
// returns its path.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = sharedTemp("ffcvfs-bin-")
		if buildErr != nil {
			return
		}
		for _, cmd := range []string{"ffcvfs"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "../cmd/"+cmd).CombinedOutput()
			if err != nil {
				buildErr = &buildError{cmd, string(out), err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if name != "ffcvfs" {
		return extraBinary(t, name)
	}
	return filepath.Join(binDir, name)
}

type buildError struct {
	cmd, out string
	err      error
}

func (e *buildError) Error() string { return "building " + e.cmd + ": " + e.err.Error() + "\n" + e.out }

// run runs a command and returns its stdout; it fails the test when the exit
// status is not want.
func run(t *testing.T, want int, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if code != want {
		t.Fatalf("%s %v: exit %d, want %d\nstdout: %s\nstderr: %s", name, args, code, want, o.String(), e.String())
	}
	return o.String(), e.String()
}

// debianPython returns /usr/bin/python3 if it imports the given modules.
func debianPython(t *testing.T, modules ...string) string {
	t.Helper()
	const py = "/usr/bin/python3"
	for _, m := range modules {
		if err := exec.Command(py, "-c", "import "+m).Run(); err != nil {
			testenv.Missing(t, "%s cannot import %s (apt-get install python3-torchvision python3-numpy python3-pil)", py, m)
		}
	}
	return py
}

// torchvisionImageFolder returns what torchvision's ImageFolder sees in root:
// classes, and (path, label) per sample.
func torchvisionImageFolder(t *testing.T, root string) (classes []string, samples [][2]any) {
	t.Helper()
	py := debianPython(t, "torchvision")
	out, _ := run(t, 0, py, "-c", `
import json, sys
from torchvision.datasets import ImageFolder
d = ImageFolder(sys.argv[1])
json.dump({"classes": d.classes, "samples": d.samples}, sys.stdout)
`, root)
	var v struct {
		Classes []string
		Samples [][2]any
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v.Classes, v.Samples
}

// mountBeton mounts src with `ffcvfs mount args... src mnt` on a new folder
// under t.TempDir(), waits until the mount serves its control files, and
// returns mnt. t.Cleanup unmounts it with SIGTERM and checks that the
// process exits and leaves no mount behind.
func mountBeton(t *testing.T, src string, args ...string) (mnt string) {
	t.Helper()
	return startMount(t, nil, src, args...).mnt
}

// mountProc is a running `ffcvfs mount`.
type mountProc struct {
	mnt    string
	cmd    *exec.Cmd
	stderr *testenv.OutputBuffer
	exited chan struct{} // closed when cmd has exited
}

// mountedFiles returns the sample files of the class folders of mnt, as
// "class/file", in ImageFolder's order: by class, then by file name.
func mountedFiles(t *testing.T, mnt string) []string {
	t.Helper()
	var files []string
	classes, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		ents, err := os.ReadDir(filepath.Join(mnt, c.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			files = append(files, c.Name()+"/"+e.Name())
		}
	}
	return files
}

// needFUSE ends the test via testenv.Missing when FUSE mounts cannot work.
func needFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "/dev/fuse: %v", err)
	}
	testenv.LookPath(t, "fusermount3")
}

// startMount is mountBeton with extra environment variables (NAME=value)
// for the child, which replace the test process's AWS_* variables when
// given. It returns the running process.
func startMount(t *testing.T, env []string, src string, args ...string) *mountProc {
	t.Helper()
	needFUSE(t)
	ffcvfs := binary(t, "ffcvfs")
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ffcvfs, append(append([]string{"mount"}, args...), src, mnt)...)
	if env != nil {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "AWS_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
	}
	p := launchMount(t, cmd, mnt)
	p.waitServing(t)
	return p
}

// waitServing waits until the mount serves its stats.json, failing the
// test when the process exits first or after testenv.Patience.
func (p *mountProc) waitServing(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for {
		if _, err := os.Stat(control.Path(p.mnt, control.StatsFile)); err == nil {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("ffcvfs mount at %s exited before serving (%s):\n%s", p.mnt, p.cmd.ProcessState, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ffcvfs mount: %s/.ffcvfs/stats.json not there in time:\n%s", p.mnt, p.stderr)
		}
	}
}

// launchMount starts cmd, an `ffcvfs mount` at mnt, with its output
// captured; t.Cleanup stops it (see stop).
func launchMount(t *testing.T, cmd *exec.Cmd, mnt string) *mountProc {
	t.Helper()
	p := &mountProc{mnt: mnt, cmd: cmd, stderr: &testenv.OutputBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// terminate sends SIGTERM and waits up to testenv.Patience for the process to exit. It
// reports whether it exited.
func (p *mountProc) terminate() bool {
	select {
	case <-p.exited:
		return true
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(testenv.Patience):
		return false
	}
}

// stop unmounts with SIGTERM (detaching the mount and killing the process
// when that does not end it in time) and checks that the process exited
// with status 0 and that no mount, stale or live, remains.
func (p *mountProc) stop(t *testing.T) {
	t.Helper()
	signaled := true
	select {
	case <-p.exited:
		signaled = false // ended earlier; the test has seen to it
	default:
	}
	if !p.terminate() {
		t.Errorf("ffcvfs mount %s: still running long after SIGTERM; detaching and killing it:\n%s", p.mnt, p.stderr)
		forceUnmount(p.mnt)
		_ = p.cmd.Process.Kill()
		<-p.exited
	} else if signaled && !p.cmd.ProcessState.Success() {
		t.Errorf("ffcvfs mount %s: %s after SIGTERM:\n%s", p.mnt, p.cmd.ProcessState, p.stderr)
	}
	checkUnmounted(t, p.mnt)
}

// checkUnmounted fails the test when dir is still a mountpoint, or a stale
// FUSE mount (whose server is gone) is left there, and detaches it then.
func checkUnmounted(t *testing.T, dir string) {
	t.Helper()
	if isMountpoint(t, dir) {
		t.Errorf("%s is still in /proc/self/mountinfo after the mount process ended", dir)
		forceUnmount(dir)
	}
	if _, err := os.Stat(dir); errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("%s is a stale mount: %v", dir, err)
		forceUnmount(dir)
	}
}

// isMountpoint reports whether dir appears as a mountpoint in
// /proc/self/mountinfo.
func isMountpoint(t *testing.T, dir string) bool {
	t.Helper()
	return mountinfo(t, dir) != nil
}

// mountinfo returns the fields of dir's line in /proc/self/mountinfo, or
// nil when dir is not a mountpoint.
func mountinfo(t *testing.T, dir string) []string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	unescape := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescape.Replace(f[4]) == abs {
			return f
		}
	}
	return nil
}

// forceUnmount detaches a mount lazily.
func forceUnmount(dir string) {
	if exec.Command("fusermount3", "-u", "-z", dir).Run() != nil {
		_ = exec.Command("umount", "-l", dir).Run()
	}
}

// extraBuilds holds the commands other than ffcvfs that binary builds on first
// use (ffcvfeed), each once per test run, so that a command that does not
// build fails only the tests that use it.
var extraBuilds sync.Map // name → *extraBuild

type extraBuild struct {
	once sync.Once
	err  error
}

// extraBinary builds ../cmd/<name>, or ../tools/<tool> for a name
// tools/<tool>, into binDir on first use and returns its path. binary has
// created binDir already.
func extraBinary(t *testing.T, name string) string {
	t.Helper()
	v, _ := extraBuilds.LoadOrStore(name, &extraBuild{})
	b := v.(*extraBuild)
	path, pkg := filepath.Join(binDir, name), "../cmd/"+name
	if tool, ok := strings.CutPrefix(name, "tools/"); ok {
		path, pkg = filepath.Join(binDir, tool), "../"+name
	}
	b.once.Do(func() {
		out, err := exec.Command("go", "build", "-o", path, pkg).CombinedOutput()
		if err != nil {
			b.err = &buildError{name, string(out), err}
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return path
}

// waitPidfd waits, for at most testenv.Patience, until the process of a
// pidfd (unix.PidfdOpen) has exited, closes the pidfd, and reports whether
// the process exited.
func waitPidfd(fd int) bool {
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(testenv.Patience.Milliseconds()))
	return err == nil && n == 1
}
