package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// longTMPDIRScript reads one epoch through a Loader that starts its own
// server, prints the server's socket, then gives the Loader a socket path
// too long for one.
const longTMPDIRScript = `
import sys
from ffcvfs import FeedError, Loader

beton, long = sys.argv[1], sys.argv[2]
n = 0
with Loader(beton, batch_size=16, resolution=32, workers=1, epochs=1) as loader:
    print("socket", loader.socket_path, flush=True)
    for images, labels in loader:
        n += len(labels)
print("read", n, flush=True)
try:
    Loader(long, connect_timeout=0)
except FeedError as e:
    print("error:", e, flush=True)
`

// TestLongTMPDIR: with a TMPDIR of 150 characters, longer than the 107
// bytes a Unix socket's path may have, the mount starts (its announce
// socket placed where its path fits) and takes an order through
// .ffcvfs/announce, from a mountpoint under that TMPDIR too; the Python
// Loader starts its own server and reads an epoch; and a socket path given
// too long is a FeedError that says what to do, not OSError.
func TestLongTMPDIR(t *testing.T) {
	needFUSE(t)
	py := debianPython(t, "numpy")
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("t", max(150-len(base)-1, 1)))
	mnt := filepath.Join(long, "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if len(long) < 150 {
		t.Fatalf("TMPDIR of %d characters, want 150", len(long))
	}
	env := append(os.Environ(), "TMPDIR="+long, "XDG_RUNTIME_DIR=")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")

	ffcvfs := binary(t, "ffcvfs")
	mount := exec.Command(ffcvfs, "mount", "--background", beton, mnt)
	mount.Env = env
	if out, err := mount.CombinedOutput(); err != nil {
		t.Fatalf("ffcvfs mount --background with a TMPDIR of %d characters: %v\n%s", len(long), err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(ffcvfs, "umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("ffcvfs umount: %v\n%s", err, out)
		}
	})
	link := control.Path(mnt, control.AnnounceFile)
	target, err := os.Readlink(link)
	if err != nil || len(target) > 107 || strings.HasPrefix(target, long) {
		t.Errorf("the announce socket %q (%v): want it outside TMPDIR, in 107 bytes", target, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	if err := control.Announce(ctx, mnt, []uint32{3, 1, 2}, false); err != nil {
		t.Errorf("announcing through %s (%d bytes): %v", link, len(link), err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, mountedFiles(t, mnt)[0])); err != nil || len(b) == 0 {
		t.Errorf("reading a file of the mount: %d bytes, %v", len(b), err)
	}

	cmd := exec.Command(py, "-c", longTMPDIRScript, beton, filepath.Join(long, "feed.sock"))
	cmd.Env = append(env, "PYTHONPATH="+absPath(t, "../python"), "FFCVFEED="+binary(t, "ffcvfeed"))
	done := make(chan struct{})
	var out []byte
	go func() {
		out, err = cmd.CombinedOutput()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(testenv.Patience):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the Loader did not finish in time:\n%s", out)
	}
	text := string(out)
	if err != nil || !strings.Contains(text, "read 200\n") {
		t.Fatalf("an epoch through a Loader that starts its server, TMPDIR of %d characters: %v\n%s", len(long), err, text)
	}
	for _, l := range strings.Split(text, "\n") {
		if s, ok := strings.CutPrefix(l, "socket "); ok && (len(s) > 107 || strings.HasPrefix(s, long)) {
			t.Errorf("the Loader's server listens at %s (%d bytes): want it outside TMPDIR, in 107", s, len(s))
		}
	}
	if !strings.Contains(text, "error: the socket "+long+"/feed.sock is ") || !strings.Contains(text, "set TMPDIR to a shorter folder") {
		t.Errorf("a socket path too long: want a FeedError saying what to do:\n%s", text)
	}
}
