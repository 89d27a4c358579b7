#include "resize.h"

/* Keep in step with wBits and accBits in resize.go. */
#define W_BITS 14
#define ACC_BITS 7
#define V_SHIFT (W_BITS - ACC_BITS)
#define V_HALF (1 << (V_SHIFT - 1))
#define H_SHIFT (W_BITS + ACC_BITS)
#define H_HALF (1 << (H_SHIFT - 1))

/* The vertical pass is plain loops over bytes that the compiler vectorizes;
 * on x86-64 it is also built for AVX2 and picked at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FFR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FFR_CLONES
#endif

FFR_CLONES
static void vpass(int32_t *restrict acc, const unsigned char *restrict src,
                  int stride, int width, int n, const int32_t *w) {
	const unsigned char *r0 = src, *r1 = src + stride, *r2 = src + 2 * stride;
	int i, t;
	switch (n) {
	case 1:
		for (i = 0; i < width; i++) {
			acc[i] = (int32_t)r0[i] << ACC_BITS;
		}
		return;
	case 2: {
		int32_t w0 = w[0], w1 = w[1];
		for (i = 0; i < width; i++) {
			acc[i] = ((int32_t)r0[i] * w0 + (int32_t)r1[i] * w1 + V_HALF) >> V_SHIFT;
		}
		return;
	}
	case 3: {
		int32_t w0 = w[0], w1 = w[1], w2 = w[2];
		for (i = 0; i < width; i++) {
			acc[i] = ((int32_t)r0[i] * w0 + (int32_t)r1[i] * w1 +
			          (int32_t)r2[i] * w2 + V_HALF) >> V_SHIFT;
		}
		return;
	}
	}
	for (i = 0; i < width; i++) {
		acc[i] = (int32_t)r0[i] * w[0] + V_HALF;
	}
	for (t = 1; t < n; t++) {
		const unsigned char *r = src + (long)t * stride;
		int32_t wt = w[t];
		for (i = 0; i < width; i++) {
			acc[i] += (int32_t)r[i] * wt;
		}
	}
	for (i = 0; i < width; i++) {
		acc[i] >>= V_SHIFT;
	}
}

/* Results need no clamping: weights are non-negative and sum to 1<<W_BITS
 * on both axes, so no value exceeds 255. */
static void hpass(unsigned char *restrict d, const int32_t *restrict acc,
                  int out_w, int k, const int32_t *restrict hx,
                  const int32_t *restrict hw) {
	int i, t;
	switch (k) {
	case 1:
		for (i = 0; i < out_w; i++, d += 3) {
			const int32_t *p = acc + hx[i];
			d[0] = (unsigned char)(p[0] >> ACC_BITS);
			d[1] = (unsigned char)(p[1] >> ACC_BITS);
			d[2] = (unsigned char)(p[2] >> ACC_BITS);
		}
		return;
	case 2:
		for (i = 0; i < out_w; i++, d += 3, hw += 2) {
			const int32_t *p = acc + hx[i];
			int32_t w0 = hw[0], w1 = hw[1];
			d[0] = (unsigned char)((p[0] * w0 + p[3] * w1 + H_HALF) >> H_SHIFT);
			d[1] = (unsigned char)((p[1] * w0 + p[4] * w1 + H_HALF) >> H_SHIFT);
			d[2] = (unsigned char)((p[2] * w0 + p[5] * w1 + H_HALF) >> H_SHIFT);
		}
		return;
	case 3:
		for (i = 0; i < out_w; i++, d += 3, hw += 3) {
			const int32_t *p = acc + hx[i];
			int32_t w0 = hw[0], w1 = hw[1], w2 = hw[2];
			d[0] = (unsigned char)((p[0] * w0 + p[3] * w1 + p[6] * w2 + H_HALF) >> H_SHIFT);
			d[1] = (unsigned char)((p[1] * w0 + p[4] * w1 + p[7] * w2 + H_HALF) >> H_SHIFT);
			d[2] = (unsigned char)((p[2] * w0 + p[5] * w1 + p[8] * w2 + H_HALF) >> H_SHIFT);
		}
		return;
	}
	for (i = 0; i < out_w; i++, d += 3, hw += k) {
		const int32_t *p = acc + hx[i];
		int32_t s0 = H_HALF, s1 = H_HALF, s2 = H_HALF;
		for (t = 0; t < k; t++, p += 3) {
			s0 += p[0] * hw[t];
			s1 += p[1] * hw[t];
			s2 += p[2] * hw[t];
		}
		d[0] = (unsigned char)(s0 >> H_SHIFT);
		d[1] = (unsigned char)(s1 >> H_SHIFT);
		d[2] = (unsigned char)(s2 >> H_SHIFT);
	}
}

void ffr_resize(unsigned char *dst, int dst_stride, int out_w, int out_h,
                const unsigned char *src, int src_stride, int src_off, int width,
                const int32_t *ystart, const int32_t *yn, const int32_t *yoff,
                const int32_t *yw, int kx, const int32_t *hx, const int32_t *hw,
                int32_t *acc) {
	int oy;
	for (oy = 0; oy < out_h; oy++) {
		vpass(acc, src + (long)ystart[oy] * src_stride + src_off, src_stride,
		      width, yn[oy], yw + yoff[oy]);
		hpass(dst + (long)oy * dst_stride, acc, out_w, kx, hx, hw);
	}
}
