package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// spawnScript starts a Loader on a beton (argv[1]) with flags of ffcvfeed
// serve, reads batches, and prints "ready PID DIR" after the first; mode
// (argv[2]) "epochs" reads 2 epochs and exits, "forever" reads on until it
// is interrupted, "bad" opens a missing beton.
const spawnScript = `
import sys
from ffcvfs import FeedError, Loader

beton, mode = sys.argv[1], sys.argv[2]
if mode == "bad":
    try:
        Loader(beton, epochs=1)
    except FeedError as e:
        print("error:", e, flush=True)
    sys.exit(0)
with Loader(beton, batch_size=16, resolution=32, workers=1, epochs=2 if mode == "epochs" else 1000) as loader:
    n = 0
    for e in range(loader.epochs):
        for images, labels in loader:
            if n == 0:
                print("ready", loader._server.proc.pid, loader._server.dir, flush=True)
            n += len(labels)
    print("read", n, flush=True)
`

// TestLoaderStartsServer: in a venv with only the package's wheel (which
// holds the programs) installed, the Python Loader given a beton starts
// the ffcvfeed of the wheel itself: two epochs read through it; a missing beton is a FeedError
// naming it; and after the Loader closes, after the script's Ctrl-C, and
// after the script is killed, no server process, socket, shared memory or
// folder of it is left (after a kill, the server removes the folder).
func TestLoaderStartsServer(t *testing.T) {
	py := installedPython(t, "numpy")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	// The venv holds the wheel alone: the Loader runs the ffcvfeed built
	// into it, with no other on the PATH.
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}
	venvBin := filepath.Dir(py)

	start := func(mode string) (*exec.Cmd, *bufio.Scanner) {
		cmd := exec.Command(py, "-c", spawnScript, beton, mode)
		cmd.Env = env
		cmd.Stderr = &testenv.OutputBuffer{} // a Ctrl-C's traceback
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewScanner(out)
	}
	ready := func(sc *bufio.Scanner) (pid int, dir string) {
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "ready" {
				pid, _ = strconv.Atoi(f[1])
				return pid, f[2]
			}
		}
		t.Fatalf("the script never read a batch")
		return 0, ""
	}
	// gone waits until the server has exited, then checks that it left no
	// shared memory, socket or folder.
	gone := func(what string, pid int, dir string) {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil && !waitPidfd(fd) {
			t.Errorf("%s: the server %d is still running", what, pid)
		}
		if shm, _ := filepath.Glob(fmt.Sprintf("/dev/shm/ffcvfeed-%d-*", pid)); len(shm) > 0 {
			t.Errorf("%s: the server left its shared memory %v", what, shm)
		}
		if _, err := os.Stat(filepath.Join(dir, "feed.sock")); err == nil {
			t.Errorf("%s: the server's socket is left in %s", what, dir)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s: the server's folder %s is left", what, dir)
		}
	}

	// Two epochs, then the with block closes the Loader.
	cmd, sc := start("epochs")
	pid, dir := ready(sc)
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || !strings.HasPrefix(exe, filepath.Dir(venvBin)) {
		t.Errorf("the server runs %q (%v), want the ffcvfeed of the wheel in %s", exe, err, filepath.Dir(venvBin))
	}
	if out, err := exec.Command(filepath.Join(venvBin, "ffcvfeed"), "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "ffcvfeed serve") {
		t.Errorf("the venv's ffcvfeed command: %v\n%s", err, out)
	}
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("two epochs through a Loader that starts its server: %v", err)
	}
	if last != "read 400" {
		t.Errorf("two epochs of 200 samples: %q, want read 400", last)
	}
	gone("closed", pid, dir)

	// A missing beton: the server's own sentence, naming it.
	bad := exec.Command(py, "-c", spawnScript, "/nonexistent/train.beton", "bad")
	bad.Env = env
	outb, err := bad.CombinedOutput()
	if out := string(outb); err != nil || !strings.Contains(out, "error:") || !strings.Contains(out, "/nonexistent/train.beton") {
		t.Errorf("a missing beton: %v: %q, want a FeedError naming it", err, out)
	}

	// Ctrl-C in the training script.
	cmd, sc = start("forever")
	pid, dir = ready(sc)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	_ = cmd.Wait() // a KeyboardInterrupt: exit 1
	gone("Ctrl-C", pid, dir)

	// The script killed: the server sees its parent go.
	cmd, sc = start("forever")
	pid, dir = ready(sc)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	_ = cmd.Wait()
	gone("killed", pid, dir)
}

