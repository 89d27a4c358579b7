#include <string.h>

#include "resize.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Keep in step with wBits and accBits in resize.go. */
#define W_BITS 14
#define ACC_BITS 7
#define V_SHIFT (W_BITS - ACC_BITS)
#define V_HALF (1 << (V_SHIFT - 1))
#define H_SHIFT (W_BITS + ACC_BITS)
#define H_HALF (1 << (H_SHIFT - 1))
#define VCHUNK 256

/* On x86-64 both passes have AVX2 versions, used where the CPU has AVX2
 * (checked once, at load time); the plain passes below do the rest. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FFR_AVX2 1

static int ffr_have_avx2, ffr_have_avx512;

static int ffr_cpu_avx512(void) {
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

__attribute__((constructor)) static void ffr_init(void) {
	__builtin_cpu_init();
	ffr_have_avx2 = __builtin_cpu_supports("avx2");
	ffr_have_avx512 = ffr_have_avx2 && ffr_cpu_avx512();
}

#define VMAX_TAPS 16

__attribute__((target("avx2"), always_inline)) static inline int
vpass_avx2_n(int16_t *acc, const unsigned char *src, int stride, int width, const int n,
             const int32_t *w) {
	const __m256i half = _mm256_set1_epi32(V_HALF);
	__m256i wp[VMAX_TAPS / 2 + 1];
	int i, t;
	/* The weights, paired, broadcast once. */
	for (t = 0; t < n; t += 2) {
		int32_t wb = t + 1 < n ? w[t + 1] : 0;
		wp[t / 2] = _mm256_set1_epi32((int32_t)((uint32_t)w[t] | (uint32_t)wb << 16));
	}
	for (i = 0; i + 16 <= width; i += 16) {
		__m256i lo = half, hi = half;
		for (t = 0; t + 1 < n; t += 2) {
			const unsigned char *r = src + (long)t * stride + i;
			__m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)r));
			__m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(r + stride)));
			lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wp[t / 2]));
			hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wp[t / 2]));
		}
		if (n % 2 == 1) {
			/* The last row alone, paired with zeros. */
			const unsigned char *r = src + (long)(n - 1) * stride + i;
			__m256i c = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)r));
			__m256i z = _mm256_setzero_si256();
			lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(c, z), wp[n / 2]));
			hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(c, z), wp[n / 2]));
		}
		lo = _mm256_srai_epi32(lo, V_SHIFT);
		hi = _mm256_srai_epi32(hi, V_SHIFT);
		_mm256_storeu_si256((__m256i *)(acc + i), _mm256_packs_epi32(lo, hi));
	}
	return i;
}

/* vpass for 2 to VMAX_TAPS taps, 16 elements at a time: pairs of rows,
 * widened to int16 and interleaved, [a0 b0 a1 b1 ..], times the pair of
 * weights in one multiply-add, the weights broadcast once; the same int32
 * sums as vpass. The common tap counts have their loops unrolled. Returns
 * the elements done: none for more taps (shrinking more than 16 times),
 * which the plain pass does. */
__attribute__((target("avx2"))) static int vpass_avx2(int16_t *acc, const unsigned char *src,
                                                      int stride, int width, int n, const int32_t *w) {
	switch (n) {
	case 2:
		return vpass_avx2_n(acc, src, stride, width, 2, w);
	case 3:
		return vpass_avx2_n(acc, src, stride, width, 3, w);
	default:
		if (n > VMAX_TAPS) {
			return 0;
		}
		return vpass_avx2_n(acc, src, stride, width, n, w);
	}
}

/* vpass_avx512_n is vpass_avx2_n 32 elements at a time. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline int
vpass_avx512_n(int16_t *acc, const unsigned char *src, int stride, int width, const int n,
               const int32_t *w) {
	const __m512i half = _mm512_set1_epi32(V_HALF);
	__m512i wp[VMAX_TAPS / 2 + 1];
	int i, t;
	for (t = 0; t < n; t += 2) {
		int32_t wb = t + 1 < n ? w[t + 1] : 0;
		wp[t / 2] = _mm512_set1_epi32((int32_t)((uint32_t)w[t] | (uint32_t)wb << 16));
	}
	for (i = 0; i + 32 <= width; i += 32) {
		__m512i lo = half, hi = half;
		for (t = 0; t + 1 < n; t += 2) {
			const unsigned char *r = src + (long)t * stride + i;
			__m512i a = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)r));
			__m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(r + stride)));
			lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(a, b), wp[t / 2]));
			hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(a, b), wp[t / 2]));
		}
		if (n % 2 == 1) {
			const unsigned char *r = src + (long)(n - 1) * stride + i;
			__m512i c = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)r));
			__m512i z = _mm512_setzero_si512();
			lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(c, z), wp[n / 2]));
			hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(c, z), wp[n / 2]));
		}
		lo = _mm512_srai_epi32(lo, V_SHIFT);
		hi = _mm512_srai_epi32(hi, V_SHIFT);
		/* unpack and pack work within 128-bit lanes alike: the order
		 * comes back. */
		_mm512_storeu_si512(acc + i, _mm512_packs_epi32(lo, hi));
	}
	return i;
}

