package imagefolder

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	stdjpeg "image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	ffjpeg "github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/pixiv/go-libjpeg/jpeg"
	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
)

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPrepare(t testing.TB, name string, src []byte, o Options) Prepared {
	t.Helper()
	p, err := Prepare(name, src, o, rand.New(rand.NewPCG(1, 2)), nil)
	if err != nil {
		t.Fatalf("Prepare(%s): %v", name, err)
	}
	return p
}

// rawOf returns the RGB pixels Prepare gives for src in raw mode, full size.
func rawOf(t testing.TB, name string, src []byte) ([]byte, int, int) {
	t.Helper()
	p := mustPrepare(t, name, src, Options{Mode: WriteRaw})
	if p.JPEG || p.Verbatim || len(p.Data) != p.Width*p.Height*3 {
		t.Fatalf("%s: raw result %+v", name, p)
	}
	return p.Data, p.Width, p.Height
}

func TestValidate(t *testing.T) {
	var o Options
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Options{Mode: "raw", JPEGQuality: 90, SmartThreshold: 256 * 256 * 3, CompressProbability: 0.5}
	if o != want {
		t.Errorf("defaults %+v, want %+v", o, want)
	}
	for _, bad := range []Options{
		{Mode: "jpeg"}, {Mode: "RAW"}, {MaxResolution: -1}, {JPEGQuality: 101}, {JPEGQuality: -5},
		{SmartThreshold: -1}, {CompressProbability: 1.5}, {CompressProbability: -0.1},
		{CompressProbability: math.NaN()},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	if _, err := Prepare("x.png", pngBytes(t, image.NewGray(image.Rect(0, 0, 1, 1))), Options{Mode: "nope"}, nil, nil); err == nil {
		t.Error("Prepare accepted a bad mode")
	}
}

func TestResizedSize(t *testing.T) {
	for _, c := range []struct{ w, h, m, nw, nh int }{
		{500, 400, 0, 500, 400},
		{500, 400, 500, 500, 400},
		{500, 400, 600, 500, 400},
		{500, 400, 250, 250, 200},
		{400, 500, 320, 256, 320},
		{553, 445, 320, 320, 257},
		{1000, 3, 100, 100, 0},
		// ratio*side is computed in float64: 96/147*147 is 95.99999999999999,
		// and 320/581*581 is 319.99999999999994.
		{147, 100, 96, 95, 65},
		{300, 581, 320, 165, 319},
	} {
		nw, nh, resized := ResizedSize(c.w, c.h, c.m)
		if nw != c.nw || nh != c.nh || resized != (c.nw != c.w || c.nh != c.h) {
			t.Errorf("ResizedSize(%d, %d, %d) = %d, %d, %v; want %d, %d", c.w, c.h, c.m, nw, nh, resized, c.nw, c.nh)
		}
	}
}

func TestVerbatimJPEG(t *testing.T) {
	for _, path := range fixtureSamples(t)[:40] {
		src := readFile(t, path)
		cfg, err := jpeg.DecodeConfig(bytes.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []Options{
			{Mode: WriteJPG},
			{Mode: WriteJPG, MaxResolution: max(cfg.Width, cfg.Height)},
			{Mode: WriteSmart, SmartThreshold: 1},
			{Mode: WriteProportion, CompressProbability: 1},
		} {
			p := mustPrepare(t, path, src, o)
			if !p.Verbatim || !p.JPEG || p.Mode() != beton.ModeJPEG || !bytes.Equal(p.Data, src) {
				t.Fatalf("%s %+v: not verbatim (%v, %v, %d bytes)", path, o, p.Verbatim, p.JPEG, len(p.Data))
			}
			if p.Width != cfg.Width || p.Height != cfg.Height {
				t.Fatalf("%s: %dx%d, header says %dx%d", path, p.Width, p.Height, cfg.Width, cfg.Height)
			}
		}
	}
}

func TestMaxResolutionJPEG(t *testing.T) {
	s := new(Scratch)
	paths := fixtureSamples(t)
	for i := 0; i < len(paths); i += 17 {
		path := paths[i]
		src := readFile(t, path)
		cfg, err := jpeg.DecodeConfig(bytes.NewReader(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []int{64, 128, 320} {
			p, err := Prepare(path, src, Options{Mode: WriteJPG, MaxResolution: m}, nil, s)
			if err != nil {
				t.Fatal(err)
			}
			nw, nh, _ := ResizedSize(cfg.Width, cfg.Height, m)
			if p.Verbatim || !p.JPEG || p.Width != nw || p.Height != nh || max(nw, nh) > m || max(nw, nh) < m-1 {
				t.Fatalf("%s max %d: got %dx%d verbatim=%v, want %dx%d", path, m, p.Width, p.Height, p.Verbatim, nw, nh)
			}
			img, err := jpeg.DecodeIntoRGB(bytes.NewReader(p.Data), &jpeg.DecoderOptions{})
			if err != nil {
				t.Fatalf("%s: stored JPEG does not decode: %v", path, err)
			}
			if img.Rect.Dx() != nw || img.Rect.Dy() != nh {
				t.Fatalf("%s: stored JPEG is %v, want %dx%d", path, img.Rect, nw, nh)
			}
		}
	}
}

// TestReferenceFixtures compares with .beton files the reference Python
// writer made from the same images: raw pixels (PIL decoding, OpenCV area
// resize) and re-encoded JPEGs must match byte for byte.
func TestReferenceFixtures(t *testing.T) {
	paths := fixtureSamples(t)
	for _, c := range []struct {
		name string
		max  int
	}{{"imagefolder-jpg", 320}, {"imagefolder-mixed", 96}} {
		t.Run(c.name, func(t *testing.T) {
			var m struct {
				Samples []struct {
					Image struct {
						Mode          string
						Width, Height int
						Sha256        string
					}
					Label int
				}
			}
			if err := json.Unmarshal(readFile(t, testenv.Fixture(t, "beton", c.name+".beton.manifest.json")), &m); err != nil {
				t.Fatal(err)
			}
			if len(m.Samples) != len(paths) {
				t.Fatalf("manifest has %d samples, the tree %d", len(m.Samples), len(paths))
			}
			s := new(Scratch)
			counts := map[string]int{}
			for i, path := range paths {
				if testing.Short() && i%7 != 0 {
					continue // -short: every 7th sample
				}
				want := m.Samples[i].Image
				src := readFile(t, path)
				o := Options{Mode: want.Mode, MaxResolution: c.max, AlwaysEncode: true}
				p, err := Prepare(path, src, o, nil, s)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(p.Data)
				if p.Mode().String() != want.Mode || p.Width != want.Width || p.Height != want.Height ||
					hex.EncodeToString(sum[:]) != want.Sha256 {
					t.Errorf("%s: got %s %dx%d sha256 %x, reference %s %dx%d sha256 %s",
						path, p.Mode(), p.Width, p.Height, sum, want.Mode, want.Width, want.Height, want.Sha256)
				}
				counts[want.Mode]++

				// Without AlwaysEncode, images that need no resize are kept.
				o.AlwaysEncode = false
				q, err := Prepare(path, src, o, nil, s)
				if err != nil {
					t.Fatal(err)
				}
				cfg, err := jpeg.DecodeConfig(bytes.NewReader(src))
				if err != nil {
					t.Fatal(err)
				}
				if _, _, resized := ResizedSize(cfg.Width, cfg.Height, c.max); q.JPEG && q.Verbatim == resized {
					t.Errorf("%s: verbatim=%v for a %dx%d image and max %d", path, q.Verbatim, cfg.Width, cfg.Height, c.max)
				}
			}
			t.Logf("matched the reference for %v", counts)
		})
	}
}

func pngBytes(t testing.TB, img image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRawPNG(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	img := image.NewRGBA(image.Rect(0, 0, 37, 23))
	want := make([]byte, 0, 37*23*3)
	for i := 0; i < len(img.Pix); i += 4 {
		c := [3]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}
		copy(img.Pix[i:], c[:])
		img.Pix[i+3] = 255
		want = append(want, c[:]...)
	}
	got, w, h := rawOf(t, "rgb.png", pngBytes(t, img))
	if w != 37 || h != 23 || !bytes.Equal(got, want) {
		t.Errorf("raw pixels differ from the PNG's")
	}
	// In jpg mode a PNG is encoded.
	p := mustPrepare(t, "rgb.png", pngBytes(t, img), Options{Mode: WriteJPG})
	if !p.JPEG || p.Verbatim || !bytes.HasPrefix(p.Data, []byte{0xFF, 0xD8, 0xFF}) {
		t.Errorf("jpg mode: %+v", p.Mode())
	}
}

// rgbOf is a helper for expected pixels.
func rgbOf(vals ...[3]byte) []byte {
	var b []byte
	for _, v := range vals {
		b = append(b, v[:]...)
	}
	return b
}

func TestPNGColorModels(t *testing.T) {
	gray := image.NewGray(image.Rect(0, 0, 3, 1))
	copy(gray.Pix, []byte{0, 7, 255})

	gray16 := image.NewGray16(image.Rect(0, 0, 4, 1))
	for i, v := range []uint16{0, 200, 255, 256} {
		gray16.SetGray16(i, 0, color.Gray16{Y: v})
	}

	pal := image.NewPaletted(image.Rect(0, 0, 3, 1), color.Palette{
		color.RGBA{10, 20, 30, 255}, color.NRGBA{200, 100, 50, 0}, color.NRGBA{1, 2, 3, 128},
	})
	copy(pal.Pix, []byte{2, 0, 1})

	nrgba := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	copy(nrgba.Pix, []byte{100, 150, 200, 0, 9, 8, 7, 77})

	nrgba64 := image.NewNRGBA64(image.Rect(0, 0, 2, 1))
	nrgba64.SetNRGBA64(0, 0, color.NRGBA64{0x1234, 0xABCD, 0xFF00, 0x8000})
	nrgba64.SetNRGBA64(1, 0, color.NRGBA64{0x00FF, 0x0100, 0xFFFF, 0xFFFF})

	for _, c := range []struct {
		name string
		img  image.Image
		want []byte
	}{
		{"gray", gray, rgbOf([3]byte{0, 0, 0}, [3]byte{7, 7, 7}, [3]byte{255, 255, 255})},
		// PIL opens 16-bit grayscale as mode "I", which convert("RGB") clips.
		{"gray16", gray16, rgbOf([3]byte{0, 0, 0}, [3]byte{200, 200, 200}, [3]byte{255, 255, 255}, [3]byte{255, 255, 255})},
		// Transparency in a palette is ignored.
		{"palette", pal, rgbOf([3]byte{1, 2, 3}, [3]byte{10, 20, 30}, [3]byte{200, 100, 50})},
		// Alpha is dropped, not composited.
		{"alpha", nrgba, rgbOf([3]byte{100, 150, 200}, [3]byte{9, 8, 7})},
		// 16-bit samples keep their high byte.
		{"rgba64", nrgba64, rgbOf([3]byte{0x12, 0xAB, 0xFF}, [3]byte{0x00, 0x01, 0xFF})},
	} {
		got, _, _ := rawOf(t, c.name, pngBytes(t, c.img))
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPNM(t *testing.T) {
	for _, c := range []struct {
		name string
		src  string
		w, h int
		want []byte
	}{
		{"P6", "P6\n2 1\n255\n\x01\x02\x03\xfa\xfb\xfc", 2, 1, rgbOf([3]byte{1, 2, 3}, [3]byte{250, 251, 252})},
		{"P6 comment", "P6 # a comment\n2 # more\n1\n255 \x01\x02\x03\xfa\xfb\xfc", 2, 1, rgbOf([3]byte{1, 2, 3}, [3]byte{250, 251, 252})},
		{"P5", "P5 3 1 255\n\x00\x80\xff", 3, 1, rgbOf([3]byte{0, 0, 0}, [3]byte{128, 128, 128}, [3]byte{255, 255, 255})},
		// Values are scaled with Python's round: 1/2*255 = 127.5 becomes 128.
		{"P5 maxval 2", "P5 4 1 2\n\x00\x01\x02\x03", 4, 1, rgbOf([3]byte{0, 0, 0}, [3]byte{128, 128, 128}, [3]byte{255, 255, 255}, [3]byte{255, 255, 255})},
		{"P6 16-bit", "P6 2 1 1000\n\x00\x00\x00\xc8\x01\xf4\x03\xe8\x00\x01\x00\x02", 2, 1, rgbOf([3]byte{0, 51, 128}, [3]byte{255, 0, 1})},
		// 16-bit gray is PIL's mode "I", clipped by convert("RGB").
		{"P5 16-bit", "P5 3 1 65535\n\x00\x00\x00\xc8\x01\x00", 3, 1, rgbOf([3]byte{0, 0, 0}, [3]byte{200, 200, 200}, [3]byte{255, 255, 255})},
		{"P3", "P3\n2 1\n15\n0 15 7\n15 0 1\n", 2, 1, rgbOf([3]byte{0, 255, 119}, [3]byte{255, 0, 17})},
		{"P2", "P2 4 1 2\n0 1 2 1", 4, 1, rgbOf([3]byte{0, 0, 0}, [3]byte{128, 128, 128}, [3]byte{255, 255, 255}, [3]byte{128, 128, 128})},
		{"P1", "P1\n4 1\n0101", 4, 1, rgbOf([3]byte{255, 255, 255}, [3]byte{0, 0, 0}, [3]byte{255, 255, 255}, [3]byte{0, 0, 0})},
		{"P4", "P4\n4 1\n\x50", 4, 1, rgbOf([3]byte{255, 255, 255}, [3]byte{0, 0, 0}, [3]byte{255, 255, 255}, [3]byte{0, 0, 0})},
	} {
		got, w, h := rawOf(t, c.name, []byte(c.src))
		if w != c.w || h != c.h || !bytes.Equal(got, c.want) {
			t.Errorf("%s: got %dx%d %v, want %dx%d %v", c.name, w, h, got, c.w, c.h, c.want)
		}
	}
	for _, bad := range []string{
		"P6\n2 1\n255\n\x01\x02", "P5 3 1 0\n\x00\x00\x00", "P5 3 1 65536\n\x00", "P2 2 1 3\n0 4",
		"P2 2 1 3\n0 x", "P6 2", "P1\n2 1\n02", "P7 1 1 255\n\x00", "P6x 1 1 255\n\x00\x00\x00",
	} {
		if _, err := Prepare("bad.ppm", []byte(bad), Options{}, nil, nil); err == nil || !strings.Contains(err.Error(), "bad.ppm") {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
}

func TestBMPAndTIFF(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 5, 3))
	r := rand.New(rand.NewPCG(5, 6))
	var want []byte
	for i := 0; i < len(img.Pix); i += 4 {
		c := [3]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}
		copy(img.Pix[i:], c[:])
		img.Pix[i+3] = 255
		want = append(want, c[:]...)
	}
	var b bytes.Buffer
	if err := bmp.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := rawOf(t, "x.bmp", b.Bytes()); !bytes.Equal(got, want) {
		t.Errorf("BMP: got %v, want %v", got, want)
	}
	b.Reset()
	if err := tiff.Encode(&b, img, nil); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := rawOf(t, "x.tif", b.Bytes()); !bytes.Equal(got, want) {
		t.Errorf("TIFF: got %v, want %v", got, want)
	}
}

func TestGrayJPEG(t *testing.T) {
	img := image.NewGray(image.Rect(0, 0, 40, 24))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	var b bytes.Buffer
	if err := stdjpeg.Encode(&b, img, &stdjpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	src := b.Bytes()
	if p := mustPrepare(t, "gray.jpg", src, Options{Mode: WriteJPG}); !p.Verbatim {
		t.Error("a grayscale JPEG is not kept verbatim")
	}
	got, _, _ := rawOf(t, "gray.jpg", src)
	ref, err := stdjpeg.Decode(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	g := ref.(*image.Gray)
	for i, v := range g.Pix {
		r, gg, bb := got[3*i], got[3*i+1], got[3*i+2]
		if r != gg || r != bb || absDiff(r, v) > 2 {
			t.Fatalf("pixel %d: got %d,%d,%d, want about %d", i, r, gg, bb, v)
		}
	}
}

func TestCMYKFormula(t *testing.T) {
	// PIL's cmyk2rgb.
	for _, c := range []struct{ c, m, y, k, r, g, b byte }{
		{0, 0, 0, 0, 255, 255, 255},
		{255, 0, 0, 0, 0, 255, 255},
		{64, 0, 255, 128, 95, 127, 0},
		{0, 0, 0, 255, 0, 0, 0},
	} {
		r, g, b := cmykToRGB(c.c, c.m, c.y, c.k)
		if r != c.r || g != c.g || b != c.b {
			t.Errorf("cmyk %v: got %d,%d,%d", c, r, g, b)
		}
	}
}

func TestModes(t *testing.T) {
	src := readFile(t, fixtureSamples(t)[0])
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Width * cfg.Height * 3

	if p := mustPrepare(t, "a", src, Options{Mode: WriteSmart, SmartThreshold: n}); p.JPEG || len(p.Data) != n {
		t.Errorf("smart at the threshold: JPEG=%v", p.JPEG)
	}
	if p := mustPrepare(t, "a", src, Options{Mode: WriteSmart, SmartThreshold: n - 1}); !p.Verbatim {
		t.Errorf("smart above the threshold: verbatim=%v", p.Verbatim)
	}
	// Small enough after resizing: raw.
	if p := mustPrepare(t, "a", src, Options{Mode: WriteSmart, MaxResolution: 100}); p.JPEG || max(p.Width, p.Height) != 100 {
		t.Errorf("smart after resize: JPEG=%v %dx%d", p.JPEG, p.Width, p.Height)
	}
	if p := mustPrepare(t, "a", src, Options{Mode: WriteSmart, MaxResolution: 300, SmartThreshold: 1000}); !p.JPEG || p.Verbatim {
		t.Errorf("smart after resize, above threshold: JPEG=%v verbatim=%v", p.JPEG, p.Verbatim)
	}

	rnd := rand.New(rand.NewPCG(7, 8))
	jpegs := 0
	for i := 0; i < 200; i++ {
		p, err := Prepare("a", src, Options{Mode: WriteProportion, CompressProbability: 0.25, MaxResolution: 32}, rnd, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.JPEG {
			jpegs++
		}
	}
	if jpegs < 25 || jpegs > 75 {
		t.Errorf("proportion 0.25: %d JPEGs out of 200", jpegs)
	}
	if _, err := Prepare("a", src, Options{Mode: WriteProportion}, nil, nil); err == nil {
		t.Error("proportion mode without a random source: no error")
	}
}

func TestCorruptInput(t *testing.T) {
	src := readFile(t, fixtureSamples(t)[5])
	cases := map[string][]byte{
		"empty":        {},
		"garbage":      []byte("this is no image at all, just text"),
		"jpeg garbage": append([]byte{0xFF, 0xD8, 0xFF}, bytes.Repeat([]byte{0x17, 0xFF, 0x42}, 100)...),
		"only SOI":     {0xFF, 0xD8, 0xFF},
		"no EOI":       src[:len(src)-2],
		"png truncated": func() []byte {
			b := pngBytes(t, image.NewGray(image.Rect(0, 0, 50, 50)))
			return b[:len(b)/2]
		}(),
		"huge png": func() []byte {
			b := pngBytes(t, image.NewGray(image.Rect(0, 0, 1, 1)))
			// IHDR says 65535×65535; the CRC is fixed so the header parses.
			b = bytes.Clone(b)
			copy(b[16:24], []byte{0, 0, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF})
			fixPNGCRC(b, 8)
			return b
		}(),
	}
	for _, cut := range []int{10, 100, 300, 1000, len(src) / 2, len(src) - 100} {
		cases[fmt.Sprintf("jpeg cut at %d", cut)] = src[:cut]
	}
	for name, b := range cases {
		for _, mode := range []string{WriteJPG, WriteRaw} {
			path := "/data/" + strings.ReplaceAll(name, " ", "_") + ".jpg"
			_, err := Prepare(path, b, Options{Mode: mode}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("%s (%s): err = %v", name, mode, err)
			}
		}
	}
	if _, err := Prepare("g", cases["garbage"], Options{}, nil, nil); !errors.Is(err, ErrFormat) {
		t.Errorf("garbage: %v does not wrap ErrFormat", err)
	}
	if _, err := Prepare("h", cases["huge png"], Options{}, nil, nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge: %v does not wrap ErrTooLarge", err)
	}
}

// fixPNGCRC recomputes the CRC of the chunk at offset off.
func fixPNGCRC(b []byte, off int) {
	n := int(b[off])<<24 | int(b[off+1])<<16 | int(b[off+2])<<8 | int(b[off+3])
	crc := crc32.ChecksumIEEE(b[off+4 : off+8+n])
	b[off+8+n], b[off+9+n], b[off+10+n], b[off+11+n] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
}

// TestNoPanic feeds damaged copies of valid files of every format; any
// result but a panic is fine.
func TestNoPanic(t *testing.T) {
	img := image.NewNRGBA(image.Rect(0, 0, 20, 10))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 13)
	}
	var tb, bb bytes.Buffer
	if err := tiff.Encode(&tb, img, nil); err != nil {
		t.Fatal(err)
	}
	if err := bmp.Encode(&bb, img); err != nil {
		t.Fatal(err)
	}
	seeds := [][]byte{
		readFile(t, fixtureSamples(t)[0]), pngBytes(t, img), tb.Bytes(), bb.Bytes(),
		[]byte("P6 4 4 255\n" + strings.Repeat("abc", 16)), []byte("P3 2 2 255\n1 2 3 4 5 6 7 8 9 10 11 12"),
	}
	r := rand.New(rand.NewPCG(9, 10))
	s := new(Scratch)
	for _, seed := range seeds {
		for i := 0; i < 150; i++ {
			b := bytes.Clone(seed)
			switch i % 3 {
			case 0:
				b = b[:r.IntN(len(b))]
			default:
				for k := 0; k < 1+r.IntN(8); k++ {
					b[r.IntN(len(b))] = byte(r.Uint32())
				}
			}
			for _, mode := range []string{WriteJPG, WriteRaw} {
				// Prepare recovers panics into errors; make sure none happened.
				if _, err := Prepare("fuzz", b, Options{Mode: mode, MaxResolution: 7}, nil, s); err != nil &&
					strings.Contains(err.Error(), "decoder failure") {
					t.Errorf("seed %d variant %d: %v", len(seed), i, err)
				}
			}
		}
	}
}

func TestScratchReuseAndConcurrency(t *testing.T) {
	paths := fixtureSamples(t)[:24]
	if testing.Short() {
		paths = paths[:6]
	}
	opts := []Options{{Mode: WriteRaw, MaxResolution: 150}, {Mode: WriteJPG, MaxResolution: 200}, {Mode: WriteRaw}}
	// Reference results, each with a fresh Scratch.
	want := make([][]Prepared, len(paths))
	for i, p := range paths {
		src := readFile(t, p)
		for _, o := range opts {
			want[i] = append(want[i], mustPrepare(t, p, src, o))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := new(Scratch)
			var kept []Prepared
			for k := 0; k < 2; k++ {
				for i, p := range paths {
					src, err := os.ReadFile(p)
					if err != nil {
						errs <- err
						return
					}
					for j, o := range opts {
						got, err := Prepare(p, src, o, nil, s)
						if err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(got.Data, want[i][j].Data) {
							errs <- fmt.Errorf("%s %+v: result differs with a reused Scratch", p, o)
							return
						}
						kept = append(kept, got)
					}
				}
			}
			// Earlier results must not have been overwritten by later calls.
			for n, got := range kept {
				i, j := n/len(opts)%len(paths), n%len(opts)
				if !bytes.Equal(got.Data, want[i][j].Data) {
					errs <- fmt.Errorf("result %d changed after later Prepare calls", n)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func absDiff(a, b byte) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// TestPrepareRestartsFallBack: a JPEG that libjpeg-turbo transcodes only
// with a warning (a scan cut short) is stored as it is, with the reason,
// not refused; one with restart markers already is kept verbatim.
func TestPrepareRestartsFallBack(t *testing.T) {
	src := testenv.Photos(t, 1)[0].Data
	bad := append(slices.Clone(src[:len(src)/2]), 0xFF, 0xD9)
	p, err := Prepare("bad.jpg", bad, Options{Mode: WriteJPG, RestartInterval: 4}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verbatim || p.Restarts || p.NoRestarts == nil || !bytes.Equal(p.Data, bad) {
		t.Fatalf("verbatim %v, restarts %v, why %v; jpeg %v %dx%d %d bytes", p.Verbatim, p.Restarts, p.NoRestarts, p.JPEG, p.Width, p.Height, len(p.Data))
	}
	rst, _, err := ffjpeg.AddRestarts(src, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err = Prepare("rst.jpg", rst, Options{Mode: WriteJPG, RestartInterval: 4}, nil, nil)
	if err != nil || !p.Verbatim || !p.Restarts || !bytes.Equal(p.Data, rst) {
		t.Fatalf("a JPEG with restart markers: verbatim %v, restarts %v, %v", p.Verbatim, p.Restarts, err)
	}
}
