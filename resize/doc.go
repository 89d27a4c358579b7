// Package resize is every resize of the project's images, in two filters
// that answer to different references and so stay two:
//
//   - Resizer, the read path's: ffcvfeed's crops (package pipeline/decode)
//     to the training resolution. Per axis it averages areas when
//     shrinking and interpolates bilinearly when enlarging, in fixed point
//     with 14-bit weights; its passes over the pixels are in C (resize.c,
//     AVX2 and AVX-512 where the CPU has them, CPUPath says which), and
//     Resize and ResizeWindow (a window of the source, as a random-resized
//     crop gives) allocate nothing once its tables have grown. Reference
//     computes the same in float64 by definition, for tests.
//   - Area, the write path's: OpenCV's INTER_AREA, float32 arithmetic in
//     OpenCV's operation order, so that ffcvfs write and DatasetWriter
//     store the pixels FFCV's writer would (--max-resolution).
//
// Neither keeps state between images beyond its scratch (a Resizer, an
// AreaScratch), which is not safe for concurrent use: each goroutine that
// resizes owns one.
//
// Written here rather than taken from a library: the read path needs a
// resize of a window of the source, with its flip, straight into a batch
// slot, without allocating; the write path OpenCV's exact pixels without
// OpenCV; no Go library does either.
package resize
