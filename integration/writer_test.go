package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/s3test"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// fileSHA256 returns the SHA-256 of a file, in hex.
// objectSHA256 is the hex SHA-256 of an object of the test S3 server.
func objectSHA256(t *testing.T, srv *s3test.Server, bucket, key string) string {
	t.Helper()
	obj, err := srv.Client().GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, obj.Body); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// loaderManifest is what FFCV's Loader read from a beton, per sample and
// field (scripts/every_field_dataset.py's ffcv_manifest).
type loaderManifest struct {
	BetonSHA256 string `json:"beton_sha256"`
	Samples     []map[string]map[string]any
}

func readLoaderManifest(t *testing.T, path string) loaderManifest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m loaderManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDatasetWriterFFCVEveryField: ffcvfs.DatasetWriter (two workers)
// writes the every-field dataset (raw and JPEG images, int, float,
// ndarray, torch tensor, bytes, JSON) into the very bytes that FFCV 1.0's
// Loader was seen to read (pipeline/testdata/ffcvfs-every-field.
// ffcv-loader.json, made by scripts/make_ffcv_writer_fixture.py with
// FFCV), and what FFCV's Loader read from them is what it read from the
// beton FFCV's own writer made of the same dataset: the same pixels of
// the raw and the JPEG images (the JPEGs are byte for byte FFCV's, as
// libjpeg-turbo encodes both), the same numbers and arrays, the same
// stored bytes and JSON. (FFCV's Loader delivers the JSON of a sample
// whose bytes field is empty from another address; the stored JSON is
// compared there.)
func TestDatasetWriterFFCVEveryField(t *testing.T) {
	py := installedPython(t, "numpy", "torch", "PIL")
	out := filepath.Join(t.TempDir(), "every.beton")
	run(t, 0, py, "../scripts/every_field_dataset.py", "write", testenv.Fixture(t, "imagefolder-small"), out, "2")
	ours := readLoaderManifest(t, "../pipeline/testdata/ffcvfs-every-field.ffcv-loader.json")
	if got := fileSHA256(t, out); got != ours.BetonSHA256 {
		t.Fatalf("the writer wrote other bytes (SHA-256 %.12s) than those FFCV was seen to read (%.12s): "+
			"if the change is meant, run scripts/make_ffcv_writer_fixture.py with FFCV", got, ours.BetonSHA256)
	}
	theirs := readLoaderManifest(t, "../pipeline/testdata/ffcv-every-field.beton.manifest.json")
	if len(ours.Samples) != 40 || len(theirs.Samples) != len(ours.Samples) {
		t.Fatalf("%d and %d samples", len(ours.Samples), len(theirs.Samples))
	}
	for i := range ours.Samples {
		for _, f := range []string{"image", "jpeg", "label", "weight", "vec", "tensor", "blob", "meta"} {
			keys := []string{"sha256"}
			switch f {
			case "jpeg":
				keys = append(keys, "accurate_sha256")
			case "blob":
				keys = append(keys, "stored_sha256")
			case "meta":
				keys = []string{"stored_sha256", "json"}
			}
			for _, k := range keys {
				a, b := ours.Samples[i][f][k], theirs.Samples[i][f][k]
				if a == nil || fmt.Sprint(a) != fmt.Sprint(b) {
					t.Errorf("sample %d, field %s, %s: FFCV read %v from ours, %v from its own", i, f, k, a, b)
				}
			}
		}
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if errs := beton.Verify(f, beton.VerifyOptions{}); len(errs) > 0 {
		t.Error(errs)
	}
}

// TestDatasetWriterFFCVScript runs a script written for FFCV's writer
// (fields of every type, a torchvision-style dataset of PIL images,
// from_indexed_dataset with two workers) with its imports changed to
// ffcvfs's and nothing else, and reads the beton back.
func TestDatasetWriterFFCVScript(t *testing.T) {
	py := installedPython(t, "numpy", "torch", "PIL")
	src, err := os.ReadFile("testdata/writer/ffcv_style.py")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(string(src), "from ffcv.", "from ffcvfs.")
	if n := strings.Count(string(src), "from ffcv."); n != 2 {
		t.Fatalf("the script has %d FFCV imports, want 2", n)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "script.py")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "det.beton")
	run(t, 0, py, path, out)
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if errs := beton.Verify(f, beton.VerifyOptions{}); len(errs) > 0 {
		t.Fatal(errs)
	}
	types := []beton.TypeID{beton.TypeRGBImage, beton.TypeRGBImage, beton.TypeInt, beton.TypeFloat, beton.TypeNDArray,
		beton.TypeTorchTensor, beton.TypeBytes, beton.TypeJSON}
	fs := f.Fields()
	if f.NumSamples() != 60 || len(fs) != len(types) {
		t.Fatalf("%d samples, %d fields", f.NumSamples(), len(fs))
	}
	for i, ty := range types {
		if fs[i].Type != ty {
			t.Errorf("field %d (%s): type %v, want %v", i, fs[i].Name, fs[i].Type, ty)
		}
	}
	if fs[4].DType != "<f4" || fmt.Sprint(fs[4].Shape) != "[4 4]" || fs[5].DType != "<i4" || fmt.Sprint(fs[5].Shape) != "[3]" {
		t.Errorf("arrays: %s %v, %s %v", fs[4].DType, fs[4].Shape, fs[5].DType, fs[5].Shape)
	}
	for i := range 60 {
		img, err := f.Image(i, 0)
		if err != nil || img.Mode != beton.ModeJPEG || max(img.Width, img.Height) != 32 {
			t.Errorf("sample %d: image %+v, %v; want a JPEG of 32 on its longer side", i, img, err)
		}
		thumb, err := f.Image(i, 1)
		if err != nil || thumb.Mode != beton.ModeRaw || thumb.Width != 8 || thumb.Height != 8 {
			t.Errorf("sample %d: thumb %+v, %v", i, thumb, err)
		}
		if f.Int(i, 2) != int64(i%10) || f.Float(i, 3) != float64(i)/10 {
			t.Errorf("sample %d: label %d, score %v", i, f.Int(i, 2), f.Float(i, 3))
		}
		ids, err := f.ReadData(i, 5, nil)
		if err != nil || len(ids) != 12 || ids[0] != byte(i) || ids[4] != byte(i+1) {
			t.Errorf("sample %d: ids % x, %v", i, ids, err)
		}
		name, err := f.ReadData(i, 6, nil)
		if err != nil || string(name) != fmt.Sprintf("sample-%d", i) {
			t.Errorf("sample %d: name %q, %v", i, name, err)
		}
		meta, err := f.ReadData(i, 7, nil)
		var m struct{ ID int }
		if err != nil || json.Unmarshal(meta[:len(meta)-1], &m) != nil || m.ID != i || meta[len(meta)-1] != 0 {
			t.Errorf("sample %d: meta %q, %v", i, meta, err)
		}
	}
}

