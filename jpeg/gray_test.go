package jpeg

import (
	"fmt"
	"image"
	"os"
	"path/filepath"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

func imageGray(img image.Image) *image.Gray {
	b := img.Bounds()
	g := image.NewGray(b)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			g.Set(x, y, img.At(x, y))
		}
	}
	return g
}

// layoutFixtures re-encodes n fixture photos in each sampling layout a
// JPEG commonly has (4:4:4, 4:2:2, 4:4:0, 4:2:0, and grayscale), as
// fixtures named after the photo and the layout, and adds the rarer layouts
// of testdata/layouts (4:1:0, 4:1:1, 1x4, 2x4, 3x2, 2x2 against 1x2; see
// scripts/make_layout_jpegs.sh), which no Go encoder writes.
func layoutFixtures(t testing.TB, n int) []fixture {
	t.Helper()
	out := rareLayoutFixtures(t, n)
	for _, f := range loadFixtures(t, n) {
		for _, l := range testenv.Layouts(t, f.data) {
			out = append(out, fixture{name: f.name + "@" + l.Name, data: l.Data})
		}
	}
	return out
}

// rareLayoutFixtures returns the JPEGs of testdata/layouts made from the
// first n of its photos (p0-*, p1-*: two, of odd sizes), named after their
// file.
func rareLayoutFixtures(t testing.TB, n int) []fixture {
	t.Helper()
	var paths []string
	for i := range min(n, 2) {
		p, _ := filepath.Glob(filepath.Join("testdata", "layouts", fmt.Sprintf("p%d-*.jpg", i)))
		paths = append(paths, p...)
	}
	if len(paths) == 0 {
		t.Fatal("no testdata/layouts/*.jpg")
	}
	var out []fixture
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fixture{name: "layouts/" + filepath.Base(p), data: b})
	}
	return out
}
