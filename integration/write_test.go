package integration

import (
	"bytes"
	"context"
	"fmt"
	"image"
	_ "image/jpeg"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// TestWriteImageFolderVerbatim: with --restart-interval 0 every sample of
// the written beton holds the exact bytes of its source JPEG and the
// label torchvision assigns it; by default, every JPEG has restart markers
// and the same pixels, and every other value is the same.
func TestWriteImageFolderVerbatim(t *testing.T) {
	src := testenv.Fixture(t, "imagefolder-small")
	ffcvfs := binary(t, "ffcvfs")
	out := filepath.Join(t.TempDir(), "out.beton")
	classesOut := filepath.Join(t.TempDir(), "classes.txt")
	run(t, 0, ffcvfs, "write", "--restart-interval", "0", "--page-size", "2MiB", "--classes-out", classesOut, src, out)
	byDefault := filepath.Join(t.TempDir(), "default.beton")
	stdout, _ := run(t, 0, ffcvfs, "write", "--page-size", "2MiB", src, byDefault)
	if !strings.Contains(stdout, "jpg 200 (200 with restart markers, 0 stored verbatim)") {
		t.Errorf("summary of a write by default:\n%s", stdout)
	}
	sameValues(t, out, byDefault)

	classes, samples := torchvisionImageFolder(t, src)
	got, _ := os.ReadFile(classesOut)
	if want := strings.Join(classes, "\n") + "\n"; string(got) != want {
		t.Errorf("--classes-out wrote %q, want %q", got, want)
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.NumSamples() != len(samples) {
		t.Fatalf("%d samples, torchvision sees %d", f.NumSamples(), len(samples))
	}
	img, label := f.FieldIndex("image"), f.FieldIndex("label")
	for i, s := range samples {
		path, wantLabel := s[0].(string), int64(s[1].(float64))
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data, err := f.ReadData(i, img, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want) {
			t.Errorf("sample %d: bytes differ from %s", i, path)
		}
		if got := f.Int(i, label); got != wantLabel {
			t.Errorf("sample %d: label %d, want %d", i, got, wantLabel)
		}
		meta, _ := f.Image(i, img)
		cfg, _, err := image.DecodeConfig(bytes.NewReader(want))
		if err != nil || meta.Mode != beton.ModeJPEG || meta.Width != cfg.Width || meta.Height != cfg.Height {
			t.Errorf("sample %d: %+v, source %dx%d (%v)", i, meta, cfg.Width, cfg.Height, err)
		}
	}
	stdout, _ = run(t, 0, ffcvfs, "verify", out)
	if !strings.Contains(stdout, "OK") {
		t.Errorf("verify said %q", stdout)
	}
}

// TestVerifyFixtures: ffcvfs verify accepts every reference fixture, and
// info reports it.
func TestVerifyFixtures(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	paths, _ := filepath.Glob(filepath.Join(testenv.Fixture(t, "beton"), "*.beton"))
	if len(paths) == 0 {
		testenv.Missing(t, "no fixture betons")
	}
	for _, p := range paths {
		run(t, 0, ffcvfs, "verify", "--all", p)
		out, _ := run(t, 0, ffcvfs, "info", "--samples", "2", p)
		if !strings.Contains(out, "samples") || !strings.Contains(out, "sample 1:") {
			t.Errorf("info %s:\n%s", p, out)
		}
		run(t, 0, ffcvfs, "info", "--json", p)
	}
}

// TestWriteModes: raw, smart and proportion round trips.
func TestWriteModes(t *testing.T) {
	src := testenv.Fixture(t, "imagefolder-small")
	ffcvfs := binary(t, "ffcvfs")
	for _, tc := range []struct {
		name string
		args []string
		jpeg func(w, h int) bool // whether an image of the stored size must be JPEG; nil: either
	}{
		{"raw", []string{"--mode", "raw", "--max-resolution", "64"}, func(int, int) bool { return false }},
		{"smart", []string{"--mode", "smart", "--max-resolution", "128", "--smart-threshold", "40000"}, func(w, h int) bool { return w*h*3 > 40000 }},
		{"proportion", []string{"--mode", "proportion", "--max-resolution", "96", "--compress-probability", "0.5", "--seed", "7"}, nil},
		{"jpg-resized", []string{"--max-resolution", "100", "--jpeg-quality", "80"}, func(int, int) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.beton")
			run(t, 0, ffcvfs, append(append([]string{"write", "--page-size", "2MiB"}, tc.args...), src, out)...)
			run(t, 0, ffcvfs, "verify", out)
			f, err := beton.OpenFile(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			maxRes := 0
			for i, a := range tc.args {
				if a == "--max-resolution" {
					fmt.Sscan(tc.args[i+1], &maxRes)
				}
			}
			modes := map[beton.ImageMode]int{}
			for i := 0; i < f.NumSamples(); i++ {
				meta, err := f.Image(i, 0)
				if err != nil {
					t.Fatal(err)
				}
				modes[meta.Mode]++
				if max(meta.Width, meta.Height) > maxRes {
					t.Errorf("sample %d: %dx%d exceeds %d", i, meta.Width, meta.Height, maxRes)
				}
				if tc.jpeg != nil && tc.jpeg(meta.Width, meta.Height) != (meta.Mode == beton.ModeJPEG) {
					t.Errorf("sample %d: %dx%d stored as %v", i, meta.Width, meta.Height, meta.Mode)
				}
				data, err := f.ReadData(i, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				if meta.Mode == beton.ModeJPEG {
					m, _, err := image.Decode(bytes.NewReader(data))
					if err != nil || m.Bounds().Dx() != meta.Width || m.Bounds().Dy() != meta.Height {
						t.Errorf("sample %d: JPEG does not decode to %dx%d: %v", i, meta.Width, meta.Height, err)
					}
				}
			}
			if tc.name == "proportion" && (modes[beton.ModeJPEG] < 60 || modes[beton.ModeRaw] < 60) {
				t.Errorf("proportion 0.5 over 200 images gave %v", modes)
			}
			t.Logf("modes: %v", modes)
		})
	}
}

// TestWriteErrors: bad input gives a clear error and leaves no output.
func TestWriteErrors(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.beton")

	_, stderr := run(t, 1, ffcvfs, "write", filepath.Join(dir, "missing"), out)
	if !strings.Contains(stderr, "missing") {
		t.Errorf("missing folder: %q", stderr)
	}
	bad := filepath.Join(dir, "bad")
	os.MkdirAll(filepath.Join(bad, "cat"), 0o755)
	os.WriteFile(filepath.Join(bad, "cat", "broken.jpg"), []byte("\xff\xd8\xff\xe0 not really a jpeg"), 0o644)
	_, stderr = run(t, 1, ffcvfs, "write", "--max-resolution", "8", bad, out)
	if !strings.Contains(stderr, "broken.jpg") {
		t.Errorf("corrupt JPEG: %q", stderr)
	}
	_, stderr = run(t, 2, ffcvfs, "write", "--page-size", "3MiB", bad, out)
	if !strings.Contains(stderr, "page size") {
		t.Errorf("bad page size: %q", stderr)
	}
	_, stderr = run(t, 2, ffcvfs, "write", "--mode", "png", bad, out)
	if !strings.Contains(stderr, "png") {
		t.Errorf("bad mode: %q", stderr)
	}
	run(t, 2, ffcvfs, "write", bad)
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "bad" {
		t.Errorf("failed writes left files behind: %v", ents)
	}
	_, stderr = run(t, 1, ffcvfs, "verify", filepath.Join(dir, "nope.beton"))
	if !strings.Contains(stderr, "nope.beton") {
		t.Errorf("verify of a missing file: %q", stderr)
	}
}

// TestWriteRawPixelsMatchReference: raw mode at --max-resolution 96 stores
// the pixels the reference writer stored for the same photos (the
// imagefolder-mixed fixture), byte for byte.
func TestWriteRawPixelsMatchReference(t *testing.T) {
	src := testenv.Fixture(t, "imagefolder-small")
	ref := testenv.Fixture(t, "beton", "imagefolder-mixed.beton")
	ffcvfs := binary(t, "ffcvfs")
	out := filepath.Join(t.TempDir(), "raw.beton")
	run(t, 0, ffcvfs, "write", "--mode", "raw", "--max-resolution", "96", "--page-size", "2MiB", src, out)
	got, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	want, err := beton.OpenFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	if got.NumSamples() != want.NumSamples() {
		t.Fatalf("%d samples, reference %d", got.NumSamples(), want.NumSamples())
	}
	compared := 0
	for i := 0; i < want.NumSamples(); i++ {
		wm, _ := want.Image(i, 0)
		gm, err := got.Image(i, 0)
		if err != nil || gm.Mode != beton.ModeRaw || gm.Width != wm.Width || gm.Height != wm.Height {
			t.Fatalf("sample %d: %+v (%v), reference %dx%d", i, gm, err, wm.Width, wm.Height)
		}
		if wm.Mode != beton.ModeRaw {
			continue // the reference stored this one as JPEG
		}
		a, _ := got.ReadData(i, 0, nil)
		b, _ := want.ReadData(i, 0, nil)
		if !bytes.Equal(a, b) {
			t.Errorf("sample %d: raw pixels differ from the reference's", i)
		}
		compared++
	}
	if compared < 50 {
		t.Fatalf("only %d raw samples compared", compared)
	}
	t.Logf("%d raw images equal the reference's pixels", compared)
}

// TestWriteHostileTrees: a symlink to /dev/zero grew ffcvfs write to 24
// GB, a FIFO hung it, both ignoring SIGTERM and leaving a temporary file;
// a class folder with a newline made --classes-out write two lines. Each
// is now a clear error naming the file, and nothing is left behind.
func TestWriteHostileTrees(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	photo := filepath.Join(testenv.Fixture(t, "imagefolder-small", "class000"), firstFile(t, testenv.Fixture(t, "imagefolder-small", "class000")))
	for _, tc := range []struct {
		name  string
		make  func(cls string) error
		flags []string
		want  string
	}{
		{"symlink to /dev/zero", func(cls string) error { return os.Symlink("/dev/zero", filepath.Join(cls, "z.jpg")) }, nil,
			"z.jpg is not a regular file but a character device"},
		{"FIFO", func(cls string) error { return syscall.Mkfifo(filepath.Join(cls, "f.jpg"), 0o644) }, nil,
			"f.jpg is not a regular file but a FIFO"},
		{"class name with a newline", func(cls string) error {
			return os.Mkdir(filepath.Join(filepath.Dir(cls), "b\nevil"), 0o755)
		}, []string{"--classes-out", "classes.txt"}, "has a line break in its name"},
		// A class folder named as the mount's control
		// folder was written, and the mount then refused the beton.
		{"class folder .ffcvfs with --keep-names", controlClass(photo), []string{"--keep-names"},
			"is named as the mount's control folder, which the mount serves in its place: rename it"},
		{"class folder .ffcvfs with --classes-out", controlClass(photo), []string{"--classes-out", "classes.txt"},
			"is named as the mount's control folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cls := filepath.Join(dir, "tree", "cls")
			if err := os.MkdirAll(cls, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(photo, filepath.Join(cls, "a.jpg")); err != nil {
				t.Fatal(err)
			}
			if err := tc.make(cls); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out.beton")
			args := append(append([]string{"write"}, tc.flags...), filepath.Join(dir, "tree"), out)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a hang fails, not blocks
			defer cancel()
			cmd := exec.CommandContext(ctx, ffcvfs, args...)
			cmd.Dir = dir
			b, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("ffcvfs write hung: %s", b)
			}
			if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 || !strings.Contains(string(b), tc.want) {
				t.Errorf("exit %d: %s\nwant exit 1 and %q", code, b, tc.want)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Errorf("left behind: %v", names(ents))
			}
		})
	}
}

// controlClass makes a class folder named as the mount's control folder,
// beside cls, holding the photo.
func controlClass(photo string) func(cls string) error {
	return func(cls string) error {
		d := filepath.Join(filepath.Dir(cls), control.Dir)
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		return os.Symlink(photo, filepath.Join(d, "a.jpg"))
	}
}

// TestWriteStopsOnSIGTERM: a write told to stop ends with status 130 and
// removes its temporary file.
func TestWriteStopsOnSIGTERM(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	src := testenv.Fixture(t, "imagefolder-small", "class000")
	dir := t.TempDir()
	// A tree large enough to be caught writing: links to the photos.
	for c := range 4 {
		cls := filepath.Join(dir, "tree", fmt.Sprintf("c%d", c))
		if err := os.MkdirAll(cls, 0o755); err != nil {
			t.Fatal(err)
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 500 {
			e := ents[k%len(ents)]
			if err := os.Symlink(filepath.Join(src, e.Name()), filepath.Join(cls, fmt.Sprintf("%04d-%s", k, e.Name()))); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := filepath.Join(dir, "out.beton")
	cmd := exec.Command(ffcvfs, "write", "--workers", "1", "--mode", "raw", "--max-resolution", "512", filepath.Join(dir, "tree"), out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Wait for the temporary file, unnamed where the filesystem allows
	// it: the write has begun.
	for {
		if holdsFileIn(cmd.Process.Pid, dir) {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("ffcvfs write ended (%v) before it could be stopped: %s", err, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("ffcvfs write still running a minute after SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("exit %d after SIGTERM: %s", code, stderr.String())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("left behind: %v", names(ents))
	}
}

// holdsFileIn reports whether process pid has a file in dir open (named
// or not: an O_TMPFILE file shows as dir/#INODE (deleted)).
func holdsFileIn(pid int, dir string) bool {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && filepath.Dir(l) == dir {
			return true
		}
	}
	return false
}

func firstFile(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("%s: %v", dir, err)
	}
	return ents[0].Name()
}

func names(ents []os.DirEntry) []string {
	var s []string
	for _, e := range ents {
		s = append(s, e.Name())
	}
	return s
}

// TestWriteRestartIntervals: ffcvfs write stores every JPEG with restart
// markers by default, and the mount serves files whose pixels, as PIL
// (torchvision's ImageFolder's loader) and torchvision.io.decode_jpeg
// decode them, are those of the source photos, though their bytes are
// not; ffcvfeed decodes every image of the beton.
func TestWriteRestartIntervals(t *testing.T) {
	src := testenv.Fixture(t, "imagefolder-small")
	py := debianPython(t, "PIL", "torchvision")
	out := filepath.Join(t.TempDir(), "restarts.beton")
	run(t, 0, binary(t, "ffcvfs"), "write", "--page-size", "2MiB", "--keep-names", src, out)
	mnt := mountBeton(t, out)
	const script = `
import os, sys
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg, read_file
src, mnt = sys.argv[1], sys.argv[2]
same = differ = rst = 0
for d, _, files in os.walk(src):
    for f in sorted(files):
        a = os.path.join(d, f)
        b = os.path.join(mnt, os.path.relpath(a, src))
        ia, ib = Image.open(a), Image.open(b)
        if ia.mode != ib.mode or ia.size != ib.size or ia.tobytes() != ib.tobytes():
            print("PIL: pixels differ:", b)
            continue
        ta, tb = (decode_jpeg(read_file(p), mode=ImageReadMode.RGB) for p in (a, b))
        if not torch.equal(ta, tb):
            print("torchvision: pixels differ:", b)
            continue
        same += 1
        ba, bb = open(a, "rb").read(), open(b, "rb").read()
        differ += ba != bb
        rst += b"\xff\xd0" in bb
print(same, differ, rst)
`
	stdout, _ := run(t, 0, py, "-c", script, src, mnt)
	var same, differ, rst int
	if _, err := fmt.Sscan(lastLine(stdout), &same, &differ, &rst); err != nil || same != 200 || differ != 200 || rst != 200 {
		t.Errorf("PIL over the mounted files: %q; want 200 with the source's pixels, other bytes and restart markers", stdout)
	}
	fo, _ := run(t, 0, binary(t, "ffcvfeed"), "bench", "--data", out, "--workers", "1", "--epochs", "1", "--on-error", "fail")
	if !strings.Contains(fo, "200 images") {
		t.Errorf("ffcvfeed bench over the beton: %s", fo)
	}
	_, stderr := run(t, 2, binary(t, "ffcvfs"), "write", "--restart-interval", "70000", src, filepath.Join(t.TempDir(), "x.beton"))
	if !strings.Contains(stderr, "restart interval") {
		t.Errorf("--restart-interval 70000: %q, want it refused", stderr)
	}
}
