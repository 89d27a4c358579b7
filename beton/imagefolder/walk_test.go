package imagefolder

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// smallDir is the 200-JPEG ImageFolder fixture.
func smallDir(t testing.TB) string {
	t.Helper()
	return testenv.Fixture(t, "imagefolder-small")
}

// fixtureSamples are the fixture's image paths in ImageFolder order.
func fixtureSamples(t testing.TB) []string {
	t.Helper()
	tree, err := Scan(smallDir(t))
	if err != nil {
		t.Fatal(err)
	}
	paths := make([]string, len(tree.Samples))
	for i, s := range tree.Samples {
		paths[i] = s.Path
	}
	return paths
}

func TestScanFixture(t *testing.T) {
	root := smallDir(t)
	tree, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	var wantClasses []string
	var want []Sample
	for c := 0; c < 10; c++ {
		class := fmt.Sprintf("class%03d", c)
		wantClasses = append(wantClasses, class)
		for i := 0; i < 20; i++ {
			want = append(want, Sample{Path: pyJoin(pyJoin(root, class), fmt.Sprintf("img%05d.jpg", i)), Label: c})
		}
	}
	if tree.Root != root {
		t.Errorf("Root = %q, want %q", tree.Root, root)
	}
	if !slices.Equal(tree.Classes, wantClasses) {
		t.Errorf("Classes = %q, want %q", tree.Classes, wantClasses)
	}
	if len(tree.Samples) != 200 {
		t.Fatalf("%d samples, want 200", len(tree.Samples))
	}
	for i := range want {
		if tree.Samples[i] != want[i] {
			t.Fatalf("sample %d = %+v, want %+v", i, tree.Samples[i], want[i])
		}
	}
}

// trickyTree builds a tree whose torchvision order is not a depth-first walk
// and not plain name order, and returns its root and the expected samples
// (paths relative to root).
func trickyTree(t *testing.T) (string, []string, []Sample) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	files := []string{
		"cat/x.JPG", "cat/A.jpg", "cat/y.png", "cat/notes.txt", "cat/.hidden.jpeg",
		"cat/é.jpg", "cat/一.jpg", "cat/\x80.jpg", "cat/archive.tar.TIFF", "cat/jpg",
		"cat/sub/z.jpeg", "cat/sub/deeper/t.webp", "cat/sub b/w.bmp", "cat/sub.b/v.tif",
		"cat/sub0/u.PGM", "Zebra/img.PPM", "Zebra/img.ppm.txt",
		"file.jpg",
		"elsewhere-dogs/d1.jpg", "elsewhere-dogs/d0.Jpeg",
	}
	for _, f := range files {
		p := filepath.Join(base, "root", f)
		if strings.HasPrefix(f, "elsewhere") {
			p = filepath.Join(base, f)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not really an image"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.Symlink(filepath.Join(base, "elsewhere-dogs"), filepath.Join(root, "dog")))
	must(t, os.Symlink(filepath.Join(base, "nowhere"), filepath.Join(root, "broken")))
	// A link to a file with an image name, inside a class: a file sample.
	must(t, os.Symlink(filepath.Join(base, "elsewhere-dogs", "d1.jpg"), filepath.Join(root, "cat", "sub", "link.jpg")))

	classes := []string{"Zebra", "cat", "dog"}
	rel := []Sample{
		{"Zebra/img.PPM", 0},
		// cat: its own files, by Python's code point order.
		{"cat/.hidden.jpeg", 1}, {"cat/A.jpg", 1}, {"cat/archive.tar.TIFF", 1},
		{"cat/x.JPG", 1}, {"cat/y.png", 1}, {"cat/é.jpg", 1}, {"cat/一.jpg", 1}, {"cat/\x80.jpg", 1},
		// Directories sorted by path string: "sub" < "sub b" < "sub.b" < "sub/deeper" < "sub0".
		{"cat/sub/link.jpg", 1}, {"cat/sub/z.jpeg", 1},
		{"cat/sub b/w.bmp", 1},
		{"cat/sub.b/v.tif", 1},
		{"cat/sub/deeper/t.webp", 1},
		{"cat/sub0/u.PGM", 1},
		{"dog/d0.Jpeg", 2}, {"dog/d1.jpg", 2},
	}
	return root, classes, rel
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestScanOrder(t *testing.T) {
	root, classes, rel := trickyTree(t)
	tree, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tree.Classes, classes) {
		t.Errorf("Classes = %q, want %q", tree.Classes, classes)
	}
	var want []Sample
	for _, s := range rel {
		want = append(want, Sample{Path: root + "/" + s.Path, Label: s.Label})
	}
	if !slices.Equal(tree.Samples, want) {
		t.Errorf("samples:\n got %+v\nwant %+v", tree.Samples, want)
	}
}

func TestScanRootWithSlash(t *testing.T) {
	root, _, rel := trickyTree(t)
	tree, err := Scan(root + "/")
	if err != nil {
		t.Fatal(err)
	}
	// os.path.join keeps the given root as it is.
	if got, want := tree.Samples[0].Path, root+"/"+rel[0].Path; got != want {
		t.Errorf("first path %q, want %q", got, want)
	}
}

func TestScanErrors(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		if _, err := Scan(filepath.Join(t.TempDir(), "nope")); err == nil {
			t.Error("no error")
		}
	})
	layout := "an ImageFolder tree holds one folder per class with the images inside (ROOT/CLASS/IMAGE.jpg)"
	t.Run("flat", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.WriteFile(filepath.Join(root, "a.jpg"), nil, 0o644))
		must(t, os.WriteFile(filepath.Join(root, "b.JPEG"), nil, 0o644))
		_, err := Scan(root)
		want := root + " holds 2 images but no class folder: " + layout
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "mkdir "+root+"/all && mv "+root+"/*.* "+root+"/all") {
			t.Errorf("err = %v, want %q and the fix", err, want)
		}
	})
	t.Run("empty", func(t *testing.T) {
		root := t.TempDir()
		_, err := Scan(root)
		if want := root + " is empty: " + layout; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	})
	t.Run("no folder", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.WriteFile(filepath.Join(root, "labels.csv"), nil, 0o644))
		_, err := Scan(root)
		if want := root + " holds no class folder, only 1 file: " + layout; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want %q", err, want)
		}
	})
	t.Run("empty class", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(root, "good"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "good", "a.jpg"), nil, 0o644))
		must(t, os.MkdirAll(filepath.Join(root, "bad", "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "bad", "sub", "a.gif"), nil, 0o644))
		_, err := Scan(root)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(root, "bad")) || strings.Contains(err.Error(), "good") {
			t.Errorf("err = %v, want one naming only the empty class folder", err)
		}
	})
	t.Run("link cycle", func(t *testing.T) {
		root := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(root, "c", "d"), 0o755))
		must(t, os.WriteFile(filepath.Join(root, "c", "a.jpg"), nil, 0o644))
		must(t, os.Symlink("..", filepath.Join(root, "c", "d", "up")))
		_, err := Scan(root)
		if err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestPyCompare(t *testing.T) {
	// Sorted as Python sorts the names os.listdir returns.
	want := []string{"", "A", "B", "a", "a b", "a.b", "a/b", "a0", "é", "一", "\x80", "\xff", "\U0001F600"}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, pyCompare)
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestHasImageExtension(t *testing.T) {
	for name, want := range map[string]bool{
		"a.jpg": true, "a.JPEG": true, "b.Tiff": true, ".webp": true, "x.tar.PNG": true,
		"a.jpg.txt": false, "jpg": false, "a.gif": false, "a.jp": false, "é.PGM": true, "": false,
	} {
		if got := HasImageExtension(name); got != want {
			t.Errorf("HasImageExtension(%q) = %v", name, got)
		}
	}
}