// everyFieldScript reads every field but the image of FFCV's all-fields
// fixture (argv[1]) through a Loader it starts, in sequential order, and
// checks each sample against the fixture's manifest (what FFCV's reader
// saw), as NumPy arrays, torch tensors and Ragged bytes; it prints "ok N"
// or the first difference.
const everyFieldScript = `
import hashlib, json, sys
import numpy as np
import torch
from ffcvfs import Loader, Ragged

beton = sys.argv[1]
want = json.load(open(beton + ".manifest.json"))["samples"]
names = ("meta", "label", "weight", "features", "blob")
sha = lambda b: hashlib.sha256(bytes(b)).hexdigest()
with Loader(beton, fields=list(names), order="sequential", batch_size=10, workers=1, epochs=2) as loader:
    assert loader.names == names, loader.names
    s = 0
    for meta, label, weight, features, blob in loader:
        assert isinstance(meta, Ragged) and isinstance(blob, Ragged), (type(meta), type(blob))
        assert label.dtype == np.int64 and weight.dtype == np.float64 and features.dtype == np.float32, (label.dtype, weight.dtype, features.dtype)
        assert features.shape == (len(label), 3, 4), features.shape
        for j, (m, js) in enumerate(zip(meta.tolist(), meta.json())):
            w = want[s]
            got = (int(label[j]), float(weight[j]), features[j].ravel().tolist(), sha(blob[j]), sha(m), js)
            exp = (w["label"], w["weight"], w["features"]["values"], w["blob"]["sha256"], w["meta"]["sha256"], w["meta"]["json"])
            if got != exp:
                print("sample", s, "got", got, "FFCV reads", exp)
                sys.exit(1)
            s += 1
    assert s == len(want), s
    t = 0
    for meta, label, weight, features, blob in loader.torch():
        assert isinstance(label, torch.Tensor) and features.dtype == torch.float32 and isinstance(blob.data, torch.Tensor)
        assert blob.data.numel() == int(blob.offsets[-1])
        t += len(label)
    assert t == len(want), t
print("ok", s)
`

// TestLoaderEveryField: every field but the image of FFCV's all-fields
// fixture (int, float, ndarray, bytes, JSON) reaches Python byte for byte
// and value for value through a Loader that starts its server, as NumPy
// arrays and as torch tensors.
func TestLoaderEveryField(t *testing.T) {
	py := installedPython(t, "numpy", "torch")
	beton := testenv.Fixture(t, "beton", "all-fields.beton")
	cmd := exec.Command(py, "-c", everyFieldScript, beton)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "ok 64") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// ffcvFixtureScript reads every field of the beton FFCV wrote with every