// TestDatasetWriterBadSamples: a sample that cannot be written raises
// WriteError naming its index and field (a wrong shape, a wrong dtype, an
// image that cannot be decoded, a value JSON cannot encode, the dataset's
// own exception), and nothing is left where the beton was to be.
func TestDatasetWriterBadSamples(t *testing.T) {
	py := installedPython(t, "numpy")
	for _, c := range []struct{ kind, want string }{
		{"shape", `sample 7, field "vec": ValueError: want float32 of shape (2, 3), got float32 of shape (3, 2)`},
		{"dtype", `sample 7, field "vec": ValueError: want float32 of shape (2, 3), got float64 of shape (2, 3)`},
		{"image", `sample 7, field "image": unrecognized or unsupported image format`},
		{"json", `sample 7, field "meta": TypeError: cannot be encoded as JSON`},
		{"dataset", `sample 7: KeyError: 'no such record'`},
	} {
		t.Run(c.kind, func(t *testing.T) {
			dir := t.TempDir()
			_, stderr := run(t, 1, py, "testdata/writer/bad_sample.py", c.kind, filepath.Join(dir, "bad.beton"))
			if !strings.Contains(stderr, "WriteError") || !strings.Contains(stderr, c.want) {
				t.Errorf("stderr lacks WriteError and %s:\n%s", c.want, stderr)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

// TestDatasetWriterWorkerEnds: a worker that dies on sample 7 (the OOM
// killer's SIGKILL, os._exit with any status) raises WriteError naming the
// worker, how it ended and the sample; one whose dataset calls sys.exit,
// raises KeyboardInterrupt or an exception whose str() raises names the
// sample and what it raised. These said "fd:5: no header: unexpected EOF"
// or "no stream has sample 6", or a traceback of the worker. Nothing is
// left.
func TestDatasetWriterWorkerEnds(t *testing.T) {
	py := installedPython(t, "numpy")
	for _, c := range []struct{ kind, want string }{
		{"sigkill", "worker 0 of 2 was killed by SIGKILL (the kernel's OOM killer kills so when memory runs out) on sample 7 (dataset index 7); the beton was not written"},
		{"exit3", "worker 0 of 2 exited with status 3 (os._exit?) on sample 7 (dataset index 7)"},
		{"exit0", "worker 0 of 2 ended with exit status 0 (os._exit?) on sample 7 (dataset index 7), before its last"},
		{"systemexit", "sample 7: SystemExit (the dataset called sys.exit): 3"},
		{"keyboard", "sample 7: KeyboardInterrupt"},
		{"badstr", "sample 7: Unprintable: (its message cannot be shown: str() raised RuntimeError)"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			dir := t.TempDir()
			_, stderr := run(t, 1, py, "testdata/writer/bad_sample.py", c.kind, filepath.Join(dir, "bad.beton"))
			if !strings.Contains(stderr, "WriteError") || !strings.Contains(stderr, c.want) {
				t.Errorf("stderr lacks WriteError and %s:\n%s", c.want, stderr)
			}
			if strings.Count(stderr, "Traceback") > 1 {
				t.Errorf("more than the one traceback:\n%s", stderr)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

// TestDatasetWriterS3 writes the every-field dataset straight to the test
// S3 server: the object is byte for byte the local file. A writer killed
// (SIGKILL) halfway leaves no object and no incomplete upload: its workers
// and its ffcvfs write end with it, and the upload is aborted.
func TestDatasetWriterS3(t *testing.T) {
	py := installedPython(t, "numpy", "torch", "PIL")
	srv := s3test.Start(t)
	srv.CreateBucket(t, "betons")
	env := append(os.Environ(), srv.Env()...)
	cmd := exec.Command(py, "../scripts/every_field_dataset.py", "write", testenv.Fixture(t, "imagefolder-small"), "s3://betons/every.beton", "2")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := readLoaderManifest(t, "../pipeline/testdata/ffcvfs-every-field.ffcv-loader.json").BetonSHA256
	if got := objectSHA256(t, srv, "betons", "every.beton"); got != want {
		t.Errorf("the object's SHA-256 is %.12s, the local file's %.12s", got, want)
	}

	// Killed halfway: sample 30 of 60 never comes.
	script := `
import sys, threading
import numpy as np
from ffcvfs.fields import IntField, RGBImageField
from ffcvfs.writer import DatasetWriter

class Slow:
    def __len__(self):
        return 60
    def __getitem__(self, i):
        if i == 30:
            print("at 30", flush=True)
            threading.Event().wait()
        return np.full((300, 400, 3), i, np.uint8), i

DatasetWriter("s3://betons/killed.beton", {"image": RGBImageField(), "label": IntField()},
              num_workers=2).from_indexed_dataset(Slow(), chunksize=10)
`
	kill := exec.Command(py, "-c", script)
	kill.Env = env
	stdout, err := kill.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := kill.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "at 30\n" {
		t.Fatalf("the writer did not reach sample 30: %q, %v", buf, err)
	}
	uploads := func() int {
		out, err := srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String("betons")})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Uploads)
	}
	if n := uploads(); n != 1 {
		t.Fatalf("%d uploads open halfway, want 1", n)
	}
	kill.Process.Signal(syscall.SIGKILL)
	kill.Wait()
	deadline := time.Now().Add(testenv.Patience)
	for uploads() != 0 {
		if time.Now().After(deadline) {
			ps, _ := exec.Command("ps", "-eo", "pid,ppid,stat,args").Output()
			t.Fatalf("the upload of the killed writer is still open; processes:\n%s", ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := srv.Client().HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("betons"), Key: aws.String("killed.beton")}); err == nil {
		t.Error("the killed writer left an object")
	}
}

// readmeBlockWith returns the README's Python block that holds s.
func readmeBlockWith(t *testing.T, s string) string {
	t.Helper()
	for _, b := range readREADME(t).blocks {
		if b.lang == "python" && strings.Contains(b.text, s) {
			return b.text
		}
	}
	t.Fatalf("no Python block of the README holds %q", s)
	return ""
}

// TestReadmeWriterBlocks runs the README's two DatasetWriter blocks: the
// CIFAR-10 one with torchvision's CIFAR10 standing for a small local
// dataset of the same kind (PIL images and labels; no download), and the
// detection one over fixture photos, written to a local file instead of
// its bucket. Both betons hold what was given.
func TestReadmeWriterBlocks(t *testing.T) {
	py := installedPython(t, "numpy", "torchvision", "PIL")
	dir := t.TempDir()
	cifar := `
import numpy as np, torchvision
from PIL import Image

class SmallCIFAR10:
    def __init__(self, root, train=True, download=False):
        self.n = 120 if train else 40
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        return Image.fromarray(np.full((32, 32, 3), i % 256, np.uint8)), i % 10

torchvision.datasets.CIFAR10 = SmallCIFAR10
` + readmeBlockWith(t, "cifar_{split}.beton")
	cmd := exec.Command(py, "-c", cifar)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the CIFAR-10 block: %v\n%s", err, out)
	}
	for split, n := range map[string]int{"train": 120, "test": 40} {
		f, err := beton.OpenFile(filepath.Join(dir, "cifar_"+split+".beton"))
		if err != nil {
			t.Fatal(err)
		}
		if f.NumSamples() != n {
			t.Errorf("%s: %d samples, want %d", split, f.NumSamples(), n)
		}
		for i := range n {
			img, err := f.Image(i, 0)
			if err != nil || img.Mode != beton.ModeRaw || img.Width != 32 || img.Height != 32 || f.Int(i, 1) != int64(i%10) {
				t.Errorf("%s sample %d: %+v, label %d, %v", split, i, img, f.Int(i, 1), err)
			}
		}
		f.Close()
	}

	// The detection block as written, over 30 of the fixture's photos
	// (TestReadmeDetection reads its beton back).
	photos, _ := filepath.Glob(filepath.Join(testenv.Fixture(t, "imagefolder-small"), "*", "*.jpg"))
	sort.Strings(photos)
	var records []map[string]any
	for i, p := range photos[:30] {
		boxes, labels := [][4]int{}, []int{}
		for range i % 3 {
			boxes, labels = append(boxes, [4]int{1, 2, 30, 40}), append(labels, i%7)
		}
		records = append(records, map[string]any{"file": p, "boxes": boxes, "labels": labels})
	}
	ann, _ := json.Marshal(records)
	if err := os.WriteFile(filepath.Join(dir, "annotations.json"), ann, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(py, "-c", readmeBlockWith(t, "class Detection"))
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the detection block: %v\n%s", err, out)
	}
	f, err := beton.OpenFile(filepath.Join(dir, "det_train.beton"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.NumSamples() != 30 {
		t.Fatalf("%d samples", f.NumSamples())
	}
	for i := range 30 {
		if f.Int(i, 1) != int64(i%3) {
			t.Errorf("sample %d: count %d", i, f.Int(i, 1))
		}
		boxes, err := f.ReadData(i, 2, nil)
		if err != nil || len(boxes) != 32*4*4 {
			t.Errorf("sample %d: boxes of %d bytes, %v", i, len(boxes), err)
		}
	}
}

// TestWriteFromStreamFlags: ffcvfs write --from-stream refuses bad flags
// and sources with a sentence (exit 2), writes a stream given on standard
// input (exit 0), and refuses a stream that is not one (exit 1), leaving
// nothing.
func TestWriteFromStreamFlags(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.beton")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from-stream", "fd:abc", out}, `"fd:abc": want fd:N`},
		{[]string{"--from-stream", "fd:-1", out}, "want fd:N"},
		{[]string{"--from-stream", "fd:999999999", out}, "want fd:N"},
		{[]string{"--from-stream", "fd:977", out}, "fd:977: bad file descriptor (no such descriptor open)"},
		{[]string{"--from-stream", filepath.Join(dir, "missing"), out}, "no such file or directory"},
		{[]string{"--from-stream", dir, out}, "is a folder, not a stream"},
		{[]string{"--from-stream", "-", "--mode", "raw", out}, "--mode is for ImageFolder trees"},
		{[]string{"--from-stream", "-", "--max-sample-size", "1PiB", out}, "--max-sample-size: want a size from 1MiB to 4GiB"},
		{[]string{"--from-stream", "-", "--max-sample-size", "-5", out}, "--max-sample-size"},
		{[]string{"--from-stream", "-", "--workers", "0", out}, "--workers: want 1 to 4096"},
		{[]string{"--from-stream", "-"}, "needs 1 argument(s)"},
		{[]string{"--from-stream", "-", "--page-size", "3MiB", out}, ""},
	} {
		cmd := exec.Command(ffcvfs, append([]string{"write"}, c.args...)...)
		cmd.Stdin = strings.NewReader("")
		b, err := cmd.CombinedOutput()
		code := cmd.ProcessState.ExitCode()
		if c.want == "" {
			if code != 1 || !strings.Contains(string(b), "no header") {
				t.Errorf("%v: exit %d, %s; want exit 1 and no header", c.args, code, b)
			}
		} else if code != 2 || !strings.Contains(string(b), c.want) {
			t.Errorf("%v: exit %d (%v), %s; want exit 2 and %q", c.args, code, err, b, c.want)
		}
	}
	// A JPEG given as a stream; then a one-sample stream on stdin.
	jpg := filepath.Join(testenv.Fixture(t, "imagefolder-small"), "class000", "img00000.jpg")
	_, stderr := run(t, 1, ffcvfs, "write", "--from-stream", jpg, out)
	if !strings.Contains(stderr, "not an ffcvfs sample stream") || !strings.Contains(stderr, "was not written") {
		t.Errorf("a JPEG as a stream: %s", stderr)
	}
	header := `{"format": "ffcvfs-stream", "version": 1, "samples": 1, "fields": [{"name": "label", "type": "int"}]}`
	var in []byte
	in = append(in, byte(len(header)+1), 0, 0, 0, 'H')
	in = append(in, header...)
	in = append(in, 17, 0, 0, 0, 'S', 0, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0)
	cmd := exec.Command(ffcvfs, "write", "--from-stream", "-", out)
	cmd.Stdin = strings.NewReader(string(in))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.NumSamples() != 1 || f.Int(0, 0) != 42 {
		t.Errorf("%d samples, label %d", f.NumSamples(), f.Int(0, 0))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestDatasetWriterWebDataset writes three tar shards through
// from_webdataset(shards, pipeline), with two workers: the samples in
// shard order. Debian has no webdataset package, so a module of that name
// stands in for it, reading a tar as webdataset does (members grouped by
// basename into dicts of extension: bytes).
func TestDatasetWriterWebDataset(t *testing.T) {
	py := installedPython(t, "numpy")
	dir := t.TempDir()
	stub := `
import os, tarfile
class WebDataset:
    def __init__(self, shard):
        self.shard = shard
    def __iter__(self):
        cur, key = {}, None
        with tarfile.open(self.shard) as tf:
            for m in tf:
                base, ext = os.path.splitext(m.name)
                if key is not None and base != key:
                    yield cur
                    cur = {}
                key = base
                cur["__key__"] = base
                cur[ext[1:]] = tf.extractfile(m).read()
        if cur:
            yield cur
`
	if err := os.WriteFile(filepath.Join(dir, "webdataset.py"), []byte(stub), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import io, json, os, sys, tarfile
from ffcvfs.fields import BytesField, IntField
from ffcvfs.writer import DatasetWriter

shards = []
n = 0
for s, count in enumerate((5, 0, 7, 3)):
    path = os.path.join(sys.argv[1], "shard-%d.tar" % s)
    with tarfile.open(path, "w") as tf:
        for k in range(count):
            for ext, data in (("cls", str(n).encode()), ("txt", ("sample %d" % n).encode())):
                info = tarfile.TarInfo("%06d.%s" % (n, ext))
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            n += 1
    shards.append(path)

def pipeline(ds):
    return ((int(d["cls"]), d["txt"]) for d in ds)

DatasetWriter(sys.argv[2], {"label": IntField(), "text": BytesField()}, num_workers=2).from_webdataset(shards, pipeline)
`
	out := filepath.Join(dir, "wds.beton")
	cmd := exec.Command(py, "-c", script, dir, out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.NumSamples() != 15 {
		t.Fatalf("%d samples, want 15", f.NumSamples())
	}
	for i := range 15 {
		text, err := f.ReadData(i, 1, nil)
		if f.Int(i, 0) != int64(i) || err != nil || string(text) != fmt.Sprintf("sample %d", i) {
			t.Errorf("sample %d: label %d, text %q, %v", i, f.Int(i, 0), text, err)
		}
	}
}

// TestDatasetWriterTerminal: in a terminal (script(1) gives it one), the
// DatasetWriter's progress bar ends its line before the summary, which
// comes once, after it; the bar's first line shows no rate. The summary
// was printed into the bar's line, and the bar then drawn again after it.
func TestDatasetWriterTerminal(t *testing.T) {
	py := installedPython(t, "numpy")
	scriptBin := testenv.LookPath(t, "script")
	dir := t.TempDir()
	prog := `
import numpy as np
from ffcvfs.fields import IntField, NDArrayField
from ffcvfs.writer import DatasetWriter

class Data:
    def __len__(self):
        return 3000
    def __getitem__(self, i):
        return np.full((4,), i, np.int32), i

DatasetWriter("out.beton", {"x": NDArrayField(np.dtype("int32"), (4,)), "label": IntField()},
              num_workers=2).from_indexed_dataset(Data())
print("after", flush=True)
`
	if err := os.WriteFile(filepath.Join(dir, "w.py"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(scriptBin, "-qec", py+" w.py", "/dev/null")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the writer in a terminal: %v\n%q", err, out)
	}
	text := strings.ReplaceAll(string(out), "\r\n", "\n")
	bar := strings.Index(text, "write [")
	sum := strings.Index(text, "out.beton: 3000 samples")
	if bar < 0 || sum < 0 {
		t.Fatalf("no bar or no summary in the terminal:\n%q", text)
	}
	if sum < bar || text[sum-1] != '\n' || strings.Count(text[sum:], "write [") > 0 {
		t.Errorf("the summary must follow the bar's finished line, and the bar not come again:\n%q", text)
	}
	if first := text[bar:]; strings.Contains(first[:strings.IndexAny(first+"\r", "\r")], "samples/s") {
		t.Errorf("the bar's first line shows a rate:\n%q", text)
	}
	if !strings.Contains(text[sum:], "after") {
		t.Errorf("the script's own output after the writer's is missing:\n%q", text)
	}
}