// pythonWalk is torchvision's find_classes and make_dataset (v0.15 to
// v0.20), standing in when torchvision is not installed. Paths are printed
// as the hex of their bytes.
const pythonWalk = `
import json, os, sys

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

def find_classes(directory):
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {cls_name: i for i, cls_name in enumerate(classes)}

def make_dataset(directory, class_to_idx):
    instances = []
    for target_class in sorted(class_to_idx.keys()):
        class_index = class_to_idx[target_class]
        target_dir = os.path.join(directory, target_class)
        if not os.path.isdir(target_dir):
            continue
        for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(root, fname)
                if path.lower().endswith(IMG_EXTENSIONS):
                    instances.append((path, class_index))
    return instances

def listing(root):
    if sys.argv[1] == "torchvision":
        from torchvision.datasets.folder import DatasetFolder, IMG_EXTENSIONS
        classes, idx = DatasetFolder.find_classes(None, root)
        samples = DatasetFolder.make_dataset(root, idx, IMG_EXTENSIONS)
    else:
        classes, idx = find_classes(root)
        samples = make_dataset(root, idx)
    return {"classes": [os.fsencode(c).hex() for c in classes],
            "samples": [[os.fsencode(p).hex(), i] for p, i in samples]}

json.dump([listing(root) for root in sys.argv[2:]], sys.stdout)
`

// runPython lists each root with pythonWalk, or with torchvision's own code
// when impl is "torchvision", and returns the trees it found.
func runPython(t *testing.T, impl string, roots ...string) []*Tree {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", append([]string{"-c", pythonWalk, impl}, roots...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var res []struct {
		Classes []string
		Samples [][2]json.RawMessage
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if len(res) != len(roots) {
		t.Fatalf("python listed %d trees, want %d", len(res), len(roots))
	}
	unhex := func(s string) string {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var trees []*Tree
	for i, r := range res {
		tree := &Tree{Root: roots[i]}
		for _, c := range r.Classes {
			tree.Classes = append(tree.Classes, unhex(c))
		}
		for _, s := range r.Samples {
			var p string
			var label int
			if err := json.Unmarshal(s[0], &p); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(s[1], &label); err != nil {
				t.Fatal(err)
			}
			tree.Samples = append(tree.Samples, Sample{Path: unhex(p), Label: label})
		}
		trees = append(trees, tree)
	}
	return trees
}

func compareTrees(t *testing.T, got, want *Tree) {
	t.Helper()
	if !slices.Equal(got.Classes, want.Classes) {
		t.Errorf("classes: got %q, Python %q", got.Classes, want.Classes)
	}
	if !slices.Equal(got.Samples, want.Samples) {
		t.Errorf("samples:\n     got %+v\n  Python %+v", got.Samples, want.Samples)
	}
}

// TestScanMatchesPython compares Scan with the listing Python's os.walk and
// sorted give, through torchvision's own functions when it is installed.
func TestScanMatchesPython(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "no /usr/bin/python3 (apt-get install python3)")
	}
	impls := []string{"replica"}
	if exec.Command("/usr/bin/python3", "-c", "import torchvision").Run() == nil {
		impls = append(impls, "torchvision")
	} else {
		t.Log("torchvision is not importable by /usr/bin/python3: comparing with a replica of its code only")
	}
	tricky, _, _ := trickyTree(t)
	for _, impl := range impls {
		t.Run(impl, func(t *testing.T) {
			roots := []string{tricky, smallDir(t)}
			for i, want := range runPython(t, impl, roots...) {
				got, err := Scan(roots[i])
				if err != nil {
					t.Fatal(err)
				}
				compareTrees(t, got, want)
			}
		})
	}
}
