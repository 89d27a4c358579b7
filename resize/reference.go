package resize

import "math"

// Reference is what Resizer computes, in float64 and by definition: per
// axis, area averaging when shrinking, bilinear (half-pixel centers,
// clamped) otherwise, rounded to the nearest byte. It is slow (every output
// sums over every source pixel) and serves as the reference of tests.
func Reference(src []byte, stride, sw, sh, ow, oh int) []byte {
	wts := func(n, out int) [][]float64 {
		s := float64(n) / float64(out)
		m := make([][]float64, out)
		for i := range m {
			m[i] = make([]float64, n)
			if s > 1 {
				a, b := float64(i)*s, float64(i+1)*s
				for j := 0; j < n; j++ {
					if ov := math.Min(b, float64(j+1)) - math.Max(a, float64(j)); ov > 0 {
						m[i][j] = ov / s
					}
				}
			} else {
				c := math.Min(math.Max((float64(i)+0.5)*s-0.5, 0), float64(n-1))
				j := int(c)
				f := c - float64(j)
				m[i][j] += 1 - f
				if f > 0 {
					m[i][j+1] += f
				}
			}
		}
		return m
	}
	wx, wy := wts(sw, ow), wts(sh, oh)
	// span is the range of an output's nonzero weights: the terms outside
	// it add nothing.
	span := func(w []float64) (lo, hi int) {
		for lo < len(w) && w[lo] == 0 {
			lo++
		}
		for hi = len(w); hi > lo && w[hi-1] == 0; hi-- {
		}
		return lo, hi
	}
	out := make([]byte, ow*oh*3)
	for oy := 0; oy < oh; oy++ {
		y0, y1 := span(wy[oy])
		for ox := 0; ox < ow; ox++ {
			x0, x1 := span(wx[ox])
			for c := 0; c < 3; c++ {
				var s float64
				for y := y0; y < y1; y++ {
					for x := x0; x < x1; x++ {
						s += wy[oy][y] * wx[ox][x] * float64(src[y*stride+x*3+c])
					}
				}
				out[(oy*ow+ox)*3+c] = byte(math.Round(s))
			}
		}
	}
	return out
}
