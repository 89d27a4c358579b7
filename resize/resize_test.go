package resize

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// exactResize is Resizer.ResizeWindow's fixed-point arithmetic written out
// plainly over the tables axisTable.build makes: each output row filters
// the source rows under it vertically, rounding to accBits fractional
// bits, then filters that row horizontally, rounding to a byte (or, when
// the horizontal axis is copied, truncating).
func exactResize(src []byte, stride, sw, sh, ow, oh int, fx, fy, fw, fh float64, flip bool) []byte {
	var xt, yt axisTable
	xt.build(sw, fx, fw, ow)
	yt.build(sh, fy, fh, oh)
	out := make([]byte, ow*oh*3)
	row := make([]int64, sw*3)
	for oy := 0; oy < oh; oy++ {
		for i := range row {
			var s int64
			for t := 0; t < int(yt.n[oy]); t++ {
				s += int64(src[(int(yt.start[oy])+t)*stride+i]) * int64(yt.w[int(yt.off[oy])+t])
			}
			row[i] = (s + 1<<(wBits-accBits-1)) >> (wBits - accBits)
		}
		for ox := 0; ox < ow; ox++ {
			d := ox
			if flip {
				d = ow - 1 - ox
			}
			for c := 0; c < 3; c++ {
				var s int64
				for t := 0; t < int(xt.n[ox]); t++ {
					s += row[(int(xt.start[ox])+t)*3+c] * int64(xt.w[int(xt.off[ox])+t])
				}
				if xt.k == 1 {
					// An axis copied: the row's value, truncated.
					out[(oy*ow+d)*3+c] = byte(row[int(xt.start[ox])*3+c] >> accBits)
				} else {
					out[(oy*ow+d)*3+c] = byte((s + 1<<(wBits+accBits-1)) >> (wBits + accBits))
				}
			}
		}
	}
	return out
}

// TestResizeExact checks that ResizeWindow's passes, AVX2 and plain,
// compute exactly the fixed-point arithmetic of exactResize, byte for
// byte, over shrinking, enlarging and mixed sizes, fractional windows and
// flips.
func TestResizeExact(t *testing.T) {
	bothPasses(t, testResizeExact)
}

// bothPasses runs test with resize.c's AVX-512 and AVX2 passes, where the
// CPU has them, and with the plain ones.
func bothPasses(t *testing.T, test func(t *testing.T)) {
	defer useAVX512(true)
	defer useAVX2(true)
	if useAVX2(true) && useAVX512(true) {
		t.Run("avx512", test)
	}
	useAVX512(false)
	if useAVX2(true) {
		t.Run("avx2", test)
	}
	useAVX2(false)
	t.Run("plain", test)
}

func testResizeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var r Resizer
	sizes := [][4]int{{235, 230, 160, 160}, {300, 300, 160, 160}, {120, 130, 160, 160}, {161, 199, 160, 160},
		{37, 29, 16, 16}, {16, 16, 37, 29}, {1, 1, 5, 3}, {640, 480, 7, 9}, {9, 900, 50, 40}, {160, 160, 160, 160}, {160, 213, 160, 160}, {160, 97, 160, 160}}
	for i := 0; i < 300; i++ {
		var sw, sh, ow, oh int
		if i < len(sizes) {
			sw, sh, ow, oh = sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3]
		} else {
			sw, sh = 1+rng.IntN(400), 1+rng.IntN(400)
			ow, oh = 1+rng.IntN(200), 1+rng.IntN(200)
		}
		fx, fy := 0.0, 0.0
		fw, fh := float64(sw), float64(sh)
		if i%2 == 1 {
			fx, fy = rng.Float64()*0.9, rng.Float64()*0.9
			fw = max(0.5, fw-fx-rng.Float64()*0.9)
			fh = max(0.5, fh-fy-rng.Float64()*0.9)
		}
		flip := i%3 == 0
		stride := sw*3 + rng.IntN(8)
		src := randomRGB(rng, stride/3+1, sh)[:(sh-1)*stride+sw*3]
		want := exactResize(src, stride, sw, sh, ow, oh, fx, fy, fw, fh, flip)
		got := make([]byte, ow*oh*3)
		r.ResizeWindow(got, ow*3, ow, oh, src, stride, sw, sh, fx, fy, fw, fh, flip)
		for j := range got {
			if got[j] != want[j] {
				name := fmt.Sprintf("%dx%d window %.3f,%.3f %.3fx%.3f -> %dx%d flip %v", sw, sh, fx, fy, fw, fh, ow, oh, flip)
				t.Fatalf("%s: byte %d (pixel %d,%d channel %d) = %d, want %d", name, j, j/3%ow, j/3/ow, j%3, got[j], want[j])
			}
		}
	}
}

// TestResizeRowEnds checks, for both kinds of passes, every output width
// up to 26, enlarging and shrinking by several ratios (1, 2, 4 and 6
// horizontal taps), with and without a flip: the passes do outputs four,
// two and one at a time, and each width ends a row in another of them; no
// byte past a row is written.
func TestResizeRowEnds(t *testing.T) {
	bothPasses(t, testResizeRowEnds)
}

