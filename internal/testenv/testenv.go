// Package testenv finds what tests need (the repository's fixtures, system
// tools) and decides what a missing prerequisite means: a skip on a
// developer's machine, a failure in CI (CI=true), where nothing may be
// skipped.
//
// Fixtures live in the repository, under testdata/ at its root (see
// testdata/NOTICE.md); tests never look outside the repository for them.
package testenv

import (
	"bytes"
	"compress/gzip"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Patience is how long a test waits for a condition (a mount to appear, a
// process to exit, a counter to reach a value) before it fails. Long,
// because a training machine, and so CI, is busy: a condition that holds
// ends the wait at once, so only a failing test pays it.
const Patience = 3 * time.Minute

// InCI reports whether the tests run in CI, where missing prerequisites fail.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing ends the test for a missing prerequisite: t.Fatal in CI, t.Skip
// elsewhere.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("prerequisite missing (CI=true, so this fails): "+format, args...)
	}
	t.Skipf("prerequisite missing: "+format, args...)
}

// module is the module path that go.mod declares at the repository's root.
const module = "github.com/ffcvfs/ffcvfs"

// RepoRoot returns the repository's top folder: the first folder above the
// working directory (a package's folder, where go test runs) whose go.mod
// declares this module.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module "+module+"\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the working directory: run the tests inside the repository", module)
		}
		dir = parent
	}
}

// Fixture returns the path of a file or folder under the repository's
// testdata/. Betons are kept gzipped there (NAME.beton.gz): asked for
// NAME.beton, Fixture decompresses it into the test's temporary folder,
// with its manifest (NAME.beton.manifest.json) beside it, and returns that
// path. Asked for a folder holding gzipped files, it returns a temporary
// copy with each decompressed. Tests must not write to what it returns.
func Fixture(t testing.TB, elem ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{RepoRoot(t), "testdata"}, elem...)...)
	st, err := os.Stat(p)
	switch {
	case err == nil && st.IsDir():
		if gz, _ := filepath.Glob(filepath.Join(p, "*.gz")); len(gz) > 0 {
			return expandDir(t, p)
		}
		return p
	case err == nil:
		return p
	}
	if _, gzErr := os.Stat(p + ".gz"); gzErr != nil {
		t.Fatalf("fixture %s: %v (the repository's testdata/ should hold it, or %s.gz)", p, err, filepath.Base(p))
	}
	out := Gunzip(t, p+".gz")
	if m := p + ".manifest.json"; fileExists(m) {
		CopyFile(t, m, out+".manifest.json")
	}
	return out
}

// expandDir copies the regular files of dir into a temporary folder,
// decompressing those named *.gz, and returns the folder.
func expandDir(t testing.TB, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		src := filepath.Join(dir, e.Name())
		if strings.HasSuffix(e.Name(), ".gz") {
			gunzipTo(t, src, filepath.Join(out, strings.TrimSuffix(e.Name(), ".gz")))
		} else {
			CopyFile(t, src, filepath.Join(out, e.Name()))
		}
	}
	return out
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// CopyFile copies the file src to dst: another file of the same bytes
// (a beton at another location, say).
func CopyFile(t testing.TB, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// LookPath returns the path of an executable, or ends the test via Missing.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not found on PATH", name)
	}
	return p
}

// Gunzip decompresses the gzip file at path into the test's temporary
// folder and returns the path of the result.
func Gunzip(t testing.TB, path string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(path), ".gz"))
	gunzipTo(t, path, out)
	return out
}

// gunzipTo decompresses the gzip file at path into the file out.
func gunzipTo(t testing.TB, path, out string) {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	z, err := gzip.NewReader(in)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, z); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// ShortPhotos is how many photos Photos returns at most under -short.
const ShortPhotos = 3

// Photo is one of the fixture photos: its path under imagefolder-small
// (CLASS/NAME.jpg) and its bytes.
type Photo struct {
	Name string
	Data []byte
}

// Photos returns n of the fixture photos of testdata/imagefolder-small,
// spread over its classes (all of them for n ≤ 0), in name order. With
// go test -short (the arm64 tests under emulation) it returns at most
// ShortPhotos of them: the same checks over fewer photos.
func Photos(t testing.TB, n int) []Photo {
	t.Helper()
	if testing.Short() && (n <= 0 || n > ShortPhotos) {
		n = ShortPhotos
	}
	dir := Fixture(t, "imagefolder-small")
	paths, err := filepath.Glob(filepath.Join(dir, "*", "*.jpg"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no JPEGs under %s (%v)", dir, err)
	}
	slices.Sort(paths)
	if n > 0 && len(paths) > n {
		step := len(paths) / n
		pick := make([]string, n)
		for i := range pick {
			pick[i] = paths[i*step]
		}
		paths = pick
	}
	out := make([]Photo, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = Photo{Name: filepath.Base(filepath.Dir(p)) + "/" + filepath.Base(p), Data: b}
	}
	return out
}

// PSNR is the peak signal-to-noise ratio of the bytes b against the
// reference a, in dB (+Inf when they are equal).
func PSNR(a, b []byte) float64 {
	var se float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255*float64(len(a))/se)
}

// SmoothPNG is a side×side PNG of smooth colours: a few KB per megapixel
// as a file, side²×3 bytes decoded, for tests of what images that
// compress well cost once decoded.
func SmoothPNG(t testing.TB, side int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, side, side))
	for y := range side {
		for x := range side {
			o := img.PixOffset(x, y)
			img.Pix[o], img.Pix[o+1], img.Pix[o+2], img.Pix[o+3] = byte(x/64), byte(y/64), 100, 255
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
