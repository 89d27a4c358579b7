#ifndef FFCVFS_DECODE_JPEG_H
#define FFCVFS_DECODE_JPEG_H

#include <stddef.h>
#include <stdint.h>

/* Return codes of the ffj_* functions. */
#define FFJ_OK 0
#define FFJ_ERR_LIBJPEG 1   /* libjpeg reported an error; message in ffj_message */
#define FFJ_ERR_ARG 2       /* invalid argument (region, scale, buffer size) */
#define FFJ_ERR_NOMEM 3
#define FFJ_ERR_CORRUPT 4   /* the image is not what it should be; message in ffj_message */
#define FFJ_ERR_INEXACT 5   /* a transcode would not keep the pixels; message in msg */
#define FFJ_ERR_TOOBIG 6    /* a transcode would take more memory than allowed; message in msg */
#define FFJ_ERR_NOPLANES 7  /* a layout ffj_planes_rgb does not convert; message in ffj_message */

typedef struct ffj_decoder ffj_decoder;

ffj_decoder *ffj_new(void);
void ffj_free(ffj_decoder *d);

/* With on set, DCT-scaled decodes use libjpeg's own IDCT at every scale;
 * by default the scales libjpeg-turbo has no SIMD code for use idct.c's. */
void ffj_use_libjpeg_idct(ffj_decoder *d, int on);

/* With on set, JPEGs are entropy-decoded by libjpeg's Huffman decoder; by
 * default single-scan sequential ones are by huff.c's. */
void ffj_use_libjpeg_entropy(ffj_decoder *d, int on);
/* Whether the last ffj_decode_region used huff.c's decoder. */
int ffj_entropy_hooked(ffj_decoder *d);

/* Message of the last error (or "" when none). Valid until the next call. */
const char *ffj_message(ffj_decoder *d);
/* Last non-fatal warning of the last call, or "". */
const char *ffj_warning(ffj_decoder *d);

int ffj_header(ffj_decoder *d, const unsigned char *src, size_t n, int *w, int *h);

/* Where ffj_decode_region put the region: w x h pixels, the first at
 * dst + off, rows stride bytes apart. */
typedef struct ffj_region {
	int w, h;
	size_t off, stride;
} ffj_region;

/* Decodes the region [x, x+w) x [y, y+h) of full-resolution pixels at scale
 * m/8 (1 <= m <= 8) as RGB into dst (dst_len bytes). An image whose frame
 * header says other than frame_w x frame_h (when frame_w > 0), or more than
 * max_pixels pixels (when max_pixels > 0), is FFJ_ERR_CORRUPT, before any
 * memory is given to it. The scaled region is
 * rounded outward. With dst_stride > 0 its rows go dst_stride bytes apart
 * from dst itself; with dst_stride 0 libjpeg writes its rows into dst as
 * they are (no copy), which may start left of the region and are as wide
 * as the scaled image at most, and *out says where the region is. src and
 * dst are used only during the call. */
int ffj_decode_region(ffj_decoder *d, const unsigned char *src, size_t n,
                      int x, int y, int w, int h, int m,
                      unsigned char *dst, size_t dst_len, int dst_stride,
                      int frame_w, int frame_h, long long max_pixels,
                      ffj_region *out);

/* Transcodes the JPEG src losslessly (the same DCT coefficients) to one with
 * a restart marker every *k_out MCUs, the divisor of the MCUs per row
 * nearest target, with optimized Huffman tables and the source's APPn and
 * COM markers, as they were. *out is malloc'd; the caller frees it. An image
 * of more than max_pixels pixels, or whose coefficients and output would
 * take more than max_mem bytes, is FFJ_ERR_TOOBIG before its coefficients
 * are read; a progressive image whose scans leave coefficients incomplete
 * (which decoders smooth, and a sequential copy could not) is
 * FFJ_ERR_INEXACT. On an error, msg (msglen bytes) says why. */
int ffj_add_restarts(const unsigned char *src, size_t n, int target,
                     long long max_pixels, long long max_mem,
                     unsigned char **out, size_t *out_len, int *k_out,
                     char *msg, int msglen);

/* How ffj_rst_scan stopped. */
#define FFJ_RST_N 1   /* the n-th interval ended at an RSTn */
#define FFJ_RST_EOI 2 /* an interval ended at EOI */
#define FFJ_RST_BAD 3 /* an RSTn out of turn, another marker, or the data's end */

/* Finds the restart intervals of the entropy-coded data from src[scan] on:
 * records the offsets of the first byte (starts) and of the marker after it
 * (ends) of each, up to n (1 <= n, starts and ends have room for n), and
 * returns how many, *how saying where it stopped. len is at most INT32_MAX. */
int ffj_rst_scan(const unsigned char *src, size_t len, size_t scan, int n,
                 int32_t *starts, int32_t *ends, int *how);

/* A JPEG image as its component planes after entropy decoding and the
 * inverse DCT, at full resolution: n planes (1: grayscale, 3: Y, Cb, Cr),
 * plane c pw[c] x ph[c] bytes, one after another, rows packed; hr[c] and
 * vr[c] (1 or 2) are what libjpeg upsamples it by to the image's w x h. */
typedef struct ffj_planes {
	int w, h, n;
	int pw[3], ph[3], hr[3], vr[3];
} ffj_planes;

/* Reads the header of src into *p. FFJ_ERR_NOPLANES for a layout
 * ffj_planes_rgb cannot turn into libjpeg's RGB (not grayscale or YCbCr,
 * other sampling ratios than 1 and 2, chroma too narrow for libjpeg's
 * fancy upsampling); frame_w, frame_h and max_pixels as in
 * ffj_decode_region. */
int ffj_planes_info(ffj_decoder *d, const unsigned char *src, size_t n,
                    int frame_w, int frame_h, long long max_pixels, ffj_planes *p);

/* Decodes src, whose layout ffj_planes_info gave as *p, into its planes
 * (dst_len bytes at least the planes' sum). Damage anywhere in the image is
 * an error. */
int ffj_decode_planes(ffj_decoder *d, const unsigned char *src, size_t n,
                      const ffj_planes *p, unsigned char *dst, size_t dst_len);

/* Writes the region [x, x+w) x [y, y+h) of the image whose planes are data
 * as packed RGB into dst, rows stride bytes apart: the pixels libjpeg's
 * full decode gives there, byte for byte (its fancy upsampling and
 * YCbCr-to-RGB conversion). FFJ_ERR_ARG for a region outside the image or
 * buffers too small. */
int ffj_planes_rgb(const ffj_planes *p, const unsigned char *data, size_t data_len,
                   int x, int y, int w, int h, unsigned char *dst, size_t dst_len, size_t stride);

/* Writes the region [x, x+w) x [y, y+h) of the image at half its
 * resolution ((w+1)/2 x (h+1)/2 pixels: each the mean of a 2x2 block, the
 * last odd column or row alone) as packed RGB into dst, rows stride bytes
 * apart: each plane's samples averaged to that resolution, then converted
 * to RGB as libjpeg converts. */
int ffj_planes_rgb_half(const ffj_planes *p, const unsigned char *data, size_t data_len,
                        int x, int y, int w, int h, unsigned char *dst, size_t dst_len, size_t stride);

/* Chooses ffj_planes_rgb's colour conversion: with avx2 set, the AVX2
 * one where the CPU has AVX2; the portable one otherwise. Call it before
 * the first conversion. */
void ffj_planes_init(int avx2);

/* The code used on this CPU: 1 x86-64-v3 (AVX2: the entropy decoder's and
 * IDCT's clones, the restart scan), 0 portable. */
int ffj_path(void);

#endif
