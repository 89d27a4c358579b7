package integration

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/s3test"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// writeSmallBeton converts the imagefolder-small fixture with
// --classes-out and returns the fixture folder, the beton and the classes
// file.
func writeSmallBeton(t *testing.T) (src, out, classes string) {
	t.Helper()
	src = testenv.Fixture(t, "imagefolder-small")
	dir := t.TempDir()
	out, classes = filepath.Join(dir, "small.beton"), filepath.Join(dir, "classes.txt")
	// The JPEGs as they are: the mount must serve the fixture's very files.
	run(t, 0, binary(t, "ffcvfs"), "write", "--restart-interval", "0", "--page-size", "2MiB", "--classes-out", classes, src, out)
	return src, out, classes
}

// TestMountImageFolder: torchvision's ImageFolder sees the same dataset in a
// mount of a written beton as in the folder it was written from.
func TestMountImageFolder(t *testing.T) {
	src, out, classes := writeSmallBeton(t)
	mnt := mountBeton(t, out, "--classes", classes)
	checkSameImageFolder(t, mnt, src)
}

// imageFolderComparison is what the script of checkSameImageFolder prints.
type imageFolderComparison struct {
	Classes, WantClasses       []string
	ClassToIdx, WantClassToIdx map[string]int
	Len, WantLen               int
	LabelDiffers, BytesDiffer  []int
}

// checkSameImageFolder checks that ImageFolder(got) and ImageFolder(want)
// have the same classes, class_to_idx and length, and that every index has
// the same label and file bytes in both.
func checkSameImageFolder(t *testing.T, got, want string) {
	t.Helper()
	py := debianPython(t, "torchvision")
	stdout, _ := run(t, 0, py, "-c", `
import json, sys
from torchvision.datasets import ImageFolder

def raw(path):
    with open(path, "rb") as f:
        return f.read()

a, b = ImageFolder(sys.argv[1], loader=raw), ImageFolder(sys.argv[2], loader=raw)
res = {"Classes": a.classes, "WantClasses": b.classes,
       "ClassToIdx": a.class_to_idx, "WantClassToIdx": b.class_to_idx,
       "Len": len(a), "WantLen": len(b), "LabelDiffers": [], "BytesDiffer": []}
for i in range(min(len(a), len(b))):
    x, lx = a[i]
    y, ly = b[i]
    if lx != ly:
        res["LabelDiffers"].append(i)
    if x != y:
        res["BytesDiffer"].append(i)
json.dump(res, sys.stdout)
`, got, want)
	var r imageFolderComparison
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if strings.Join(r.Classes, "\n") != strings.Join(r.WantClasses, "\n") {
		t.Errorf("classes %q, want %q", r.Classes, r.WantClasses)
	}
	if fmt.Sprint(r.ClassToIdx) != fmt.Sprint(r.WantClassToIdx) {
		t.Errorf("class_to_idx %v, want %v", r.ClassToIdx, r.WantClassToIdx)
	}
	if r.Len != r.WantLen || r.Len == 0 {
		t.Errorf("%d samples, want %d", r.Len, r.WantLen)
	}
	if len(r.LabelDiffers) > 0 {
		t.Errorf("%d indices have another label, first %v", len(r.LabelDiffers), r.LabelDiffers[:min(5, len(r.LabelDiffers))])
	}
	if len(r.BytesDiffer) > 0 {
		t.Errorf("%d indices have other bytes, first %v", len(r.BytesDiffer), r.BytesDiffer[:min(5, len(r.BytesDiffer))])
	}
}

// manifestImage is an image field of a sample in a fixture's manifest.
type manifestImage struct {
	Mode          string
	Width, Height int
	Size          int
	SHA256        string
}

// fixtureManifest reads the manifest of a fixture beton: per sample, the
// label and the image fields.
func fixtureManifest(t *testing.T, beton string) (labels []int64, images []map[string]manifestImage) {
	t.Helper()
	b, err := os.ReadFile(beton + ".manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		NumSamples int `json:"num_samples"`
		Fields     map[string]struct {
			Handler string
		}
		Samples []map[string]json.RawMessage
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s.manifest.json: %v", beton, err)
	}
	if len(m.Samples) != m.NumSamples {
		t.Fatalf("%s.manifest.json: %d samples listed, num_samples %d", beton, len(m.Samples), m.NumSamples)
	}
	for i, s := range m.Samples {
		var label int64
		if err := json.Unmarshal(s["label"], &label); err != nil {
			t.Fatalf("%s.manifest.json: sample %d label: %v", beton, i, err)
		}
		imgs := map[string]manifestImage{}
		for name, fd := range m.Fields {
			if fd.Handler != "RGBImageField" {
				continue
			}
			var img manifestImage
			if err := json.Unmarshal(s[name], &img); err != nil {
				t.Fatalf("%s.manifest.json: sample %d %s: %v", beton, i, name, err)
			}
			imgs[name] = img
		}
		labels = append(labels, label)
		images = append(images, imgs)
	}
	return labels, images
}

// TestMountFixtureBetons: every reference beton mounts; every sample file
// holds exactly the stored image (a raw one behind a P6 header that PIL
// reads), in the folder of its label; dataset.beton is the file itself.
func TestMountFixtureBetons(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(testenv.Fixture(t, "beton"), "*.beton"))
	if len(paths) == 0 {
		testenv.Missing(t, "no fixture betons")
	}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".beton"), func(t *testing.T) {
			labels, images := fixtureManifest(t, p)
			mnt := mountBeton(t, p)
			checkMountedSamples(t, mnt, labels, images, "image")
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(control.Path(mnt, control.DatasetFile))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf(".ffcvfs/dataset.beton (%d bytes) differs from %s (%d bytes)", len(got), p, len(want))
			}
		})
	}
	t.Run("label-first-two-images/thumb", func(t *testing.T) {
		p := testenv.Fixture(t, "beton", "label-first-two-images.beton")
		labels, images := fixtureManifest(t, p)
		mnt := mountBeton(t, p, "--image-field", "thumb")
		if n := checkMountedSamples(t, mnt, labels, images, "thumb"); n[".ppm"] != len(labels) {
			t.Errorf("files by extension %v, want %d .ppm", n, len(labels))
		}
	})
}

