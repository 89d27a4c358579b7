package jpeg

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	libjpeg "github.com/pixiv/go-libjpeg/jpeg"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

type fixture struct {
	name string
	data []byte
}

// newDecoder returns a Decoder closed when the test ends.
func newDecoder(t testing.TB) *Decoder {
	t.Helper()
	d, err := NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// loadFixtures returns n of the fixture photos (all for n ≤ 0).
func loadFixtures(t testing.TB, n int) []fixture {
	t.Helper()
	var fs []fixture
	for _, p := range testenv.Photos(t, n) {
		fs = append(fs, fixture{p.Name, p.Data})
	}
	return fs
}

// shortOr returns n, or with -short (the arm64 tests under emulation)
// short.
func shortOr(n, short int) int {
	if testing.Short() {
		return short
	}
	return n
}

// testScales returns the scales m/8 a test of regions decodes at: all of
// them, or with -short (the arm64 tests under emulation) the smallest,
// one between and the whole (TestIDCTMatchesLibjpeg still checks every
// scale's inverse DCT).
func testScales() []int {
	if testing.Short() {
		return []int{1, 3, 8}
	}
	return []int{1, 2, 3, 4, 5, 6, 7, 8}
}

// fullDecode decodes the whole image with go-libjpeg (ISLOW), as the
// reference.
func fullDecode(t testing.TB, b []byte) (pix []byte, stride, w, h int) {
	t.Helper()
	img, err := libjpeg.DecodeIntoRGB(bytes.NewReader(b), &libjpeg.DecoderOptions{DCTMethod: libjpeg.DCTISlow})
	if err != nil {
		t.Fatal(err)
	}
	return img.Pix, img.Stride, img.Rect.Dx(), img.Rect.Dy()
}

type region struct{ x, y, w, h int }

// testRegions returns edge cases and random regions of a w×h image.
func testRegions(rng *rand.Rand, w, h, n int) []region {
	rs := []region{
		{0, 0, w, h}, {0, 0, 1, 1}, {w - 1, h - 1, 1, 1}, {0, h - 1, w, 1}, {w - 1, 0, 1, h},
		{16, 16, 16, 16}, {15, 17, 33, 31}, {8, 8, w - 16, h - 16}, {w - 17, h - 9, 17, 9},
		{1, 1, w - 2, h - 2}, {w / 2, h / 2, w - w/2, h - h/2},
	}
	for range n {
		cw := 1 + rng.IntN(w)
		ch := 1 + rng.IntN(h)
		rs = append(rs, region{rng.IntN(w - cw + 1), rng.IntN(h - ch + 1), cw, ch})
	}
	return rs
}

func TestHeader(t *testing.T) {
	for _, f := range loadFixtures(t, 20) {
		w, h, err := Header(f.data)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		_, _, fw, fh := fullDecode(t, f.data)
		if w != fw || h != fh {
			t.Errorf("%s: Header %dx%d, decode %dx%d", f.name, w, h, fw, fh)
		}
	}
}

func TestDecodeRegionExact(t *testing.T) {
	d := newDecoder(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var buf []byte
	checked := 0
	for _, f := range loadFixtures(t, 50) {
		pix, stride, w, h := fullDecode(t, f.data)
		for _, r := range testRegions(rng, w, h, 40) {
			// A stride wider than the row, to check it is honored.
			dstStride := r.w*3 + 5
			n := (r.h-1)*dstStride + r.w*3
			if cap(buf) < n {
				buf = make([]byte, n)
			}
			buf = buf[:n]
			ow, oh, err := d.DecodeRegion(f.data, r.x, r.y, r.w, r.h, 8, buf, dstStride)
			if err != nil {
				t.Fatalf("%s %+v: %v", f.name, r, err)
			}
			if ow != r.w || oh != r.h {
				t.Fatalf("%s %+v: output %dx%d", f.name, r, ow, oh)
			}
			for yy := 0; yy < r.h; yy++ {
				got := buf[yy*dstStride : yy*dstStride+r.w*3]
				want := pix[(r.y+yy)*stride+r.x*3 : (r.y+yy)*stride+(r.x+r.w)*3]
				if !bytes.Equal(got, want) {
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%s %+v: row %d differs first at column %d (channel %d): %d, want %d",
								f.name, r, yy, i/3, i%3, got[i], want[i])
						}
					}
				}
			}
			checked++
		}
	}
	t.Logf("%d regions byte-identical to a full decode", checked)
}

