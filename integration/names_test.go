package integration

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// namedTree makes an ImageFolder tree of the fixture photos with names a
// training set has: WordNet-like class folders, nested folders, names
// that sort differently as paths and as strings ("sub-x" and "sub/..."),
// spaces and non-ASCII letters.
func namedTree(t *testing.T) string {
	t.Helper()
	src := testenv.Fixture(t, "imagefolder-small")
	photos, err := filepath.Glob(filepath.Join(src, "*", "*.jpg"))
	if err != nil || len(photos) < 40 {
		t.Fatalf("fixture photos: %d, %v", len(photos), err)
	}
	sort.Strings(photos)
	dirs := []string{"n01440764", "n01440764/sub", "n01440764/sub-x", "n01440764/sub/deeper", "n02102040 dogs", "n02102040 dogs/été", "n03000134"}
	root := t.TempDir()
	for i, p := range photos[:40] {
		d := filepath.Join(root, dirs[i%len(dirs)])
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("ILSVRC2012_val_%08d.JPEG", 40-i)
		if i%5 == 0 {
			name = fmt.Sprintf("photo %d.jpg", i)
		}
		copyFile(t, p, filepath.Join(d, name), 0o644)
	}
	return root
}

// treeFiles maps each file's path relative to root to its bytes.
func treeFiles(t *testing.T, root string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".ffcvfs" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[rel] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestMountKeepNames: a tree written with --keep-names mounts as that
// tree, folders, names and bytes (what diff -r compares); torchvision's
// ImageFolder lists the same samples with the same indices over both;
// ffcvfeed delivers the paths as a field; --no-file-names serves the
// sample-id names.
func TestMountKeepNames(t *testing.T) {
	py := debianPython(t, "torchvision")
	tree := namedTree(t)
	beton := filepath.Join(t.TempDir(), "named.beton")
	run(t, 0, binary(t, "ffcvfs"), "write", "--restart-interval", "0", "--keep-names", "--page-size", "2MiB", tree, beton)
	mnt := mountBeton(t, beton)

	want, got := treeFiles(t, tree), treeFiles(t, mnt)
	for rel, b := range want {
		if g, ok := got[rel]; !ok {
			t.Errorf("%s: missing from the mount", rel)
		} else if !bytes.Equal(g, b) {
			t.Errorf("%s: %d bytes in the mount differ from the source's %d", rel, len(g), len(b))
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			t.Errorf("%s: in the mount, not in the source", rel)
		}
	}
	const script = `
import sys
from torchvision.datasets import ImageFolder
for root in sys.argv[1:]:
    d = ImageFolder(root)
    print(d.classes)
    for p, l in d.samples:
        print(p[len(root):], l)
    print("--")
`
	stdout, _ := run(t, 0, py, "-c", script, tree, mnt)
	parts := strings.Split(stdout, "--\n")
	if len(parts) < 2 || parts[0] != parts[1] || strings.Count(parts[0], "\n") != 41 {
		t.Errorf("ImageFolder over the source and over the mount differ:\n%s", stdout)
	}

	// ffcvfeed delivers the paths like any bytes field.
	out, _ := run(t, 0, binary(t, "ffcvfeed"), "bench", "--data", beton, "--fields", "path,label", "--workers", "1", "--epochs", "1")
	if !strings.Contains(out, "40 images") {
		t.Errorf("ffcvfeed bench --fields path,label: %s", out)
	}

	plain := mountBeton(t, beton, "--no-file-names")
	files := treeFiles(t, plain)
	if len(files) != 40 {
		t.Errorf("--no-file-names: %d files, want 40", len(files))
	}
	for rel := range files {
		if !strings.HasSuffix(rel, ".jpg") || strings.Count(rel, string(filepath.Separator)) != 1 {
			t.Errorf("--no-file-names: %s is not <class>/<id>.jpg", rel)
		}
	}
}
