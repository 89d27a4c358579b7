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
