package resize

/*
#cgo CFLAGS: -O3 -Wno-psabi
#include "resize.h"
*/
import "C"

import (
	"math"
	"unsafe"
)

// Resizer resizes packed RGB images. Along each axis it averages areas when
// shrinking (each output pixel is the coverage-weighted mean of the source
// pixels under it, like cv2.INTER_AREA and PIL's box filter) and
// interpolates bilinearly when enlarging (pixel centers at half-integers,
// like align_corners=False); an axis whose size does not change is copied.
// Arithmetic is fixed point with 14-bit weights; the passes over the
// pixels are in C (resize.c), where the compiler vectorizes them.
//
// A Resizer keeps its tables and row buffer between calls, so resizing
// allocates nothing once they have grown to the largest size seen. It is
// not safe for concurrent use.
type Resizer struct {
	xt, yt axisTable
	acc    []int16 // one vertically filtered source row, 7 fractional bits
	// The horizontal taps of each output column, in write order: the
	// element offset of the first tap in acc, and its weights in pairs
	// (the last weight zero when xt.k is odd), each pair (w, w') as the
	// pattern w w' w w' w w' 0 0 that resize.c multiplies pixels by.
	hx []int32
	hw []int16
	// Scratch of resize.c's AVX-512 pass (hgroups).
	gbase []int32
	gtab  []int16
}