func testResizeRowEnds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var r Resizer
	for ow := 1; ow <= 26; ow++ {
		for _, f := range []float64{0.5, 1, 1.5, 3.2, 5.5} {
			sw := max(1, int(float64(ow)*f))
			for _, flip := range []bool{false, true} {
				src := randomRGB(rng, sw, 3)
				want := exactResize(src, sw*3, sw, 3, ow, 2, 0, 0, float64(sw), 3, flip)
				// Rows 8 bytes apart beyond their pixels, and 8 bytes after
				// the last: none of them may be written.
				stride := ow*3 + 8
				got := bytes.Repeat([]byte{0xAA}, 2*stride)
				r.ResizeWindow(got[:stride+ow*3], stride, ow, 2, src, sw*3, sw, 3, 0, 0, float64(sw), 3, flip)
				for y := range 2 {
					row, pad := got[y*stride:y*stride+ow*3], got[y*stride+ow*3:(y+1)*stride]
					if !bytes.Equal(row, want[y*ow*3:(y+1)*ow*3]) {
						t.Fatalf("%d -> %d pixels, flip %v, row %d: %v, want %v", sw, ow, flip, y, row, want[y*ow*3:(y+1)*ow*3])
					}
					if !bytes.Equal(pad, bytes.Repeat([]byte{0xAA}, 8)) {
						t.Fatalf("%d -> %d pixels, flip %v: the bytes after row %d were written: %v", sw, ow, flip, y, pad)
					}
				}
			}
		}
	}
}

func TestResizeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var r Resizer
	for _, c := range []struct{ sw, sh, ow, oh int }{
		{37, 29, 16, 16}, {16, 16, 37, 29}, {50, 10, 20, 30}, {13, 13, 13, 13}, {1, 1, 5, 3}, {64, 64, 7, 9},
	} {
		src := randomRGB(rng, c.sw, c.sh)
		want := Reference(src, c.sw*3, c.sw, c.sh, c.ow, c.oh)
		got := make([]byte, c.ow*c.oh*3)
		r.Resize(got, c.ow*3, c.ow, c.oh, src, c.sw*3, c.sw, c.sh, false)
		for i := range got {
			if d := int(got[i]) - int(want[i]); d < -1 || d > 1 {
				t.Fatalf("%+v: byte %d = %d, reference %d", c, i, got[i], want[i])
			}
		}
		if c.sw == c.ow && c.sh == c.oh && !bytes.Equal(got, src) {
			t.Errorf("%+v: same-size resize is not a copy", c)
		}
	}
}

func randomRGB(rng *rand.Rand, w, h int) []byte {
	b := make([]byte, w*h*3)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// BenchmarkResize times Resizer.ResizeWindow alone on random pixels for
// sizes typical of Apply's RandomResizedCrop to 160×160 (the mean scaled
// crop is about 235×230; crops under 160 pixels enlarge).
func BenchmarkResize(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, c := range []struct {
		name           string
		sw, sh, ow, oh int
	}{
		{"300x300-160x160", 300, 300, 160, 160},
		{"235x230-160x160", 235, 230, 160, 160},
		{"120x130-160x160", 120, 130, 160, 160},
	} {
		b.Run(c.name, func(b *testing.B) {
			src := randomRGB(rng, c.sw, c.sh)
			dst := make([]byte, c.ow*c.oh*3)
			var r Resizer
			for i := 0; b.Loop(); i++ {
				// Vary the window a little, as Apply does, so tables are rebuilt.
				f := float64(i%2) * 0.25
				r.ResizeWindow(dst, c.ow*3, c.ow, c.oh, src, c.sw*3, c.sw, c.sh,
					f, f, float64(c.sw)-f, float64(c.sh)-f, i%2 == 0)
			}
		})
	}
}

// BenchmarkBuild times one axis table of a crop shrunk to 160 pixels: two
// are built for each image.
func BenchmarkBuild(b *testing.B) {
	var t axisTable
	for i := 0; b.Loop(); i++ {
		f := float64(i%7) * 0.25
		t.build(300, f, 235-f, 160)
	}
}

// TestAreaFastMatchesGeneral: build's shortcut for area windows (areaFast)
// gives the tables its general branch gives, bit for bit, for windows on
// whole pixels, on eighths of a pixel (crops decoded at m/8) and anywhere.
func TestAreaFastMatchesGeneral(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	var fast, general axisTable
	defer func() { generalOnly = false }()
	cases := 100000
	if testing.Short() {
		cases = 10000
	}
	for i := range cases {
		srcN, out := 1+rng.IntN(900), 1+rng.IntN(300)
		var x0, span float64
		switch i % 3 {
		case 0:
			x0, span = 0, float64(srcN)
		case 1:
			x0, span = float64(rng.IntN(8*srcN))/8, float64(1+rng.IntN(8*srcN))/8
		default:
			x0, span = rng.Float64()*float64(srcN), rng.Float64()*float64(srcN)
		}
		span = min(span, float64(srcN)-x0)
		if span <= 0 {
			continue
		}
		generalOnly = false
		fast.build(srcN, x0, span, out)
		fast.fix()
		generalOnly = true
		general.build(srcN, x0, span, out)
		general.fix()
		if fast.k != general.k || !slices.Equal(fast.start, general.start) || !slices.Equal(fast.n, general.n) ||
			!slices.Equal(fast.off, general.off) || !slices.Equal(fast.w, general.w) ||
			!slices.Equal(fast.kstart, general.kstart) || !slices.Equal(fast.kw, general.kw) {
			t.Fatalf("srcN %d, %d outputs over [%v, %v+%v): the tables differ", srcN, out, x0, x0, span)
		}
	}
}
