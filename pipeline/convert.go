package pipeline

/*
#cgo CFLAGS: -O3 -Wno-psabi
#include "convert.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// The output stage (convert.c): the dtype and layout conversion of a
// sample's pixels, in C because Go's compiler neither vectorizes strided
// copies nor drops the bounds checks of table lookups; measured, a loop over elements with an index
// function and a bounds-checked store cost about 1 ns per byte, 15 % of
// ffcvfeed's CPU with --layout nchw. Planar float16 lookups use AVX-512
// VBMI byte permutes where the CPU has them (nine times the table
// loads' speed), the table loads elsewhere.

// noVBMI makes the output stage keep to its portable code, for tests.
func noVBMI() { C.ffc_no_vbmi() }

// convertPixels writes the n HWC uint8 pixels src into out: planar
// (NCHW) or not, as uint8 (lut16 and lut32 nil), or through lut16 as
// 16-bit values or lut32 as 32-bit ones. out must hold n×3 values of its
// type; the caller checks.
func convertPixels(out, src []byte, n int, planar bool, lut16 *[3][256]uint16, lut32 *[3][256]uint32) {
	if n == 0 {
		return
	}
	pl := C.int(0)
	if planar {
		pl = 1
	}
	s := (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(src)))
	o := unsafe.Pointer(unsafe.SliceData(out))
	switch {
	case lut16 != nil:
		C.ffc_lut16(s, (*C.uint16_t)(o), C.size_t(n), (*C.uint16_t)(unsafe.Pointer(&lut16[0][0])), pl)
	case lut32 != nil:
		C.ffc_lut32(s, (*C.uint32_t)(o), C.size_t(n), (*C.uint32_t)(unsafe.Pointer(&lut32[0][0])), pl)
	case planar:
		C.ffc_planar_u8(s, (*C.uint8_t)(o), C.size_t(n))
	default:
		copy(out[:3*n], src[:3*n])
	}
	runtime.KeepAlive(src)
	runtime.KeepAlive(out)
	runtime.KeepAlive(lut16)
	runtime.KeepAlive(lut32)
}

// CPUPath names the conversion to batches used on this CPU: "AVX-512
// VBMI", "x86-64-v3" (AVX2) or "portable", for `version`.
func CPUPath() string {
	switch C.ffc_path() {
	case 2:
		return "AVX-512 VBMI"
	case 1:
		return "x86-64-v3"
	}
	return "portable"
}
