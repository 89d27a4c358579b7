package imagefolder

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unicode/utf8"
)

// imgExtensions are the file name endings torchvision's ImageFolder accepts
// (IMG_EXTENSIONS), matched against the lower-cased name.
var imgExtensions = []string{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}

// Tree is an ImageFolder dataset: its classes and samples in torchvision's
// order.
type Tree struct {
	// Root is the directory as given to Scan.
	Root string
	// Classes are the names of the class folders; a sample's Label indexes it.
	Classes []string
	// Samples are the image files, class by class.
	Samples []Sample
}

// Sample is one image file and its class index.
type Sample struct {
	// Path is the file's path, joined the way Python's os.path.join joins
	// Root, the class folder and the walk's directories and file name.
	Path  string
	Label int
}

// Scan lists root the way torchvision's DatasetFolder does with the default
// ImageFolder extensions (find_classes, then make_dataset):
//
//   - the classes are the entries directly under root that are directories,
//     symbolic links to directories included, sorted as Python sorts strings;
//     there must be at least one;
//   - class i's samples come from os.walk(root/class, followlinks=True): the
//     directories it visits are sorted by path, the file names (every entry
//     that is not a directory) in each are sorted, and a name is kept when
//     its lower-cased form ends with one of imgExtensions;
//   - every class must have at least one sample.
//
// Python compares strings by code point, which for UTF-8 names is byte order;
// bytes that are not valid UTF-8 sort as the lone surrogates Python decodes
// them to.
//
// Where torchvision would silently skip a directory it cannot list, or
// recurse through a symbolic link that points back to one of its own
// ancestors until the system refuses, Scan returns an error instead.
func Scan(root string) (*Tree, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("imagefolder: scanning %s: %w", root, err)
	}
	var classes []string
	for _, e := range entries {
		if isDir(pyJoin(root, e.Name()), e) {
			classes = append(classes, e.Name())
		}
	}
	if len(classes) == 0 {
		return nil, noClassError(root, entries)
	}
	slices.SortFunc(classes, pyCompare)

	t := &Tree{Root: root, Classes: classes}
	var empty []string
	for label, class := range classes {
		classDir := pyJoin(root, class)
		var dirs []walkDir
		if err := walk(classDir, nil, &dirs); err != nil {
			return nil, fmt.Errorf("imagefolder: class %q: %w", class, err)
		}
		slices.SortFunc(dirs, func(a, b walkDir) int { return pyCompare(a.path, b.path) })
		n := len(t.Samples)
		for _, d := range dirs {
			slices.SortFunc(d.files, pyCompare)
			for _, name := range d.files {
				if HasImageExtension(name) {
					t.Samples = append(t.Samples, Sample{Path: pyJoin(d.path, name), Label: label})
				}
			}
		}
		if len(t.Samples) == n {
			empty = append(empty, classDir)
		}
	}
	if len(empty) > 0 {
		return nil, fmt.Errorf("imagefolder: found no valid file for the class folders %s (supported extensions: %s)",
			strings.Join(empty, ", "), strings.Join(imgExtensions, ", "))
	}
	return t, nil
}

// noClassError says why root, which holds no folder, is no ImageFolder tree,
// and what the tree should look like.
func noClassError(root string, entries []fs.DirEntry) error {
	images := 0
	for _, e := range entries {
		if HasImageExtension(e.Name()) {
			images++
		}
	}
	const layout = "an ImageFolder tree holds one folder per class with the images inside (ROOT/CLASS/IMAGE.jpg), as torchvision's ImageFolder reads it"
	switch {
	case len(entries) == 0:
		return fmt.Errorf("imagefolder: %s is empty: %s", root, layout)
	case images > 0:
		return fmt.Errorf("imagefolder: %s holds %d images but no class folder: %s; for images of one class, move them into a folder below it (mkdir %s/all && mv %s/*.* %s/all)",
			root, images, layout, root, root, root)
	default:
		files := fmt.Sprintf("%d files", len(entries))
		if len(entries) == 1 {
			files = "1 file"
		}
		return fmt.Errorf("imagefolder: %s holds no class folder, only %s: %s", root, files, layout)
	}
}

// HasImageExtension reports whether torchvision's ImageFolder accepts a file
// of this name.
func HasImageExtension(name string) bool {
	for _, ext := range imgExtensions {
		if hasSuffixFold(name, ext) {
			return true
		}
	}
	return false
}

// hasSuffixFold reports whether strings.ToLower(name) ends with the ASCII
// lower-case suffix. No non-ASCII rune lower-cases to a string ending in one
// of the extensions' characters, so comparing bytes is exact.
func hasSuffixFold(name, suffix string) bool {
	if len(name) < len(suffix) {
		return false
	}
	tail := name[len(name)-len(suffix):]
	for i := 0; i < len(suffix); i++ {
		c := tail[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != suffix[i] {
			return false
		}
	}
	return true
}

// walkDir is one tuple of os.walk: a directory and its non-directory entries.
type walkDir struct {
	path  string
	files []string
}

// walk appends dir and, recursively, every directory below it, following
// symbolic links, as os.walk(dir, followlinks=True) yields them. ancestors
// are the directories above dir, to detect link cycles.
func walk(dir string, ancestors []os.FileInfo, out *[]walkDir) error {
	self, err := os.Stat(dir)
	if err != nil {
		return err
	}
	for _, a := range ancestors {
		if os.SameFile(a, self) {
			return fmt.Errorf("%s: symbolic link cycle: the directory is its own ancestor", dir)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	d := walkDir{path: dir}
	var subdirs []string
	for _, e := range entries {
		p := pyJoin(dir, e.Name())
		if isDir(p, e) {
			subdirs = append(subdirs, p)
		} else {
			d.files = append(d.files, e.Name())
		}
	}
	*out = append(*out, d)
	ancestors = append(ancestors, self)
	for _, p := range subdirs {
		if err := walk(p, ancestors, out); err != nil {
			return err
		}
	}
	return nil
}

// isDir is os.DirEntry.is_dir() in Python: true for a directory or a
// symbolic link to one; false when the link is broken.
func isDir(path string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir()
	}
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// pyJoin joins two path elements the way os.path.join does on POSIX.
func pyJoin(a, b string) string {
	if strings.HasPrefix(b, "/") {
		return b
	}
	if a == "" || strings.HasSuffix(a, "/") {
		return a + b
	}
	return a + "/" + b
}

// pyCompare compares two file names as Python compares the str values it
// decodes them to (UTF-8 with surrogateescape): by code point, a byte that
// is not part of valid UTF-8 counting as U+DC00 plus the byte.
func pyCompare(a, b string) int {
	if utf8.ValidString(a) && utf8.ValidString(b) {
		return strings.Compare(a, b)
	}
	for a != "" && b != "" {
		ra, na := pyRune(a)
		rb, nb := pyRune(b)
		if ra != rb {
			if ra < rb {
				return -1
			}
			return 1
		}
		a, b = a[na:], b[nb:]
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	default:
		return 1
	}
}

func pyRune(s string) (rune, int) {
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 {
		return 0xDC00 + rune(s[0]), 1
	}
	return r, n
}
