package fs

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// namedView builds the view of a beton of 1x1 raw images named names.
func namedView(t *testing.T, names []string, opts Options) (*View, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "named.beton")
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}, {Type: beton.TypeBytes, Name: beton.PathField}}
	w, err := beton.Create(path, fields, len(names), beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SetNames(2, names); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeRaw, Width: 1, Height: 1, Data: []byte{1, 2, 3}}, {}, {Data: []byte(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	opts.ControlDir = testenv.SocketDir(t)
	v, err := testView(t, path, opts, 2)
	if err == nil {
		t.Cleanup(v.Close)
	}
	return v, err
}

// TestNamedWalkOrder: ImageFolder's indices follow torchvision's walk of
// the named tree: class folders by name, then folders by path as strings
// ("sub" before "sub-x" before "sub/deeper"), then file names.
func TestNamedWalkOrder(t *testing.T) {
	names := []string{"c/sub/deeper/d.jpg", "b/x.jpg", "c/sub-x/a.jpg", "c/z.jpg", "c/sub/b.jpg", "a/é.jpg"}
	v, err := namedView(t, names, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range len(names) {
		s, _ := v.SampleOf(i)
		got = append(got, names[s])
	}
	want := []string{"a/é.jpg", "b/x.jpg", "c/z.jpg", "c/sub/b.jpg", "c/sub-x/a.jpg", "c/sub/deeper/d.jpg"}
	if !slices.Equal(got, want) {
		t.Errorf("ImageFolder order %q, want %q", got, want)
	}
	if c := v.Classes(); !slices.Equal(c, []string{"a", "b", "c"}) {
		t.Errorf("classes %q", c)
	}
}

// TestNamedErrors: names a tree cannot hold are refused, naming the sample
// and the way out.
func TestNamedErrors(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"a/x.jpg", "a/x.jpg"}, "both named"},
		{[]string{"a/x", "a/x/y.jpg"}, "both a file and a folder"},
		{[]string{"x.jpg"}, "no class folder"},
		{[]string{"a/../x.jpg"}, "not a relative path"},
		{[]string{"/a/x.jpg"}, "not a relative path"},
		{[]string{".ffcvfs/x.jpg"}, "hide the mount"},
	} {
		_, err := namedView(t, tc.names, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--no-file-names") && tc.want != "hide the mount" {
			t.Errorf("%q: %v, want an error saying %q", tc.names, err, tc.want)
		}
	}
	if _, err := namedView(t, []string{"a/x.jpg"}, Options{Classes: []string{"k"}}); err == nil {
		t.Error("a class list accepted for a beton that names its folders")
	}
	if v, err := namedView(t, []string{"a/b/c.jpg"}, Options{NoFileNames: true}); err != nil || v.SampleName(0) != "0.ppm" {
		t.Errorf("NoFileNames: %v", err)
	}
}