// checkMountedSamples checks the class folders and sample files of mnt
// against a manifest's labels and images (field), and returns how many
// files of each extension it found.
func checkMountedSamples(t *testing.T, mnt string, labels []int64, images []map[string]manifestImage, field string) map[string]int {
	t.Helper()
	var maxLabel int64
	for _, l := range labels {
		maxLabel = max(maxLabel, l)
	}
	labelWidth, idWidth := len(strconv.FormatInt(maxLabel, 10)), len(strconv.Itoa(len(labels)-1))
	type ppm struct {
		Path          string
		Width, Height int
		Header        int
	}
	var ppms []ppm
	seen := make([]bool, len(labels))
	exts := map[string]int{}
	for _, f := range mountedFiles(t, mnt) {
		class, name, _ := strings.Cut(f, "/")
		ext := filepath.Ext(name)
		id, err := strconv.Atoi(strings.TrimSuffix(name, ext))
		if err != nil || id < 0 || id >= len(labels) || seen[id] {
			t.Errorf("%s/%s: not a sample file name, or a sample served twice", class, name)
			continue
		}
		seen[id] = true
		exts[ext]++
		img := images[id][field]
		wantExt := map[string]string{"jpg": ".jpg", "raw": ".ppm"}[img.Mode]
		if want := fmt.Sprintf("%0*d%s", idWidth, id, wantExt); name != want {
			t.Errorf("sample %d is %s, want %s", id, name, want)
		}
		if want := fmt.Sprintf("%0*d", labelWidth, labels[id]); class != want {
			t.Errorf("sample %d (label %d) is in folder %s, want %s", id, labels[id], class, want)
		}
		path := filepath.Join(mnt, class, name)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("sample %d: %v", id, err)
			continue
		}
		if st, err := os.Stat(path); err != nil || st.Size() != int64(len(data)) {
			t.Errorf("sample %d: stat says %v (%v), read %d bytes", id, st.Size(), err, len(data))
		}
		if img.Mode == "raw" {
			hdr := fmt.Sprintf("P6\n%d %d\n255\n", img.Width, img.Height)
			if !bytes.HasPrefix(data, []byte(hdr)) {
				t.Errorf("sample %d: .ppm starts %q, want %q", id, data[:min(len(data), 20)], hdr)
				continue
			}
			data = data[len(hdr):]
			ppms = append(ppms, ppm{path, img.Width, img.Height, len(hdr)})
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != img.SHA256 || len(data) != img.Size {
			t.Errorf("sample %d (%s): %d bytes with SHA-256 %x, manifest: %d bytes, %s", id, name, len(data), sum, img.Size, img.SHA256)
		}
	}
	for id, ok := range seen {
		if !ok {
			t.Errorf("sample %d has no file", id)
		}
	}
	if len(ppms) == 0 {
		return exts
	}
	// PIL reads each .ppm to its size, and its pixels are the bytes after
	// the header.
	py := debianPython(t, "PIL")
	list, _ := json.Marshal(ppms)
	stdout, _ := run(t, 0, py, "-c", `
import json, sys
from PIL import Image
bad = []
for p in json.loads(sys.argv[1]):
    with open(p["Path"], "rb") as f:
        pixels = f.read()[p["Header"]:]
    with Image.open(p["Path"]) as im:
        if im.format != "PPM" or im.mode != "RGB" or im.size != (p["Width"], p["Height"]) or im.tobytes() != pixels:
            bad.append("%s: %s %s %s" % (p["Path"], im.format, im.mode, im.size))
json.dump(bad, sys.stdout)
`, string(list))
	var bad []string
	if err := json.Unmarshal([]byte(stdout), &bad); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	for _, b := range bad {
		t.Errorf("PIL: %s", b)
	}
	return exts
}

// loaderEpoch is what the DataLoader script prints per epoch.
type loaderEpoch struct {
	Seen       []int
	Bad        []int
	SamplerLen int
	Stats      mountStats
}

// mountStats is what stats.json holds.
type mountStats = control.Stats

