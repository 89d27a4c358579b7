#ifndef FFCVFS_PIPELINE_CONVERT_H
#define FFCVFS_PIPELINE_CONVERT_H

#include <stddef.h>
#include <stdint.h>

/* The output stage: n packed RGB pixels src (HWC uint8) written to out in
 * NCHW (planar: all R, then G, then B) or NHWC order, as uint8 or through
 * per-channel lookup tables lut[3][256] as 16- or 32-bit values. */
void ffc_planar_u8(const uint8_t *src, uint8_t *out, size_t n);
void ffc_lut16(const uint8_t *src, uint16_t *out, size_t n, const uint16_t *lut, int planar);
void ffc_lut32(const uint8_t *src, uint32_t *out, size_t n, const uint32_t *lut, int planar);

/* The conversion used on this CPU: 2 AVX-512 VBMI, 1 x86-64-v3 (AVX2),
 * 0 portable. */
int ffc_path(void);

/* Makes ffc_lut16 keep to its portable path, for tests. */
void ffc_no_vbmi(void);

#endif
