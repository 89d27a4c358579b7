package decode

import "math"

// Resizer resizes packed RGB images. Along each axis it averages areas when
// shrinking (each output pixel is the coverage-weighted mean of the source
// pixels under it, like cv2.INTER_AREA and PIL's box filter) and
// interpolates bilinearly when enlarging (pixel centers at half-integers,
// like align_corners=False); an axis whose size does not change is copied.
// Arithmetic is fixed point with 14-bit weights.
//
// A Resizer keeps its tables and row buffer between calls, so resizing
// allocates nothing once they have grown to the largest size seen. It is
// not safe for concurrent use.
type Resizer struct {
	xt, yt axisTable
	acc    []int32 // one vertically filtered source row, 7 fractional bits
}

// axisTable maps each output index to a run of source indices and weights.
type axisTable struct {
	start []int32 // first source index of output i
	n     []int32 // number of taps of output i
	off   []int32 // offset of output i's weights in w
	w     []int32 // weights, summing to 1<<wBits per output
}

const (
	wBits   = 14
	accBits = 7
)

// build fills t for out outputs over the source window [x0, x0+span) of an
// axis with srcN pixels (the window may be fractional and is clamped to the
// axis).
func (t *axisTable) build(srcN int, x0, span float64, out int) {
	t.start, t.n, t.off, t.w = t.start[:0], t.n[:0], t.off[:0], t.w[:0]
	s := span / float64(out)
	var fw [64]float64
	for i := 0; i < out; i++ {
		var first, cnt int
		taps := fw[:0]
		if s > 1 {
			// Area: overlap of [a, b) with each source pixel.
			a := x0 + float64(i)*s
			b := a + s
			a, b = max(a, 0), min(b, float64(srcN))
			first = int(math.Floor(a))
			last := int(math.Ceil(b)) - 1
			last = max(first, min(last, srcN-1))
			var extra []float64
			for j := first; j <= last; j++ {
				ov := min(b, float64(j+1)) - max(a, float64(j))
				if ov < 0 {
					ov = 0
				}
				if len(taps) < cap(taps) {
					taps = append(taps, ov)
				} else {
					extra = append(extra, ov)
				}
			}
			if extra != nil {
				taps = append(append([]float64(nil), taps...), extra...)
			}
			cnt = len(taps)
		} else {
			// Bilinear, edges clamped.
			c := x0 + (float64(i)+0.5)*s - 0.5
			c = min(max(c, 0), float64(srcN-1))
			first = int(math.Floor(c))
			f := c - float64(first)
			if first >= srcN-1 || f < 1.0/(1<<wBits) {
				taps = append(taps, 1)
			} else {
				taps = append(taps, 1-f, f)
			}
			cnt = len(taps)
		}
		var sum float64
		for _, v := range taps {
			sum += v
		}
		off := len(t.w)
		var isum int32
		best := 0
		for k, v := range taps {
			q := int32(math.Round(v / sum * (1 << wBits)))
			t.w = append(t.w, q)
			isum += q
			if q > t.w[off+best] {
				best = k
			}
		}
		t.w[off+best] += 1<<wBits - isum
		t.start = append(t.start, int32(first))
		t.n = append(t.n, int32(cnt))
		t.off = append(t.off, int32(off))
	}
}

// Resize scales the srcW×srcH RGB image src (rows srcStride bytes apart) to
// outW×outH into dst (rows dstStride bytes apart), mirroring it left to
// right while writing when flip is set.
func (r *Resizer) Resize(dst []byte, dstStride, outW, outH int, src []byte, srcStride, srcW, srcH int, flip bool) {
	r.ResizeWindow(dst, dstStride, outW, outH, src, srcStride, srcW, srcH,
		0, 0, float64(srcW), float64(srcH), flip)
}

// ResizeWindow is Resize for the source window of size fw×fh at (fx, fy),
// in source pixels, which need not be whole: it lets a region decoded at a
// reduced DCT scale, rounded outward, map exactly onto the requested crop.
func (r *Resizer) ResizeWindow(dst []byte, dstStride, outW, outH int, src []byte, srcStride, srcW, srcH int, fx, fy, fw, fh float64, flip bool) {
	if outW <= 0 || outH <= 0 || srcW <= 0 || srcH <= 0 {
		return
	}
	_ = dst[(outH-1)*dstStride+outW*3-1]
	_ = src[(srcH-1)*srcStride+srcW*3-1]
	r.xt.build(srcW, fx, fw, outW)
	r.yt.build(srcH, fy, fh, outH)

	// Source columns the horizontal taps touch.
	c0 := int(r.xt.start[0])
	c1 := int(r.xt.start[outW-1] + r.xt.n[outW-1])
	for i := 0; i < outW; i++ {
		c0 = min(c0, int(r.xt.start[i]))
		c1 = max(c1, int(r.xt.start[i]+r.xt.n[i]))
	}
	if cap(r.acc) < srcW*3 {
		r.acc = make([]int32, srcW*3)
	}
	acc := r.acc[:srcW*3]
	const half = 1 << (wBits - accBits - 1)
	const outShift = wBits + accBits
	for oy := 0; oy < outH; oy++ {
		// Vertical pass over the needed columns.
		ys, yn, yo := int(r.yt.start[oy]), int(r.yt.n[oy]), int(r.yt.off[oy])
		a := acc[c0*3 : c1*3]
		row := src[ys*srcStride+c0*3 : ys*srcStride+c1*3]
		wt := r.yt.w[yo]
		for k := range a {
			a[k] = int32(row[k]) * wt
		}
		for t := 1; t < yn; t++ {
			row = src[(ys+t)*srcStride+c0*3 : (ys+t)*srcStride+c1*3]
			wt = r.yt.w[yo+t]
			row = row[:len(a)]
			for k := range a {
				a[k] += int32(row[k]) * wt
			}
		}
		for k := range a {
			a[k] = (a[k] + half) >> (wBits - accBits)
		}
		// Horizontal pass, written mirrored when flipping.
		drow := dst[oy*dstStride : oy*dstStride+outW*3]
		for ox := 0; ox < outW; ox++ {
			xs, xn, xo := int(r.xt.start[ox]), int(r.xt.n[ox]), int(r.xt.off[ox])
			var s0, s1, s2 int32 = 1 << (outShift - 1), 1 << (outShift - 1), 1 << (outShift - 1)
			ws := r.xt.w[xo : xo+xn]
			ss := acc[xs*3 : (xs+xn)*3]
			for t, w := range ws {
				s0 += ss[t*3] * w
				s1 += ss[t*3+1] * w
				s2 += ss[t*3+2] * w
			}
			d := ox * 3
			if flip {
				d = (outW - 1 - ox) * 3
			}
			drow[d] = clamp8(s0 >> outShift)
			drow[d+1] = clamp8(s1 >> outShift)
			drow[d+2] = clamp8(s2 >> outShift)
		}
	}
}

func clamp8(v int32) byte {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return byte(v)
}
