package jpeg

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPlanesMatchDecode checks that regions made from the planes equal a
// full decode's pixels byte for byte, for every layout the planes hold
// (4:4:4, 4:2:2, 4:4:0, 4:2:0, grayscale, 2x2 against 1x2, on real photos
// and on the odd sizes of testdata/layouts), and that the other layouts are
// refused with ErrNoPlanes: the image whole, its edges, and random regions.
func TestPlanesMatchDecode(t *testing.T) {
	for _, avx2 := range []bool{true, false} {
		name := "avx2"
		if !avx2 {
			name = "portable"
		}
		t.Run(name, func(t *testing.T) {
			usePlanesAVX2(avx2)
			defer usePlanesAVX2(true)
			checkPlanes(t)
		})
	}
}

// checkPlanes is TestPlanesMatchDecode with the conversion chosen.
func checkPlanes(t *testing.T) {
	d := newDecoder(t)
	held, refused := map[string]bool{}, 0
	for _, f := range layoutFixtures(t, shortOr(4, 1)) {
		p, err := d.PlanesOf(f.data, Size{})
		if errors.Is(err, ErrNoPlanes) {
			refused++
			t.Logf("%s: %v", f.name, err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		layout := f.name[strings.LastIndexAny(f.name, "@/")+1:]
		held[layout] = true
		w, h := p.W, p.H
		full := make([]byte, w*h*3)
		if _, _, err := d.DecodeRegion(f.data, 0, 0, w, h, 8, full, w*3); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		planes := make([]byte, p.Bytes())
		if err := d.DecodePlanes(f.data, p, planes); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		rng := rand.New(rand.NewPCG(1, uint64(len(f.data))))
		regions := [][4]int{{0, 0, w, h}, {0, 0, 1, 1}, {w - 1, h - 1, 1, 1}, {w - 3, 0, 3, h}, {0, h - 2, w, 2}}
		for range 40 {
			rw, rh := 1+rng.IntN(w), 1+rng.IntN(h)
			regions = append(regions, [4]int{rng.IntN(w - rw + 1), rng.IntN(h - rh + 1), rw, rh})
		}
		for _, r := range regions {
			x, y, rw, rh := r[0], r[1], r[2], r[3]
			got := make([]byte, rw*rh*3)
			if err := p.RGB(planes, x, y, rw, rh, got, rw*3); err != nil {
				t.Fatalf("%s: region %v: %v", f.name, r, err)
			}
			for row := range rh {
				want := full[((y+row)*w+x)*3:][:rw*3]
				if g := got[row*rw*3:][:rw*3]; !bytes.Equal(g, want) {
					i := 0
					for g[i] == want[i] {
						i++
					}
					t.Fatalf("%s (%+v): region %v: row %d differs from the full decode first at pixel %d: %v, want %v",
						f.name, p, r, row, i/3, g[i/3*3:i/3*3+3], want[i/3*3:i/3*3+3])
				}
			}
		}
	}
	for _, l := range []string{"444", "422", "440", "420", "gray"} {
		if !held[l] {
			t.Errorf("no %s fixture was held as planes", l)
		}
	}
	if refused == 0 {
		t.Error("no layout was refused")
	}
}

// TestPlanesHostile checks the refusals: a truncated or damaged JPEG, a
// frame that is not the size asked, a destination too small, a region
// outside the image, planes shorter than their layout.
func TestPlanesHostile(t *testing.T) {
	d := newDecoder(t)
	f := loadFixtures(t, 1)[0]
	p, err := d.PlanesOf(f.data, Size{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.PlanesOf(f.data, Size{W: p.W + 1, H: p.H}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a frame of another size: %v, want ErrCorrupt", err)
	}
	if _, err := d.PlanesOf(nil, Size{}); err == nil {
		t.Error("no data: no error")
	}
	planes := make([]byte, p.Bytes())
	if err := d.DecodePlanes(f.data[:len(f.data)/2], p, planes); !errors.Is(err, ErrCorrupt) {
		t.Errorf("half a JPEG: %v, want ErrCorrupt", err)
	}
	if err := d.DecodePlanes(f.data, p, planes[:len(planes)-1]); !errors.Is(err, ErrArgument) {
		t.Errorf("a destination a byte short: %v, want ErrArgument", err)
	}
	other := p
	other.PW[0]++
	if err := d.DecodePlanes(f.data, other, make([]byte, other.Bytes())); !errors.Is(err, ErrArgument) {
		t.Errorf("a layout not the JPEG's: %v, want ErrArgument", err)
	}
	if err := d.DecodePlanes(f.data, p, planes); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 30)
	for _, r := range [][4]int{{-1, 0, 1, 1}, {0, 0, 0, 1}, {p.W, 0, 1, 1}, {0, p.H - 1, 1, 2}, {0, 0, 11, 1}, {1 << 40, 0, 1, 1}} {
		if err := p.RGB(planes, r[0], r[1], r[2], r[3], dst, 33); !errors.Is(err, ErrArgument) {
			t.Errorf("region %v: %v, want ErrArgument", r, err)
		}
	}
	if err := p.RGB(planes[:len(planes)-1], 0, 0, 1, 1, dst, 3); !errors.Is(err, ErrArgument) {
		t.Errorf("planes a byte short: %v, want ErrArgument", err)
	}
	bad := p
	bad.HR[1] = 3
	if err := bad.RGB(planes, 0, 0, 1, 1, dst, 3); !errors.Is(err, ErrArgument) {
		t.Errorf("a ratio of 3: %v, want ErrArgument", err)
	}
	// Y subsampled: its rows would be read past their end.
	bad = p
	bad.HR[0], bad.PW[0] = 2, (p.W+1)/2
	for _, rgb := range []func([]byte, int, int, int, int, []byte, int) error{bad.RGB, bad.RGBHalf} {
		if err := rgb(planes, 0, 0, 10, 1, dst, 30); !errors.Is(err, ErrArgument) {
			t.Errorf("Y subsampled: %v, want ErrArgument", err)
		}
	}
	// Planes larger than their image (a layout not PlanesOf's).
	bad = p
	bad.PW[0]++
	if err := bad.RGB(planes, 0, 0, 1, 1, dst, 3); !errors.Is(err, ErrArgument) {
		t.Errorf("a plane wider than its image: %v, want ErrArgument", err)
	}
}

// BenchmarkPlanes compares, per fixture photo (4:2:0), a full decode with
// decoding to planes and with making the whole image's RGB from planes.
func BenchmarkPlanes(b *testing.B) {
	d := newDecoder(b)
	fs := loadFixtures(b, 20)
	type img struct {
		data, planes, rgb []byte
		p                 Planes
	}
	var imgs []img
	for _, f := range fs {
		p, err := d.PlanesOf(f.data, Size{})
		if err != nil {
			b.Fatal(err)
		}
		pl := make([]byte, p.Bytes())
		if err := d.DecodePlanes(f.data, p, pl); err != nil {
			b.Fatal(err)
		}
		imgs = append(imgs, img{f.data, pl, make([]byte, p.W*p.H*3), p})
	}
	b.Run("full-decode", func(b *testing.B) {
		for i := range b.N {
			m := imgs[i%len(imgs)]
			if _, _, err := d.DecodeRegion(m.data, 0, 0, m.p.W, m.p.H, 8, m.rgb, m.p.W*3); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-planes", func(b *testing.B) {
		for i := range b.N {
			m := imgs[i%len(imgs)]
			if err := d.DecodePlanes(m.data, m.p, m.planes); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("planes-rgb", func(b *testing.B) {
		for i := range b.N {
			m := imgs[i%len(imgs)]
			if err := m.p.RGB(m.planes, 0, 0, m.p.W, m.p.H, m.rgb, m.p.W*3); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzPlanes: any bytes as a JPEG's planes: PlanesOf and DecodePlanes
// return errors and never crash, and planes that decode convert, whole
// and at half size, to images of the layout's size.
func FuzzPlanes(f *testing.F) {
	for _, fx := range layoutFixtures(f, 1) {
		f.Add(fx.data)
	}
	d, err := NewDecoder()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := d.PlanesOf(b, Size{})
		if err != nil || p.Bytes() > 1<<24 {
			return
		}
		planes := make([]byte, p.Bytes())
		if err := d.DecodePlanes(b, p, planes); err != nil {
			return
		}
		if err := p.RGB(planes, 0, 0, p.W, p.H, make([]byte, p.W*p.H*3), p.W*3); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		w2, h2 := (p.W+1)/2, (p.H+1)/2
		if err := p.RGBHalf(planes, 0, 0, w2, h2, make([]byte, w2*h2*3), w2*3); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
	})
}

// TestPlanesHalf checks RGBHalf against its definition, computed here: each
// plane's samples under a 2×2 block of the image averaged (rounded), the
// last odd column or row alone, then jdcolor.c's YCbCr-to-RGB conversion;
// for every layout the planes hold, whole and in random regions, with the
// AVX2 conversion and without.
func TestPlanesHalf(t *testing.T) {
	d := newDecoder(t)
	fix := func(x float64) int32 { return int32(x*65536 + 0.5) }
	clamp := func(v int32) byte { return byte(min(max(v, 0), 255)) }
	for _, avx2 := range []bool{true, false} {
		usePlanesAVX2(avx2)
		for _, f := range layoutFixtures(t, 1) {
			p, err := d.PlanesOf(f.data, Size{})
			if err != nil {
				continue
			}
			planes := make([]byte, p.Bytes())
			if err := d.DecodePlanes(f.data, p, planes); err != nil {
				t.Fatal(err)
			}
			var off [3]int
			for c := 1; c < p.Comps; c++ {
				off[c] = off[c-1] + p.PW[c-1]*p.PH[c-1]
			}
			// sample returns plane c's mean under the image's 2×2 block at
			// half-size pixel (x, y).
			sample := func(c, x, y int) int32 {
				fx, fy := 2/p.HR[c], 2/p.VR[c]
				sum, n := 0, 0
				for dy := range fy {
					for dx := range fx {
						px, py := x*fx+dx, y*fy+dy
						if px >= p.PW[c] || py >= p.PH[c] {
							px, py = min(px, p.PW[c]-1), min(py, p.PH[c]-1)
						}
						sum += int(planes[off[c]+py*p.PW[c]+px])
						n++
					}
				}
				return int32((sum + n/2) / n)
			}
			w2, h2 := (p.W+1)/2, (p.H+1)/2
			want := make([]byte, w2*h2*3)
			for y := range h2 {
				for x := range w2 {
					o := want[(y*w2+x)*3:]
					yy := sample(0, x, y)
					if p.Comps == 1 {
						o[0], o[1], o[2] = byte(yy), byte(yy), byte(yy)
						continue
					}
					cb, cr := sample(1, x, y)-128, sample(2, x, y)-128
					o[0] = clamp(yy + (fix(1.402)*cr+32768)>>16)
					o[1] = clamp(yy + (-fix(0.34414)*cb+32768-fix(0.71414)*cr)>>16)
					o[2] = clamp(yy + (fix(1.772)*cb+32768)>>16)
				}
			}
			rng := rand.New(rand.NewPCG(3, uint64(len(f.data))))
			regions := [][4]int{{0, 0, w2, h2}}
			for range 20 {
				rw, rh := 1+rng.IntN(w2), 1+rng.IntN(h2)
				regions = append(regions, [4]int{rng.IntN(w2 - rw + 1), rng.IntN(h2 - rh + 1), rw, rh})
			}
			for _, r := range regions {
				got := make([]byte, r[2]*r[3]*3)
				if err := p.RGBHalf(planes, r[0], r[1], r[2], r[3], got, r[2]*3); err != nil {
					t.Fatal(err)
				}
				for row := range r[3] {
					if !bytes.Equal(got[row*r[2]*3:][:r[2]*3], want[((r[1]+row)*w2+r[0])*3:][:r[2]*3]) {
						t.Fatalf("%s (avx2 %v, %+v): half-size region %v, row %d differs from the definition", f.name, avx2, p, r, row)
					}
				}
			}
		}
	}
	usePlanesAVX2(true)
}
