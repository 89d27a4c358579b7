// Package decode is the image half of the ffcvfeed pipeline: it turns one
// stored image (a JPEG, or raw RGB pixels) into a training or validation
// tensor, OutH×OutW×3 bytes (HWC RGB), the way FFCV's decoders do.
//
// # What it owns
//
//   - The crops: torchvision's RandomResizedCrop.get_params
//     (RandomResizedCropParams) and FFCV's center crop (CenterCropParams).
//   - Region decoding over libjpeg-turbo (Decoder.DecodeRegion): only the
//     iMCU columns under the crop are decoded (jpeg_crop_scanline), rows
//     above it are skipped (jpeg_skip_scanlines), decoding stops after its
//     last row, and DCT scaling (1/2, 1/4, 1/8, chosen by ChooseScale)
//     reduces large crops while decoding. At scale 1 the pixels equal a full
//     ISLOW decode byte for byte.
//   - Resizing (Resizer): area averaging when shrinking, bilinear when
//     enlarging, with the horizontal flip folded into the write. The filter
//     tables are built in Go; the passes over the pixels run in C
//     (resize.c), which the compiler vectorizes (AVX2 where the CPU has it),
//     about twice as fast as the same loops in Go.
//   - Op and Decoder.Apply, which chain the three.
//
// # Concurrency
//
// A Decoder (and a Resizer) holds scratch state and is not safe for
// concurrent use: each worker goroutine owns one. The package-level Header
// and DecodeRegion draw Decoders from a pool and are safe for concurrent
// use.
//
// # What it must never do
//
// Crash or exit on bad input: libjpeg errors longjmp back to the C helper,
// which returns a code that becomes an error wrapping ErrCorrupt; libjpeg
// never prints. The C side never keeps a Go pointer past a call.
package decode
