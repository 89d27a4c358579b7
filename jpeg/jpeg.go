package jpeg

/*
#cgo CFLAGS: -O3 -Wno-psabi
#cgo LDFLAGS: -ljpeg -lm
#include <stdlib.h>
#include "huff.h"
#include "idct.h"
#include "jpeg.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Sentinel errors. Errors returned by this package wrap one of them.
var (
	// ErrCorrupt marks input that libjpeg could not decode: bad markers,
	// truncated or damaged entropy-coded data, unsupported color spaces.
	ErrCorrupt = errors.New("jpeg: corrupt or unsupported JPEG")
	// ErrArgument marks a bad region, scale or destination buffer.
	ErrArgument = errors.New("jpeg: invalid argument")
)

// Decoder decodes JPEG regions with a libjpeg decompressor allocated in C
// and reused across calls, along with its scratch buffers.
//
// A Decoder is not safe for concurrent use: give each goroutine its own.
// Close frees the C state; a Decoder that is never closed is freed when it
// is garbage collected.
type Decoder struct {
	c       *C.ffj_decoder
	cleanup runtime.Cleanup

	// The restart intervals of the last JPEG and the JPEG made of those a
	// region needs (restart.go).
	rst intervals
	sub []byte
	// noRestarts decodes every region from the whole JPEG, for
	// comparisons.
	noRestarts bool
	// libjpegEntropy is what UseLibjpegEntropy last set.
	libjpegEntropy bool
}

// NewDecoder allocates a Decoder.
func NewDecoder() (*Decoder, error) {
	c := C.ffj_new()
	if c == nil {
		return nil, errors.New("jpeg: cannot allocate libjpeg decompressor")
	}
	d := &Decoder{c: c}
	d.cleanup = runtime.AddCleanup(d, func(c *C.ffj_decoder) { C.ffj_free(c) }, c)
	return d, nil
}

// Close frees the decoder's C state. The Decoder must not be used after.
func (d *Decoder) Close() {
	if d.c == nil {
		return
	}
	d.cleanup.Stop()
	C.ffj_free(d.c)
	d.c = nil
}

// cBool is on as a C int, 1 or 0.
func cBool(on bool) C.int {
	if on {
		return 1
	}
	return 0
}

// useLibjpegIDCT makes DCT-scaled decodes use libjpeg's own inverse DCT at
// every scale, for comparisons.
func (d *Decoder) useLibjpegIDCT(on bool) {
	C.ffj_use_libjpeg_idct(d.c, cBool(on))
}

// entropyBuffer is the size of huff.c's buffer of unstuffed data (tests
// make intervals longer than it).
const entropyBuffer = C.FFH_BUF

// useIDCTShortcuts turns idct.c's shortcuts for blocks without high
// frequencies on (the default) or off, for every Decoder; no decode may
// run meanwhile.
func useIDCTShortcuts(on bool) {
	C.ffj_idct_shortcuts = cBool(on)
}

// UseLibjpegEntropy makes the decoder entropy-decode every JPEG with
// libjpeg-turbo's own Huffman decoder, as a baseline; by default
// single-scan sequential JPEGs are entropy-decoded by huff.c's, which
// gives the same coefficients in less time.
func (d *Decoder) UseLibjpegEntropy(on bool) {
	if d.c == nil {
		return
	}
	d.libjpegEntropy = on
	C.ffj_use_libjpeg_entropy(d.c, cBool(on))
}

// LibjpegEntropy reports what UseLibjpegEntropy last set.
func (d *Decoder) LibjpegEntropy() bool { return d.libjpegEntropy }

// entropyHooked reports whether the last decode was entropy-decoded by
// huff.c's decoder.
func (d *Decoder) entropyHooked() bool { return d.c != nil && C.ffj_entropy_hooked(d.c) != 0 }

// LastWarning returns the last non-fatal libjpeg warning of the previous
// call, or "". Warnings are never printed.
func (d *Decoder) LastWarning() string {
	if d.c == nil {
		return ""
	}
	return C.GoString(C.ffj_warning(d.c))
}

func (d *Decoder) err(op string, rc C.int) error {
	msg := C.GoString(C.ffj_message(d.c))
	switch rc {
	case C.FFJ_ERR_ARG:
		return fmt.Errorf("%s: %s: %w", op, msg, ErrArgument)
	case C.FFJ_ERR_NOMEM:
		return fmt.Errorf("%s: out of memory", op)
	default:
		return fmt.Errorf("%s: %s: %w", op, msg, ErrCorrupt)
	}
}

func bytesPtr(b []byte) *C.uchar {
	if len(b) == 0 {
		return nil
	}
	return (*C.uchar)(unsafe.Pointer(unsafe.SliceData(b)))
}

// Header returns the dimensions of the JPEG image in src.
func (d *Decoder) Header(src []byte) (w, h int, err error) {
	if d.c == nil {
		return 0, 0, fmt.Errorf("decode header: decoder closed: %w", ErrArgument)
	}
	var cw, ch C.int
	rc := C.ffj_header(d.c, bytesPtr(src), C.size_t(len(src)), &cw, &ch)
	runtime.KeepAlive(src)
	if rc != C.FFJ_OK {
		return 0, 0, d.err("decode header", rc)
	}
	return int(cw), int(ch), nil
}

// DecodeRegion decodes the region [x, x+w) × [y, y+h) of the JPEG image in
// src, given in full-resolution pixels, at scale m/8 (1 ≤ m ≤ 8; libjpeg's
// DCT scaling turns each 8×8 block into m×m pixels) as packed RGB into dst,
// whose rows lie dstStride bytes apart. Grayscale images are expanded to
// RGB. Source column c maps to scaled column c·m/8; the scaled region is
// rounded outward (x·m/8 down, (x+w)·m/8 up) and clamped to the scaled
// image; its size is returned. At m = 8 the pixels equal a full decode's
// byte for byte.
//
// Only the iMCU columns that cover the region are decoded, the rows above
// it are skipped and decoding stops after its last row, so data damaged or
// missing below the region goes unnoticed. A JPEG with restart intervals
// that divide its MCU rows is entropy-decoded only in the intervals around
// the region (restart.go), with the same pixels. Damage met while decoding, and
// truncation inside the region, are errors wrapping ErrCorrupt.
func (d *Decoder) DecodeRegion(src []byte, x, y, w, h int, m int, dst []byte, dstStride int) (outW, outH int, err error) {
	if dstStride <= 0 {
		return 0, 0, fmt.Errorf("decode region: stride %d: %w", dstStride, ErrArgument)
	}
	r, err := d.decodeRegion(src, x, y, w, h, m, dst, dstStride, Size{})
	return r.W, r.H, err
}

// MaxPixels bounds the images decoded or written: PIL's limit, above which
// it raises DecompressionBombError (2 × Image.MAX_IMAGE_PIXELS). A JPEG
// whose frame header says more is a corrupt image, refused before any
// memory is given to it.
const MaxPixels = 2 * (1024 * 1024 * 1024 / 4 / 3)

// Size is the size a JPEG's frame header must say (a stored sample's
// size in its beton's metadata); the zero Size takes any.
type Size struct{ W, H int }

// Region says where a decoded W×H region lies: its first pixel at
// dst[Off:], its rows Stride bytes apart.
type Region struct {
	W, H, Off, Stride int
}

// DecodeSample decodes a region as DecodeRegion does, of a stored image
// whose frame header must say want (a mismatch, like an image of more than
// MaxPixels, is an error wrapping ErrCorrupt, found before libjpeg
// allocates anything). With dstStride 0, libjpeg writes its rows into dst
// as they come, without copying them: the region then starts Off bytes
// into dst and its rows lie Stride bytes apart, at most the scaled
// image's row, (imageW·m+7)/8·3 bytes; dst must hold that many bytes for
// each of the region's rows.
func (d *Decoder) DecodeSample(src []byte, x, y, w, h, m int, dst []byte, dstStride int, want Size) (Region, error) {
	return d.decodeRegion(src, x, y, w, h, m, dst, dstStride, want)
}

// decodeRegion decodes as DecodeRegion does; the image's frame header
// must say f (unless f is zero) and at most MaxPixels.
func (d *Decoder) decodeRegion(src []byte, x, y, w, h int, m int, dst []byte, dstStride int, f Size) (Region, error) {
	if d.c == nil {
		return Region{}, fmt.Errorf("decode region: decoder closed: %w", ErrArgument)
	}
	if dstStride < 0 || x > maxCInt || y > maxCInt || w > maxCInt || h > maxCInt || dstStride > maxCInt {
		return Region{}, fmt.Errorf("decode region: bad region or stride: %w", ErrArgument)
	}
	if !d.noRestarts {
		if sub, ox, oy, ok := d.restartCrop(src, x, y, w, h, m, f); ok {
			// restartCrop checked the whole JPEG's frame against f; the
			// JPEG of its intervals has a frame of their own.
			src, x, y, f = sub, x-ox, y-oy, Size{}
		}
	}
	var out C.ffj_region
	rc := C.ffj_decode_region(d.c, bytesPtr(src), C.size_t(len(src)),
		C.int(x), C.int(y), C.int(w), C.int(h), C.int(m),
		bytesPtr(dst), C.size_t(len(dst)), C.int(dstStride), C.int(f.W), C.int(f.H), C.longlong(MaxPixels), &out)
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	if rc != C.FFJ_OK {
		return Region{}, d.err("decode region", rc)
	}
	return Region{int(out.w), int(out.h), int(out.off), int(out.stride)}, nil
}

const maxCInt = 1<<31 - 1

var decoderPool = sync.Pool{New: func() any {
	d, err := NewDecoder()
	if err != nil {
		return nil
	}
	return d
}}

func withDecoder[T any](f func(d *Decoder) (T, T, error)) (T, T, error) {
	v := decoderPool.Get()
	if v == nil {
		var zero T
		return zero, zero, errors.New("jpeg: cannot allocate libjpeg decompressor")
	}
	d := v.(*Decoder)
	a, b, err := f(d)
	decoderPool.Put(d)
	return a, b, err
}

// Header returns the dimensions of the JPEG image in src, using a pooled
// Decoder.
func Header(src []byte) (w, h int, err error) {
	return withDecoder(func(d *Decoder) (int, int, error) { return d.Header(src) })
}

// DecodeRegion is Decoder.DecodeRegion on a pooled Decoder; it is safe for
// concurrent use.
func DecodeRegion(src []byte, x, y, w, h int, m int, dst []byte, dstStride int) (outW, outH int, err error) {
	return withDecoder(func(d *Decoder) (int, int, error) {
		return d.DecodeRegion(src, x, y, w, h, m, dst, dstStride)
	})
}
