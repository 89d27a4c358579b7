// Package decode is the image half of the ffcvfeed pipeline: it turns one
// stored image (a JPEG, or raw RGB pixels) into a training or validation
// tensor, OutH×OutW×3 bytes (HWC RGB), the way FFCV's decoders do.
//
// # What it owns
//
//   - The crops: torchvision's RandomResizedCrop.get_params
//     (RandomResizedCropParams) and FFCV's center crop (CenterCropParams).
//     The crop is always chosen in source pixels; only how its pixels are
//     made depends on the scale below.
//   - Region decoding over libjpeg-turbo (Decoder.DecodeRegion): only the
//     iMCU columns under the crop are decoded (jpeg_crop_scanline), rows
//     above it are skipped (jpeg_skip_scanlines), decoding stops after its
//     last row, and DCT scaling by m/8 (1 ≤ m ≤ 8) makes each 8×8 block
//     m×m pixels while decoding. At 8/8 the pixels equal a full ISLOW
//     decode byte for byte.
//   - The scale (ChooseScale): the smallest m/8 at which the crop still
//     has at least the output's pixels in each direction, so the resize
//     after it only shrinks. A 300-pixel crop resized to 160 decodes at
//     5/8, 188 pixels, not 300.
//   - An inverse DCT for the scales libjpeg-turbo has no SIMD code for
//     (idct.c). libjpeg-turbo vectorizes the 8-, 4-, 2- and 1-point IDCTs
//     only; its plain C 3-, 5-, 6- and 7-point ones (and the 10- to
//     14-point ones that make 4:2:0 chroma full size at those scales) made
//     a 5/8 decode slower than a full one. idct.c computes the same
//     transform in floating point, vectorized by the compiler (AVX2 where
//     the CPU has it), and is installed in the decompressor's IDCT table
//     only where that table holds libjpeg's own method for the size, so a
//     library laid out differently keeps its own. It agrees with libjpeg's
//     to 62–73 dB (TestIDCTMatchesLibjpeg); no library offers it.
//   - An entropy decoder (huff.c) for single-scan sequential JPEGs,
//     installed in libjpeg-turbo's decompressor in place of its Huffman
//     decoder once a decompression has started; the IDCT, upsampling and
//     colour stay libjpeg's. libjpeg-turbo turns its fast Huffman path off
//     for any JPEG with restart markers (the JPEGs crops are decoded from
//     intervals of), and its slow path reads a byte at a time. huff.c
//     first copies the data up to the next marker without its byte
//     stuffing (FF 00), so that its bit reader takes 8 bytes at once with
//     no test for FF, once per four symbols with no test of the bits left,
//     keeps its bit buffer in registers, and decodes most
//     AC coefficients, every EOB and every ZRL with one table lookup. It gives libjpeg's
//     coefficients (TestEntropyMatchesLibjpeg: the same pixels at every
//     scale, layout and region, with and without restart intervals) and
//     reports damage where libjpeg does (TestEntropyDamage,
//     TestEntropyRandomDamage, FuzzEntropy);
//     Op.LibjpegEntropy and Decoder.UseLibjpegEntropy fall back to
//     libjpeg's. No library offers a Huffman decoder that plugs into
//     libjpeg-turbo's pipeline.
//   - Resizing (resize.Resizer, package resize): area averaging when shrinking, bilinear when
//     enlarging, with the horizontal flip folded into the write. The filter
//     tables are built in Go; the passes over the pixels run in C
//     (resize.c): the vertical one vectorized by the compiler (and by hand
//     for AVX2 and AVX-512), the
//     horizontal one as int16 multiply-adds of tap pairs (SSE2, two outputs
//     at a time with AVX2, 16 channel values at a time with AVX-512,
//     their taps gathered by word permutes). The arithmetic is fixed point
//     and exact: every path gives the same bytes (TestResizeExact).
//   - Op and Decoder.Apply, which chain the crop, the decode and the
//     resize.
//
// # The trade
//
// Decoding at m/8 then resizing is not the same filter as decoding in
// full then area-resizing (the reference, which Op.Exact computes): the
// DCT-domain downscale keeps each block's lowest frequencies. For 2,000
// RandomResizedCrops to 160×160 of real photos (TestFidelity), the scaled
// crops are 46.6 dB from the reference on average and never under 30 dB;
// crops decoded at 8/8 equal it byte for byte. Power-of-two scales alone
// give the same worst case (30.1 dB, at 1/2, libjpeg's own code) and scale
// far fewer crops. In exchange, ffcvfeed bench on real photos runs faster
// than decoding them in full.
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
