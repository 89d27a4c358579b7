#include "convert.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define FFC_VBMI 1
#define FFC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FFC_CLONES
#endif

/* Every loop is a plain strided copy or a table lookup over restrict
 * pointers, which the compiler vectorizes or unrolls (GCC's generic tuning
 * emits no gathers for the tables); there is no per-element index
 * function. */

/* The interleaved lookups: element j takes channel j mod 3's table. In
 * blocks of 24 elements (a multiple of 3 and of the vector widths) the
 * table offsets are a constant pattern, with no division per element. */
static const uint16_t ffc_offsets[24] = {0, 256, 512, 0, 256, 512, 0, 256, 512, 0, 256, 512,
                                         0, 256, 512, 0, 256, 512, 0, 256, 512, 0, 256, 512};

#define FFC_INTERLEAVED(name, T)                                                          \
	static inline void name(const uint8_t *restrict src, T *restrict out, size_t m,   \
	                        const T *restrict lut) {                                  \
		size_t j = 0;                                                             \
		for (; j + 24 <= m; j += 24) {                                            \
			for (int k = 0; k < 24; k++) {                                    \
				out[j + k] = lut[ffc_offsets[k] + src[j + k]];            \
			}                                                                 \
		}                                                                         \
		for (; j < m; j++) {                                                      \
			out[j] = lut[256 * (j % 3) + src[j]];                             \
		}                                                                         \
	}

FFC_INTERLEAVED(interleaved16, uint16_t)
FFC_INTERLEAVED(interleaved32, uint32_t)

/* The planar lookups: channel c of pixel i to plane c. */
#define FFC_PLANAR(name, T)                                                                  \
	static inline void name(const uint8_t *restrict src, T *restrict out, size_t n,      \
	                        const T *restrict lut) {                                     \
		const T *restrict l0 = lut, *restrict l1 = lut + 256, *restrict l2 = lut + 512; \
		T *restrict r = out, *restrict g = out + n, *restrict b = out + 2 * n;       \
		for (size_t i = 0; i < n; i++) {                                             \
			r[i] = l0[src[3 * i]];                                               \
			g[i] = l1[src[3 * i + 1]];                                           \
			b[i] = l2[src[3 * i + 2]];                                           \
		}                                                                            \
	}

FFC_PLANAR(planar16, uint16_t)
FFC_PLANAR(planar32, uint32_t)

FFC_CLONES
void ffc_planar_u8(const uint8_t *restrict src, uint8_t *restrict out, size_t n) {
	uint8_t *restrict r = out, *restrict g = out + n, *restrict b = out + 2 * n;
	for (size_t i = 0; i < n; i++) {
		r[i] = src[3 * i];
		g[i] = src[3 * i + 1];
		b[i] = src[3 * i + 2];
	}
}

#ifdef FFC_VBMI
/* Planar 16-bit lookups with AVX-512 VBMI byte permutes: a table of 256
 * 16-bit values is four 128-byte halves (low and high bytes of entries
 * 0-127 and 128-255), and vpermi2b looks 64 indices up in 128 bytes at a
 * time, so 64 values take four permutes, two blends and the interleave of
 * low and high bytes, where a table takes 64 loads. The channels are first
 * split into planes of bytes, a block at a time. */
#define FFC_BLOCK 1024

/* The low and high bytes of a channel's 256 16-bit values. */
typedef struct {
	uint8_t lo[256], hi[256];
} ffc_split;

__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static void lut16_plane_vbmi(const uint8_t *restrict idx, uint16_t *restrict out, size_t n, const ffc_split *t, const uint16_t *restrict lut) {
	const __m512i lo0 = _mm512_loadu_si512(t->lo), lo1 = _mm512_loadu_si512(t->lo + 64);
	const __m512i lo2 = _mm512_loadu_si512(t->lo + 128), lo3 = _mm512_loadu_si512(t->lo + 192);
	const __m512i hi0 = _mm512_loadu_si512(t->hi), hi1 = _mm512_loadu_si512(t->hi + 64);
	const __m512i hi2 = _mm512_loadu_si512(t->hi + 128), hi3 = _mm512_loadu_si512(t->hi + 192);
	const __m512i first = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
	const __m512i second = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		__m512i v = _mm512_loadu_si512(idx + i);
		__mmask64 top = _mm512_movepi8_mask(v);
		__m512i l = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(lo0, v, lo1), _mm512_permutex2var_epi8(lo2, v, lo3));
		__m512i h = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(hi0, v, hi1), _mm512_permutex2var_epi8(hi2, v, hi3));
		/* Per 128-bit lane j, a holds values 16j..16j+7, b 16j+8..16j+15. */
		__m512i a = _mm512_unpacklo_epi8(l, h), b = _mm512_unpackhi_epi8(l, h);
		_mm512_storeu_si512(out + i, _mm512_permutex2var_epi64(a, first, b));
		_mm512_storeu_si512(out + i + 32, _mm512_permutex2var_epi64(a, second, b));
	}
	for (; i < n; i++) {
		out[i] = lut[idx[i]];
	}
}

/* Whether the CPU has AVX-512 VBMI, set once when the library loads
 * (before any worker calls in). */
static int have;

__attribute__((constructor)) static void ffc_detect(void) {
	__builtin_cpu_init();
	have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vbmi");
}

static void lut16_planar_vbmi(const uint8_t *restrict src, uint16_t *restrict out, size_t n, const uint16_t *restrict lut) {
	uint8_t planes[3 * FFC_BLOCK];
	ffc_split t[3];
	for (int c = 0; c < 3; c++) {
		for (int v = 0; v < 256; v++) {
			t[c].lo[v] = (uint8_t)lut[256 * c + v];
			t[c].hi[v] = (uint8_t)(lut[256 * c + v] >> 8);
		}
	}
	for (size_t b = 0; b < n; b += FFC_BLOCK) {
		size_t m = n - b < FFC_BLOCK ? n - b : FFC_BLOCK;
		ffc_planar_u8(src + 3 * b, planes, m);
		for (int c = 0; c < 3; c++) {
			lut16_plane_vbmi(planes + c * m, out + c * n + b, m, &t[c], lut + 256 * c);
		}
	}
}
#endif

FFC_CLONES
static void lut16_table(const uint8_t *restrict src, uint16_t *restrict out, size_t n, const uint16_t *restrict lut, int planar);

void ffc_no_vbmi(void) {
#ifdef FFC_VBMI
	have = 0;
#endif
}

void ffc_lut16(const uint8_t *restrict src, uint16_t *restrict out, size_t n, const uint16_t *restrict lut, int planar) {
#ifdef FFC_VBMI
	if (planar && have) {
		lut16_planar_vbmi(src, out, n, lut);
		return;
	}
#endif
	lut16_table(src, out, n, lut, planar);
}

FFC_CLONES
static void lut16_table(const uint8_t *restrict src, uint16_t *restrict out, size_t n, const uint16_t *restrict lut, int planar) {
	if (planar) {
		planar16(src, out, n, lut);
		return;
	}
	interleaved16(src, out, 3 * n, lut);
}

FFC_CLONES
void ffc_lut32(const uint8_t *restrict src, uint32_t *restrict out, size_t n, const uint32_t *restrict lut, int planar) {
	if (planar) {
		planar32(src, out, n, lut);
		return;
	}
	interleaved32(src, out, 3 * n, lut);
}

int ffc_path(void) {
#ifdef FFC_VBMI
	__builtin_cpu_init();
	if (have)
		return 2;
	return __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
#else
	return 0;
#endif
}
