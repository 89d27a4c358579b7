package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

// makeVariants is the Python (PIL, jpegtran) that writes JPEGs of every
// kind a transcode meets into a folder, from a photo: progressive (RGB and
// grayscale), cut after each scan but the last and closed with EOI, CMYK
// with and without an Adobe marker, arithmetic-coded (sequential and
// progressive), and a 12-bit frame header.
const makeVariants = `
import io, os, subprocess, sys
from PIL import Image
photo, out = sys.argv[1], sys.argv[2]
im = Image.open(photo).convert("RGB")

def save(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)

def encoded(img, **kw):
    b = io.BytesIO()
    img.save(b, "JPEG", quality=90, **kw)
    return b.getvalue()

def segments(data):
    """(marker, start, end) of each marker segment up to EOI."""
    i, out = 2, []
    while i < len(data):
        m = data[i + 1]
        if m == 0xD9:
            break
        n = int.from_bytes(data[i + 2:i + 4], "big")
        end = i + 2 + n
        if m == 0xDA:  # the scan's data runs to the next marker
            j = end
            while True:
                j = data.index(b"\xff", j)
                if data[j + 1] != 0 and not 0xD0 <= data[j + 1] <= 0xD7:
                    break
                j += 2
            end = j
        out.append((m, i, end))
        i = end
    return out

for name, img in (("prog", im), ("prog-gray", im.convert("L"))):
    p = encoded(img, progressive=True)
    save(name + ".jpg", p)
    scans = [s for s in segments(p) if s[0] == 0xDA]
    for k, s in enumerate(scans[:-1], 1):
        save(f"{name}-cut{k}.jpg", p[:s[2]] + b"\xff\xd9")
cmyk = encoded(im.convert("CMYK"))
save("cmyk-adobe.jpg", cmyk)
adobe = [s for s in segments(cmyk) if s[0] == 0xEE]
assert adobe, "PIL wrote no Adobe marker"
save("cmyk-noadobe.jpg", cmyk[:adobe[0][1]] + cmyk[adobe[0][2]:])
base = encoded(im)
save("arith.jpg", subprocess.run(["jpegtran", "-arithmetic"], input=base, capture_output=True, check=True).stdout)
save("arith-prog.jpg", subprocess.run(["jpegtran", "-arithmetic", "-progressive"], input=base, capture_output=True, check=True).stdout)
sof = [s for s in segments(base) if s[0] == 0xC0][0]
save("12bit.jpg", base[:sof[1] + 4] + bytes([12]) + base[sof[1] + 5:])
`

// comparePixels is the Python that compares, with PIL, each JPEG in a
// folder with the one of the same name in another: it prints a line per
// file, "kept" (the same bytes), "exact" (other bytes, the same mode, size
// and pixels) or "differ".
const comparePixels = `
import os, sys
from PIL import Image
a, b = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(a)):
    x, y = open(os.path.join(a, name), "rb").read(), open(os.path.join(b, name), "rb").read()
    if x == y:
        print(name, "kept")
        continue
    ia, ib = Image.open(os.path.join(a, name)), Image.open(os.path.join(b, name))
    same = ia.mode == ib.mode and ia.size == ib.size and ia.tobytes() == ib.tobytes()
    print(name, "exact" if same else "differ")
`