/* vpass_avx512 is vpass_avx2 with 512-bit registers. */
__attribute__((target("avx512f,avx512bw"))) static int vpass_avx512(int16_t *acc, const unsigned char *src,
                                                                   int stride, int width, int n, const int32_t *w) {
	switch (n) {
	case 2:
		return vpass_avx512_n(acc, src, stride, width, 2, w);
	case 3:
		return vpass_avx512_n(acc, src, stride, width, 3, w);
	default:
		if (n > VMAX_TAPS) {
			return 0;
		}
		return vpass_avx512_n(acc, src, stride, width, n, w);
	}
}

/* hsum_avx2 is the sum of taps 0..k-1 of outputs i (low lane) and i+1
 * (high lane), with H_HALF added: [R G B 0] in int32 in each lane. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
hsum_avx2(const int16_t *acc, const int k, const int32_t *hx, const int16_t *hw) {
	const __m256i pairs = _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1,
	                                       0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
	const int16_t *p = acc + hx[0], *q = acc + hx[1];
	__m256i s = _mm256_set1_epi32(H_HALF);
	int j;
	for (j = 0; j < k; j += 2) {
		__m256i x = _mm256_loadu2_m128i((const __m128i *)(q + 3 * j), (const __m128i *)(p + 3 * j));
		__m256i w = _mm256_loadu_si256((const __m256i *)(hw + 8 * j));
		s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_shuffle_epi8(x, pairs), w));
	}
	return _mm256_srai_epi32(s, H_SHIFT);
}

__attribute__((target("avx2"), always_inline)) static inline int
hpass_avx2_k(unsigned char *d, const int16_t *acc, int out_w, const int k, const int32_t *hx,
             const int16_t *hw) {
	/* After the packs below, lane 0 holds outputs 0 and 2, lane 1 outputs
	 * 1 and 3, as dwords [R G B 0]: gather them in order, then drop the
	 * zero bytes. */
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0);
	const __m128i rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
	int i = 0;
	/* Four outputs at a time, one 16-byte store (12 bytes of pixels, 4
	 * overwritten next), while it stays inside the row. */
	for (; i + 6 <= out_w; i += 4, d += 12, hw += 16 * k) {
		__m256i a = hsum_avx2(acc, k, hx + i, hw);
		__m256i b = hsum_avx2(acc, k, hx + i + 2, hw + 8 * k);
		__m256i x = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_setzero_si256());
		x = _mm256_permutevar8x32_epi32(x, order);
		_mm_storeu_si128((__m128i *)d, _mm_shuffle_epi8(_mm256_castsi256_si128(x), rgb));
	}
	/* Two at a time, two 4-byte stores. */
	for (; i + 2 < out_w; i += 2, d += 6, hw += 8 * k) {
		__m256i s = hsum_avx2(acc, k, hx + i, hw);
		s = _mm256_packus_epi16(_mm256_packs_epi32(s, s), s);
		int32_t a = _mm256_extract_epi32(s, 0), b = _mm256_extract_epi32(s, 4);
		memcpy(d, &a, 4);
		memcpy(d + 3, &b, 4);
	}
	return i;
}

/* hpass for k >= 2 taps (k even): two outputs in one multiply-add, one in
 * each 128-bit lane, the pixels rearranged into pairs with one byte
 * shuffle, four outputs per store; the common tap counts with their loops
 * unrolled. Returns the outputs done (an even number); the row's last
 * output, whose 4-byte store would pass the row's end, is left to hpass. */
__attribute__((target("avx2"))) static int hpass_avx2(unsigned char *d, const int16_t *acc,
                                                      int out_w, int k, const int32_t *hx,
                                                      const int16_t *hw) {
	switch (k) {
	case 2:
		return hpass_avx2_k(d, acc, out_w, 2, hx, hw);
	case 4:
		return hpass_avx2_k(d, acc, out_w, 4, hx, hw);
	default:
		return hpass_avx2_k(d, acc, out_w, k, hx, hw);
	}
}


