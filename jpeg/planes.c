/* The last steps of libjpeg-turbo's decode, on planes decoded before:
 * fancy upsampling (jdsample.c: h2v1, h1v2, h2v2) and YCbCr-to-RGB
 * conversion (jdcolor.c), computed as libjpeg-turbo computes them, so that
 * a region equals a full decode's byte for byte (TestPlanesMatchDecode).
 * Only the region's rows and columns are made; neighbours outside it are
 * read as libjpeg reads them, the image's edges replicated. */

#include <stdint.h>
#include <string.h>

#include "jpeg.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FFP_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FFP_CLONES
#endif

/* jdcolor.c's fixed point: FIX(x) with 16 fraction bits. */
#define FFP_SCALEBITS 16
#define FFP_HALF ((int32_t)1 << (FFP_SCALEBITS - 1))
#define FFP_FIX(x) ((int32_t)((x) * (1L << FFP_SCALEBITS) + 0.5))

/* The most columns one pass upsamples; a region is made in strips. */
#define FFP_STRIP 512

static inline int ffp_clamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ffp_h2 writes the 2k outputs of k inputs in[0..k) upsampled 2x
 * horizontally, in[-1] and in[k] being their neighbours: each output 3/4
 * of the nearer input and 1/4 of the farther, plus bias[0] for the even
 * one and bias[1] for the odd one, shifted right by shift. */
static void ffp_h2_c(const int16_t *in, int k, int b0, int b1, int shift, unsigned char *out) {
	int i;
	for (i = 0; i < k; i++) {
		out[2 * i] = (unsigned char)((in[i] * 3 + in[i - 1] + b0) >> shift);
		out[2 * i + 1] = (unsigned char)((in[i] * 3 + in[i + 1] + b1) >> shift);
	}
}

static void ffp_h2(const int16_t *in, int k, int b0, int b1, int shift, unsigned char *out);

/* ffp_pairs writes n means of 2x2 samples: columns 2i and 2i+1 of rows a
 * and b. */
FFP_CLONES static void ffp_pairs(const unsigned char *a, const unsigned char *b, int n, unsigned char *out) {
	int i;
	for (i = 0; i < n; i++) {
		out[i] = (unsigned char)((a[2 * i] + a[2 * i + 1] + b[2 * i] + b[2 * i + 1] + 2) >> 2);
	}
}

/* ffp_colsum writes n column sums: 3·a + b across two rows, or a alone
 * for one (v 0). */
FFP_CLONES static void ffp_colsum(const unsigned char *a, const unsigned char *b, int v, int n, int16_t *out) {
	int i;
	if (v) {
		for (i = 0; i < n; i++) {
			out[i] = (int16_t)(a[i] * 3 + b[i]);
		}
	} else {
		for (i = 0; i < n; i++) {
			out[i] = (int16_t)a[i];
		}
	}
}

/* ffp_upsample returns columns [x0, x0+n) of output row y of plane c, made
 * in out (FFP_STRIP + 2 bytes) or read from the plane itself, as libjpeg's
 * upsampler makes them: h2v1 (3/4 of the nearer sample
 * and 1/4 of the farther, +1 and +2 before >> 2), h1v2 (the same across
 * rows: +1 for an even row, +2 for an odd one), h2v2 (column sums 3·near +
 * far across rows, then across columns, +8 and +7 before >> 4). The
 * neighbour of an edge sample is the sample itself, as libjpeg's edge
 * cases make it. */