// axisTable maps each output index to a run of source indices and weights.
type axisTable struct {
	start []int32 // first source index of output i
	n     []int32 // number of taps of output i
	off   []int32 // offset of output i's weights in w
	w     []int32 // weights, summing to 1<<wBits per output

	// The same filter with every output given k taps (the most any output
	// has), zero-weighted where it has fewer, so that the inner loops run
	// over a fixed number of taps (kstart and kw, filled by fix): output i
	// reads source indices kstart[i] .. kstart[i]+k-1 with weights
	// kw[i*k : i*k+k]. Runs that would pass the end of the axis are moved
	// back to end on it.
	k      int
	kstart []int32
	kw     []int32

	// The arguments the tables were built for; build returns at once when
	// they repeat; fixed, whether kstart and kw are filled for them.
	key          tableKey
	valid, fixed bool

	taps []float64 // one output's overlaps, scratch of build
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
// axis). It runs for every crop, so its loops work on local slices.
func (t *axisTable) build(srcN int, x0, span float64, out int) {
	key := tableKey{srcN, out, x0, span}
	if t.valid && t.key == key {
		return
	}
	t.valid = false
	start, ns, offs := grow(t.start, out), grow(t.n, out), grow(t.off, out)
	w, taps := t.w[:0], t.taps[:0]
	s := span / float64(out)
	end := float64(srcN)
	k := 1
	for i := range out {
		var first int
		taps = taps[:0]
		if s > 1 && !generalOnly && areaFast(x0+float64(i)*s, s, end, srcN, &w, &start[i], &ns[i], &offs[i]) {
			k = max(k, int(ns[i]))
			continue
		}
		if s > 1 {
			// Area: overlap of [a, b) with each source pixel.
			a := x0 + float64(i)*s
			b := a + s
			if a < 0 {
				a = 0
			}
			if b > end {
				b = end
			}
			// a >= 0 and b > a: conversion truncates to the floor.
			first = int(a)
			last := int(b)
			if float64(last) == b {
				last-- // b whole: the pixel from b on is not covered
			}
			last = max(first, min(last, srcN-1))
			for j := first; j <= last; j++ {
				lo, hi := float64(j), float64(j+1)
				if a > lo {
					lo = a
				}
				if b < hi {
					hi = b
				}
				taps = append(taps, max(hi-lo, 0))
			}
		} else {
			// Bilinear, edges clamped.
			c := x0 + (float64(i)+0.5)*s - 0.5
			c = min(max(c, 0), end-1)
			first = int(math.Floor(c))
			f := c - float64(first)
			if first >= srcN-1 || f < 1.0/(1<<wBits) {
				taps = append(taps, 1)
			} else {
				taps = append(taps, 1-f, f)
			}
		}
		var sum float64
		for _, v := range taps {
			sum += v
		}
		off := len(w)
		var isum, top int32
		best := off
		inv := (1 << wBits) / sum
		for _, v := range taps {
			q := roundUp(v * inv)
			if q > top {
				best, top = len(w), q
			}
			w = append(w, q)
			isum += q
		}
		w[best] += 1<<wBits - isum
		start[i], ns[i], offs[i] = int32(first), int32(len(taps)), int32(off)
		k = max(k, len(taps))
	}
	t.start, t.n, t.off, t.w, t.taps = start, ns, offs, w, taps
	t.k = k
	t.key, t.valid, t.fixed = key, true, false
}

// fix fills t's fixed-width form (kstart, kw) from the table build made
// last, once: the horizontal pass needs it, the vertical one does not.
func (t *axisTable) fix() {
	if t.fixed {
		return
	}
	// The taps of one output are distinct source indices, so k <= srcN and
	// a run moved back to end on the axis stays inside it.
	k, out, srcN := t.k, t.key.out, t.key.srcN
	start, offs, ns, w := t.start, t.off, t.n, t.w
	kstart, kw := grow(t.kstart, out), grow(t.kw, out*k)
	clear(kw)
	for i := range out {
		st, off := int(start[i]), int(offs[i])
		ks := min(st, srcN-k)
		for j, v := range w[off : off+int(ns[i])] { // a few taps: no memmove
			kw[i*k+st-ks+j] = v
		}
		kstart[i] = int32(ks)
	}
	t.kstart, t.kw = kstart, kw
	t.fixed = true
}

// generalOnly turns areaFast off, for tests that compare it with the
// general branch.
var generalOnly bool

// areaFast is build's area branch for output window [a, a+s) (s > 1) when
// it covers two or more source pixels inside the axis, which is nearly
// always: the first and last taps are partial, those between them whole,
// with the weights the general branch gives, summed in the same order. It
// appends the weights to *w, sets the output's first source index, tap
// count and weight offset, and returns false, doing nothing, for any other
// window.
func areaFast(a, s, end float64, srcN int, w *[]int32, start, n, off *int32) bool {
	b := a + s
	if a < 0 || b > end {
		return false
	}
	first := int(a)
	last := int(b)
	if float64(last) == b {
		last--
	}
	if last <= first || last > srcN-1 {
		return false
	}
	// Overlaps: [a, first+1), then whole pixels, then [last, b); none is
	// negative or -0.
	t0 := min(b, float64(first+1)) - a
	tl := b - float64(last)
	mid := last - first - 1
	sum := t0
	for range mid {
		sum++
	}
	sum += tl
	inv := (1 << wBits) / sum
	q0, qm, ql := roundUp(t0*inv), roundUp(inv), roundUp(tl*inv)
	ws := *w
	o := len(ws)
	// The first largest weight takes what rounding left over.
	best, top := o, q0
	ws = append(ws, q0)
	isum := q0
	if mid > 0 && qm > top {
		best, top = o+1, qm
	}
	for range mid {
		ws = append(ws, qm)
		isum += qm
	}
	if ql > top {
		best = len(ws)
	}
	ws = append(ws, ql)
	isum += ql
	ws[best] += 1<<wBits - isum
	*w = ws
	*start, *n, *off = int32(first), int32(last-first+1), int32(o)
	return true
}

// roundUp rounds a weight v in [0, 1<<wBits] to the nearest whole number,
// halves up, in one addition and one conversion: math.Round's result but
// for 0.49999999999999994, the double just below a half, which v+0.5
// rounds up to 1.
func roundUp(v float64) int32 {
	return int32(v + 0.5)
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
	// The C passes do no bounds checks: these two, and the tables, which
	// stay inside the srcW×srcH image by construction, stand for them.
	_ = dst[(outH-1)*dstStride+outW*3-1]
	_ = src[(srcH-1)*srcStride+srcW*3-1]
	if srcW*3 > srcStride || outW*3 > dstStride || max(srcStride*srcH, dstStride*outH) > maxCInt {
		panic("resize: ResizeWindow: bad stride or size")
	}
	xt, yt := &r.xt, &r.yt
	xt.build(srcW, fx, fw, outW)
	xt.fix()
	yt.build(srcH, fy, fh, outH)

	// Source columns [c0, c1) the horizontal taps touch; kstart is
	// non-decreasing.
	k := xt.k
	c0 := int(xt.kstart[0])
	c1 := int(xt.kstart[outW-1]) + k
	width := (c1 - c0) * 3
	// The C pass reads taps in pairs, up to 5 elements past the last, and
	// the AVX-512 one a window of 64 from the first of 16 outputs' taps.
	if cap(r.acc) < width+72 {
		r.acc = make([]int16, width+72)
	}
	acc := r.acc[:width+72]
	kx := k
	if k > 1 && k%2 == 1 {
		kx++
	}
	// Horizontal taps in the order the output is written (mirrored when
	// flipping), weights laid out as resize.c's hweights reads them: the
	// patterns of outputs 2m and 2m+1 alternate, pair of taps by pair.
	hx := grow(r.hx, outW)
	hw := r.hw[:0]
	if k > 1 {
		hw = grow(r.hw, (outW+1)/2*8*kx)
		clear(hw[len(hw)-8*kx:]) // an odd last output's partner
	}
	for o := range outW {
		i := o
		if flip {
			i = outW - 1 - i
		}
		hx[o] = (xt.kstart[i] - int32(c0)) * 3
		if k == 1 {
			continue
		}
		w := xt.kw[i*k : i*k+k]
		for t := 0; t < kx; t += 2 {
			a, b := int16(w[t]), int16(0)
			if t+1 < k {
				b = int16(w[t+1])
			}
			p := hw[o/2*8*kx+o%2*8+t/2*16:][:8]
			p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7] = a, b, a, b, a, b, 0, 0
		}
	}
	r.hx, r.hw = hx, hw
	// Scratch of the AVX-512 pass: 3 groups of 16 channel outputs per 16
	// outputs, kx/2 pairs of 32 indexes and 32 weights each.
	groups := outW / 16 * 3
	r.gbase = grow(r.gbase, max(groups, 1))
	r.gtab = grow(r.gtab, max(groups*kx*32, 1))

	C.ffr_resize(bytesPtr(dst), C.int(dstStride), C.int(outW), C.int(outH),
		bytesPtr(src), C.int(srcStride), C.int(c0*3), C.int(width),
		i32Ptr(yt.start), i32Ptr(yt.n), i32Ptr(yt.off), i32Ptr(yt.w),
		C.int(kx), i32Ptr(hx), (*C.int16_t)(unsafe.Pointer(unsafe.SliceData(hw))),
		(*C.int16_t)(unsafe.Pointer(unsafe.SliceData(acc))),
		i32Ptr(r.gbase), (*C.int16_t)(unsafe.Pointer(unsafe.SliceData(r.gtab))))
}

