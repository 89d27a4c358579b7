package resize

import (
	"fmt"
	"math"
)

// The write path's area filter: OpenCV's INTER_AREA, float32 arithmetic
// and operation order kept so that written betons hold the pixels the
// reference writer stores. Resizer (resize.go) is the read path's, fixed
// point and vectorized; the two answer to different references and stay
// two filters, in one package.

// AreaScratch holds Area's tables and row buffers between calls, so that
// resizing allocates nothing once they have grown. The zero value is ready;
// it is not safe for concurrent use.
type AreaScratch struct {
	xtab  []areaTab // column weights
	ytab  []areaTab // row weights
	taps  []tap     // column weights, padded per column
	hbuf  []float32 // the output row being summed
	hrows []float32 // two source rows after the horizontal pass
}

// areaTab is one term of a per-axis weight table: destination index d takes
// weight alpha of source index s.
type areaTab struct {
	d, s  int32
	alpha float32
}

// Area shrinks the packed RGB image src (sw×sh) into dst (dw×dh), with
// dw <= sw and dh <= sh, as OpenCV's cv::resize with INTER_AREA does for 8-bit
// images: each output pixel is the mean of the source pixels its box covers,
// partly covered pixels weighted by their coverage.
//
// It follows OpenCV's two code paths and their arithmetic. When both scale
// factors are whole numbers it sums the box in integers; for 2×2 boxes it
// rounds half up as OpenCV's vector code does, otherwise it multiplies by
// 1/area in float32 and rounds half to even. Otherwise it builds OpenCV's
// coverage tables and accumulates a horizontal pass per source row, then the
// vertical pass, in float32 with the same operation order, and rounds half
// to even.
func Area(dst []byte, dw, dh int, src []byte, sw, sh int, s *AreaScratch) error {
	if dw <= 0 || dh <= 0 || dw > sw || dh > sh {
		return fmt.Errorf("area resize from %dx%d to %dx%d: not a reduction to a non-empty size", sw, sh, dw, dh)
	}
	if len(src) < sw*sh*3 || len(dst) < dw*dh*3 {
		return fmt.Errorf("area resize: buffers too small for %dx%d to %dx%d", sw, sh, dw, dh)
	}
	scaleX := 1 / (float64(dw) / float64(sw))
	scaleY := 1 / (float64(dh) / float64(sh))
	ix, iy := int(math.RoundToEven(scaleX)), int(math.RoundToEven(scaleY))
	if math.Abs(scaleX-float64(ix)) < epsilon64 && math.Abs(scaleY-float64(iy)) < epsilon64 {
		if ix == 2 && iy == 2 {
			resizeArea2x2(dst, dw, dh, src, sw)
		} else {
			resizeAreaInt(dst, dw, dh, src, sw, ix, iy)
		}
		return nil
	}
	if s == nil {
		s = new(AreaScratch)
	}
	s.xtab = areaTable(s.xtab[:0], sw, dw, scaleX)
	s.ytab = areaTable(s.ytab[:0], sh, dh, scaleY)
	n := dw * 3
	s.hbuf = grow(s.hbuf, n)
	sum := s.hbuf[:n]
	clear(sum)
	taps, k := padTaps(s.taps[:0], s.xtab, dw)
	s.taps = taps

	// The horizontal pass depends only on the source row. Rows are needed in
	// increasing order, some twice; they are computed two at a time (which
	// gives the processor independent sums to overlap) into rowA and rowB.
	s.hrows = grow(s.hrows, 2*n)
	rowA, rowB := s.hrows[:n], s.hrows[n:2*n]
	have := -2 // rowA holds source row have, rowB row have+1
	prevDy := int(s.ytab[0].d)
	for _, yt := range s.ytab {
		beta, dy, sy := yt.alpha, int(yt.d), int(yt.s)
		if sy != have && sy != have+1 {
			have = sy
			r0 := src[sy*sw*3 : (sy+1)*sw*3]
			r1 := r0
			if sy+1 < sh {
				r1 = src[(sy+1)*sw*3 : (sy+2)*sw*3]
			}
			horizontalPair(rowA, rowB, r0, r1, taps, k)
		}
		buf := rowA
		if sy == have+1 {
			buf = rowB
		}
		buf = buf[:len(sum)]
		if dy != prevDy {
			out := dst[prevDy*n : (prevDy+1)*n]
			out = out[:len(sum)]
			for i, v := range sum {
				out[i] = roundFloat32(v)
				sum[i] = beta * buf[i]
			}
			prevDy = dy
		} else {
			for i, v := range buf {
				sum[i] += float32(beta * v)
			}
		}
	}
	out := dst[prevDy*n : (prevDy+1)*n]
	for i := range out {
		out[i] = roundFloat32(sum[i])
	}
	return nil
}

// tap is one term of an output column: weight a of source column s.
type tap struct {
	s int32 // source byte offset (3 × column)
	a float32
}

