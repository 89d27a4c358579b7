package resize

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestAreaResizeConstant(t *testing.T) {
	s := new(AreaScratch)
	for _, c := range []struct{ sw, sh, dw, dh int }{
		{10, 10, 3, 7}, {553, 445, 320, 257}, {100, 1, 33, 1}, {7, 5, 7, 5}, {9, 9, 3, 3}, {8, 6, 4, 3}, {13, 11, 1, 1},
	} {
		src := bytes.Repeat([]byte{17, 200, 255}, c.sw*c.sh)
		dst := make([]byte, c.dw*c.dh*3)
		if err := Area(dst, c.dw, c.dh, src, c.sw, c.sh, s); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst, bytes.Repeat([]byte{17, 200, 255}, c.dw*c.dh)) {
			t.Errorf("%v: constant image not constant: %v", c, dst[:min(len(dst), 12)])
		}
	}
}

func TestAreaResizeHalf(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	const sw, sh = 34, 22
	src := make([]byte, sw*sh*3)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	dst := make([]byte, sw/2*sh/2*3)
	if err := Area(dst, sw/2, sh/2, src, sw, sh, nil); err != nil {
		t.Fatal(err)
	}
	for y := 0; y < sh/2; y++ {
		for x := 0; x < sw/2; x++ {
			for c := 0; c < 3; c++ {
				at := func(xx, yy int) int { return int(src[(yy*sw+xx)*3+c]) }
				sum := at(2*x, 2*y) + at(2*x+1, 2*y) + at(2*x, 2*y+1) + at(2*x+1, 2*y+1)
				want := byte((sum + 2) / 4) // the mean, halves rounded up
				if got := dst[(y*sw/2+x)*3+c]; got != want {
					t.Fatalf("(%d,%d,%d): got %d, want %d", x, y, c, got, want)
				}
			}
		}
	}
}

// TestAreaResizeVsDefinition compares with a direct float64 computation of
// coverage-weighted means; OpenCV's float32 arithmetic may differ by one.
func TestAreaResizeVsDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	s := new(AreaScratch)
	for _, c := range []struct{ sw, sh, dw, dh int }{
		{10, 10, 3, 7}, {553, 445, 96, 77}, {31, 17, 30, 16}, {9, 6, 3, 2}, {12, 12, 5, 5}, {100, 40, 37, 13},
	} {
		src := make([]byte, c.sw*c.sh*3)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		dst := make([]byte, c.dw*c.dh*3)
		if err := Area(dst, c.dw, c.dh, src, c.sw, c.sh, s); err != nil {
			t.Fatal(err)
		}
		sx, sy := float64(c.sw)/float64(c.dw), float64(c.sh)/float64(c.dh)
		cover := func(i int, lo, hi float64) float64 {
			return math.Max(0, math.Min(float64(i+1), hi)-math.Max(float64(i), lo))
		}
		for y := 0; y < c.dh; y++ {
			for x := 0; x < c.dw; x++ {
				for ch := 0; ch < 3; ch++ {
					var sum, area float64
					for yy := int(float64(y) * sy); yy < c.sh && float64(yy) < float64(y+1)*sy; yy++ {
						wy := cover(yy, float64(y)*sy, float64(y+1)*sy)
						for xx := int(float64(x) * sx); xx < c.sw && float64(xx) < float64(x+1)*sx; xx++ {
							wgt := wy * cover(xx, float64(x)*sx, float64(x+1)*sx)
							sum += wgt * float64(src[(yy*c.sw+xx)*3+ch])
							area += wgt
						}
					}
					want := math.Round(sum / area)
					if got := float64(dst[(y*c.dw+x)*3+ch]); math.Abs(got-want) > 1 {
						t.Fatalf("%v (%d,%d,%d): got %v, want %v", c, x, y, ch, got, want)
					}
				}
			}
		}
	}
	if err := Area(make([]byte, 30), 5, 2, make([]byte, 12), 2, 2, nil); err == nil {
		t.Error("enlarging: no error")
	}
}

// BenchmarkResizeArea shrinks a 553×445 image (a fixture's size) to the
// sizes the reference fixtures use; MB/s is source pixels.
func BenchmarkResizeArea(b *testing.B) {
	const sw, sh = 553, 445
	src := make([]byte, sw*sh*3)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for _, size := range [][2]int{{320, 257}, {96, 77}} {
		dw, dh := size[0], size[1]
		b.Run(fmt.Sprintf("to%dx%d", dw, dh), func(b *testing.B) {
			dst := make([]byte, dw*dh*3)
			s := new(AreaScratch)
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Area(dst, dw, dh, src, sw, sh, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("half", func(b *testing.B) {
		dst := make([]byte, sw/2*(sh/2)*3)
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if err := Area(dst, sw/2, sh/2, src[:sw/2*2*(sh/2)*2*3], sw/2*2, sh/2*2, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
