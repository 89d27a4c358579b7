package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// TestWriteOnLoopbackFUSE: ffcvfs write to a FUSE filesystem that takes
// O_TMPFILE but cannot name the file it made (go-fuse's loopback: fchmod
// ENOENT, linkat EXDEV) writes the beton through a named temporary file.
// It failed at its very end, after all the work.
func TestWriteOnLoopbackFUSE(t *testing.T) {
	needFUSE(t)
	under := t.TempDir()
	mnt := filepath.Join(t.TempDir(), "loop")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := fs.NewLoopbackRoot(under)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{FsName: "loopback", DisableXAttrs: true}})
	if err != nil {
		testenv.Missing(t, "a loopback FUSE mount: %v", err)
	}
	t.Cleanup(func() {
		srv.Unmount()
		srv.Wait()
	})
	out := filepath.Join(mnt, "out.beton")
	run(t, 0, binary(t, "ffcvfs"), "write", "--page-size", "2MiB", testenv.Fixture(t, "imagefolder-small"), out)
	f, err := beton.OpenFile(filepath.Join(under, "out.beton"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if errs := beton.Verify(f, beton.VerifyOptions{}); len(errs) > 0 || f.NumSamples() != 200 {
		t.Errorf("the beton written through the loopback: %d samples, %v", f.NumSamples(), errs)
	}
	ents, _ := os.ReadDir(under)
	if len(ents) != 1 {
		t.Errorf("left beside the beton: %v", ents)
	}
}

// TestFIFOSourceRefused: a FIFO given as the beton is refused at once,
// naming it, by every command that reads one; each blocked for ever in
// its open (deaf to SIGINT and SIGTERM), waiting for a writer.
func TestFIFOSourceRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "in.beton")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	ffcvfs, ffcvfeed := binary(t, "ffcvfs"), binary(t, "ffcvfeed")
	for _, args := range [][]string{
		{ffcvfs, "write", "--from-beton", fifo, filepath.Join(dir, "out.beton")},
		{ffcvfs, "info", fifo},
		{ffcvfs, "mount", fifo, mnt},
		{ffcvfs, "mount", "--classes", fifo, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"), mnt},
		{ffcvfeed, "bench", "--data", fifo},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		blocked := ctx.Err() != nil
		cancel()
		if blocked {
			t.Errorf("%s blocked on a FIFO", strings.Join(args[1:], " "))
			continue
		}
		if err == nil || !strings.Contains(string(out), "FIFO") {
			t.Errorf("%s: %v\n%s\nwant a refusal naming the FIFO", strings.Join(args[1:], " "), err, out)
		}
	}
}

// hupAtStart is the Python that runs a program with a SIGHUP pending from
// its first instruction: blocked and sent, then exec (both survive it), so
// that it is delivered as soon as the program unblocks it, in the Go
// runtime's start.
const hupAtStart = `import os, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
os.kill(os.getpid(), signal.SIGHUP)
os.execv(sys.argv[1], sys.argv[1:])`

// TestSIGHUPAtStart: a SIGHUP that comes while a mount or a feed server
// starts (pending from its exec, delivered in the Go runtime's start, before
// the program catches SIGHUP) does not end it: it serves. Go's default
// ended it (a terminal closed as it started).
func TestSIGHUPAtStart(t *testing.T) {
	needFUSE(t)
	py := debianPython(t)
	src := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	ffcvfs, ffcvfeed := binary(t, "ffcvfs"), binary(t, "ffcvfeed")
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	p := launchMount(t, exec.Command(py, "-c", hupAtStart, ffcvfs, "mount", src, mnt), mnt)
	p.waitServing(t) // fails if SIGHUP ended it
	p.stop(t)

	sock := testenv.Socket(t, "feed.sock")
	serve := exec.Command(py, "-c", hupAtStart, ffcvfeed, "serve", "--data", src, "--socket", sock)
	var out testenv.OutputBuffer
	serve.Stdout, serve.Stderr = &out, &out
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	deadline := time.Now().Add(testenv.Patience)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("ffcvfeed serve, with a SIGHUP at its start, ended: %v\n%s", err, &out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ffcvfeed serve made no socket:\n%s", &out)
		}
	}
	serve.Process.Signal(syscall.SIGTERM)
	<-exited
}
