#include "convert.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FFC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FFC_CLONES
#endif

/* Every loop is a plain strided copy or a table lookup over restrict
 * pointers, which the compiler vectorizes (gathers for the tables on
 * x86-64-v3); there is no per-element index function. */

/* The interleaved lookups: element j takes channel j mod 3's table. In
 * blocks of 24 elements (a multiple of 3 and of the vector widths) the
 * table offsets are a constant pattern, so the loop vectorizes. */
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

FFC_CLONES
void ffc_planar_u8(const uint8_t *restrict src, uint8_t *restrict out, size_t n) {
	uint8_t *restrict r = out, *restrict g = out + n, *restrict b = out + 2 * n;
	for (size_t i = 0; i < n; i++) {
		r[i] = src[3 * i];
		g[i] = src[3 * i + 1];
		b[i] = src[3 * i + 2];
	}
}

FFC_CLONES
void ffc_lut16(const uint8_t *restrict src, uint16_t *restrict out, size_t n, const uint16_t *restrict lut, int planar) {
	const uint16_t *restrict l0 = lut, *restrict l1 = lut + 256, *restrict l2 = lut + 512;
	if (planar) {
		uint16_t *restrict r = out, *restrict g = out + n, *restrict b = out + 2 * n;
		for (size_t i = 0; i < n; i++) {
			r[i] = l0[src[3 * i]];
			g[i] = l1[src[3 * i + 1]];
			b[i] = l2[src[3 * i + 2]];
		}
		return;
	}
	interleaved16(src, out, 3 * n, lut);
}

FFC_CLONES
void ffc_lut32(const uint8_t *restrict src, uint32_t *restrict out, size_t n, const uint32_t *restrict lut, int planar) {
	const uint32_t *restrict l0 = lut, *restrict l1 = lut + 256, *restrict l2 = lut + 512;
	if (planar) {
		uint32_t *restrict r = out, *restrict g = out + n, *restrict b = out + 2 * n;
		for (size_t i = 0; i < n; i++) {
			r[i] = l0[src[3 * i]];
			g[i] = l1[src[3 * i + 1]];
			b[i] = l2[src[3 * i + 2]];
		}
		return;
	}
	interleaved32(src, out, 3 * n, lut);
}
