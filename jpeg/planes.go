package jpeg

/*
#include "jpeg.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// ErrNoPlanes marks a JPEG whose planes Planes.RGB cannot turn into
// libjpeg's pixels: a colour space other than grayscale and YCbCr, or
// sampling ratios other than 1 and 2. Such an image is decoded from its
// JPEG as before.
var ErrNoPlanes = errors.New("jpeg: a layout not held as planes")

// Planes is the layout of a JPEG image decoded to its component planes,
// after entropy decoding and the inverse DCT and before upsampling and
// colour conversion: Comps planes (1: grayscale; 3: Y, Cb and Cr), plane c
// PW[c]×PH[c] bytes with rows packed, one after another; libjpeg
// upsamples plane c by HR[c]×VR[c] (1 or 2 each) to the image's W×H. A
// 4:2:0 image's planes take 1.5 bytes a pixel, 4:2:2's 2, 4:4:4's 3,
// grayscale's 1.
type Planes struct {
	W, H, Comps int
	PW, PH      [3]int
	HR, VR      [3]int
}

// Bytes returns the size of the planes.
func (p Planes) Bytes() int {
	n := 0
	for c := range p.Comps {
		n += p.PW[c] * p.PH[c]
	}
	return n
}

func (p Planes) c() C.ffj_planes {
	var c C.ffj_planes
	c.w, c.h, c.n = C.int(p.W), C.int(p.H), C.int(p.Comps)
	for i := range 3 {
		c.pw[i], c.ph[i], c.hr[i], c.vr[i] = C.int(p.PW[i]), C.int(p.PH[i]), C.int(p.HR[i]), C.int(p.VR[i])
	}
	return c
}

func planesOf(c *C.ffj_planes) Planes {
	p := Planes{W: int(c.w), H: int(c.h), Comps: int(c.n)}
	for i := range 3 {
		p.PW[i], p.PH[i], p.HR[i], p.VR[i] = int(c.pw[i]), int(c.ph[i]), int(c.hr[i]), int(c.vr[i])
	}
	return p
}

// PlanesOf reads the header of the JPEG in src: the layout DecodePlanes
// gives it. The frame header must say want (the zero Size takes any) and
// at most MaxPixels, or the error wraps ErrCorrupt; a layout Planes.RGB
// does not convert is an error wrapping ErrNoPlanes.
func (d *Decoder) PlanesOf(src []byte, want Size) (Planes, error) {
	if d.c == nil {
		return Planes{}, fmt.Errorf("planes: decoder closed: %w", ErrArgument)
	}
	if want.W > maxCInt || want.H > maxCInt {
		return Planes{}, fmt.Errorf("planes: size %dx%d: %w", want.W, want.H, ErrArgument)
	}
	var cp C.ffj_planes
	rc := C.ffj_planes_info(d.c, bytesPtr(src), C.size_t(len(src)), C.int(want.W), C.int(want.H), C.longlong(MaxPixels), &cp)
	runtime.KeepAlive(src)
	if rc == C.FFJ_ERR_NOPLANES {
		return Planes{}, fmt.Errorf("planes: %s: %w", C.GoString(C.ffj_message(d.c)), ErrNoPlanes)
	}
	if rc != C.FFJ_OK {
		return Planes{}, d.err("planes", rc)
	}
	return planesOf(&cp), nil
}

// DecodePlanes decodes the whole JPEG in src, whose layout PlanesOf gave
// as p, into its planes in dst (at least p.Bytes()). Damage anywhere in
// the image is an error wrapping ErrCorrupt.
func (d *Decoder) DecodePlanes(src []byte, p Planes, dst []byte) error {
	if d.c == nil {
		return fmt.Errorf("decode planes: decoder closed: %w", ErrArgument)
	}
	if len(dst) < p.Bytes() {
		return fmt.Errorf("decode planes: destination has %d bytes, the planes %d: %w", len(dst), p.Bytes(), ErrArgument)
	}
	cp := p.c()
	rc := C.ffj_decode_planes(d.c, bytesPtr(src), C.size_t(len(src)), &cp, bytesPtr(dst), C.size_t(len(dst)))
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	if rc != C.FFJ_OK {
		return d.err("decode planes", rc)
	}
	return nil
}

// RGB writes the region [x, x+w) × [y, y+h) of the image whose planes are
// data as packed RGB into dst, rows stride bytes apart: the pixels a full
// decode (DecodeRegion at 8/8) gives there, byte for byte, libjpeg's
// upsampling and colour conversion computed for the region alone.
func (p Planes) RGB(data []byte, x, y, w, h int, dst []byte, stride int) error {
	return p.rgb(false, data, x, y, w, h, dst, stride)
}

// RGBHalf is RGB at half the image's resolution: the region [x, x+w) ×
// [y, y+h) of a (W+1)/2 × (H+1)/2 image, each pixel made from the mean of
// each plane's samples under a 2×2 block of the image (the last odd
// column or row alone), converted as libjpeg converts. It makes a quarter
// of the pixels RGB makes, for crops resized to half their size or less.
func (p Planes) RGBHalf(data []byte, x, y, w, h int, dst []byte, stride int) error {
	return p.rgb(true, data, x, y, w, h, dst, stride)
}

func (p Planes) rgb(half bool, data []byte, x, y, w, h int, dst []byte, stride int) error {
	if p.Comps != 1 && p.Comps != 3 || p.W <= 0 || p.H <= 0 || p.W > maxCInt || p.H > maxCInt {
		return fmt.Errorf("planes: layout %+v: %w", p, ErrArgument)
	}
	iw, ih, what := p.W, p.H, "region"
	if half {
		iw, ih, what = (p.W+1)/2, (p.H+1)/2, "half-size region"
	}
	if x < 0 || y < 0 || w <= 0 || h <= 0 || x > iw-w || y > ih-h || stride < 3*w || len(dst) < (h-1)*stride+3*w {
		return fmt.Errorf("planes: %s %dx%d+%d+%d of a %dx%d image into %d bytes, rows %d apart: %w", what, w, h, x, y, iw, ih, len(dst), stride, ErrArgument)
	}
	cp := p.c()
	src, n := (*C.uchar)(unsafe.Pointer(unsafe.SliceData(data))), C.size_t(len(data))
	var rc C.int
	if half {
		rc = C.ffj_planes_rgb_half(&cp, src, n, C.int(x), C.int(y), C.int(w), C.int(h), bytesPtr(dst), C.size_t(len(dst)), C.size_t(stride))
	} else {
		rc = C.ffj_planes_rgb(&cp, src, n, C.int(x), C.int(y), C.int(w), C.int(h), bytesPtr(dst), C.size_t(len(dst)), C.size_t(stride))
	}
	runtime.KeepAlive(data)
	runtime.KeepAlive(dst)
	if rc != C.FFJ_OK {
		return fmt.Errorf("planes: the layout %+v does not fit %d bytes of planes: %w", p, len(data), ErrArgument)
	}
	return nil
}

func init() { C.ffj_planes_init(1) }

// usePlanesAVX2 turns the AVX2 colour conversion of Planes.RGB on (where
// the CPU has AVX2) or off, for tests; no conversion may run meanwhile.
func usePlanesAVX2(on bool) { C.ffj_planes_init(cBool(on)) }