// useAVX2 turns the AVX2 passes of resize.c on (where the CPU has them) or
// off and reports whether they are on; tests run the plain passes with it.
// No resize may run meanwhile.
func useAVX2(on bool) bool {
	c := C.int(0)
	if on {
		c = 1
	}
	return C.ffr_use_avx2(c) != 0
}

// useAVX512 turns the AVX-512 horizontal pass of resize.c on (where the
// CPU has it and the AVX2 passes are on) or off and reports whether it is
// on; tests compare it with the others. No resize may run meanwhile.
func useAVX512(on bool) bool {
	c := C.int(0)
	if on {
		c = 1
	}
	return C.ffr_use_avx512(c) != 0
}

// i32Ptr points C at the first element of s, which holds no Go pointers.
func i32Ptr(s []int32) *C.int32_t {
	return (*C.int32_t)(unsafe.Pointer(unsafe.SliceData(s)))
}

// bytesPtr points C at the first byte of b, or is nil for an empty b.
func bytesPtr(b []byte) *C.uchar {
	if len(b) == 0 {
		return nil
	}
	return (*C.uchar)(unsafe.Pointer(unsafe.SliceData(b)))
}

// maxCInt is the largest C int: strides and sizes handed to C stay below it.
const maxCInt = 1<<31 - 1

// CPUPath names the passes the resizer uses on this CPU: "AVX-512",
// "AVX2" or "portable", for `version`.
func CPUPath() string {
	switch C.ffr_path() {
	case 2:
		return "AVX-512"
	case 1:
		return "AVX2"
	}
	return "portable"
}