func readMountStats(t *testing.T, mnt string) mountStats {
	t.Helper()
	s, err := control.ReadStats(mnt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dataLoaderScript reads a mount with torch's DataLoader (4 workers,
// batches of 16), loading each file's bytes and keeping their count, for
// epochs 0 and 1 in QuasiRandomSampler order ("quasi") or one epoch with
// shuffle=True ("shuffle"). It prints the indices seen, those whose size
// or label is wrong, and stats.json after each epoch.
const dataLoaderScript = `
import json, os, sys
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
from ffcvfs import QuasiRandomSampler

def nbytes(path):
    with open(path, "rb") as f:
        return len(f.read())

class Indexed(ImageFolder):
    def __getitem__(self, i):
        n, label = super().__getitem__(i)
        return i, n, label

def stats():
    with open(sys.argv[3]) as f:
        return json.load(f)

if __name__ == "__main__":
    mnt, mode = sys.argv[1], sys.argv[2]
    ds = Indexed(mnt, loader=nbytes)
    sizes = [os.path.getsize(p) for p, _ in ds.samples]
    if mode == "quasi":
        sampler = QuasiRandomSampler(mnt, seed=1)
        loader = DataLoader(ds, batch_size=16, sampler=sampler, num_workers=4)
        epochs = [0, 1]
    else:
        sampler = None
        loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=4)
        epochs = [0]
    out = []
    for e in epochs:
        if sampler is not None:
            sampler.set_epoch(e)
        seen, bad = [], []
        for idx, n, label in loader:
            for i, k, l in zip(idx.tolist(), n.tolist(), label.tolist()):
                seen.append(i)
                if k != sizes[i] or k == 0 or l != ds.targets[i]:
                    bad.append(i)
        out.append({"Seen": seen, "Bad": bad, "SamplerLen": len(sampler) if sampler else len(ds), "Stats": stats()})
    json.dump(out, sys.stdout)
`

// runDataLoader runs dataLoaderScript on mnt.
func runDataLoader(t *testing.T, mnt, mode string) []loaderEpoch {
	t.Helper()
	py := installedPython(t, "torch", "torchvision")
	stdout, _ := run(t, 0, py, "-c", dataLoaderScript, mnt, mode, control.Path(mnt, control.StatsFile))
	var out []loaderEpoch
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v: %.2000s", err, stdout)
	}
	return out
}

// checkEpoch checks that an epoch saw every one of n samples once, with
// the right sizes and labels.
func checkEpoch(t *testing.T, name string, e loaderEpoch, n int) {
	t.Helper()
	count := make([]int, n)
	for _, i := range e.Seen {
		if i < 0 || i >= n {
			t.Errorf("%s: index %d out of range [0, %d)", name, i, n)
			continue
		}
		count[i]++
	}
	for i, c := range count {
		if c != 1 {
			t.Errorf("%s: index %d seen %d times", name, i, c)
			break
		}
	}
	if len(e.Seen) != n || e.SamplerLen != n {
		t.Errorf("%s: %d samples seen, len %d, want %d", name, len(e.Seen), e.SamplerLen, n)
	}
	if len(e.Bad) > 0 {
		t.Errorf("%s: %d samples with a wrong size or label, first %d", name, len(e.Bad), e.Bad[0])
	}
}

// TestMountDataLoaderCache: with QuasiRandomSampler's orders, a cache of a
// tenth of the dataset reads every page once per epoch (bar the pages still
// cached from the epoch before); a shuffled DataLoader through the same
// cache still works, at the cost of re-reads.
func TestMountDataLoaderCache(t *testing.T) {
	debianPython(t, "torch", "torchvision")
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	const pageSize = 2 << 20
	var beton string
	var pages int
	for perClass := 230; ; perClass += 40 {
		tree := filepath.Join(dir, fmt.Sprintf("tree%d", perClass))
		cmd := exec.Command("go", "run", "./tools/mkimagefolder", "-out", tree, "-classes", "20", "-per-class", strconv.Itoa(perClass), "-seed", "3")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mkimagefolder: %v\n%s", err, out)
		}
		beton = filepath.Join(dir, fmt.Sprintf("d%d.beton", perClass))
		run(t, 0, ffcvfs, "write", "--restart-interval", "0", "--page-size", "2MiB", tree, beton)
		stdout, _ := run(t, 0, ffcvfs, "info", "--json", beton)
		var info struct{ Pages int }
		if err := json.Unmarshal([]byte(stdout), &info); err != nil {
			t.Fatal(err)
		}
		pages = info.Pages
		if pages >= 50 || perClass >= 500 {
			break
		}
	}
	// A tenth of the data pages. The dataset is large enough for that to be
	// at least 5 pages: the DataLoader's 4 workers read 4 batches at once,
	// and its read-ahead (prefetch_factor 2, so 8 batches of 16) spans up to
	// 5 pages of a quasi-random order whose window is 2 pages. A cache
	// smaller than what is read at once must re-read pages, whatever its
	// policy.
	if pages < 50 {
		t.Fatalf("only %d pages; a tenth of them would not hold what the DataLoader reads at once", pages)
	}
	cachePages := pages / 10
	budget := fmt.Sprintf("%dMiB", cachePages*pageSize>>20)
	t.Logf("%d pages, cache %s (%d pages)", pages, budget, cachePages)

	mnt := mountBeton(t, beton, "--cache-size", budget, "--order-batch-size", "16")
	epochs := runDataLoader(t, mnt, "quasi")
	if len(epochs) != 2 {
		t.Fatalf("%d epochs", len(epochs))
	}
	n := epochs[0].Stats.Samples
	for e, ep := range epochs {
		checkEpoch(t, fmt.Sprintf("quasi-random epoch %d", e), ep, n)
	}
	s0, s1 := epochs[0].Stats, epochs[1].Stats
	if s0.Pages != pages || s0.Cache.Slots != cachePages {
		t.Errorf("stats.json: %d pages, %d slots; want %d, %d", s0.Pages, s0.Cache.Slots, pages, cachePages)
	}
	t.Logf("quasi-random: pages_read %d after epoch 0, %d after epoch 1 (%d pages, %d slots; misses %d, hits %d)",
		s0.Cache.PagesRead, s1.Cache.PagesRead, s0.Pages, s0.Cache.Slots, s1.Cache.Misses, s1.Cache.Hits)
	if s0.Cache.PagesRead != uint64(s0.Pages) {
		t.Errorf("epoch 0 read %d pages, want each of the %d pages once", s0.Cache.PagesRead, s0.Pages)
	}
	if hi, lo := 2*s0.Pages, 2*s0.Pages-s0.Cache.Slots; s1.Cache.PagesRead > uint64(hi) || s1.Cache.PagesRead < uint64(lo) {
		t.Errorf("after epoch 1, %d pages read, want %d to %d", s1.Cache.PagesRead, lo, hi)
	}

	mnt2 := mountBeton(t, beton, "--cache-size", budget, "--order-batch-size", "16")
	shuffled := runDataLoader(t, mnt2, "shuffle")
	if len(shuffled) != 1 {
		t.Fatalf("%d epochs", len(shuffled))
	}
	checkEpoch(t, "shuffled epoch", shuffled[0], n)
	s := shuffled[0].Stats
	t.Logf("shuffled: pages_read %d (%d pages), ranges_read %d (%d samples), requests %d, misses %d, hits %d", s.Cache.PagesRead, s.Pages, s.Cache.RangesRead, n, s.Cache.Requests, s.Cache.Misses, s.Cache.Hits)
	// The order is not announced: the cache sees reads that do not keep to
	// pages, and reads each sample's bytes alone (after the first pages,
	// which the detector needs to see), in about one request per file.
	if s.Cache.RangesRead < uint64(n)*9/10 || s.Cache.PagesRead > uint64(cachePages) || s.Cache.Requests > uint64(n)+uint64(cachePages) {
		t.Errorf("a shuffled epoch through %d slots: %d pages and %d ranges read in %d requests for %d samples; want ranges", s.Cache.Slots, s.Cache.PagesRead, s.Cache.RangesRead, s.Cache.Requests, n)
	}
}