// padTaps lays the column table out as k taps per output column, k being the
// most any column has. Columns with fewer get trailing taps of weight 0:
// adding float32(x*0) leaves a sum unchanged, so the results stay OpenCV's.
func padTaps(taps []tap, xtab []areaTab, dw int) ([]tap, int) {
	k, run := 0, 0
	for i, t := range xtab {
		if i > 0 && t.d != xtab[i-1].d {
			run = 0
		}
		run++
		k = max(k, run)
	}
	taps = grow(taps, dw*k)
	for i := range taps {
		taps[i] = tap{}
	}
	j := 0
	for i, t := range xtab {
		if i > 0 && t.d != xtab[i-1].d {
			j = 0
		}
		taps[int(t.d)*k+j] = tap{s: t.s * 3, a: t.alpha}
		// Padding reads an in-range column.
		for p := j + 1; p < k; p++ {
			taps[int(t.d)*k+p].s = t.s * 3
		}
		j++
	}
	return taps, k
}

// horizontalPair applies the column taps to two source rows. Summing into
// locals from zero, tap by tap, gives the same float32 results as OpenCV's
// accumulation into a zeroed buffer.
func horizontalPair(outA, outB []float32, r0, r1 []byte, taps []tap, k int) {
	switch k {
	case 2:
		horizontalPair2(outA, outB, r0, r1, taps)
		return
	case 3:
		horizontalPair3(outA, outB, r0, r1, taps)
		return
	}
	dw := len(taps) / k
	for dx := 0; dx < dw; dx++ {
		var a0, a1, a2, b0, b1, b2 float32
		for _, t := range taps[dx*k : dx*k+k] {
			p := r0[t.s : t.s+3 : t.s+3]
			q := r1[t.s : t.s+3 : t.s+3]
			a0 += float32(u8f[p[0]] * t.a)
			a1 += float32(u8f[p[1]] * t.a)
			a2 += float32(u8f[p[2]] * t.a)
			b0 += float32(u8f[q[0]] * t.a)
			b1 += float32(u8f[q[1]] * t.a)
			b2 += float32(u8f[q[2]] * t.a)
		}
		oa := outA[dx*3 : dx*3+3 : dx*3+3]
		ob := outB[dx*3 : dx*3+3 : dx*3+3]
		oa[0], oa[1], oa[2] = a0, a1, a2
		ob[0], ob[1], ob[2] = b0, b1, b2
	}
}

func horizontalPair2(outA, outB []float32, r0, r1 []byte, taps []tap) {
	dw := len(taps) / 2
	for dx := 0; dx < dw; dx++ {
		t := taps[dx*2 : dx*2+2 : dx*2+2]
		t0, t1 := t[0], t[1]
		p := r0[t0.s : t0.s+3 : t0.s+3]
		q := r1[t0.s : t0.s+3 : t0.s+3]
		p1 := r0[t1.s : t1.s+3 : t1.s+3]
		q1 := r1[t1.s : t1.s+3 : t1.s+3]
		oa := outA[dx*3 : dx*3+3 : dx*3+3]
		ob := outB[dx*3 : dx*3+3 : dx*3+3]
		oa[0] = float32(u8f[p[0]]*t0.a) + float32(u8f[p1[0]]*t1.a)
		oa[1] = float32(u8f[p[1]]*t0.a) + float32(u8f[p1[1]]*t1.a)
		oa[2] = float32(u8f[p[2]]*t0.a) + float32(u8f[p1[2]]*t1.a)
		ob[0] = float32(u8f[q[0]]*t0.a) + float32(u8f[q1[0]]*t1.a)
		ob[1] = float32(u8f[q[1]]*t0.a) + float32(u8f[q1[1]]*t1.a)
		ob[2] = float32(u8f[q[2]]*t0.a) + float32(u8f[q1[2]]*t1.a)
	}
}

func horizontalPair3(outA, outB []float32, r0, r1 []byte, taps []tap) {
	dw := len(taps) / 3
	for dx := 0; dx < dw; dx++ {
		t := taps[dx*3 : dx*3+3 : dx*3+3]
		t0, t1, t2 := t[0], t[1], t[2]
		p0 := r0[t0.s : t0.s+3 : t0.s+3]
		p1 := r0[t1.s : t1.s+3 : t1.s+3]
		p2 := r0[t2.s : t2.s+3 : t2.s+3]
		oa := outA[dx*3 : dx*3+3 : dx*3+3]
		oa[0] = float32(u8f[p0[0]]*t0.a) + float32(u8f[p1[0]]*t1.a) + float32(u8f[p2[0]]*t2.a)
		oa[1] = float32(u8f[p0[1]]*t0.a) + float32(u8f[p1[1]]*t1.a) + float32(u8f[p2[1]]*t2.a)
		oa[2] = float32(u8f[p0[2]]*t0.a) + float32(u8f[p1[2]]*t1.a) + float32(u8f[p2[2]]*t2.a)
		q0 := r1[t0.s : t0.s+3 : t0.s+3]
		q1 := r1[t1.s : t1.s+3 : t1.s+3]
		q2 := r1[t2.s : t2.s+3 : t2.s+3]
		ob := outB[dx*3 : dx*3+3 : dx*3+3]
		ob[0] = float32(u8f[q0[0]]*t0.a) + float32(u8f[q1[0]]*t1.a) + float32(u8f[q2[0]]*t2.a)
		ob[1] = float32(u8f[q0[1]]*t0.a) + float32(u8f[q1[1]]*t1.a) + float32(u8f[q2[1]]*t2.a)
		ob[2] = float32(u8f[q0[2]]*t0.a) + float32(u8f[q1[2]]*t1.a) + float32(u8f[q2[2]]*t2.a)
	}
}

