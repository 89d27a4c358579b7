package transport

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// killedEnv names the folder a child process mounts, holding the poll
// hack's file open until it is killed (TestKilledWhileStarting).
const killedEnv = "TRANSPORT_TEST_KILLED_MOUNT"

// TestKilledWhileStarting: a server killed (SIGKILL) while it holds the
// poll hack's file open, as it does for a moment once it serves, exits.
// It closed that file as it died and waited for ever, in state D, for
// its own answer to the FLUSH (seen once in a full run of the tests on a
// busy machine: the mount of a test killed right after it mounted).
func TestKilledWhileStarting(t *testing.T) {
	if dir := os.Getenv(killedEnv); dir != "" {
		holdPollHack = func() {
			fmt.Println("holding")
			select {}
		}
		_, err := Serve(dir, fuse.NewDefaultRawFileSystem(), fuse.MountOptions{Name: "transport-test", FsName: "transport-test", MaxWrite: 1 << 20})
		fmt.Println(err)
		os.Exit(1)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "/dev/fuse: %v", err)
	}
	testenv.LookPath(t, "fusermount3")
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWhileStarting$")
	cmd.Env = append(os.Environ(), killedEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "holding\n" {
		cmd.Process.Kill()
		<-done
		t.Fatalf("the server said %q", line)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(testenv.Patience):
		// Free it: abort its connection.
		abortConnection(t, dir)
		<-done
		t.Fatal("the killed server did not exit (state D, waiting for its own FLUSH)")
	}
}

// abortConnection aborts the FUSE connection of the mount at dir, through
// the fusectl file system.
func abortConnection(t *testing.T, dir string) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Log(err)
		return
	}
	ctl := "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(ctl, "..")); err == nil {
		unix.Mount("none", ctl, "fusectl", 0, "")
	}
	abort := filepath.Join(ctl, fmt.Sprint(unix.Minor(st.Dev)), "abort")
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		t.Logf("aborting %s: %v", strings.TrimSuffix(abort, "/abort"), err)
	}
}
