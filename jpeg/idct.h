#ifndef FFCVFS_DECODE_IDCT_H
#define FFCVFS_DECODE_IDCT_H

#include <stdio.h>
#include <jpeglib.h>

/* The quantization tables of a decompression's components as floats, for
 * ffj_hook_idct; they must outlive the decompression. */
typedef struct ffj_idct_quant {
	float q[MAX_COMPONENTS][64];
} ffj_idct_quant;

/* Replaces libjpeg's block IDCT, for the components of cinfo whose DCT
 * scaled size has no SIMD code in libjpeg-turbo (all but 1, 2, 4 and 8),
 * by idct.c's, and points those components' dct_table (libjpeg's own
 * multiplier table, which only its IDCT reads) at their table in quant.
 * Call after jpeg_start_decompress (and jpeg_crop_scanline), before
 * reading scanlines. */
void ffj_hook_idct(j_decompress_ptr cinfo, ffj_idct_quant *quant);

/* Nonzero (the default): the IDCT skips the frequencies a block has no
 * coefficients in. Tests set it to 0 to compare. */
extern int ffj_idct_shortcuts;

#endif
