// Package jpeg is the project's one home for JPEG: reading its markers,
// decoding regions of it fast, transcoding it with restart markers, and
// decoding and encoding whole images for writing betons.
//
// # What it owns
//
//   - The one reader of JPEG markers (markers.go): ParseFrame (an image's
//     size, strictly, reading no entropy-coded data), Scan (a whole file as
//     libjpeg would decode it, to write it), and the walk up to the first
//     scan that crops from restart intervals need.
//   - Region decoding over libjpeg-turbo (Decoder.DecodeRegion,
//     Decoder.DecodeSample): only the iMCU columns under a region are
//     decoded (jpeg_crop_scanline), rows above it are skipped
//     (jpeg_skip_scanlines), decoding stops after its last row, and DCT
//     scaling by m/8 (1 ≤ m ≤ 8) makes each 8×8 block m×m pixels. At 8/8
//     the pixels equal a full decode with the accurate IDCT byte for byte.
//     ScaledWindow says where a crop lies in a region decoded at m/8.
//   - An inverse DCT for the scales libjpeg-turbo has no SIMD code for
//     (idct.c: the 3-, 5-, 6- and 7-point IDCTs, and the 10- to 14-point
//     ones that make 4:2:0 chroma full size at those scales), in floating
//     point vectorized by the compiler, installed in the decompressor's
//     IDCT table only where that table holds libjpeg's own method for the
//     size. It agrees with libjpeg's (TestIDCTMatchesLibjpeg).
//   - An entropy decoder (huff.c) for single-scan sequential JPEGs,
//     installed in libjpeg-turbo's decompressor in place of its Huffman
//     decoder once a decompression has started; the IDCT, upsampling and
//     colour stay libjpeg's. It unstuffs the data up to the next marker
//     into a buffer of its own and reads it 8 bytes at a time, decoding
//     most symbols with one table lookup, where libjpeg-turbo's fast path
//     gives way to its byte-at-a-time slow path for any JPEG with restart
//     markers. It gives libjpeg's coefficients (TestEntropyMatchesLibjpeg)
//     and reports damage where libjpeg does (TestEntropyDamage,
//     FuzzEntropy); Decoder.UseLibjpegEntropy falls back to libjpeg's.
//   - Restart intervals (restart.go, restart.c): AddRestarts transcodes a
//     JPEG losslessly into one with a restart marker every few MCUs, whose
//     intervals form columns; a region of such a JPEG is decoded from a
//     smaller JPEG made of the intervals around it, with the same pixels.
//   - Planes (planes.go, planes.c): a whole JPEG decoded to its component
//     planes after the inverse DCT (libjpeg's raw data), and regions made
//     from them as RGB with libjpeg-turbo's fancy upsampling and colour
//     conversion computed for the region alone, byte for byte a full
//     decode's (TestPlanesMatchDecode), or at half resolution
//     (Planes.RGBHalf): ffcvfeed's decoded-image tier.
//   - Whole images for writing (codec.go): DecodeRGB and DecodeCMYK decode
//     as PIL does, EncodeRGB encodes as OpenCV's imencode does, through
//     go-libjpeg and the standard library.
//   - The bound on an image's pixels, MaxPixels (PIL's), which the readers
//     and the writer of betons apply.
//
// No library offers a Huffman decoder or an IDCT that plugs into
// libjpeg-turbo's pipeline, nor crops from restart intervals, nor
// libjpeg-turbo's upsampling and colour conversion for a region of planes
// (its own are internal to a decompression): those are written here, in C
// beside libjpeg-turbo.
//
// # Concurrency
//
// A Decoder holds a libjpeg decompressor and scratch state and is not safe
// for concurrent use: each goroutine owns one. The package-level Header and
// DecodeRegion draw Decoders from a pool and are safe for concurrent use,
// as are the marker functions and the codec.
//
// # What it must never do
//
// Crash or exit on bad input: libjpeg errors longjmp back to the C helper,
// which returns a code that becomes an error wrapping ErrCorrupt; libjpeg
// never prints. Every allocation a JPEG's header would size is checked
// against MaxPixels first. The C side never keeps a Go pointer past a call.
package jpeg
