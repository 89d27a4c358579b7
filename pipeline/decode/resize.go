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
	taps   []hTaps // horizontal taps of each output column, in write order
}

// hTaps is one output column of the horizontal pass: the element offset in
// the filtered row of its first tap and up to four weights.
type hTaps struct {
	x int32
	w [4]int32
}

// axisTable maps each output index to a run of source indices and weights.
type axisTable struct {
	start []int32 // first source index of output i
	n     []int32 // number of taps of output i
	off   []int32 // offset of output i's weights in w
	w     []int32 // weights, summing to 1<<wBits per output

	// The same filter with every output given k taps (the most any output
	// has), zero-weighted where it has fewer, so that the inner loops run
	// over a fixed number of taps: output i reads source indices
	// kstart[i] .. kstart[i]+k-1 with weights kw[i*k : i*k+k]. Runs that
	// would pass the end of the axis are moved back to end on it.
	k      int
	kstart []int32
	kw     []int32

	// The arguments the tables were built for; build returns at once when
	// they repeat.
	key   tableKey
	valid bool
}

type tableKey struct {
	srcN, out int
	x0, span  float64
}

const (
	wBits   = 14
	accBits = 7
)

// build fills t for out outputs over the source window [x0, x0+span) of an
// axis with srcN pixels (the window may be fractional and is clamped to the
// axis).
func (t *axisTable) build(srcN int, x0, span float64, out int) {
	key := tableKey{srcN, out, x0, span}
	if t.valid && t.key == key {
		return
	}
	t.valid = false
	t.start, t.n, t.off, t.w = t.start[:0], t.n[:0], t.off[:0], t.w[:0]
	s := span / float64(out)
	var fw [64]float64
	k := 1
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
		k = max(k, cnt)
	}

	// Fixed-width form. The taps of one output are distinct source indices,
	// so k <= srcN and a run moved back to end on the axis stays inside it.
	t.k = k
	t.kstart = t.kstart[:0]
	if cap(t.kw) < out*k {
		t.kw = make([]int32, out*k)
	}
	t.kw = t.kw[:out*k]
	clear(t.kw)
	for i := 0; i < out; i++ {
		st, n, off := int(t.start[i]), int(t.n[i]), int(t.off[i])
		ks := min(st, srcN-k)
		copy(t.kw[i*k+st-ks:], t.w[off:off+n])
		t.kstart = append(t.kstart, int32(ks))
	}
	t.key, t.valid = key, true
}

// Resize scales the srcW×srcH RGB image src (rows srcStride bytes apart) to
// outW×outH into dst (rows dstStride bytes apart), mirroring it left to
// right while writing when flip is set.
func (r *Resizer) Resize(dst []byte, dstStride, outW, outH int, src []byte, srcStride, srcW, srcH int, flip bool) {
	r.ResizeWindow(dst, dstStride, outW, outH, src, srcStride, srcW, srcH,
		0, 0, float64(srcW), float64(srcH), flip)
}

const (
	// vHalf rounds the vertical pass to accBits fractional bits.
	vHalf  = 1 << (wBits - accBits - 1)
	vShift = wBits - accBits
	// hShift and hHalf take the horizontal pass back to whole values.
	hShift = wBits + accBits
	hHalf  = 1 << (hShift - 1)
)

// ResizeWindow is Resize for the source window of size fw×fh at (fx, fy),
// in source pixels, which need not be whole: it lets a region decoded at a
// reduced DCT scale, rounded outward, map exactly onto the requested crop.
//
// Each output row is made in two passes: the source rows under it are
// filtered vertically into a row of int32 with accBits fractional bits,
// over the source columns the output row needs only, and that row is
// filtered horizontally into dst. All weights are non-negative and sum to
// 1<<wBits, so no intermediate value exceeds 255<<accBits and no result
// 255.
func (r *Resizer) ResizeWindow(dst []byte, dstStride, outW, outH int, src []byte, srcStride, srcW, srcH int, fx, fy, fw, fh float64, flip bool) {
	if outW <= 0 || outH <= 0 || srcW <= 0 || srcH <= 0 {
		return
	}
	_ = dst[(outH-1)*dstStride+outW*3-1]
	_ = src[(srcH-1)*srcStride+srcW*3-1]
	xt, yt := &r.xt, &r.yt
	xt.build(srcW, fx, fw, outW)
	yt.build(srcH, fy, fh, outH)

	// Source columns [c0, c1) the horizontal taps touch; kstart is
	// non-decreasing.
	kx := xt.k
	c0 := int(xt.kstart[0])
	c1 := int(xt.kstart[outW-1]) + kx
	width := (c1 - c0) * 3
	if cap(r.acc) < width {
		r.acc = make([]int32, width)
	}
	acc := r.acc[:width]
	// Horizontal taps in the order the output is written: mirrored when
	// flipping.
	var taps []hTaps
	if kx <= 4 {
		taps = r.taps[:0]
		for i := range outW {
			if flip {
				i = outW - 1 - i
			}
			t := hTaps{x: (xt.kstart[i] - int32(c0)) * 3}
			copy(t.w[:], xt.kw[i*kx:i*kx+kx])
			taps = append(taps, t)
		}
		r.taps = taps
	}

	for oy := 0; oy < outH; oy++ {
		ys, yn, yo := int(yt.start[oy]), int(yt.n[oy]), int(yt.off[oy])
		wy := yt.w[yo : yo+yn]
		o := ys*srcStride + c0*3
		switch yn {
		case 1:
			vpass1(acc, src[o:o+width])
		case 2:
			vpass2(acc, src[o:o+width], src[o+srcStride:o+srcStride+width], wy[0], wy[1])
		case 3:
			vpass3(acc, src[o:o+width], src[o+srcStride:o+srcStride+width],
				src[o+2*srcStride:o+2*srcStride+width], wy[0], wy[1], wy[2])
		default:
			vpassN(acc, src[o:], srcStride, wy)
		}
		drow := dst[oy*dstStride : oy*dstStride+outW*3]
		switch kx {
		case 1:
			hpass1(drow, acc, taps)
		case 2:
			hpass2(drow, acc, taps)
		case 3:
			hpass3(drow, acc, taps)
		case 4:
			hpass4(drow, acc, taps)
		default:
			hpassN(drow, acc, xt, c0, flip)
		}
	}
}