// TestMountS3: a beton in S3 mounts and reads like the local file.
func TestMountS3(t *testing.T) {
	src, out, classes := writeSmallBeton(t)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	srv := s3test.Start(t)
	srv.CreateBucket(t, "datasets")
	srv.PutObject(t, "datasets", "small/train.beton", data)
	p := startMount(t, srv.Env(), "s3://datasets/small/train.beton",
		"--classes", classes, "--s3-endpoint", srv.Endpoint(), "--s3-path-style")
	checkSameImageFolder(t, p.mnt, src)
	got, err := os.ReadFile(control.Path(p.mnt, control.DatasetFile))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("dataset.beton: %d bytes (%v), differs from the object", len(got), err)
	}
}

// mountFails runs `ffcvfs mount args...`, which must fail with status 1,
// and returns its stderr. Should it mount instead, it is unmounted and
// killed after 30 s.
func mountFails(t *testing.T, mnt string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t, "ffcvfs"), append([]string{"mount"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(testenv.Patience):
		forceUnmount(mnt)
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("mount %v still running after 30 s; it should have failed\n%s", args, stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("mount %v: exit %d, want 1\n%s", args, code, stderr.String())
	}
	return stderr.String()
}

// TestMountErrors: mounts that cannot work fail with a clear message; the
// mount refuses changes; the control folder is hidden but there, and its
// announce file takes orders and refuses garbage.
func TestMountErrors(t *testing.T) {
	needFUSE(t)
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	dir := t.TempDir()

	t.Run("not-empty", func(t *testing.T) {
		mnt := filepath.Join(dir, "full")
		os.MkdirAll(mnt, 0o755)
		os.WriteFile(filepath.Join(mnt, "x"), nil, 0o644)
		if stderr := mountFails(t, mnt, fixture, mnt); !strings.Contains(stderr, "not empty") {
			t.Errorf("stderr: %q", stderr)
		}
		checkUnmounted(t, mnt)
	})
	t.Run("missing-source", func(t *testing.T) {
		mnt := filepath.Join(dir, "m1")
		os.MkdirAll(mnt, 0o755)
		missing := filepath.Join(dir, "missing.beton")
		if stderr := mountFails(t, mnt, missing, mnt); !strings.Contains(stderr, missing) {
			t.Errorf("stderr does not name %s: %q", missing, stderr)
		}
		checkUnmounted(t, mnt)
	})
	t.Run("corrupt", func(t *testing.T) {
		data, err := os.ReadFile(fixture)
		if err != nil {
			t.Fatal(err)
		}
		bad := filepath.Join(dir, "truncated.beton")
		os.WriteFile(bad, data[:len(data)/2], 0o644)
		mnt := filepath.Join(dir, "m2")
		os.MkdirAll(mnt, 0o755)
		if stderr := mountFails(t, mnt, bad, mnt); !strings.Contains(stderr, "corrupt beton") || !strings.Contains(stderr, bad) {
			t.Errorf("stderr: %q", stderr)
		}
		checkUnmounted(t, mnt)
	})

	mnt := mountBeton(t, fixture)
	t.Run("already-mounted", func(t *testing.T) {
		if stderr := mountFails(t, mnt, fixture, mnt); !strings.Contains(stderr, "already a mountpoint") {
			t.Errorf("stderr: %q", stderr)
		}
		if _, err := os.Stat(control.Path(mnt, control.StatsFile)); err != nil {
			t.Errorf("the first mount no longer serves: %v", err)
		}
	})
	t.Run("read-only", func(t *testing.T) {
		refused := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
				t.Errorf("%s: %v, want EROFS or EACCES", what, err)
			}
		}
		refused("create", os.WriteFile(filepath.Join(mnt, "0", "x.jpg"), []byte("x"), 0o644))
		sample := filepath.Join(mnt, "0", "000.jpg")
		if _, err := os.Stat(sample); err != nil {
			t.Fatal(err)
		}
		before, err := os.ReadFile(sample)
		if err != nil {
			t.Fatal(err)
		}
		// With zero-message opens the kernel no longer asks the mount
		// before an open, so root (whom permission bits do not stop) can
		// open a sample for writing; every write still fails.
		for _, flag := range []int{os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND} {
			f, err := os.OpenFile(sample, flag, 0)
			if err != nil {
				refused(fmt.Sprintf("open with flags %#x", flag), err)
				continue
			}
			if flag&os.O_TRUNC != 0 {
				t.Errorf("open with O_TRUNC succeeded")
			}
			_, err = f.Write([]byte("x"))
			f.Close()
			if !errors.Is(err, syscall.EROFS) {
				t.Errorf("write after open with flags %#x: %v, want EROFS", flag, err)
			}
		}
		if after, err := os.ReadFile(sample); err != nil || !bytes.Equal(after, before) {
			t.Errorf("the sample changed after the writes (%v)", err)
		}
		refused("mkdir", os.Mkdir(filepath.Join(mnt, "new"), 0o755))
		refused("remove", os.Remove(sample))
		refused("rename", os.Rename(sample, filepath.Join(mnt, "0", "y.jpg")))
		refused("write to dataset.beton", os.WriteFile(control.Path(mnt, control.DatasetFile), nil, 0o644))
	})
	t.Run("control-folder", func(t *testing.T) {
		ents, err := os.ReadDir(mnt)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("the root lists %s", e.Name())
			}
		}
		if st, err := os.Stat(control.Path(mnt)); err != nil || !st.IsDir() {
			t.Errorf("stat .ffcvfs: %v", err)
		}
		announce := control.Path(mnt, control.AnnounceFile)
		if out, err := exec.Command(debianPython(t), "-c", announcePy, control.Path(mnt, control.AnnounceFile), "imagefolder\n0\n1\n").CombinedOutput(); err != nil || string(out) != "ok 2\n" {
			t.Errorf("announcing a valid order: %v: %q", err, out)
		}
		found := false
		for _, p := range readMountStats(t, mnt).Cache.Plans {
			found = found || strings.HasPrefix(p.ID, "announce:") && p.Len == 2
		}
		if !found {
			t.Errorf("stats.json lists no plan of 2 samples after the announce: %+v", readMountStats(t, mnt).Cache.Plans)
		}
		if out, _ := exec.Command(debianPython(t), "-c", announcePy, control.Path(mnt, control.AnnounceFile), "not a number\n").CombinedOutput(); !strings.HasPrefix(string(out), `error: line 1: "not a number" is not a number`) {
			t.Errorf("announcing garbage: %q, want the mount's sentence", out)
		}
		// The path is a symlink to the socket; the tree takes no writes.
		if err := os.WriteFile(announce, []byte("0\n"), 0o600); err == nil {
			t.Error("announce written as a file")
		}
	})
}

