package jpeg

/*
#include <stdlib.h>
#include "jpeg.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"unsafe"
)

// DefaultRestartInterval is the MCUs between restart markers that the
// writers aim for by default (ffcvfs write, DatasetWriter, write
// --from-beton): crops entropy-decode little past their edges, and the
// markers make a JPEG about 1.4 % larger (every 2 MCUs: about 4 %).
const DefaultRestartInterval = 4

// MaxTranscodeMemory bounds what one AddRestarts holds: the whole image's
// DCT coefficients (2 bytes a sample: 3 bytes a pixel at 4:2:0, 6 at
// 4:4:4) and its output. 256 MiB transcodes an image of about 85
// megapixels at 4:2:0; a larger one is ErrTooLarge, and the writers keep it
// as it is.
const MaxTranscodeMemory = 256 << 20

// ErrTooLarge is AddRestarts' error for an image of more than MaxPixels,
// or whose transcode would hold more than MaxTranscodeMemory.
var ErrTooLarge = errors.New("too large to transcode")

// ErrInexact is AddRestarts' error for a JPEG whose transcode some decoder
// would give other pixels: a progressive JPEG whose scans leave
// coefficients incomplete (cut short, or DC only), whose blocks libjpeg
// (PIL, torchvision) smooths; a sequential copy would be decoded as it is.
var ErrInexact = errors.New("a transcode would change its pixels")

// AddRestarts returns the JPEG src transcoded losslessly to one with a
// restart marker every k MCUs, k the divisor of the image's MCUs per row
// nearest target, with optimized Huffman tables and src's APPn and COM
// markers as they were. Every decoder gives the same pixels from it as from
// src; where that cannot be promised it is an error wrapping ErrInexact,
// and an image too large to transcode (see MaxTranscodeMemory) one
// wrapping ErrTooLarge, both found before the image's coefficients are
// held. Other errors wrap ErrCorrupt (a warning while reading the source
// is one: the coefficients after it would be made up).
func AddRestarts(src []byte, target int) (out []byte, k int, err error) {
	if len(src) == 0 {
		return nil, 0, fmt.Errorf("add restarts: empty input: %w", ErrArgument)
	}
	var (
		p   *C.uchar
		n   C.size_t
		ck  C.int
		msg [200]C.char
	)
	rc := C.ffj_add_restarts(bytesPtr(src), C.size_t(len(src)), C.int(min(max(target, 1), 1<<16-1)),
		C.longlong(MaxPixels), C.longlong(MaxTranscodeMemory), &p, &n, &ck, &msg[0], C.int(len(msg)))
	runtime.KeepAlive(src)
	switch rc {
	case C.FFJ_OK:
	case C.FFJ_ERR_NOMEM:
		return nil, 0, errors.New("add restarts: out of memory")
	case C.FFJ_ERR_TOOBIG:
		return nil, 0, fmt.Errorf("add restarts: %s: %w", C.GoString(&msg[0]), ErrTooLarge)
	case C.FFJ_ERR_INEXACT:
		return nil, 0, fmt.Errorf("add restarts: %s: %w", C.GoString(&msg[0]), ErrInexact)
	default:
		return nil, 0, fmt.Errorf("add restarts: %s: %w", C.GoString(&msg[0]), ErrCorrupt)
	}
	out = C.GoBytes(unsafe.Pointer(p), C.int(n))
	C.free(unsafe.Pointer(p))
	return out, int(ck), nil
}

// HasCropRestarts reports whether the JPEG src has restart intervals that
// a crop can be entropy-decoded from (DecodeRegion): markers in one
// sequential scan of every component, every k MCUs with k dividing an MCU
// row. It reads src's markers up to the scan, not the scan.
func HasCropRestarts(src []byte) bool {
	var x intervals
	return restartHeader(src, &x)
}

// intervals is the index of a JPEG's restart intervals.
type intervals struct {
	width, height int
	mcuW, mcuH    int
	perRow, rows  int // MCUs per row, MCU rows
	k             int // MCUs per interval; it divides perRow
	// The components' sampling factors, and the largest.
	comps      int
	hs, vs     [4]int
	hMax, vMax int
	sof        int // offset of the frame header's height field
	scan       int // offset of the entropy-coded data
	// starts[i] is the offset of interval i's first byte; ends[i] that
	// of the marker after it (RSTn, or EOI for the last).
	starts, ends []int32
}

// cols returns the intervals in an MCU row.
func (x *intervals) cols() int { return x.perRow / x.k }

// restartIndex indexes all the restart intervals of src into x (its
// slices reused), if src is a single-scan sequential JPEG whose restart
// interval divides its MCU rows; else it returns false.
func restartIndex(src []byte, x *intervals) bool {
	return restartHeader(src, x) && x.index(src, x.rows*x.cols())
}

// restartHeader reads src's frame, restart interval and scan header into
// x, if src is a single-scan sequential JPEG whose restart interval
// divides its MCU rows; else it returns false. x.index then finds the
// intervals.
func restartHeader(src []byte, x *intervals) bool {
	x.k, x.sof = 0, 0
	j, err := parseHeader(src)
	// Baseline or extended sequential, with restart markers, its one
	// scan holding every component.
	if err != nil || j.SOF != 0xC0 && j.SOF != 0xC1 || j.Restart == 0 ||
		j.Components > len(x.hs) || j.ScanComps != j.Components {
		return false
	}
	x.width, x.height, x.comps = j.Width, j.Height, j.Components
	x.hMax, x.vMax = 0, 0
	for c := range j.Components {
		x.hs[c], x.vs[c] = j.Comps[c].H, j.Comps[c].V
		if x.hs[c] == 0 || x.vs[c] == 0 {
			return false
		}
		x.hMax, x.vMax = max(x.hMax, x.hs[c]), max(x.vMax, x.vs[c])
	}
	x.k, x.sof, x.scan = j.Restart, j.SOFAt, j.ScanAt
	return x.geometry()
}

// geometry sets x's MCU size and counts from its frame, and reports
// whether its restart interval divides its MCU rows.
func (x *intervals) geometry() bool {
	x.mcuW, x.mcuH = 8*x.hMax, 8*x.vMax
	if x.comps == 1 { // a single component is coded block by block
		x.mcuW, x.mcuH = 8, 8
	}
	x.perRow = (x.width + x.mcuW - 1) / x.mcuW
	x.rows = (x.height + x.mcuH - 1) / x.mcuH
	return x.perRow%x.k == 0
}

// index finds the first n intervals of the scan, reading no further than
// the marker after the last of them. Asked for all, it also checks that
// the scan holds exactly that many, up to EOI. The scan is restart.c's
// (ffj_rst_scan), 64 bytes at a time: stuffed bytes and markers put an FF
// about every hundred bytes, and bytes.IndexByte returns at each.
func (x *intervals) index(src []byte, n int) bool {
	total := x.rows * x.cols()
	n = min(n, total)
	if n <= 0 || len(src) > math.MaxInt32 || x.scan >= len(src) {
		return false
	}
	// Every interval but the last ends at a 2-byte marker: the data bounds
	// how many there can be, whatever the header says.
	room := min(n, (len(src)-x.scan)/2+1)
	x.starts = slices.Grow(x.starts[:0], room)[:room]
	x.ends = slices.Grow(x.ends[:0], room)[:room]
	var how C.int
	got := int(C.ffj_rst_scan(bytesPtr(src), C.size_t(len(src)), C.size_t(x.scan), C.int(room),
		(*C.int32_t)(unsafe.Pointer(unsafe.SliceData(x.starts))),
		(*C.int32_t)(unsafe.Pointer(unsafe.SliceData(x.ends))), &how))
	runtime.KeepAlive(src)
	x.starts, x.ends = x.starts[:got], x.ends[:got]
	switch how {
	case C.FFJ_RST_EOI:
		return got == total
	case C.FFJ_RST_N:
		return got == n && n < total
	}
	return false
}

// sub appends to dst the JPEG of interval columns [i0, i1) of MCU rows
// [r0, r1) of src (indexed by x), and returns it with its origin in src's
// pixels.
func (x *intervals) sub(dst, src []byte, i0, i1, r0, r1 int) (out []byte, ox, oy int) {
	ox, oy = i0*x.k*x.mcuW, r0*x.mcuH
	w := min(i1*x.k*x.mcuW, x.width) - ox
	h := min(r1*x.mcuH, x.height) - oy
	out = append(dst[:0], src[:x.scan]...)
	binary.BigEndian.PutUint16(out[x.sof:], uint16(h))
	binary.BigEndian.PutUint16(out[x.sof+2:], uint16(w))
	n := 0
	for r := r0; r < r1; r++ {
		for i := i0; i < i1; i++ {
			if n > 0 {
				out = append(out, 0xFF, 0xD0+byte((n-1)%8))
			}
			j := r*x.cols() + i
			out = append(out, src[x.starts[j]:x.ends[j]]...)
			n++
		}
	}
	return append(out, 0xFF, 0xD9), ox, oy
}

// margins returns how far, in source pixels, the region decoded at m/8
// must stay from a sub-image's edges that are not the image's: where
// libjpeg upsamples a component, it takes an image edge for the last
// sample, which changes the pixels within one of that component's samples
// of it. Which components are upsampled follows libjpeg-turbo's choice of
// DCT sizes (jdmaster.c): a subsampled component's DCT is scaled up in
// doublings, while below 8 and even in both directions, to spare
// upsampling.
func (x *intervals) margins(m int) (mx, my int) {
	if x.comps == 1 {
		return 0, 0
	}
	for c := range x.comps {
		ssize := m
		for ssize < 8 && (x.hMax*m)%(x.hs[c]*ssize*2) == 0 && (x.vMax*m)%(x.vs[c]*ssize*2) == 0 {
			ssize *= 2
		}
		// One output sample of the component covers 8·max/(f·ssize)
		// source pixels.
		if x.hs[c]*ssize != x.hMax*m {
			mx = max(mx, 2*((8*x.hMax+x.hs[c]*ssize-1)/(x.hs[c]*ssize)))
		}
		if x.vs[c]*ssize != x.vMax*m {
			my = max(my, 2*((8*x.vMax+x.vs[c]*ssize-1)/(x.vs[c]*ssize)))
		}
	}
	return mx, my
}

// restartCrop returns the JPEG of the intervals that the region [x, x+w)
// × [y, y+h) of src needs at m/8, with the margins chroma upsampling
// needs, and its origin; ok is false when src has no usable restart
// intervals or the region needs most of what a region decode of src would
// decode anyway.
//
// Huffman decoding is most of a crop's cost, and libjpeg entropy-decodes
// every MCU of every row down to the crop's last, all columns, whatever
// part of them the crop covers. A JPEG with a restart marker every K MCUs
// can be entropy-decoded from any interval: each starts on a byte
// boundary with its DC predictors reset. When K divides an MCU row, the
// intervals form a grid of columns, and a crop needs only the intervals
// it overlaps. DecodeRegion then hands libjpeg a smaller JPEG made of
// them (restartIndex, sub): the source's tables, a frame of the selected
// columns and rows, the intervals with their markers renumbered. Its
// pixels are the source's: the coefficients are the same, and a margin
// around the crop keeps the sub-image's edges, where chroma upsampling
// differs, away from it (margins).
//
// AddRestarts writes such JPEGs (ffcvfs write --restart-interval): a
// lossless transcode, as jpegtran -restart does.
func (d *Decoder) restartCrop(src []byte, x, y, w, h, m int, f Size) (sub []byte, ox, oy int, ok bool) {
	ix := &d.rst
	if !restartHeader(src, ix) {
		return nil, 0, 0, false
	}
	// A frame of another size, or too large, is refused on the whole
	// JPEG's way, where libjpeg reads the same header.
	if f != (Size{}) && (ix.width != f.W || ix.height != f.H) || int64(ix.width)*int64(ix.height) > MaxPixels {
		return nil, 0, 0, false
	}
	mx, my := ix.margins(m)
	c0 := max((x-mx)/ix.mcuW, 0)
	c1 := min((x+w+mx+ix.mcuW-1)/ix.mcuW, ix.perRow)
	r0 := max((y-my)/ix.mcuH, 0)
	r1 := min((y+h+my+ix.mcuH-1)/ix.mcuH, ix.rows)
	i0, i1 := c0/ix.k, (c1+ix.k-1)/ix.k
	// A region decode entropy-decodes every MCU of rows [0, r1).
	if (r1-r0)*(i1-i0)*ix.k*10 > r1*ix.perRow*9 {
		return nil, 0, 0, false
	}
	// The scan is read only as far as the crop's last interval.
	if !ix.index(src, (r1-1)*ix.cols()+i1) {
		return nil, 0, 0, false
	}
	d.sub, ox, oy = ix.sub(d.sub, src, i0, i1, r0, r1)
	return d.sub, ox, oy, true
}

// CPUPath names the code the decoder uses on this CPU: "x86-64-v3" (AVX2
// clones of the entropy decoder and the IDCT, the AVX2 restart scan) or
// "portable", for `version`.
func CPUPath() string {
	if C.ffj_path() == 1 {
		return "x86-64-v3"
	}
	return "portable"
}