// areaDown averages denom×denom blocks of the region r of pix (partial
// blocks at the image edge average what is there), over the scaled region
// rounded outward, as DecodeRegion returns it.
func areaDown(pix []byte, stride, w, h int, r region, denom int) (out []byte, ow, oh int) {
	x0, y0 := r.x/denom, r.y/denom
	x1, y1 := (r.x+r.w+denom-1)/denom, (r.y+r.h+denom-1)/denom
	ow, oh = x1-x0, y1-y0
	out = make([]byte, ow*oh*3)
	for oy := 0; oy < oh; oy++ {
		for ox := 0; ox < ow; ox++ {
			var s [3]int
			n := 0
			for yy := (y0 + oy) * denom; yy < min((y0+oy+1)*denom, h); yy++ {
				for xx := (x0 + ox) * denom; xx < min((x0+ox+1)*denom, w); xx++ {
					for c := range 3 {
						s[c] += int(pix[yy*stride+xx*3+c])
					}
					n++
				}
			}
			for c := range 3 {
				out[(oy*ow+ox)*3+c] = byte((s[c] + n/2) / n)
			}
		}
	}
	return out, ow, oh
}

// TestDecodeRegionScaled compares DCT-scaled regions with a full decode
// averaged over denom×denom blocks. The two are different filters (libjpeg
// scales each 8×8 block with a reduced-size IDCT, and chroma is upsampled
// differently), so they agree closely but not exactly: about 50 dB on
// average, but down to about 32 dB on small regions at the image's right or
// bottom edge, where a partial block is averaged over fewer pixels than the
// IDCT spreads it over. The bounds are 30 dB per region and 45 dB on
// average; the figures are logged.
func TestDecodeRegionScaled(t *testing.T) {
	d := newDecoder(t)
	rng := rand.New(rand.NewPCG(3, 4))
	fixtures := loadFixtures(t, 30)
	minPSNR := map[int]float64{2: 30, 4: 30, 8: 30}
	for _, denom := range []int{2, 4, 8} {
		worst, sum, n := math.Inf(1), 0.0, 0
		var whole []float64
		for _, f := range fixtures {
			pix, stride, w, h := fullDecode(t, f.data)
			for i, r := range testRegions(rng, w, h, 10) {
				if r.w < 2*denom || r.h < 2*denom {
					continue
				}
				want, ow, oh := areaDown(pix, stride, w, h, r, denom)
				got := make([]byte, ow*oh*3)
				gw, gh, err := d.DecodeRegion(f.data, r.x, r.y, r.w, r.h, 8/denom, got, ow*3)
				if err != nil {
					t.Fatalf("%s %+v /%d: %v", f.name, r, denom, err)
				}
				if gw != ow || gh != oh {
					t.Fatalf("%s %+v /%d: output %dx%d, want %dx%d", f.name, r, denom, gw, gh, ow, oh)
				}
				p := min(testenv.PSNR(got, want), 99)
				if p < minPSNR[denom] {
					t.Errorf("%s %+v /%d: PSNR %.1f dB < %.0f", f.name, r, denom, p, minPSNR[denom])
				}
				if i == 0 {
					whole = append(whole, p)
				}
				worst = min(worst, p)
				sum += p
				n++
			}
		}
		if sum/float64(n) < 45 {
			t.Errorf("scale 1/%d: mean PSNR %.1f dB < 45", denom, sum/float64(n))
		}
		sort.Float64s(whole)
		t.Logf("scale 1/%d: %d regions, PSNR mean %.1f dB, min %.1f dB; whole images median %.1f dB",
			denom, n, sum/float64(n), worst, whole[len(whole)/2])
	}
}