// TestMountSIGTERMWhileReading: SIGTERM ends a mount that is being read
// hard, and leaves no mount behind, stale or live.
func TestMountSIGTERMWhileReading(t *testing.T) {
	p := startMount(t, nil, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	var files []string
	for _, f := range mountedFiles(t, p.mnt) {
		files = append(files, filepath.Join(p.mnt, f))
	}
	if len(files) == 0 {
		t.Fatal("no files in the mount")
	}
	var (
		stop          = make(chan struct{})
		wg            sync.WaitGroup
		reads, failed atomic.Int64
	)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Errors are expected once the mount goes away.
				if _, err := os.ReadFile(files[i%len(files)]); err != nil {
					failed.Add(1)
				} else {
					reads.Add(1)
				}
			}
		}()
	}
	// Let the readers get going: every file read at least once.
	for reads.Load() < int64(len(files)) {
		select {
		case <-p.exited:
			close(stop)
			wg.Wait()
			t.Fatalf("the mount exited while being read: %s\n%s", p.cmd.ProcessState, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	exited := p.terminate()
	if !exited {
		// The unmount was refused (busy) and the process waits for a
		// second signal, which detaches the mount lazily: see that this
		// at least cleans up.
		t.Errorf("still running long after one SIGTERM while being read (%d reads, %d failed); a busy unmount must not keep the mount up:\n%s", reads.Load(), failed.Load(), p.stderr)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(testenv.Patience):
		}
	}
	close(stop)
	wg.Wait()
	select {
	case <-p.exited:
	default:
		t.Fatalf("still running long after a second SIGTERM:\n%s", p.stderr)
	}
	t.Logf("%d reads, %d failed; %s", reads.Load(), failed.Load(), p.cmd.ProcessState)
	if !p.cmd.ProcessState.Success() {
		t.Errorf("exit: %s\n%s", p.cmd.ProcessState, p.stderr)
	}
	checkUnmounted(t, p.mnt)
}

// TestMountMmapDataset maps .ffcvfs/dataset.beton with numpy's
// memmap(mode='r'), as FFCV's Loader does by default, and reads it whole,
// byte for byte, through a cache of one page: pages are evicted, and the
// kernel's copies of them dropped, while the file is mapped.
func TestMountMmapDataset(t *testing.T) {
	py := debianPython(t, "numpy")
	src := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	mnt := mountBeton(t, src, "--cache-size", "2MiB")
	const script = `
import hashlib, sys
import numpy as np
m = np.memmap(sys.argv[1], dtype=np.uint8, mode="r")
h = hashlib.sha256()
for off in range(0, len(m), 1 << 16):  # page by page, as a loader would
    h.update(m[off:off + (1 << 16)].tobytes())
print(len(m), h.hexdigest())
`
	stdout, _ := run(t, 0, py, "-c", script, control.Path(mnt, control.DatasetFile))
	if got, exp := strings.TrimSpace(stdout), fmt.Sprintf("%d %x", len(want), sha256.Sum256(want)); got != exp {
		t.Errorf("numpy memmap of dataset.beton: %s, want %s", got, exp)
	}
	st := readMountStats(t, mnt)
	if st.Cache.Slots != 1 || st.Pages < 2 {
		t.Errorf("stats.json: %d slots, %d pages; the test needs 1 slot and at least 2 pages", st.Cache.Slots, st.Pages)
	}
}

// TestMountPlanOfKilledReader: a training process reads its epoch's order
// (announcing it) and is killed; its plan leaves the cache within seconds,
// not when the mount restarts.
func TestMountPlanOfKilledReader(t *testing.T) {
	py := installedPython(t, "torch")
	mnt := mountBeton(t, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	cmd := exec.Command(py, "-c", `
import sys, time
from ffcvfs import QuasiRandomSampler
s = QuasiRandomSampler(sys.argv[1], seed=3)
s.set_epoch(0)
it = iter(s)  # reads the order, which announces it
print(next(it), flush=True)
time.sleep(600)
`, mnt)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("the reader printed nothing: %v", err)
	}
	id := fmt.Sprintf("order:uid-%d:quasi-random/3/0-of-1", os.Getuid())
	st := readMountStats(t, mnt)
	if len(st.Cache.Plans) != 1 || st.Cache.Plans[0].ID != id || st.PlanOwners[id] != uint32(cmd.Process.Pid) {
		t.Fatalf("stats.json: plans %+v, owners %v; want %s, announced by pid %d", st.Cache.Plans, st.PlanOwners, id, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(testenv.Patience)
	for {
		st := readMountStats(t, mnt)
		if len(st.Cache.Plans) == 0 && len(st.PlanOwners) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("long after its reader was killed, stats.json still lists plans %+v, owners %v", st.Cache.Plans, st.PlanOwners)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStopServesOpenFiles: SIGTERM
// while a reader held a file open: the log said open files are served
// until closed, but the reader's read() got EIO. Now the mount is detached
// at once and the open files read byte for byte until the last is closed;
// then the process exits with status 0.
func TestStopServesOpenFiles(t *testing.T) {
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	p := startMount(t, nil, fixture, "--stop-grace", "10m")
	files := mountedFiles(t, p.mnt)
	_, images := fixtureManifest(t, fixture)
	var open []*os.File
	var want []string
	for _, name := range []string{files[3], files[150]} {
		fh, err := os.Open(filepath.Join(p.mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		open = append(open, fh)
		id, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(name), ".jpg"))
		want = append(want, images[id]["image"].SHA256)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	for isMountpoint(t, p.mnt) {
		select {
		case <-p.exited:
			t.Fatalf("the mount exited with files open:\n%s", p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	for i, fh := range open {
		b, err := io.ReadAll(fh)
		if err != nil {
			t.Fatalf("reading an open file after SIGTERM: %v\n%s", err, p.stderr)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != want[i] {
			t.Errorf("file %d read after SIGTERM: sha256 %s, want %s", i, got, want[i])
		}
		fh.Close()
		if i == 0 {
			select {
			case <-p.exited:
				t.Fatalf("the mount exited with a file still open:\n%s", p.stderr)
			default:
			}
		}
	}
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the mount still runs with no file open:\n%s", p.stderr)
	}
	if !p.cmd.ProcessState.Success() || !strings.Contains(p.stderr.String(), "serving them until they are closed") {
		t.Errorf("%s:\n%s", p.cmd.ProcessState, p.stderr)
	}
}

// TestStopGraceAborts: a file kept open past --stop-grace no longer holds
// the mount: the connection is aborted, its reads fail with ENOTCONN, and
// the process exits with status 0.
func TestStopGraceAborts(t *testing.T) {
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	p := startMount(t, nil, fixture, "--stop-grace", "1s")
	fh, err := os.Open(filepath.Join(p.mnt, mountedFiles(t, p.mnt)[7]))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the mount still runs 2 minutes after SIGTERM with --stop-grace 1s:\n%s", p.stderr)
	}
	if !p.cmd.ProcessState.Success() || !strings.Contains(p.stderr.String(), "--stop-grace is over") {
		t.Errorf("%s:\n%s", p.cmd.ProcessState, p.stderr)
	}
	if _, err := io.ReadAll(fh); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("reading a file open past the grace period: %v, want ENOTCONN", err)
	}
}

// TestSourceFromStdin: a presigned
// URL could only be given on the command line, which every local user
// reads in /proc/PID/cmdline. SRC "-" reads it from standard input; the
// signature then appears in no command line, log line or mount table.
func TestSourceFromStdin(t *testing.T) {
	needFUSE(t)
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	const secret = "Signature=s3cr3t-d0-not-leak"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.Contains(req.URL.RawQuery, secret) {
			http.Error(w, "AccessDenied", http.StatusForbidden)
			return
		}
		fh, err := os.Open(fixture)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer fh.Close()
		st, _ := fh.Stat()
		http.ServeContent(w, req, "train.beton", st.ModTime(), fh)
	}))
	defer srv.Close()
	u := srv.URL + "/train.beton?X-Amz-" + secret

	cmd := exec.Command(binary(t, "ffcvfs"), "info", "--json", "-")
	cmd.Stdin = strings.NewReader(u + "\n")
	got, err := cmd.Output()
	if err != nil || len(got) == 0 {
		t.Fatalf("ffcvfs info - with the URL on stdin: %v", err)
	}

	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mc := exec.Command(binary(t, "ffcvfs"), "mount", "-", mnt)
	mc.Stdin = strings.NewReader(u + "\n")
	p := launchMount(t, mc, mnt)
	waitServing(t, p)
	if n := len(mountedFiles(t, mnt)); n != 200 {
		t.Errorf("%d files served, want 200", n)
	}
	if _, err := os.ReadFile(filepath.Join(mnt, mountedFiles(t, mnt)[0])); err != nil {
		t.Error(err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", mc.Process.Pid))
	if err != nil || bytes.Contains(cmdline, []byte("s3cr3t")) {
		t.Errorf("the mount's command line %q (%v) holds the signature", cmdline, err)
	}
	if f := mountinfo(t, mnt); strings.Contains(strings.Join(f, " "), "s3cr3t") {
		t.Errorf("the mount table shows the signature: %v", f)
	}
	p.stop(t)
	if strings.Contains(p.stderr.String(), "s3cr3t") {
		t.Errorf("the log holds the signature:\n%s", p.stderr)
	}
	// No location on stdin: a sentence, not a hang.
	_, stderr := run(t, 1, binary(t, "ffcvfs"), "info", "-")
	if !strings.Contains(stderr, "no location on standard input") {
		t.Errorf("info - with nothing on stdin: %q", stderr)
	}
}

// TestUmountBusyNamesHolders: `ffcvfs
// umount` of a killed mount whose files a reader still held said EBUSY
// and nothing more. It names the holders and the way out, --lazy, which
// then clears the mount.
func TestUmountBusyNamesHolders(t *testing.T) {
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	p := startMount(t, nil, fixture)
	file := filepath.Join(p.mnt, mountedFiles(t, p.mnt)[0])
	holder := exec.Command("sh", "-c", `exec 3<"$1"; echo open; exec cat`, "sh", file)
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	defer stdin.Close()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "open\n" {
		t.Fatalf("the holder did not open %s: %q %v", file, line, err)
	}
	p.cmd.Process.Kill()
	<-p.exited
	_, stderr := run(t, 1, binary(t, "ffcvfs"), "umount", p.mnt)
	want := fmt.Sprintf("cat (pid %d)", holder.Process.Pid)
	if !strings.Contains(stderr, "is busy") || !strings.Contains(stderr, want) || !strings.Contains(stderr, "ffcvfs umount --lazy") {
		t.Errorf("umount of a busy mount: %q, want it busy, naming %s and --lazy", stderr, want)
	}
	run(t, 0, binary(t, "ffcvfs"), "umount", "--lazy", p.mnt)
	if isMountpoint(t, p.mnt) {
		t.Error("still mounted after umount --lazy")
	}
}

// TestMountBackground: mount --background returns once the tree can be
// read, with the mount served on by a process in a session of its own,
// which ffcvfs umount ends; SRC "-" is handed to it from standard input;
// and a mount that fails says why and returns its exit status, leaving
// nothing mounted.
func TestMountBackground(t *testing.T) {
	needFUSE(t)
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	bin := binary(t, "ffcvfs")
	dir := t.TempDir()

	for _, viaStdin := range []bool{false, true} {
		mnt := filepath.Join(dir, fmt.Sprintf("mnt-stdin-%v", viaStdin))
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { forceUnmount(mnt) })
		src := fixture
		cmd := exec.Command(bin, "mount", "--background", src, mnt)
		if viaStdin {
			cmd = exec.Command(bin, "mount", "--background", "-", mnt)
			cmd.Stdin = strings.NewReader(src + "\n")
		}
		// A file, not a pipe: the mount keeps the stderr it shares.
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("log-%v", viaStdin)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		err = cmd.Run()
		logf.Close()
		log, _ := os.ReadFile(logf.Name())
		if err != nil {
			t.Fatalf("mount --background (SRC from stdin: %v): %v\n%s", viaStdin, err, log)
		}
		// Returned: the tree is there already, without waiting.
		if !isMountpoint(t, mnt) {
			t.Fatalf("mount --background returned 0 but %s is not mounted\n%s", mnt, log)
		}
		if files := mountedFiles(t, mnt); len(files) == 0 {
			t.Errorf("the background mount serves no files")
		}
		if _, err := os.Stat(control.Path(mnt, control.StatsFile)); err != nil {
			t.Errorf("the background mount's control files: %v", err)
		}
		m := regexp.MustCompile(`msg=mounted .* pid=([0-9]+)`).FindSubmatch(log)
		if m == nil {
			t.Fatalf("the background mount logged no pid\n%s", log)
		}
		pid, _ := strconv.Atoi(string(m[1]))
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			t.Fatalf("the background mount's process %d: %v", pid, err)
		}
		run(t, 0, bin, "umount", mnt)
		checkUnmounted(t, mnt)
		// The process ends with its mount.
		if !waitPidfd(pidfd) {
			t.Errorf("the background mount's process %d did not end after ffcvfs umount", pid)
		}
	}

	// A failing mount: the parent exits with the child's status, and the
	// child's sentence naming the source is on the shared stderr.
	mnt := filepath.Join(dir, "mnt-fail")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.beton")
	logPath := filepath.Join(dir, "log-fail")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mount", "--background", missing, mnt)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	logf.Close()
	log, _ := os.ReadFile(logPath)
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
		t.Errorf("mount --background of a missing file: exit %d (%v), want 1\n%s", code, err, log)
	}
	if !strings.Contains(string(log), missing) {
		t.Errorf("the error does not name %s: %q", missing, log)
	}
	checkUnmounted(t, mnt)
}

// TestMountBackgroundLetsGoOfThePipe: a background mount whose output is
// piped (ffcvfs mount --background ... | tail) lets go of the pipe once
// mounted, so that the pipe ends when the command returns; its log goes to
// --log-file (0600), from "mounted" to "unmounted". A --log-file that is a
// symbolic link, a folder or in a missing folder is refused with a
// sentence, and nothing is mounted.
func TestMountBackgroundLetsGoOfThePipe(t *testing.T) {
	needFUSE(t)
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	bin := binary(t, "ffcvfs")
	dir := t.TempDir()

	for _, withLog := range []bool{true, false} {
		mnt := filepath.Join(dir, fmt.Sprintf("mnt-log-%v", withLog))
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { forceUnmount(mnt) })
		logPath := filepath.Join(dir, fmt.Sprintf("mount-%v.log", withLog))
		args := []string{"mount", "--background", fixture, mnt}
		if withLog {
			args = []string{"mount", "--background", "--log-file", logPath, fixture, mnt}
		}
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w.Close()
		// The pipe ends when every process holding it has let go: the
		// command, and the mount it leaves behind.
		read := make(chan []byte, 1)
		go func() { b, _ := io.ReadAll(r); read <- b }()
		var piped []byte
		select {
		case piped = <-read:
		case <-time.After(testenv.Patience):
			t.Fatalf("mount --background (log file %v): its output pipe did not end: the mount holds it", withLog)
		}
		r.Close()
		if err := cmd.Wait(); err != nil {
			t.Fatalf("mount --background (log file %v): %v\n%s", withLog, err, piped)
		}
		if !isMountpoint(t, mnt) || len(mountedFiles(t, mnt)) == 0 {
			t.Fatalf("mount --background returned 0 but %s serves nothing\n%s", mnt, piped)
		}
		m := regexp.MustCompile(`msg=mounted .* pid=([0-9]+)`).FindSubmatch(piped)
		if m == nil {
			t.Fatalf("the background mount logged no pid before it was mounted\n%s", piped)
		}
		pid, _ := strconv.Atoi(string(m[1]))
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			t.Fatalf("the background mount's process %d: %v", pid, err)
		}
		run(t, 0, bin, "umount", mnt)
		if !waitPidfd(pidfd) {
			t.Fatalf("the background mount's process %d did not end after ffcvfs umount", pid)
		}
		if !withLog {
			continue
		}
		st, err := os.Stat(logPath)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("--log-file %s has mode %v, want 0600", logPath, st.Mode().Perm())
		}
		log, _ := os.ReadFile(logPath)
		if !regexp.MustCompile(`(?s)msg=mounted .*msg=unmounted`).Match(log) {
			t.Errorf("--log-file holds no mounted ... unmounted:\n%s", log)
		}
	}

	// Hostile and mistaken --log-file paths.
	mnt := filepath.Join(dir, "mnt-bad-log")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forceUnmount(mnt) })
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "planted.log")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{link, "--log-file " + link + " is a symbolic link"},
		{dir, "--log-file " + dir + " is a folder"},
		{filepath.Join(dir, "no", "such", "mount.log"), "the folder " + filepath.Join(dir, "no", "such") + " does not exist"},
	} {
		for _, bg := range []bool{false, true} {
			args := []string{"mount", "--log-file", c.path, fixture, mnt}
			if bg {
				args = append([]string{"mount", "--background"}, args[1:]...)
			}
			_, stderr := run(t, 1, bin, args...)
			if !strings.Contains(stderr, c.want) {
				t.Errorf("ffcvfs %s: %q, want %q", strings.Join(args, " "), stderr, c.want)
			}
			checkUnmounted(t, mnt)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep\n" {
		t.Errorf("the file behind the planted link was written: %q", b)
	}
}