#endif

int ffr_use_avx512(int on) {
#if defined(FFR_AVX2)
	ffr_have_avx512 = on && ffr_have_avx2 && ffr_cpu_avx512();
	return ffr_have_avx512;
#else
	(void)on;
	return 0;
#endif
}

int ffr_use_avx2(int on) {
#if defined(FFR_AVX2)
	ffr_have_avx2 = on && __builtin_cpu_supports("avx2");
	ffr_have_avx512 = ffr_have_avx512 && ffr_have_avx2;
	return ffr_have_avx2;
#else
	(void)on;
	return 0;
#endif
}

/* The plain vertical pass is loops over bytes that the compiler
 * vectorizes; on x86-64 it is also built for AVX2 and picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FFR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FFR_CLONES
#endif

FFR_CLONES
static void vpass(int16_t *restrict acc, const unsigned char *restrict src,
                  int stride, int width, int n, const int32_t *w) {
	const unsigned char *r0 = src, *r1 = src + stride, *r2 = src + 2 * stride;
	int i, t;
	switch (n) {
	case 1:
		for (i = 0; i < width; i++) {
			acc[i] = (int16_t)((int32_t)r0[i] << ACC_BITS);
		}
		return;
	case 2: {
		int32_t w0 = w[0], w1 = w[1];
		for (i = 0; i < width; i++) {
			acc[i] = (int16_t)(((int32_t)r0[i] * w0 + (int32_t)r1[i] * w1 + V_HALF) >> V_SHIFT);
		}
		return;
	}
	case 3: {
		int32_t w0 = w[0], w1 = w[1], w2 = w[2];
		for (i = 0; i < width; i++) {
			acc[i] = (int16_t)(((int32_t)r0[i] * w0 + (int32_t)r1[i] * w1 +
			                    (int32_t)r2[i] * w2 + V_HALF) >> V_SHIFT);
		}
		return;
	}
	}
	/* More taps: in chunks of a row held as int32. */
	for (i = 0; i < width; i += VCHUNK) {
		int32_t s[VCHUNK];
		int m = width - i < VCHUNK ? width - i : VCHUNK, j;
		for (j = 0; j < m; j++) {
			s[j] = (int32_t)r0[i + j] * w[0] + V_HALF;
		}
		for (t = 1; t < n; t++) {
			const unsigned char *r = src + (long)t * stride + i;
			int32_t wt = w[t];
			for (j = 0; j < m; j++) {
				s[j] += (int32_t)r[j] * wt;
			}
		}
		for (j = 0; j < m; j++) {
			acc[i + j] = (int16_t)(s[j] >> V_SHIFT);
		}
	}
}

/* Results need no clamping: weights are non-negative and sum to 1<<W_BITS
 * on both axes, so no value exceeds 255.
 *
 * The horizontal taps come in pairs (k is 1, the axis copied, or even; a
 * missing tap has weight 0): hw holds, for output i and pair j, the two
 * weights (w[2j], w[2j+1]) as the int16 pattern [w w' w w' w w' 0 0], at
 * hweights(hw, k, i, j): the patterns of outputs 2m and 2m+1 alternate,
 * so that one 32-byte load gives a pair of taps of both. A
 * pair of taps of all three channels is then one multiply-add of int16
 * pairs: the row's pixels t and t+1, [R G B R' G' B' ..], rearranged to
 * [R R' G G' B B' . .], times the pattern gives [R G B 0] in int32. The
 * loads read up to 5 elements past the last tap, and each output writes 4
 * bytes, the 4th overwritten by the next output; the caller's acc has
 * slack, and the last output of a row is written by the scalar code. */
static inline const int16_t *hweights(const int16_t *hw, int k, int i, int j) {
	return hw + (long)(i / 2) * 8 * k + (i % 2) * 8 + j * 16;
}

static inline void hpixel(unsigned char *d, const int16_t *p, int k, const int16_t *hw, int i) {
	int32_t s0 = H_HALF, s1 = H_HALF, s2 = H_HALF;
	int t;
	for (t = 0; t < k; t++, p += 3) {
		int32_t w = hweights(hw, k, i, t / 2)[t % 2];
		s0 += p[0] * w;
		s1 += p[1] * w;
		s2 += p[2] * w;
	}
	d[0] = (unsigned char)(s0 >> H_SHIFT);
	d[1] = (unsigned char)(s1 >> H_SHIFT);
	d[2] = (unsigned char)(s2 >> H_SHIFT);
}


