#ifndef FFCVFS_DECODE_RESIZE_H
#define FFCVFS_DECODE_RESIZE_H

#include <stdint.h>

/* The two passes of Resizer.ResizeWindow, over tables built in Go; see
 * resize.go for the arithmetic. Each output row oy is made from source rows
 * ystart[oy] .. ystart[oy]+yn[oy]-1, weighted by yw[yoff[oy]...], over the
 * width elements (3 per pixel) of each row starting at src_off, into acc;
 * then output pixel i of the row (in write order) is the kx taps (kx 1 or even)
 * of acc at element hx[i], 3 apart, weighted by hw, each pair j of
 * weights (w, w') as the pattern w w' w w' w w' 0 0 at element
 * (i/2)*8*kx + (i%2)*8 + j*16 (for kx 1, hw is not read). acc holds
 * width + 72 elements. gbase and gtab, room for out_w/16*3 and
 * out_w/16*3*kx*32 elements (or NULL), are scratch for the AVX-512 pass. */
void ffr_resize(unsigned char *dst, int dst_stride, int out_w, int out_h,
                const unsigned char *src, int src_stride, int src_off, int width,
                const int32_t *ystart, const int32_t *yn, const int32_t *yoff,
                const int32_t *yw, int kx, const int32_t *hx, const int16_t *hw,
                int16_t *acc, int32_t *gbase, int16_t *gtab);

/* ffr_use_avx2 turns the AVX2 passes on (where the CPU has AVX2) or off,
 * for tests of the others; returns whether they are on. Not safe while a
 * resize runs. */
int ffr_use_avx2(int on);

/* ffr_use_avx512 turns the AVX-512 horizontal pass on (where the CPU has
 * AVX-512 BW and the AVX2 passes are on) or off; returns whether it is
 * on. Not safe while a resize runs. */
int ffr_use_avx512(int on);

/* The passes used on this CPU: 2 AVX-512, 1 AVX2, 0 the portable ones. */
int ffr_path(void);

#endif