// TestMountLogFileFIFO: a --log-file that is a FIFO is refused with a
// sentence, in the foreground and with --background, whether a reader
// holds it or not; without one, the open waited for a reader for ever
// (and the background child with it).
func TestMountLogFileFIFO(t *testing.T) {
	needFUSE(t)
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	bin := binary(t, "ffcvfs")
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forceUnmount(mnt) })
	fifo := filepath.Join(dir, "log.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	want := "--log-file " + fifo + " is a FIFO, not a regular file"
	for _, reader := range []bool{false, true} {
		if reader {
			r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
		}
		for _, bg := range []string{"--foreground", "--background"} {
			args := []string{"mount", "--log-file", fifo, fixture, mnt}
			if bg == "--background" {
				args = append([]string{"mount", bg}, args[1:]...)
			}
			_, stderr := run(t, 1, bin, args...)
			if !strings.Contains(stderr, want) {
				t.Errorf("reader %v, %s: %q, want %q", reader, bg, stderr, want)
			}
			checkUnmounted(t, mnt)
		}
	}
}

// TestMountStopsAtOnceOnSignal: SIGTERM the moment the mount serves ends it
// cleanly (exit 0, nothing left in the mount table). The signal handler is
// in place before the mount becomes visible; before, a signal in between
// killed the process and left a dead mount behind (ENOTCONN), as a job
// scheduler's quick cancellation would.
func TestMountStopsAtOnceOnSignal(t *testing.T) {
	fixture := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	for range 10 {
		p := startMount(t, nil, fixture)
		p.stop(t)
		if t.Failed() {
			t.Fatalf("the mount's log:\n%s", p.stderr)
		}
	}
}