#if defined(FFR_AVX2)
/* With AVX-512, the horizontal pass takes channel outputs (an output
 * pixel's R, G or B) 16 at a time, in write order: one 64-element window
 * of acc, two registers, from which one two-register word permute picks,
 * for each of the 16, its pair of taps, and one multiply-add weighs them;
 * a second permute and multiply-add for taps 2 and 3. Per 16 outputs, 48
 * channel outputs in 3 groups, against 8 of hpass_avx2's two-output
 * sums (each two loads, an insert, a shuffle, a multiply-add per pair of
 * taps). The groups' windows, permutes and weights are built once per
 * resize (hgroups); every row uses them. With 256-bit registers (8
 * channel outputs a group) the pass took 40 % more of a pipeline's CPU on
 * the Xeon measured. */
#define HG_N 16 /* channel outputs per group */

/* hgroups builds the groups of the first units*16 outputs (units*3
 * groups) for kx 2 or 4 taps: base[g] is the window's first element, and
 * tab holds for each group and pair of taps p (kx/2 of them) 32 permute
 * indexes, then 32 weights. Returns 0 when a group's taps do not fit in
 * a 64-element window. */
static int hgroups(int units, int kx, const int32_t *hx, const int16_t *hw, int32_t *base,
                   int16_t *tab) {
	const int np = kx / 2, ng = units * 3, nout = units * 16;
	int o, g, p, c;
	for (g = 0; g < ng; g++) {
		base[g] = INT32_MAX;
	}
	/* The windows: from each group's lowest tap weighted. Channel output
	 * j = 3o + c is group j/16's j%16th. */
	for (o = 0; o < nout; o++) {
		for (p = 0; p < np; p++) {
			const int16_t *w = hweights(hw, kx, o, p);
			for (c = 0; c < 3; c++) {
				int32_t e = hx[o] + 6 * p + c, *b = &base[(3 * o + c) >> 4];
				if (w[0] != 0 && e < *b) {
					*b = e;
				}
				if (w[1] != 0 && e + 3 < *b) {
					*b = e + 3;
				}
			}
		}
	}
	for (g = 0; g < ng; g++) {
		if (base[g] == INT32_MAX) {
			base[g] = 0; /* no weight in the group: weights sum to 1<<W_BITS, so never */
		}
	}
	/* The permutes and weights. A tap weighted zero may lie outside the
	 * window: any index in it will do. */
	for (o = 0; o < nout; o++) {
		for (p = 0; p < np; p++) {
			const int16_t *w = hweights(hw, kx, o, p);
			for (c = 0; c < 3; c++) {
				int j = 3 * o + c;
				int16_t *t = tab + (long)(j >> 4) * np * 64 + p * 64 + 2 * (j & 15);
				int32_t e = hx[o] + 6 * p + c - base[j >> 4];
				int32_t i0 = w[0] != 0 ? e : 0, i1 = w[1] != 0 ? e + 3 : 0;
				if ((uint32_t)i0 >= 64 || (uint32_t)i1 >= 64) {
					return 0;
				}
				t[0] = (int16_t)i0;
				t[1] = (int16_t)i1;
				t[32] = w[0];
				t[33] = w[1];
			}
		}
	}
	return 1;
}

/* hpass_avx512_n writes ng groups of a row for np pairs of taps (np a
 * constant once inlined): the permutes and multiply-adds of its pairs,
 * summed. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
hpass_avx512_n(unsigned char *d, const int16_t *acc, int ng, const int np, const int32_t *base,
               const int16_t *tab) {
	const __m512i half = _mm512_set1_epi32(H_HALF);
	int g, p;
	for (g = 0; g < ng; g++, d += HG_N, tab += np * 64) {
		const int16_t *a = acc + base[g];
		__m512i lo = _mm512_loadu_si512(a), hi = _mm512_loadu_si512(a + 32), s = half;
		for (p = 0; p < np; p++) {
			__m512i x = _mm512_permutex2var_epi16(lo, _mm512_loadu_si512(tab + p * 64), hi);
			s = _mm512_add_epi32(s, _mm512_madd_epi16(x, _mm512_loadu_si512(tab + p * 64 + 32)));
		}
		_mm_storeu_si128((__m128i *)d, _mm512_cvtepi32_epi8(_mm512_srai_epi32(s, H_SHIFT)));
	}
}

/* hpass_avx512 writes the units*16 first outputs of a row; acc holds 64
 * elements from every base[g]. */