static const unsigned char *ffp_upsample(const ffj_planes *p, int c, const unsigned char *plane, int y, int x0,
                                         int n, unsigned char *out) {
	const int pw = p->pw[c], ph = p->ph[c];
	int i;
	const unsigned char *in0, *in1;
	if (p->vr[c] == 1) {
		in0 = in1 = plane + (size_t)y * (size_t)pw;
	} else {
		/* The plane's row y/2 and, for an even row, the one above it,
		 * for an odd row the one below. */
		const int s = y >> 1;
		const int t = (y & 1) ? ffp_clamp(s + 1, 0, ph - 1) : ffp_clamp(s - 1, 0, ph - 1);
		in0 = plane + (size_t)s * (size_t)pw;
		in1 = plane + (size_t)t * (size_t)pw;
	}
	if (p->hr[c] == 1) {
		if (p->vr[c] == 1) {
			return in0 + x0;
		}
		{
			const int bias = 1 + (y & 1);
			for (i = 0; i < n; i++) {
				out[i] = (unsigned char)((in0[x0 + i] * 3 + in1[x0 + i] + bias) >> 2);
			}
		}
		return out;
	}
	{
		/* Columns c0..c1 of the plane make outputs 2·c0 .. 2·c1+1. */
		int16_t sum[FFP_STRIP / 2 + 4];
		const int c0 = x0 >> 1, c1 = (x0 + n - 1) >> 1, k = c1 - c0 + 1;
		const int v = p->vr[c] == 2;
		/* sum[1 + i] for column c0 + i, i in [-1, k]; beyond the
		 * plane's edges, the edge column. */
		const int lo = c0 > 0 ? -1 : 0, hi = c0 + k < pw ? k : k - 1;
		ffp_colsum(in0 + c0 + lo, in1 + c0 + lo, v, hi - lo + 1, sum + 1 + lo);
		if (lo == 0) {
			sum[0] = sum[1];
		}
		if (hi == k - 1) {
			sum[k + 1] = sum[k];
		}
		if (v) {
			ffp_h2(sum + 1, k, 8, 7, 4, out);
		} else {
			ffp_h2(sum + 1, k, 1, 2, 2, out);
		}
		return out + (x0 & 1);
	}
}

static inline unsigned char ffp_byte(int32_t v) { return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* ffp_ycc_c writes n pixels of RGB from Y, Cb and Cr as jdcolor.c's
 * ycc_rgb_convert does (its tables hold these expressions). */
static void ffp_ycc_c(const unsigned char *yp, const unsigned char *cb, const unsigned char *cr, int n,
                      unsigned char *out) {
	int i;
	for (i = 0; i < n; i++) {
		int32_t y = yp[i], b = (int32_t)cb[i] - 128, r = (int32_t)cr[i] - 128;
		int32_t rr = (FFP_FIX(1.40200) * r + FFP_HALF) >> FFP_SCALEBITS;
		int32_t gg = (-FFP_FIX(0.34414) * b + FFP_HALF - FFP_FIX(0.71414) * r) >> FFP_SCALEBITS;
		int32_t bb = (FFP_FIX(1.77200) * b + FFP_HALF) >> FFP_SCALEBITS;
		out[3 * i] = ffp_byte(y + rr);
		out[3 * i + 1] = ffp_byte(y + gg);
		out[3 * i + 2] = ffp_byte(y + bb);
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

_Static_assert(FFP_FIX(1.40200) == 26347 + 2 * 32767, "R's coefficients");
_Static_assert(FFP_FIX(1.77200) == 2 + 4 * 29032, "B's coefficients");
_Static_assert(FFP_FIX(0.71414) == 2 * 23401 && FFP_FIX(0.34414) == 22554, "G's coefficients");

/* ffp_ycc_avx2 is ffp_ycc_c 16 pixels at a time: the same 32-bit
 * products, shifts and clamping, then R, G and B interleaved by shuffles. */
__attribute__((target("avx2"))) static void ffp_ycc_avx2(const unsigned char *yp, const unsigned char *cb,
                                                         const unsigned char *cr, int n, unsigned char *out) {
	const __m256i c128 = _mm256_set1_epi16(128), half = _mm256_set1_epi32(FFP_HALF);
	const __m256i kr = _mm256_set1_epi32((int32_t)((uint32_t)32767 << 16 | 26347));
	const __m256i kb = _mm256_set1_epi32((int32_t)((uint32_t)29032 << 16 | 2));
	const __m256i kg = _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)-23401 << 16 | (uint16_t)-22554));
	const __m128i mR0 = _mm_setr_epi8(0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1, 5);
	const __m128i mR1 = _mm_setr_epi8(-1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10, -1);
	const __m128i mR2 = _mm_setr_epi8(-1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1, -1);
	const __m128i mG0 = _mm_setr_epi8(-1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1, -1);
	const __m128i mG1 = _mm_setr_epi8(5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1, 10);
	const __m128i mG2 = _mm_setr_epi8(-1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15, -1);
	const __m128i mB0 = _mm_setr_epi8(-1, -1, 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, -1, -1, 4, -1);
	const __m128i mB1 = _mm_setr_epi8(-1, 5, -1, -1, 6, -1, -1, 7, -1, -1, 8, -1, -1, 9, -1, -1);
	const __m128i mB2 = _mm_setr_epi8(10, -1, -1, 11, -1, -1, 12, -1, -1, 13, -1, -1, 14, -1, -1, 15);
	int i = 0;
	for (;; i += 16) {
		if (i + 16 > n) {
			/* The last pixels: the 16 that end them, some made twice. */
			if (n < 16 || i == n) {
				break;
			}
			i = n - 16;
		}
		/* Each product as madd_epi16 makes it, of a sample and a multiple
		 * of it by two coefficients that fit 16 bits and sum to the
		 * constant: 91881 = 26347 + 2·32767, 116130 = 2 + 4·29032,
		 * -22554·b - 46802·r = -22554·b - 23401·2r. unpack and packs
		 * undo each other's order within each 128-bit lane. */
		__m256i y = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(yp + i)));
		__m256i b = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(cb + i))), c128);
		__m256i r = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(cr + i))), c128);
		__m256i r2 = _mm256_add_epi16(r, r), b4 = _mm256_slli_epi16(b, 2);
		__m256i rlo = _mm256_unpacklo_epi16(r, r2), rhi = _mm256_unpackhi_epi16(r, r2);
		__m256i blo = _mm256_unpacklo_epi16(b, b4), bhi = _mm256_unpackhi_epi16(b, b4);
		__m256i glo = _mm256_unpacklo_epi16(b, r2), ghi = _mm256_unpackhi_epi16(b, r2);