// field type (argv[1], manifest argv[2]) through a Loader it starts, the
// raw image whole, and compares each sample's bytes with FFCV's (see
// pipeline.TestFFCVEveryField for which of FFCV's).
const ffcvFixtureScript = `
import hashlib, json, sys
import numpy as np
from ffcvfs import Loader

beton, manifest = sys.argv[1], sys.argv[2]
want = json.load(open(manifest))["samples"]
names = ("image", "label", "weight", "vec", "tensor", "blob", "meta")
sha = lambda a: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
s = 0
with Loader(beton, fields=list(names), crop="none", flip=0, order="sequential", batch_size=16, workers=1) as loader:
    for batch in loader:
        f = dict(zip(names, batch))
        assert f["vec"].dtype == np.int16 and f["tensor"].dtype == np.float64 and f["image"].shape[1:] == (32, 32, 3)
        metas = f["meta"].json()
        for j in range(len(f["label"])):
            w = want[s]
            for k in names:
                exp = w[k]["stored_sha256"] if k in ("blob", "meta") else w[k]["sha256"]
                got = sha(f[k][j])
                if got != exp:
                    print("sample", s, "field", k, got, "FFCV", exp)
                    sys.exit(1)
            if metas[j] != w["meta"]["json"]:
                print("sample", s, "meta", metas[j], "FFCV", w["meta"]["json"])
                sys.exit(1)
            s += 1
print("ok", s)
`

// TestLoaderFFCVEveryField: every field of a beton FFCV wrote with every
// field type it has reaches Python through the Loader byte for byte.
func TestLoaderFFCVEveryField(t *testing.T) {
	py := installedPython(t, "numpy")
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	beton := testenv.Gunzip(t, filepath.Join(repo, "pipeline", "testdata", "ffcv-every-field.beton.gz"))
	out, err := exec.Command(py, "-c", ffcvFixtureScript, beton, filepath.Join(repo, "pipeline", "testdata", "ffcv-every-field.beton.manifest.json")).CombinedOutput()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "ok 40") {
		t.Fatalf("%v\n%s", err, out)
	}
}

// decodedScript reads two epochs of exact crops through a Loader that
// starts its server, with the flags of ffcvfeed serve given as JSON
// (argv[2]), and prints a SHA-256 of the batches; with "bad" it prints the
// FeedError of a bad size.
const decodedScript = `
import hashlib, json, sys
from ffcvfs import FeedError, Loader

beton, flags = sys.argv[1], json.loads(sys.argv[2])
try:
    loader = Loader(beton, batch_size=16, resolution=48, workers=2, epochs=2, exact=True, **flags)
except FeedError as e:
    print("error:", e, flush=True)
    sys.exit(0)
h = hashlib.sha256()
with loader:
    for e in range(loader.epochs):
        for images, labels in loader:
            h.update(images.tobytes())
            h.update(labels.tobytes())
print("sum", h.hexdigest(), flush=True)
`

// TestLoaderDecodedCache: the Python Loader passes the decoded-image
// cache's options to the server it starts: two epochs of exact crops with
// the cache in RAM, or on a disk, are the batches without it, byte for
// byte; a bad size is the server's one-line error, as a FeedError.
func TestLoaderDecodedCache(t *testing.T) {
	py := installedPython(t, "numpy")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}
	run := func(flags string) string {
		t.Helper()
		cmd := exec.Command(py, "-c", decodedScript, beton, flags)
		cmd.Env = env
		stderr := &testenv.OutputBuffer{} // the server's warnings (FeedWarning)
		cmd.Stderr = stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("Loader with %s: %v\n%s%s", flags, err, out, stderr)
		}
		return strings.TrimSpace(string(out))
	}
	want := run(`{}`)
	if !strings.HasPrefix(want, "sum ") {
		t.Fatalf("without the cache: %q", want)
	}
	for _, flags := range []string{
		`{"decoded_cache_size": "64MiB"}`,
		fmt.Sprintf(`{"decoded_cache_size": "1MiB", "decoded_cache_dir": %q, "decoded_cache_disk_size": "64MiB"}`, t.TempDir()),
	} {
		if got := run(flags); got != want {
			t.Errorf("with %s: %q, want %q (the batches without the cache)", flags, got, want)
		}
	}
	if got := run(`{"decoded_cache_size": "-1"}`); !strings.Contains(got, `error: `) || !strings.Contains(got, `decoded_cache_size="-1": want a size such as 8GiB`) {
		t.Errorf("a bad size: %q, want a FeedError with the server's sentence", got)
	}
}
