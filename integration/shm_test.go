package integration

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// TestFeedSmallShm: ffcvfeed serve under a /dev/shm of 64 MiB (Docker's
// default), in a mount namespace of its own. A ring that does not fit
// (256 images of 224×224, 4 slots: 147 MiB) is refused at start with exit
// 2 and a sentence naming /dev/shm, its free space and the flags to lower;
// it used to die of SIGBUS in its first batches. A ring that fits serves
// and ends cleanly at SIGTERM. Never a signal.
func TestFeedSmallShm(t *testing.T) {
	unshare := testenv.LookPath(t, "unshare")
	if os.Geteuid() != 0 {
		testenv.Missing(t, "a private mount namespace needs root")
	}
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	bin := binary(t, "ffcvfeed")
	// The shell mounts a 64 MiB tmpfs on /dev/shm in the new namespace
	// only, then runs ffcvfeed there.
	feed := func(ctx context.Context, sock string, args ...string) *exec.Cmd {
		script := `mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm && exec "$@"`
		all := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", bin, "serve", "--data", beton, "--socket", sock, "--workers", "1"}, args...)
		return exec.CommandContext(ctx, unshare, all...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()

	cmd := feed(ctx, testenv.Socket(t, "big.sock"), "--batch-size", "256", "--resolution", "224")
	out, err := cmd.CombinedOutput()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() || cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("a ring larger than /dev/shm: %v (%v), want exit 2\n%s", err, ws, out)
	}
	for _, want := range []string{"/dev/shm has ", "MiB free, a ring of 4 slots needs 147.0 MiB", "docker run --shm-size", "lower --slots (4) or --batch-size (256)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal lacks %q:\n%s", want, out)
		}
	}

	// A ring that fits: serving, then SIGTERM.
	cmd = feed(ctx, testenv.Socket(t, "small.sock"), "--batch-size", "16", "--resolution", "64")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	serving := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "level=INFO msg=serving ") {
			serving = true
			break
		}
	}
	if !serving {
		cmd.Wait()
		t.Fatalf("a ring that fits in /dev/shm: the server never served (%v)", cmd.ProcessState)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	// unshare and sh exec'd ffcvfeed: it is the process started.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if err != nil || ws.Signaled() {
			t.Errorf("a ring that fits: ended with %v (%v), want exit 0 at SIGTERM", err, ws)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("the server did not end at SIGTERM")
	}
}