func TestCorrupt(t *testing.T) {
	d := newDecoder(t)
	f := loadFixtures(t, 1)[0]
	w, h, err := d.Header(f.data)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, w*h*3)
	full := func(b []byte) error {
		_, _, err := d.DecodeRegion(b, 0, 0, w, h, 8, dst, w*3)
		return err
	}
	cases := map[string][]byte{
		"empty":        nil,
		"garbage":      []byte("this is not a jpeg at all, not even close"),
		"header only":  f.data[:200],
		"half":         f.data[:len(f.data)/2],
		"missing EOI":  f.data[:len(f.data)-2],
		"soi then end": {0xFF, 0xD8},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 50 {
		b := bytes.Clone(f.data)
		for range 1 + rng.IntN(20) {
			b[rng.IntN(len(b))] = byte(rng.Uint32())
		}
		cases["flipped bytes "+string(rune('A'+i%26))+string(rune('a'+i/26))] = b
	}
	for name, b := range cases {
		err := full(b)
		switch name {
		case "empty", "missing EOI", "garbage", "header only", "half", "soi then end":
			if err == nil {
				t.Errorf("%s: no error", name)
			} else if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrArgument) {
				t.Errorf("%s: error %v wraps neither sentinel", name, err)
			}
		default:
			// Random damage may or may not be detectable; it must not crash.
			_ = err
		}
	}
	// The decoder still works after errors.
	if err := full(f.data); err != nil {
		t.Fatalf("after errors: %v", err)
	}
	// A region above the truncation point decodes; one below does not.
	half := f.data[:len(f.data)/2]
	if _, _, err := d.DecodeRegion(half, 0, 0, w, 8, 8, dst, w*3); err != nil {
		t.Errorf("top rows of truncated file: %v", err)
	}
	if _, _, err := d.DecodeRegion(half, 0, h-8, w, 8, 8, dst, w*3); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bottom rows of truncated file: %v, want ErrCorrupt", err)
	}
	// Bad arguments.
	for _, a := range []struct{ x, y, w, h, m, stride int }{
		{0, 0, w + 1, h, 8, (w + 1) * 3}, {-1, 0, 4, 4, 8, 12}, {0, 0, 0, 4, 8, 12},
		{0, 0, 4, 4, 0, 12}, {0, 0, 4, 4, 9, 12}, {0, 0, 4, 4, 8, 11}, {0, 0, w, h, 8, w*3 + 1},
	} {
		if _, _, err := d.DecodeRegion(f.data, a.x, a.y, a.w, a.h, a.m, dst, a.stride); !errors.Is(err, ErrArgument) {
			t.Errorf("%+v: %v, want ErrArgument", a, err)
		}
	}
}

func TestGrayscale(t *testing.T) {
	// Build a grayscale JPEG with go-libjpeg's encoder from a fixture.
	f := loadFixtures(t, 1)[0]
	img, err := libjpeg.Decode(bytes.NewReader(f.data), &libjpeg.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	gray := imageGray(img)
	var enc bytes.Buffer
	if err := libjpeg.Encode(&enc, gray, &libjpeg.EncoderOptions{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	w, h := b.Dx(), b.Dy()
	dst := make([]byte, w*h*3)
	if _, _, err := DecodeRegion(enc.Bytes(), 0, 0, w, h, 8, dst, w*3); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(dst); i += 3 {
		if dst[i] != dst[i+1] || dst[i] != dst[i+2] {
			t.Fatalf("pixel %d not gray: %v", i/3, dst[i:i+3])
		}
	}
}

// TestDecodeRegionCropExact checks, at every scale m/8, that a region's
// pixels equal those of the whole image decoded at that scale, byte for
// byte: cropping columns, skipping rows and stopping early change nothing,
// with and without the horizontal pad that chroma upsampling needs, in
// every sampling layout.
func TestDecodeRegionCropExact(t *testing.T) {
	d := newDecoder(t)
	rng := rand.New(rand.NewPCG(11, 12))
	fixtures := append(loadFixtures(t, 20), layoutFixtures(t, 3)...)
	checked := 0
	for _, m := range testScales() {
		for _, f := range fixtures {
			w, h, err := d.Header(f.data)
			if err != nil {
				t.Fatal(err)
			}
			sw, sh := (w*m+7)/8, (h*m+7)/8
			whole := make([]byte, sw*sh*3)
			if gw, gh, err := d.DecodeRegion(f.data, 0, 0, w, h, m, whole, sw*3); err != nil || gw != sw || gh != sh {
				t.Fatalf("%s at %d/8: %dx%d, %v; want %dx%d", f.name, m, gw, gh, err, sw, sh)
			}
			for _, r := range testRegions(rng, w, h, 8) {
				win := ScaledWindow(r.x, r.y, r.w, r.h, w, h, m)
				got := make([]byte, win.W*win.H*3)
				gw, gh, err := d.DecodeRegion(f.data, r.x, r.y, r.w, r.h, m, got, win.W*3)
				if err != nil {
					t.Fatalf("%s %+v at %d/8: %v", f.name, r, m, err)
				}
				if gw != win.W || gh != win.H {
					t.Fatalf("%s %+v at %d/8: output %dx%d, want %dx%d", f.name, r, m, gw, gh, win.W, win.H)
				}
				for yy := 0; yy < gh; yy++ {
					want := whole[(win.Y0+yy)*sw*3+win.X0*3:][:gw*3]
					if !bytes.Equal(got[yy*gw*3:][:gw*3], want) {
						t.Fatalf("%s %+v at %d/8: row %d differs from the whole image's", f.name, r, m, yy)
					}
				}
				checked++
			}
		}
	}
	t.Logf("%d regions at scales 1/8..8/8 equal to the whole image's pixels", checked)
}
