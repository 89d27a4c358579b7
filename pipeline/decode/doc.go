// Package decode is the image half of the ffcvfeed pipeline, as FFCV's
// image decoders are: it turns one stored image (a JPEG, or raw RGB
// pixels) into a training or validation tensor, OutH×OutW×3 bytes (HWC
// RGB). The JPEG itself is package jpeg's business; this package chooses
// what to decode and resizes it.
//
// # What it owns
//
//   - The crops: torchvision's RandomResizedCrop.get_params
//     (RandomResizedCropParams) and FFCV's center crop (CenterCropParams).
//     The crop is always chosen in source pixels; only how its pixels are
//     made depends on the scale below.
//   - The scale (ChooseScale): the smallest m/8 at which the crop still
//     has at least the output's pixels in each direction, so the resize
//     after the region decode (jpeg.Decoder.DecodeSample) only shrinks. A
//     300-pixel crop resized to 160 decodes at 5/8, 188 pixels, not 300.
//   - Op and Decoder.Apply, which chain the crop, the decode and the
//     resize (package resize: area averaging when shrinking, bilinear when
//     enlarging, the horizontal flip folded into the write).
//
// # The trade
//
// Decoding at m/8 then resizing is not the same filter as decoding in
// full then area-resizing (the reference, which Op.Exact computes): the
// DCT-domain downscale keeps each block's lowest frequencies. TestFidelity
// bounds the distance of the scaled crops from the reference (at least 30
// dB, and crops decoded at 8/8 equal it byte for byte); the figures are
// in docs/measurements.md. In exchange, fewer pixels are decoded.
//
// # Concurrency
//
// A Decoder holds a JPEG decoder and a resizer with scratch state and is
// not safe for concurrent use: each worker goroutine owns one.
//
// # What it must never do
//
// Crash on bad input: every failure is an error wrapping ErrCorrupt (the
// image) or ErrArgument (the op or the buffers), package jpeg's sentinels.
package decode
