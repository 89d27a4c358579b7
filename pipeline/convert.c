#include "convert.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FFC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FFC_CLONES
#endif

/* Every loop is a plain strided copy or a table lookup over restrict
 * pointers, which the compiler vectorizes (gathers for the tables on
 * x86-64-v3); there is no per-element index function. */

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
	for (size_t i = 0; i < n; i++) {
		out[3 * i] = l0[src[3 * i]];
		out[3 * i + 1] = l1[src[3 * i + 1]];
		out[3 * i + 2] = l2[src[3 * i + 2]];
	}
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
	for (size_t i = 0; i < n; i++) {
		out[3 * i] = l0[src[3 * i]];
		out[3 * i + 1] = l1[src[3 * i + 1]];
		out[3 * i + 2] = l2[src[3 * i + 2]];
	}
}
