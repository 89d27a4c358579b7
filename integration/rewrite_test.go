package integration

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/s3test"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

// fromBetonGolden is what FFCV 1.0's Loader read from the rewrite of its
// own every-field beton (scripts/make_ffcv_rewrite_fixture.py, which also
// checked that it is what FFCV reads from the source).
const fromBetonGolden = "../pipeline/testdata/ffcv-every-field.from-beton.ffcv-loader.json"

// sameValues checks that the beton at got holds src's samples: every
// field's values equal but the JPEGs' bytes, which decode to the same
// pixels and carry restart markers.
func sameValues(t *testing.T, src, got string) {
	t.Helper()
	f, err := beton.OpenFile(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := beton.OpenFile(got)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.NumSamples() != f.NumSamples() || len(g.Fields()) != len(f.Fields()) {
		t.Fatalf("%d samples of %d fields, the source's %d of %d", g.NumSamples(), len(g.Fields()), f.NumSamples(), len(f.Fields()))
	}
	pixels := func(b []byte) []byte {
		info, err := jpeg.Scan(b)
		if err != nil {
			t.Fatal(err)
		}
		pix, _, _, err := jpeg.DecodeRGB(b, &info)
		if err != nil {
			t.Fatal(err)
		}
		return pix
	}
	for s := range f.NumSamples() {
		for fi, fd := range f.Fields() {
			if gd := g.Fields()[fi]; gd.Type != fd.Type || gd.Name != fd.Name || gd.Args != fd.Args {
				t.Fatalf("field %d: %+v, the source's %+v", fi, gd, fd)
			}
			switch fd.Type {
			case beton.TypeInt, beton.TypeFloat:
				if !bytes.Equal(f.Record(s)[f.RecordLayout().Offsets[fi]:][:8], g.Record(s)[g.RecordLayout().Offsets[fi]:][:8]) {
					t.Fatalf("sample %d, field %s: the value differs", s, fd.Name)
				}
				continue
			}
			a, err := f.ReadData(s, fi, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := g.ReadData(s, fi, nil)
			if err != nil {
				t.Fatal(err)
			}
			ia, _ := f.Image(s, fi)
			ib, _ := g.Image(s, fi)
			switch {
			case fd.Type != beton.TypeRGBImage || ia.Mode == beton.ModeRaw:
				if !bytes.Equal(a, b) || ia.Mode != ib.Mode {
					t.Fatalf("sample %d, field %s: the value differs", s, fd.Name)
				}
			case ia.Mode != ib.Mode || ia.Width != ib.Width || ia.Height != ib.Height:
				t.Fatalf("sample %d, field %s: image %+v, the source's %+v", s, fd.Name, ib, ia)
			case !jpeg.HasCropRestarts(b):
				t.Fatalf("sample %d, field %s: no restart markers", s, fd.Name)
			case !bytes.Equal(pixels(a), pixels(b)):
				t.Fatalf("sample %d, field %s: other pixels", s, fd.Name)
			}
		}
	}
}

// TestWriteFromBetonFFCV: the every-field beton FFCV's own writer made
// (two workers: its pages hold ids out of order), rewritten by ffcvfs
// write --from-beton, locally and from S3 to S3 on the test server: the
// very bytes FFCV 1.0's Loader was seen to read the same pixels and values
// from as from the source (fromBetonGolden), every field equal, the JPEGs
// with restart markers and the same pixels for libjpeg-turbo.
func TestWriteFromBetonFFCV(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	src := filepath.Join(dir, "ffcv.beton")
	data, err := os.ReadFile(testenv.Gunzip(t, "../pipeline/testdata/ffcv-every-field.beton.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.beton")
	stdout, _ := run(t, 0, ffcvfs, "write", "--from-beton", src, out)
	if !strings.Contains(stdout, "40 JPEGs transcoded, 0 had them already, 0 kept without") || !strings.Contains(stdout, "jpg 40, raw 40") {
		t.Errorf("summary:\n%s", stdout)
	}
	golden := readLoaderManifest(t, fromBetonGolden)
	if got := fileSHA256(t, out); got != golden.BetonSHA256 {
		t.Fatalf("the rewrite wrote other bytes (SHA-256 %.12s) than those FFCV was seen to read (%.12s): "+
			"if the change is meant, run scripts/make_ffcv_rewrite_fixture.py with FFCV", got, golden.BetonSHA256)
	}
	theirs := readLoaderManifest(t, "../pipeline/testdata/ffcv-every-field.beton.manifest.json")
	if len(golden.Samples) != 40 || len(theirs.Samples) != 40 {
		t.Fatalf("%d and %d samples", len(golden.Samples), len(theirs.Samples))
	}
	for i := range golden.Samples {
		for _, f := range []string{"image", "jpeg", "label", "weight", "vec", "tensor", "blob", "meta"} {
			keys := []string{"sha256"}
			switch f {
			case "jpeg":
				keys = append(keys, "accurate_sha256")
			case "blob":
				keys = append(keys, "stored_sha256")
			case "meta":
				keys = []string{"stored_sha256", "json"} // see TestDatasetWriterFFCVEveryField
			}
			for _, k := range keys {
				a, b := golden.Samples[i][f][k], theirs.Samples[i][f][k]
				if a == nil || fmt.Sprint(a) != fmt.Sprint(b) {
					t.Errorf("sample %d, field %s, %s: FFCV read %v from the rewrite, %v from the source", i, f, k, a, b)
				}
			}
		}
	}
	sameValues(t, src, out)

	// The same from S3 to S3: the object is those bytes.
	srv := s3test.Start(t)
	srv.CreateBucket(t, "betons")
	srv.PutObject(t, "betons", "ffcv.beton", data)
	cmd := exec.Command(ffcvfs, "write", "--from-beton", "s3://betons/ffcv.beton", "--workers", "3", "s3://betons/out.beton")
	cmd.Env = append(os.Environ(), srv.Env()...)
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, o)
	}
	if got := objectSHA256(t, srv, "betons", "out.beton"); got != golden.BetonSHA256 {
		t.Errorf("the object's SHA-256 is %.12s, the local rewrite's %.12s", got, golden.BetonSHA256)
	}
}

// TestWriteFromBetonImageFolder: a beton of the fixture's photos written
// with --restart-interval 0 and --keep-names, rewritten in place (the
// source and the output one path: it is read whole before the rename):
// every value the same, the names index too, and ffcvfs verify content.
// A second rewrite finds every JPEG with its markers and changes nothing.
func TestWriteFromBetonImageFolder(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.beton")
	run(t, 0, ffcvfs, "write", "--restart-interval", "0", "--keep-names", "--page-size", "2MiB", testenv.Fixture(t, "imagefolder-small"), plain)
	path := filepath.Join(dir, "train.beton")
	data, _ := os.ReadFile(plain)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, _ := run(t, 0, ffcvfs, "write", "--from-beton", path, path)
	if !strings.Contains(stdout, "200 JPEGs transcoded") || !strings.Contains(stdout, "pages of 2 MiB") {
		t.Errorf("summary:\n%s", stdout)
	}
	sameValues(t, plain, path)
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	names, err := f.Names()
	f.Close()
	if err != nil || len(names) != 200 || !strings.HasPrefix(names[0], "class000/") {
		t.Fatalf("names index: %d names, %v", len(names), err)
	}
	run(t, 0, ffcvfs, "verify", path)
	again := filepath.Join(dir, "again.beton")
	stdout, _ = run(t, 0, ffcvfs, "write", "--from-beton", path, again)
	if !strings.Contains(stdout, "0 JPEGs transcoded, 200 had them already") {
		t.Errorf("a second rewrite:\n%s", stdout)
	}
	if a, b := fileSHA256(t, path), fileSHA256(t, again); a != b {
		t.Errorf("a second rewrite changed the bytes")
	}
}

// TestWriteFromBetonErrors: bad flags, a missing, empty, foreign or cut
// source, each a sentence naming it and a non-zero exit, and nothing
// written.
func TestWriteFromBetonErrors(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	src := filepath.Join(dir, "src.beton")
	run(t, 0, ffcvfs, "write", "--restart-interval", "0", "--page-size", "2MiB", testenv.Fixture(t, "imagefolder-small"), src)
	data, _ := os.ReadFile(src)
	cut := filepath.Join(dir, "cut.beton")
	if err := os.WriteFile(cut, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.beton")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out", "x.beton")
	if err := os.Mkdir(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--from-beton", src, "--restart-interval", "0", out}, 2, "--restart-interval 0 with --from-beton"},
		{[]string{"--from-beton", src, "--restart-interval", "70000", out}, 2, "want 1 to 65535"},
		{[]string{"--from-beton", src, "--restart-interval", "-1", out}, 2, "want 1 to 65535"},
		{[]string{"--from-beton", src, "--mode", "raw", out}, 2, "--mode is for ImageFolder trees"},
		{[]string{"--from-beton", src, "--workers", "0", out}, 2, "--workers: want 1 to 4096"},
		{[]string{"--from-beton", src, "--workers", fmt.Sprint(math.MaxInt32), out}, 2, "--workers: want 1 to 4096"},
		{[]string{"--from-beton", src, "--page-size", "3MiB", out}, 2, "--page-size"},
		{[]string{"--from-beton", src, "--from-stream", "-", out}, 2, "give one source"},
		{[]string{"--from-beton", src}, 2, "needs 1 argument"},
		{[]string{"--from-beton", "", out}, 2, "give the source beton"},
		{[]string{"--from-beton", "--workers", "2", src, out}, 2, "--from-beton --workers: the flag takes the source beton"},
		{[]string{"--from-beton", filepath.Join(dir, "missing.beton"), out}, 1, "missing.beton"},
		{[]string{"--from-beton", dir, out}, 1, dir},
		{[]string{"--from-beton", empty, out}, 1, "empty.beton"},
		{[]string{"--from-beton", cut, out}, 1, "cut.beton"},
		{[]string{"--from-beton", src, "--read-deadline", "0s", out}, 2, "--read-deadline"},
		{[]string{"--from-beton", src, "--read-deadline", "99999h", out}, 2, "--read-deadline"},
	} {
		_, stderr := run(t, c.code, ffcvfs, append([]string{"write"}, c.args...)...)
		if !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 2 || strings.Contains(stderr, "panic") {
			t.Errorf("%v: stderr lacks %q:\n%s", c.args, c.want, stderr)
		}
	}
	// Storage that refuses every connection: the source and the cause
	// named, within the deadline given.
	cmd := exec.Command(ffcvfs, "write", "--from-beton", "s3://bucket/train.beton", "--s3-endpoint", "http://127.0.0.1:1",
		"--attempt-timeout", "1s", "--read-deadline", "2s", out)
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test-secret", "AWS_REGION=us-east-1")
	o, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		!strings.Contains(string(o), "open s3://bucket/train.beton: storage unavailable") || !strings.Contains(string(o), "connection refused") {
		t.Errorf("an unreachable S3 source: %v\n%s", err, o)
	}
	if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}