// u8f converts a byte to float32 by table.
var u8f = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i)
	}
	return t
}()

// epsilon64 is C's DBL_EPSILON.
const epsilon64 = 2.220446049250313e-16

// areaTable is OpenCV's computeResizeAreaTab for one axis.
func areaTable(tab []areaTab, ssize, dsize int, scale float64) []areaTab {
	for dx := 0; dx < dsize; dx++ {
		fsx1 := float64(dx) * scale
		fsx2 := fsx1 + scale
		cellWidth := min(scale, float64(ssize)-fsx1)
		sx1, sx2 := int(math.Ceil(fsx1)), int(math.Floor(fsx2))
		sx2 = min(sx2, ssize-1)
		sx1 = min(sx1, sx2)
		if float64(sx1)-fsx1 > 1e-3 {
			tab = append(tab, areaTab{int32(dx), int32(sx1 - 1), float32((float64(sx1) - fsx1) / cellWidth)})
		}
		for sx := sx1; sx < sx2; sx++ {
			tab = append(tab, areaTab{int32(dx), int32(sx), float32(1.0 / cellWidth)})
		}
		if fsx2-float64(sx2) > 1e-3 {
			tab = append(tab, areaTab{int32(dx), int32(sx2), float32(min(min(fsx2-float64(sx2), 1), cellWidth) / cellWidth)})
		}
	}
	return tab
}

// roundFloat32 is OpenCV's saturate_cast<uchar>(float): round half to even,
// then clamp. Adding and subtracting 1.5×2²³ rounds in float32 arithmetic,
// to nearest even, for any |f| < 2²²; sums here never come near that.
func roundFloat32(f float32) byte {
	const magic = 0x1.8p23
	r := int32(float32(f+magic) - magic)
	switch {
	case r <= 0:
		return 0
	case r >= 255:
		return 255
	}
	return byte(r)
}

// resizeArea2x2 halves both sides: (a+b+c+d+2)>>2 per channel.
func resizeArea2x2(dst []byte, dw, dh int, src []byte, sw int) {
	stride := sw * 3
	for y := 0; y < dh; y++ {
		r0 := src[2*y*stride : 2*y*stride+stride]
		r1 := src[(2*y+1)*stride : (2*y+1)*stride+stride]
		out := dst[y*dw*3 : (y+1)*dw*3]
		for x := 0; x < dw; x++ {
			i, o := x*6, x*3
			a := r0[i : i+6 : i+6]
			b := r1[i : i+6 : i+6]
			d := out[o : o+3 : o+3]
			d[0] = byte((uint(a[0]) + uint(a[3]) + uint(b[0]) + uint(b[3]) + 2) >> 2)
			d[1] = byte((uint(a[1]) + uint(a[4]) + uint(b[1]) + uint(b[4]) + 2) >> 2)
			d[2] = byte((uint(a[2]) + uint(a[5]) + uint(b[2]) + uint(b[5]) + 2) >> 2)
		}
	}
}

// resizeAreaInt shrinks by whole factors ix, iy: the integer box sum times
// float32(1/area), rounded half to even.
func resizeAreaInt(dst []byte, dw, dh int, src []byte, sw, ix, iy int) {
	stride := sw * 3
	scale := 1 / float32(ix*iy)
	for y := 0; y < dh; y++ {
		out := dst[y*dw*3 : (y+1)*dw*3]
		for x := 0; x < dw; x++ {
			for c := 0; c < 3; c++ {
				var sum int
				for ky := 0; ky < iy; ky++ {
					row := src[(y*iy+ky)*stride:]
					for kx := 0; kx < ix; kx++ {
						sum += int(row[(x*ix+kx)*3+c])
					}
				}
				out[x*3+c] = roundFloat32(float32(float32(sum) * scale))
			}
		}
	}
}

// grow returns b resized to n elements, reusing its storage when it can.
func grow[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]T, n, n+n/4)
}