// vpass1 copies one source row into acc.
func vpass1(acc []int32, r0 []byte) {
	acc = acc[:len(r0)]
	for i, v := range r0 {
		acc[i] = int32(v) << accBits
	}
}

func vpass2(acc []int32, r0, r1 []byte, w0, w1 int32) {
	acc = acc[:len(r0)]
	r1 = r1[:len(r0)]
	for i, v := range r0 {
		acc[i] = (int32(v)*w0 + int32(r1[i])*w1 + vHalf) >> vShift
	}
}

func vpass3(acc []int32, r0, r1, r2 []byte, w0, w1, w2 int32) {
	acc = acc[:len(r0)]
	r1 = r1[:len(r0)]
	r2 = r2[:len(r0)]
	for i, v := range r0 {
		acc[i] = (int32(v)*w0 + int32(r1[i])*w1 + int32(r2[i])*w2 + vHalf) >> vShift
	}
}

// vpassN filters len(w) rows of src, srcStride bytes apart, into acc.
func vpassN(acc []int32, src []byte, srcStride int, w []int32) {
	row := src[:len(acc)]
	w0 := w[0]
	for i, v := range row {
		acc[i] = int32(v)*w0 + vHalf
	}
	for t := 1; t < len(w); t++ {
		row = src[t*srcStride : t*srcStride+len(acc)]
		wt := w[t]
		for i, v := range row {
			acc[i] += int32(v) * wt
		}
	}
	for i := range acc {
		acc[i] >>= vShift
	}
}

// The horizontal passes write len(taps) pixels to drow from the filtered
// row acc; hpassK reads K taps per pixel. Results need no clamping: see
// ResizeWindow.

func hpass1(drow []byte, acc []int32, taps []hTaps) {
	drow = drow[:3*len(taps)]
	for i := range taps {
		x := taps[i].x
		p := (*[3]int32)(acc[x:])
		q := (*[3]byte)(drow[3*i:])
		q[0] = byte(p[0] >> accBits)
		q[1] = byte(p[1] >> accBits)
		q[2] = byte(p[2] >> accBits)
	}
}

func hpass2(drow []byte, acc []int32, taps []hTaps) {
	drow = drow[:3*len(taps)]
	for i := range taps {
		t := &taps[i]
		p := (*[6]int32)(acc[t.x:])
		w0, w1 := t.w[0], t.w[1]
		q := (*[3]byte)(drow[3*i:])
		q[0] = byte((p[0]*w0 + p[3]*w1 + hHalf) >> hShift)
		q[1] = byte((p[1]*w0 + p[4]*w1 + hHalf) >> hShift)
		q[2] = byte((p[2]*w0 + p[5]*w1 + hHalf) >> hShift)
	}
}

func hpass3(drow []byte, acc []int32, taps []hTaps) {
	drow = drow[:3*len(taps)]
	for i := range taps {
		t := &taps[i]
		p := (*[9]int32)(acc[t.x:])
		w0, w1, w2 := t.w[0], t.w[1], t.w[2]
		q := (*[3]byte)(drow[3*i:])
		q[0] = byte((p[0]*w0 + p[3]*w1 + p[6]*w2 + hHalf) >> hShift)
		q[1] = byte((p[1]*w0 + p[4]*w1 + p[7]*w2 + hHalf) >> hShift)
		q[2] = byte((p[2]*w0 + p[5]*w1 + p[8]*w2 + hHalf) >> hShift)
	}
}

func hpass4(drow []byte, acc []int32, taps []hTaps) {
	drow = drow[:3*len(taps)]
	for i := range taps {
		t := &taps[i]
		p := (*[12]int32)(acc[t.x:])
		w0, w1, w2, w3 := t.w[0], t.w[1], t.w[2], t.w[3]
		q := (*[3]byte)(drow[3*i:])
		q[0] = byte((p[0]*w0 + p[3]*w1 + p[6]*w2 + p[9]*w3 + hHalf) >> hShift)
		q[1] = byte((p[1]*w0 + p[4]*w1 + p[7]*w2 + p[10]*w3 + hHalf) >> hShift)
		q[2] = byte((p[2]*w0 + p[5]*w1 + p[8]*w2 + p[11]*w3 + hHalf) >> hShift)
	}
}

// hpassN is the horizontal pass for any number of taps, from the table xt
// over source columns from c0.
func hpassN(drow []byte, acc []int32, xt *axisTable, c0 int, flip bool) {
	k := xt.k
	outW := len(drow) / 3
	for ox := range outW {
		p := acc[(int(xt.kstart[ox])-c0)*3:][:3*k]
		w := xt.kw[ox*k : ox*k+k]
		var s0, s1, s2 int32 = hHalf, hHalf, hHalf
		for t, wt := range w {
			s := p[3*t : 3*t+3]
			s0 += s[0] * wt
			s1 += s[1] * wt
			s2 += s[2] * wt
		}
		d := ox * 3
		if flip {
			d = (outW - 1 - ox) * 3
		}
		q := (*[3]byte)(drow[d:])
		q[0], q[1], q[2] = byte(s0>>hShift), byte(s1>>hShift), byte(s2>>hShift)
	}
}