#define FFP_TERM(v, k) _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(v, k), half), FFP_SCALEBITS)
		__m256i r16 = _mm256_add_epi16(y, _mm256_packs_epi32(FFP_TERM(rlo, kr), FFP_TERM(rhi, kr)));
		__m256i g16 = _mm256_add_epi16(y, _mm256_packs_epi32(FFP_TERM(glo, kg), FFP_TERM(ghi, kg)));
		__m256i b16 = _mm256_add_epi16(y, _mm256_packs_epi32(FFP_TERM(blo, kb), FFP_TERM(bhi, kb)));
#undef FFP_TERM
		/* 16 -> 8 bits clamped to 0..255, as range_limit does. */
		__m128i rr = _mm_packus_epi16(_mm256_castsi256_si128(r16), _mm256_extracti128_si256(r16, 1));
		__m128i gg = _mm_packus_epi16(_mm256_castsi256_si128(g16), _mm256_extracti128_si256(g16, 1));
		__m128i bb = _mm_packus_epi16(_mm256_castsi256_si128(b16), _mm256_extracti128_si256(b16, 1));
		__m128i o0 = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(rr, mR0), _mm_shuffle_epi8(gg, mG0)), _mm_shuffle_epi8(bb, mB0));
		__m128i o1 = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(rr, mR1), _mm_shuffle_epi8(gg, mG1)), _mm_shuffle_epi8(bb, mB1));
		__m128i o2 = _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(rr, mR2), _mm_shuffle_epi8(gg, mG2)), _mm_shuffle_epi8(bb, mB2));
		_mm_storeu_si128((__m128i *)(out + 3 * i), o0);
		_mm_storeu_si128((__m128i *)(out + 3 * i + 16), o1);
		_mm_storeu_si128((__m128i *)(out + 3 * i + 32), o2);
		if (i + 16 == n) {
			return;
		}
	}
	ffp_ycc_c(yp + i, cb + i, cr + i, n - i, out + 3 * i);
}

