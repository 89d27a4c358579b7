package jpeg

import (
	"bytes"
	"image"
	"image/color"
	stdjpeg "image/jpeg"
	"strings"
	"testing"
)

// testJPEG encodes a small w×h JPEG.
func testJPEG(w, h int, seed byte) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{byte(x*8) + seed, byte(y * 8), seed, 255})
		}
	}
	var buf bytes.Buffer
	if err := stdjpeg.Encode(&buf, img, &stdjpeg.Options{Quality: 80}); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// FuzzParseFrame parses arbitrary bytes as a JPEG's frame header and up to
// its first scan (parseHeader), and scans them whole (Scan). Where the standard library's decoder also reads a
// frame header, both must agree.
func FuzzParseFrame(f *testing.F) {
	for i, wh := range [][2]int{{1, 1}, {16, 12}, {33, 7}, {640, 2}} {
		f.Add(testJPEG(wh[0], wh[1], byte(i)))
	}
	// Progressive frame, fill bytes, a restart marker and an APP segment
	// before the frame header.
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xFF, 0xE0, 0x00, 0x04, 'J', 'F', 0xFF, 0xD0, 0xFF, 0xC2, 0x00, 0x0B, 0x08, 0x00, 0x20, 0x00, 0x30, 0x01, 0x01, 0x11, 0x00})
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02})
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 0x08, 0x00, 0x00, 0x00, 0x10, 0x03})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseFrame(b)
		whole, werr := Scan(b)
		if werr == nil && (whole.Width <= 0 || whole.Height <= 0 || whole.Components <= 0) {
			t.Fatalf("Scan accepted a frame header of %dx%d, %d components", whole.Width, whole.Height, whole.Components)
		}
		if hd, err := parseHeader(b); err == nil && (hd.Frame != h || hd.ScanAt > len(b) || hd.SOFAt+4 > len(b)) {
			t.Fatalf("parseHeader read %+v past the frame %+v of %d bytes", hd, h, len(b))
		}
		if err != nil {
			return
		}
		if h.Width <= 0 || h.Height <= 0 || h.Components <= 0 {
			t.Fatalf("accepted a frame header of %dx%d, %d components", h.Width, h.Height, h.Components)
		}
		if c, err := stdjpeg.DecodeConfig(bytes.NewReader(b)); err == nil && (c.Width != h.Width || c.Height != h.Height) {
			t.Fatalf("read %dx%d, image/jpeg reads %dx%d", h.Width, h.Height, c.Width, c.Height)
		}
	})
}

func TestParseFrame(t *testing.T) {
	sof := func(marker byte) []byte {
		return []byte{0xFF, marker, 0x00, 0x0B, 0x08, 0x00, 0x20, 0x00, 0x30, 0x01, 0x01, 0x11, 0x00}
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	soi := []byte{0xFF, 0xD8}
	app0 := []byte{0xFF, 0xE0, 0x00, 0x04, 'J', 'F'}
	for _, c := range []struct {
		name string
		in   []byte
		want Frame
		err  string
	}{
		{"encoded", testJPEG(33, 7, 1), Frame{Width: 33, Height: 7, Components: 3}, ""},
		{"baseline", cat(soi, app0, sof(0xC0)), Frame{Width: 48, Height: 32, Components: 1}, ""},
		{"progressive", cat(soi, sof(0xC2)), Frame{Width: 48, Height: 32, Components: 1, Progressive: true}, ""},
		{"fill-bytes", cat(soi, []byte{0xFF, 0xFF}, app0, []byte{0xFF}, sof(0xC1)), Frame{Width: 48, Height: 32, Components: 1}, ""},
		{"restart-marker", cat(soi, []byte{0xFF, 0xD0}, sof(0xC0)), Frame{Width: 48, Height: 32, Components: 1}, ""},
		{"empty", nil, Frame{}, "no start-of-image"},
		{"png", []byte("\x89PNG\r\n\x1a\n"), Frame{}, "no start-of-image"},
		{"scan-first", cat(soi, []byte{0xFF, 0xDA, 0x00, 0x02}), Frame{}, "no frame header before its scan data"},
		{"no-frame", cat(soi, app0), Frame{}, "ends before its frame header"},
		{"segment-past-end", cat(soi, []byte{0xFF, 0xE0, 0x10, 0x00, 0x00}), Frame{}, "runs past the end"},
		{"short-frame", cat(soi, []byte{0xFF, 0xC0, 0x00, 0x06, 0x08, 0x00, 0x20, 0x00}), Frame{}, "frame header too short"},
		{"zero-size", cat(soi, []byte{0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00, 0x00, 0x00, 0x30, 0x01, 0x01, 0x11, 0x00}), Frame{}, "says 48x0"},
		{"garbage-between", cat(soi, app0, []byte{0x12}, sof(0xC0)), Frame{}, "expected a marker at byte 8"},
		// A segment that ends with 0xFF is not followed by a marker unless
		// another 0xFF comes.
		{"segment-ends-ff", cat(soi, []byte{0xFF, 0xE0, 0x00, 0x04, 'J', 0xFF}, sof(0xC0)[1:]), Frame{}, "expected a marker at byte 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := ParseFrame(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %+v, %v; want error %q", h, err, c.err)
				}
				return
			}
			if err != nil || h != c.want {
				t.Fatalf("got %+v, %v; want %+v", h, err, c.want)
			}
		})
	}
}