// TestTranscodeKeepsPixels: every writer's transcode to restart markers
// gives, by PIL (libjpeg-turbo, and PIL's CMYK inversion, which follows
// the Adobe marker), the source's pixels, or keeps the JPEG as it was and
// counts it: over progressive JPEGs complete and cut after each scan, CMYK
// with and without an Adobe marker, arithmetic coding, odd sampling and a
// 12-bit frame. A cut progressive JPEG was transcoded to other pixels (its
// blocks, which libjpeg smooths, a sequential copy has complete), and a
// CMYK one without an Adobe marker was given one, which inverts it in PIL.
func TestTranscodeKeepsPixels(t *testing.T) {
	py := debianPython(t, "PIL")
	testenv.LookPath(t, "jpegtran")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	photo := filepath.Join(dir, "photo.jpg")
	if err := os.WriteFile(photo, testenv.Photos(t, 1)[0].Data, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, 0, py, "-c", makeVariants, photo, src)
	layouts, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(t), "jpeg", "testdata", "layouts", "*.jpg"))
	if len(layouts) == 0 {
		testenv.Missing(t, "jpeg/testdata/layouts/*.jpg")
	}
	for _, l := range layouts {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "layout-"+filepath.Base(l)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)

	// write --from-beton over a beton that holds each as it is.
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	in := filepath.Join(dir, "in.beton")
	w, err := beton.Create(in, fields, len(names), beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		b, _ := os.ReadFile(filepath.Join(src, n))
		f, err := jpeg.ParseFrame(b)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeJPEG, Width: f.Width, Height: f.Height, Data: b}, {Int: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.beton")
	summary, _ := run(t, 0, binary(t, "ffcvfs"), "write", "--from-beton", in, out)
	got := filepath.Join(dir, "from-beton")
	if err := os.Mkdir(got, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		b, err := f.ReadData(i, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(got, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	res := compareFolders(t, py, src, got)
	t.Logf("--from-beton: %s", strings.TrimSpace(summary))
	mustBe := map[string]string{"prog.jpg": "exact", "prog-gray.jpg": "exact", "cmyk-adobe.jpg": "exact", "cmyk-noadobe.jpg": "exact",
		"arith.jpg": "exact", "arith-prog.jpg": "exact", "12bit.jpg": "kept"}
	kept := 0
	for _, n := range names {
		switch {
		case res[n] == "differ":
			t.Errorf("--from-beton: %s: transcoded to other pixels", n)
		case mustBe[n] != "" && res[n] != mustBe[n]:
			t.Errorf("--from-beton: %s %s, want it %s", n, res[n], mustBe[n])
		case strings.HasPrefix(n, "layout-") && res[n] != "exact":
			t.Errorf("--from-beton: %s %s, want it transcoded", n, res[n])
		}
		if res[n] == "kept" {
			kept++
		}
	}
	if !strings.Contains(summary, fmt.Sprintf("%d kept", kept)) && !strings.Contains(summary, fmt.Sprintf("kept %d", kept)) {
		t.Errorf("--from-beton kept %d JPEGs as they were; its summary does not count them:\n%s", kept, summary)
	}

	// ffcvfs write of an ImageFolder: its verbatim JPEGs (progressive,
	// complete and cut) are transcoded or kept.
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	var progs []string
	for _, n := range names {
		if strings.HasPrefix(n, "prog") {
			b, _ := os.ReadFile(filepath.Join(src, n))
			os.WriteFile(filepath.Join(tree, "a", n), b, 0o644)
			progs = append(progs, n)
		}
	}
	folder := filepath.Join(dir, "folder.beton")
	run(t, 0, binary(t, "ffcvfs"), "write", "--keep-names", tree, folder)
	mnt := mountBeton(t, folder)
	res = compareFolders(t, py, filepath.Join(tree, "a"), filepath.Join(mnt, "a"))
	for _, n := range progs {
		switch {
		case res[n] == "differ":
			t.Errorf("write (ImageFolder): %s: transcoded to other pixels", n)
		case (n == "prog.jpg" || n == "prog-gray.jpg") && res[n] != "exact":
			t.Errorf("write (ImageFolder): %s %s, want it transcoded", n, res[n])
		}
	}
}

// compareFolders runs comparePixels over folders a and b and returns each
// file's verdict.
func compareFolders(t *testing.T, py, a, b string) map[string]string {
	t.Helper()
	stdout, _ := run(t, 0, py, "-c", comparePixels, a, b)
	res := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if name, verdict, ok := strings.Cut(line, " "); ok {
			res[name] = verdict
		}
	}
	return res
}

// TestWriteHugeJPEGsBounded: four JPEGs of 13376² (4:2:0, 5 MB each),
// written with 2 workers and restart markers, keep ffcvfs write within
// 1 GiB: a transcode whose coefficients would take more than
// jpeg.MaxTranscodeMemory keeps its JPEG as it is, and says so. Each
// transcode held 517 MiB of coefficients: 1.06 GiB with 2 workers.
func TestWriteHugeJPEGsBounded(t *testing.T) {
	py := debianPython(t, "PIL")
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree", "a")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, 0, py, "-c", `
import sys
from PIL import Image, ImageDraw
n = 13376
im = Image.new("RGB", (n, n), (90, 120, 200))
d = ImageDraw.Draw(im)
for i in range(0, n, 512):
    d.line([(i, 0), (n - i, n)], fill=(i % 256, 30, 200 - i % 200), width=9)
im.save(sys.argv[1], "JPEG", quality=80)
`, filepath.Join(tree, "h0.jpg"))
	b, err := os.ReadFile(filepath.Join(tree, "h0.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 4; i++ {
		if err := os.WriteFile(filepath.Join(tree, fmt.Sprintf("h%d.jpg", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, peak, err := runPeak(t, binary(t, "ffcvfs"), "write", "--workers", "2", filepath.Join(dir, "tree"), filepath.Join(dir, "huge.beton"))
	if err != nil {
		t.Fatalf("ffcvfs write: %v\n%s", err, out)
	}
	t.Logf("peak RSS %d MiB\n%s", peak>>20, out)
	if peak > 1<<30 {
		t.Errorf("ffcvfs write of four 13376² JPEGs with 2 workers peaked at %d MiB, more than 1 GiB", peak>>20)
	}
	if !strings.Contains(string(out), "4 JPEGs stored as they were") || !strings.Contains(string(out), "too large to transcode") {
		t.Errorf("the summary does not say the JPEGs too large to transcode were kept:\n%s", out)
	}
}

// pageFittingJPEG writes a JPEG of noise, padded with a comment to
// pageSize-margin bytes: it fits a page as it is and no longer with
// restart markers (its scan grows about 1 %).
func pageFittingJPEG(t *testing.T, py, path string, pageSize, margin int) {
	t.Helper()
	run(t, 0, py, "-c", `
import io, random, sys
from PIL import Image
path, want = sys.argv[1], int(sys.argv[2])
rnd = random.Random(5)
side = 1000
while True:
    im = Image.frombytes("RGB", (side, side), rnd.randbytes(side * side * 3))
    b = io.BytesIO()
    im.save(b, "JPEG", quality=85, optimize=True)
    data = b.getvalue()
    if len(data) > want - 4 * 65533 - 200:
        break
    side += 100
while len(data) > want - 4 * 65533 - 200:
    side -= 4
    im = im.crop((0, 0, side, side))
    b = io.BytesIO()
    im.save(b, "JPEG", quality=85, optimize=True)
    data = b.getvalue()
pad = want - len(data)
coms = b""
while pad > 0:
    n = min(pad - 4, 65533) if pad > 4 + 65533 else pad - 4
    n = max(n, 0)
    coms += b"\xff\xfe" + (n + 2).to_bytes(2, "big") + b"x" * n
    pad -= n + 4
data = data[:2] + coms + data[2:]
assert len(data) == want, (len(data), want)
open(path, "wb").write(data)
`, path, fmt.Sprint(pageSize-margin))
}

// TestWriteKeepsJPEGThatFitsAsItIs: a JPEG that fits its page as it is but
// not with restart markers is stored as it was, and counted, by ffcvfs
// write of an ImageFolder and by the DatasetWriter, as --from-beton does.
// Both failed the whole write.
func TestWriteKeepsJPEGThatFitsAsItIs(t *testing.T) {
	py := debianPython(t, "PIL")
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree", "a")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(tree, "big.jpg")
	pageFittingJPEG(t, py, big, beton.MinPageSize, 300)
	src, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "folder.beton")
	stdout, _ := run(t, 0, binary(t, "ffcvfs"), "write", "--page-size", "2MiB", filepath.Join(dir, "tree"), out)
	if !strings.Contains(stdout, "1 JPEGs stored as they were") && !strings.Contains(stdout, "1 JPEG stored as it was") {
		t.Errorf("ffcvfs write does not count the JPEG kept:\n%s", stdout)
	}
	checkStoredAsItWas(t, out, src)

	pyv := installedPython(t, "numpy")
	ds := filepath.Join(dir, "ds.beton")
	run(t, 0, pyv, "-c", `
import sys
from ffcvfs.fields import IntField, RGBImageField
from ffcvfs.writer import DatasetWriter
data = open(sys.argv[1], "rb").read()
DatasetWriter(sys.argv[2], {"image": RGBImageField(write_mode="jpg"), "label": IntField()}, page_size=2 << 20, num_workers=1).from_indexed_dataset([(data, 0)])
`, big, ds)
	checkStoredAsItWas(t, ds, src)
}

// checkStoredAsItWas fails the test unless the beton's one sample holds
// src as its image.
func checkStoredAsItWas(t *testing.T, path string, src []byte) {
	t.Helper()
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := f.ReadData(0, 0, nil)
	if err != nil || !bytes.Equal(b, src) {
		t.Errorf("%s: its image is %d bytes (%v), not the source's %d as they were", path, len(b), err, len(src))
	}
}

// TestWriteFromBetonHugePages: a source of 2 GiB pages holding three
// small JPEGs (a sparse file of kilobytes) is rewritten into a beton that
// is sparse too: a page takes the memory and disk of its bytes.
// --from-beton wrote 4.1 GB of zeros (15.7 s) from a buffer of a page's
// 2 GiB.
func TestWriteFromBetonHugePages(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "huge-pages.beton")
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	w, err := beton.Create(src, fields, 3, beton.WriterOptions{PageSize: 1 << 31})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range testenv.Photos(t, 3) {
		f, err := jpeg.ParseFrame(p.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeJPEG, Width: f.Width, Height: f.Height, Data: p.Data}, {Int: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.beton")
	stdout, _ := run(t, 0, binary(t, "ffcvfs"), "write", "--from-beton", src, out)
	t.Log(stdout)
	for _, p := range []string{src, out} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 > 64<<20 {
			t.Errorf("%s: %d MiB on disk for 3 small JPEGs in pages of 2 GiB; want its zeros a hole", p, st.Blocks*512>>20)
		}
	}
	// Read in a process of its own (its tables and 3 samples; a verify
	// would read 4 GiB of holes): this one's resident size would count in
	// the peak of every process it starts after (ru_maxrss).
	if stdout, _ := run(t, 0, binary(t, "ffcvfs"), "info", "--samples", "3", out); strings.Count(stdout, "sample ") != 3 {
		t.Errorf("ffcvfs info of the rewritten beton: %s", stdout)
	}
}