/* ffp_h2_avx2 is ffp_h2_c 16 inputs at a time. */
__attribute__((target("avx2"))) static void ffp_h2_avx2(const int16_t *in, int k, int b0, int b1, int shift,
                                                        unsigned char *out) {
	const __m256i e = _mm256_set1_epi16((short)b0), o = _mm256_set1_epi16((short)b1);
	const __m128i sh = _mm_cvtsi32_si128(shift);
	int i = 0;
	for (;; i += 16) {
		if (i + 16 > k) {
			if (k < 16 || i == k) {
				break;
			}
			i = k - 16;
		}
		__m256i a = _mm256_loadu_si256((const __m256i *)(in + i));
		__m256i l = _mm256_loadu_si256((const __m256i *)(in + i - 1));
		__m256i r = _mm256_loadu_si256((const __m256i *)(in + i + 1));
		__m256i t = _mm256_add_epi16(_mm256_add_epi16(a, a), a);
		__m256i ev = _mm256_srl_epi16(_mm256_add_epi16(_mm256_add_epi16(t, l), e), sh);
		__m256i od = _mm256_srl_epi16(_mm256_add_epi16(_mm256_add_epi16(t, r), o), sh);
		/* Bytes e0 o0 e1 o1 ...: within each lane, then the lanes. */
		__m256i lo = _mm256_unpacklo_epi16(ev, od), hi = _mm256_unpackhi_epi16(ev, od);
		__m256i bytes = _mm256_packus_epi16(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
		_mm256_storeu_si256((__m256i *)(out + 2 * i), _mm256_permute4x64_epi64(bytes, 0xd8));
		if (i + 16 == k) {
			return;
		}
	}
	ffp_h2_c(in + i, k - i, b0, b1, shift, out + 2 * i);
}

static int ffp_avx2 = -1;

static void ffp_h2(const int16_t *in, int k, int b0, int b1, int shift, unsigned char *out) {
	if (ffp_avx2) {
		ffp_h2_avx2(in, k, b0, b1, shift, out);
	} else {
		ffp_h2_c(in, k, b0, b1, shift, out);
	}
}

static void ffp_ycc(const unsigned char *yp, const unsigned char *cb, const unsigned char *cr, int n,
                    unsigned char *out) {
	if (ffp_avx2) {
		ffp_ycc_avx2(yp, cb, cr, n, out);
	} else {
		ffp_ycc_c(yp, cb, cr, n, out);
	}
}

void ffj_planes_init(int avx2) { ffp_avx2 = avx2 && __builtin_cpu_supports("avx2"); }
#else
static void ffp_h2(const int16_t *in, int k, int b0, int b1, int shift, unsigned char *out) {
	ffp_h2_c(in, k, b0, b1, shift, out);
}
#define ffp_ycc ffp_ycc_c
void ffj_planes_init(int avx2) { (void)avx2; }
#endif

static void ffp_gray(const unsigned char *yp, int n, unsigned char *out) {
	int i;
	for (i = 0; i < n; i++) {
		out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = yp[i];
	}
}

/* ffp_check checks a layout as ffj_planes_info makes them (1 or 3 planes,
 * Y at full size, each plane ceil(w/hr) x ceil(h/vr) with ratios of 1 or
 * 2), the planes' bytes, and a region [x, x+w) x [y, y+h) of an image of
 * iw x ih pixels written to dst_len bytes, rows stride apart; it sets
 * plane[c] to plane c's first byte. */
static int ffp_check(const ffj_planes *p, const unsigned char *data, size_t data_len, int x, int y, int w, int h,
                     int iw, int ih, size_t dst_len, size_t stride, const unsigned char *plane[3]) {
	size_t need = 0;
	int c;
	if ((p->n != 1 && p->n != 3) || p->w <= 0 || p->h <= 0 || p->hr[0] != 1 || p->vr[0] != 1) {
		return FFJ_ERR_ARG;
	}
	for (c = 0; c < p->n; c++) {
		if ((p->hr[c] != 1 && p->hr[c] != 2) || (p->vr[c] != 1 && p->vr[c] != 2) ||
		    (p->w + p->hr[c] - 1) / p->hr[c] != p->pw[c] || (p->h + p->vr[c] - 1) / p->vr[c] != p->ph[c]) {
			return FFJ_ERR_ARG;
		}
		plane[c] = data + need;
		need += (size_t)p->pw[c] * (size_t)p->ph[c];
	}
	if (need > data_len || x < 0 || y < 0 || w <= 0 || h <= 0 || (long long)x + w > iw || (long long)y + h > ih ||
	    stride < (size_t)w * 3 || (size_t)(h - 1) * stride + (size_t)w * 3 > dst_len) {
		return FFJ_ERR_ARG;
	}
	return FFJ_OK;
}

int ffj_planes_rgb(const ffj_planes *p, const unsigned char *data, size_t data_len,
                   int x, int y, int w, int h, unsigned char *dst, size_t dst_len, size_t stride) {
	const unsigned char *plane[3];
	int r, x0;

	if (ffp_check(p, data, data_len, x, y, w, h, p->w, p->h, dst_len, stride, plane) != FFJ_OK) {
		return FFJ_ERR_ARG;
	}
	for (r = 0; r < h; r++) {
		unsigned char *out = dst + (size_t)r * stride;
		const unsigned char *yrow = plane[0] + (size_t)(y + r) * (size_t)p->pw[0] + x;
		if (p->n == 1) {
			ffp_gray(yrow, w, out);
			continue;
		}
		for (x0 = 0; x0 < w; x0 += FFP_STRIP) {
			unsigned char cb[FFP_STRIP + 2], cr[FFP_STRIP + 2];
			int n = w - x0 < FFP_STRIP ? w - x0 : FFP_STRIP;
			ffp_ycc(yrow + x0, ffp_upsample(p, 1, plane[1], y + r, x + x0, n, cb),
			        ffp_upsample(p, 2, plane[2], y + r, x + x0, n, cr), n, out + (size_t)x0 * 3);
		}
	}
	return FFJ_OK;
}

/* ffp_half writes n samples of row y of plane c at half the image's
 * resolution: each the mean of the plane's samples under a 2x2 block of
 * the image (a sample of a plane subsampled 2x on an axis already covers
 * the block's two pixels on it), the image's last odd column or row
 * taken alone. */
static void ffp_half(const ffj_planes *p, int c, const unsigned char *plane, int y, int x0, int n,
                     unsigned char *out) {
	const int pw = p->pw[c], ph = p->ph[c], hr = p->hr[c], vr = p->vr[c];
	const unsigned char *r0, *r1;
	int i;
	if (vr == 2) {
		r0 = r1 = plane + (size_t)y * (size_t)pw;
	} else {
		r0 = plane + (size_t)(2 * y) * (size_t)pw;
		r1 = plane + (size_t)(2 * y + 1 < ph ? 2 * y + 1 : 2 * y) * (size_t)pw;
	}
	if (hr == 2) {
		for (i = 0; i < n; i++) {
			out[i] = (unsigned char)((r0[x0 + i] + r1[x0 + i] + 1) >> 1);
		}
		return;
	}
	/* The columns 2x and 2x+1; the last, when pw is odd, alone. */
	{
		int m = n;
		if (2 * (x0 + n) > pw) {
			m = n - 1;
		}
		ffp_pairs(r0 + 2 * x0, r1 + 2 * x0, m, out);
		if (m < n) {
			out[m] = (unsigned char)((r0[pw - 1] + r1[pw - 1] + 1) >> 1);
		}
	}
}

int ffj_planes_rgb_half(const ffj_planes *p, const unsigned char *data, size_t data_len,
                        int x, int y, int w, int h, unsigned char *dst, size_t dst_len, size_t stride) {
	const unsigned char *plane[3];
	int r, x0;

	if (ffp_check(p, data, data_len, x, y, w, h, (p->w + 1) / 2, (p->h + 1) / 2, dst_len, stride, plane) != FFJ_OK) {
		return FFJ_ERR_ARG;
	}
	for (r = 0; r < h; r++) {
		unsigned char *out = dst + (size_t)r * stride;
		for (x0 = 0; x0 < w; x0 += FFP_STRIP) {
			unsigned char yy[FFP_STRIP], cb[FFP_STRIP], cr[FFP_STRIP];
			int n = w - x0 < FFP_STRIP ? w - x0 : FFP_STRIP;
			ffp_half(p, 0, plane[0], y + r, x + x0, n, yy);
			if (p->n == 1) {
				ffp_gray(yy, n, out + (size_t)x0 * 3);
				continue;
			}
			ffp_half(p, 1, plane[1], y + r, x + x0, n, cb);
			ffp_half(p, 2, plane[2], y + r, x + x0, n, cr);
			ffp_ycc(yy, cb, cr, n, out + (size_t)x0 * 3);
		}
	}
	return FFJ_OK;
}
