package beton_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// TestOpenNotABeton: a file of another kind given as a beton (a JPEG, a
// PNG, a gzipped beton, text) is called what it is, with ErrNotBeton, not a
// beton of an odd version; a beton of another version keeps ErrVersion.
func TestOpenNotABeton(t *testing.T) {
	photo, err := os.ReadFile(filepath.Join(testenv.Fixture(t, "imagefolder-small", "class000"), "img00000.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	var pngBuf, gzBuf bytes.Buffer
	if err := png.Encode(&pngBuf, image.NewRGBA(image.Rect(0, 0, 4, 4))); err != nil {
		t.Fatal(err)
	}
	z := gzip.NewWriter(&gzBuf)
	z.Write(bytes.Repeat([]byte{2, 0, 1, 0}, 64))
	z.Close()
	version3 := make([]byte, beton.HeaderSize)
	version3[0] = 3
	for _, c := range []struct {
		name string
		data []byte
		want error
		re   string
	}{
		// Said once: the sentence is the whole message (it ended ": not a beton file").
		{"photo.jpg", photo, beton.ErrNotBeton, `^photo\.jpg: its first bytes are those of a JPEG image, not of a beton \(whose header starts with format version 2\)$`},
		{"image.png", pngBuf.Bytes(), beton.ErrNotBeton, `those of a PNG image`},
		{"train.beton.gz", gzBuf.Bytes(), beton.ErrNotBeton, `those of a gzip file`},
		{"notes.txt", []byte("a list of files, one per line, not a beton\n"), beton.ErrNotBeton, `those of a text file`},
		{"v3.beton", version3, beton.ErrVersion, `file version is 3, this reader reads version 2`},
	} {
		_, err := beton.Open(bytes.NewReader(c.data), int64(len(c.data)), c.name)
		if !errors.Is(err, c.want) || !regexp.MustCompile(c.re).MatchString(err.Error()) {
			t.Errorf("%s: Open: %v; want %v matching %q", c.name, err, c.want, c.re)
		}
	}
}
