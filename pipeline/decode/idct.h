#ifndef FFCVFS_DECODE_IDCT_H
#define FFCVFS_DECODE_IDCT_H

#include <stdio.h>
#include <jpeglib.h>

/* Replaces libjpeg's block IDCT, for the components of cinfo whose DCT
 * scaled size has no SIMD code in libjpeg-turbo (all but 1, 2, 4 and 8),
 * by ffj_idct_any. Call after jpeg_start_decompress (and
 * jpeg_crop_scanline), before reading scanlines. */
void ffj_hook_idct(j_decompress_ptr cinfo);

/* Nonzero (the default): the IDCT skips the frequencies a block has no
 * coefficients in. Tests set it to 0 to compare. */
extern int ffj_idct_shortcuts;

#endif