__attribute__((target("avx512f,avx512bw"))) static void
hpass_avx512(unsigned char *d, const int16_t *acc, int units, int kx, const int32_t *base,
             const int16_t *tab) {
	if (kx == 2) {
		hpass_avx512_n(d, acc, units * 3, 1, base, tab);
	} else {
		hpass_avx512_n(d, acc, units * 3, 2, base, tab);
	}
}
#endif

static void hpass(unsigned char *restrict d, const int16_t *restrict acc,
                  int out_w, int k, const int32_t *restrict hx,
                  const int16_t *restrict hw) {
	int i = 0;
	if (k == 1) {
		/* An axis copied: the taps' weights are all 1<<W_BITS. */
		for (; i < out_w; i++, d += 3) {
			const int16_t *p = acc + hx[i];
			d[0] = (unsigned char)(p[0] >> ACC_BITS);
			d[1] = (unsigned char)(p[1] >> ACC_BITS);
			d[2] = (unsigned char)(p[2] >> ACC_BITS);
		}
		return;
	}
#if defined(FFR_AVX2)
	if (ffr_have_avx2) {
		i = hpass_avx2(d, acc, out_w, k, hx, hw);
		d += 3 * i;
	}
#endif
#if defined(__SSE2__)
	const __m128i half = _mm_set1_epi32(H_HALF);
	for (; i < out_w - 1; i++, d += 3) {
		const int16_t *p = acc + hx[i];
		__m128i s = half;
		int t;
		for (t = 0; t < k; t += 2, p += 6) {
			__m128i a = _mm_loadl_epi64((const __m128i *)p);
			__m128i b = _mm_loadl_epi64((const __m128i *)(p + 3));
			__m128i w = _mm_loadu_si128((const __m128i *)hweights(hw, k, i, t / 2));
			s = _mm_add_epi32(s, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), w));
		}
		s = _mm_srai_epi32(s, H_SHIFT);
		s = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
		int32_t px = _mm_cvtsi128_si32(s);
		memcpy(d, &px, 4);
	}
#endif
	for (; i < out_w; i++, d += 3) {
		hpixel(d, acc + hx[i], k, hw, i);
	}
}

void ffr_resize(unsigned char *dst, int dst_stride, int out_w, int out_h,
                const unsigned char *src, int src_stride, int src_off, int width,
                const int32_t *ystart, const int32_t *yn, const int32_t *yoff,
                const int32_t *yw, int kx, const int32_t *hx, const int16_t *hw,
                int16_t *acc, int32_t *gbase, int16_t *gtab) {
	int oy, units = 0;
#if defined(FFR_AVX2)
	if (ffr_have_avx512 && (kx == 2 || kx == 4) && gbase != NULL) {
		units = out_w / 16;
		if (units > 0 && !hgroups(units, kx, hx, hw, gbase, gtab)) {
			units = 0;
		}
	}
#endif
	for (oy = 0; oy < out_h; oy++) {
		const unsigned char *s = src + (long)ystart[oy] * src_stride + src_off;
		int done = 0;
#if defined(FFR_AVX2)
		if (ffr_have_avx512 && yn[oy] >= 2) {
			done = vpass_avx512(acc, s, src_stride, width, yn[oy], yw + yoff[oy]);
		}
		if (ffr_have_avx2 && yn[oy] >= 2) {
			done += vpass_avx2(acc + done, s + done, src_stride, width - done, yn[oy], yw + yoff[oy]);
		}
#endif
		vpass(acc + done, s + done, src_stride, width - done, yn[oy], yw + yoff[oy]);
		unsigned char *d = dst + (long)oy * dst_stride;
#if defined(FFR_AVX2)
		if (units > 0) {
			/* 16 outputs a unit, an even number: the rest start on a
			 * pair of hw's patterns. */
			hpass_avx512(d, acc, units, kx, gbase, gtab);
			if (units * 16 < out_w) {
				hpass(d + 48 * units, acc, out_w - 16 * units, kx, hx + 16 * units,
				      hw + (long)8 * units * 8 * kx);
			}
			continue;
		}
#endif
		hpass(d, acc, out_w, kx, hx, hw);
	}
}

int ffr_path(void) {
#if defined(FFR_AVX2)
	return ffr_have_avx512 ? 2 : ffr_have_avx2 ? 1 : 0;
#else
	return 0;
#endif
}