// TestMountSIGHUP: SIGHUP while a mount is being set up (its storage, a
// web server here, holds the first request until the signal is sent) and
// once it serves, without a peer tier and with --peers @FILE: the mount
// goes on and serves. A mount without @FILE or dns: died silently at the
// first SIGHUP and left its mountpoint dead (ENOTCONN); one with @FILE, at a
// SIGHUP in its first milliseconds.
func TestMountSIGHUP(t *testing.T) {
	needFUSE(t)
	ffcvfs := binary(t, "ffcvfs")
	data, err := os.ReadFile(testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	if err != nil {
		t.Fatal(err)
	}
	for _, withPeers := range []bool{false, true} {
		t.Run(fmt.Sprintf("peers=%v", withPeers), func(t *testing.T) {
			first, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				once.Do(func() { close(first); <-release })
				w.Header().Set("ETag", `"v1"`)
				http.ServeContent(w, r, "data.beton", time.Unix(1e9, 0), bytes.NewReader(data))
			}))
			defer srv.Close()
			defer once.Do(func() {})
			dir := t.TempDir()
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"mount"}
			if withPeers {
				peers := filepath.Join(dir, "peers")
				if err := os.WriteFile(peers, []byte(peerURL(9)+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--peer-listen", peerAddr(9), "--peers", "@"+peers, "--peer-secret-file", peerSecret(t))
			}
			p := launchMount(t, exec.Command(ffcvfs, append(args, srv.URL+"/data.beton", mnt)...), mnt)
			select {
			case <-first:
			case <-p.exited:
				t.Fatalf("the mount ended before reading its storage (%s):\n%s", p.cmd.ProcessState, p.stderr)
			}
			p.cmd.Process.Signal(syscall.SIGHUP)
			close(release)
			p.waitServing(t) // fails if SIGHUP ended it
			p.cmd.Process.Signal(syscall.SIGHUP)
			if !withPeers {
				waitOutput(t, p.stderr, "SIGHUP: nothing to reload")
			}
			files := mountedFiles(t, mnt)
			if len(files) != 200 {
				t.Fatalf("%d files served", len(files))
			}
			if _, err := os.ReadFile(filepath.Join(mnt, files[0])); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.exited:
				t.Fatalf("the mount ended (%s):\n%s", p.cmd.ProcessState, p.stderr)
			default:
			}
		})
	}
}
