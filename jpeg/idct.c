#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <jpeglib.h>

#include "idct.h"

/* libjpeg's inverse-DCT module as jddctmgr.c lays it out (jpegint.h, which
 * is not installed): a start_pass method, then one block method per
 * component. The layout has been the same since IJG's libjpeg 6b. */
typedef void (*ffj_idct_method)(j_decompress_ptr cinfo, jpeg_component_info *compptr,
                                JCOEFPTR coef_block, JSAMPARRAY output_buf,
                                JDIMENSION output_col);
struct ffj_inverse_dct {
	void (*start_pass)(j_decompress_ptr cinfo);
	ffj_idct_method inverse_DCT[MAX_COMPONENTS];
};

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

#define FFJ_MAXN 16

/* basis[n][x] holds, for an n-point output, a(u, x)/sqrt(8) in lane u:
 * a(0, x) = 1 and a(u, x) = sqrt(2) cos((2x+1) u pi / 2n), lanes u >= n
 * zero. basis_t[n][u] holds the same values transposed, x in lanes 0..15.
 * Their product is the scaled IDCT of libjpeg 7's jidctint.c (each output
 * is the n-point IDCT of the block's lowest min(n, 8) frequencies, with
 * the DC mapping to the same level), computed in floating point. */
static v8f basis[FFJ_MAXN + 1][FFJ_MAXN];
static v8f basis_t[FFJ_MAXN + 1][8][2];

__attribute__((constructor)) static void ffj_idct_init(void) {
	int n, x, u;
	for (n = 1; n <= FFJ_MAXN; n++) {
		for (x = 0; x < n; x++) {
			for (u = 0; u < 8 && u < n; u++) {
				double a = u == 0 ? 1 : sqrt(2) * cos((2 * x + 1) * u * M_PI / (2 * n));
				a /= sqrt(8);
				basis[n][x][u] = (float)a;
				basis_t[n][u][x / 8][x % 8] = (float)a;
			}
		}
	}
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FFJ_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FFJ_CLONES
#endif

typedef int16_t v8s __attribute__((vector_size(16)));
typedef uint16_t v8us __attribute__((vector_size(16)));
typedef uint8_t v8b __attribute__((vector_size(8)));

/* Rounds, offsets by 128 and saturates 8 values to bytes. */
static inline v8b ffj_to_bytes(v8f f) {
	const v8f off = {128.5f, 128.5f, 128.5f, 128.5f, 128.5f, 128.5f, 128.5f, 128.5f};
	const v8f zero = {0};
	f += off;
	f = (v8f)((v8i)f & (f > zero)); /* negatives (and NaN) to 0, so truncation rounds */
	v8i i = __builtin_convertvector(f, v8i);
	v8b out;
#if defined(__SSE2__)
	__m128i lo, hi;
	memcpy(&lo, &i, 16);
	memcpy(&hi, (char *)&i + 16, 16);
	__m128i b = _mm_packus_epi16(_mm_packs_epi32(lo, hi), _mm_setzero_si128());
	memcpy(&out, &b, 8);
#else
	int x;
	for (x = 0; x < 8; x++) {
		out[x] = (uint8_t)(i[x] > 255 ? 255 : i[x]);
	}
#endif
	return out;
}

/* Stores the first n (1..8) bytes of b at p, with copies of constant size. */
static inline void ffj_store(unsigned char *p, v8b b, int n) {
	switch (n) {
	case 8: memcpy(p, &b, 8); break;
	case 7: memcpy(p, &b, 4); memcpy(p + 4, (char *)&b + 4, 3); break;
	case 6: memcpy(p, &b, 4); memcpy(p + 4, (char *)&b + 4, 2); break;
	case 5: memcpy(p, &b, 4); p[4] = b[4]; break;
	case 4: memcpy(p, &b, 4); break;
	case 3: memcpy(p, &b, 2); p[2] = b[2]; break;
	case 2: memcpy(p, &b, 2); break;
	default: p[0] = b[0];
	}
}

/* The n-point IDCT of the kk×kk lowest frequencies of a block (the others
 * zero), with n and kk constants once inlined. */
static inline __attribute__((always_inline)) void
ffj_idct_body(const int n, const int kk, const v8f *t, JSAMPARRAY out, JDIMENSION col) {
	const float *b = (const float *)basis[n];
	const v8f(*bt)[2] = basis_t[n];
	v8f r[FFJ_MAXN];
	int y, v, u;
	/* Columns: r[y] = sum over v of basis[n][y][v] * t[v]. */
	for (y = 0; y < n; y++) {
		v8f s = t[0] * b[y * 8];
		for (v = 1; v < kk; v++) {
			s += t[v] * b[y * 8 + v];
		}
		r[y] = s;
	}
	/* Rows: out[y][x] = sum over u of r[y][u] * basis[n][x][u]. */
	for (y = 0; y < n; y++) {
		v8f lo = bt[0][0] * r[y][0], hi = bt[0][1] * r[y][0];
		for (u = 1; u < kk; u++) {
			lo += bt[u][0] * r[y][u];
			if (n > 8) {
				hi += bt[u][1] * r[y][u];
			}
		}
		if (n > 8) {
			ffj_store(out[y] + col, ffj_to_bytes(lo), 8);
			ffj_store(out[y] + col + 8, ffj_to_bytes(hi), n - 8);
		} else {
			ffj_store(out[y] + col, ffj_to_bytes(lo), n);
		}
	}
}

/* Zero turns the shortcut over the 4 lowest frequencies off, for tests:
 * it gives the bytes the whole transform gives. */
int ffj_idct_shortcuts = 1;

/* One block: dequantize the k = min(n, 8) lowest rows and columns, then
 * the IDCT over all of them, or over the 4 lowest when the others are zero
 * (terms dropped for zeros add zeros: the sums are the same), or a flat
 * block when only the DC is nonzero. (A shortcut over the 2 lowest, which
 * 20-30 % of blocks allow, saved nothing measurable.) */
static inline __attribute__((always_inline)) void
ffj_idct_n(const int n, jpeg_component_info *compptr, JCOEFPTR coef, JSAMPARRAY out, JDIMENSION col) {
	const int k = n < 8 ? n : 8;
	/* The quantization table as floats (ffj_hook_idct): each product is
	 * rounded once, as the float of the integer product would be. */
	const float *qf = (const float *)compptr->dct_table;
	v8f t[8];
	uint64_t ac = 0, high = 0;
	int v, y;
	/* Lanes below k: the columns this IDCT reads. */
	const v8s lanes = {-1, k > 1 ? -1 : 0, k > 2 ? -1 : 0, k > 3 ? -1 : 0,
	                   k > 4 ? -1 : 0, k > 5 ? -1 : 0, k > 6 ? -1 : 0, k > 7 ? -1 : 0};
	for (v = 0; v < k; v++) {
		v8s c;
		v8f q;
		uint64_t w[2];
		memcpy(&c, coef + v * 8, sizeof(c));
		memcpy(&q, qf + v * 8, sizeof(q));
		c &= lanes;
		t[v] = __builtin_convertvector(__builtin_convertvector(c, v8i), v8f) * q;
		memcpy(w, &c, sizeof(w));
		/* AC coefficients; those in columns 4..7 or rows 4... */
		ac |= v == 0 ? (w[0] >> 16) | w[1] : w[0] | w[1];
		high |= v < 4 ? w[1] : w[0] | w[1];
	}
	if (ac == 0) {
		v8f f = {0};
		f[0] = t[0][0] / 8;
		v8b px = ffj_to_bytes(f);
		for (y = 0; y < n; y++) {
			memset(out[y] + col, px[0], (size_t)n);
		}
		return;
	}
	if (high == 0 && k > 4 && ffj_idct_shortcuts) {
		ffj_idct_body(n, 4, t, out, col);
	} else {
		ffj_idct_body(n, k, t, out, col);
	}
}

#define FFJ_IDCT(N)                                                                    \
	FFJ_CLONES static void ffj_idct_##N(j_decompress_ptr cinfo, jpeg_component_info *c, \
	                                    JCOEFPTR coef, JSAMPARRAY out, JDIMENSION col) { \
		(void)cinfo;                                                                   \
		ffj_idct_n(N, c, coef, out, col);                                              \
	}
FFJ_IDCT(3)
FFJ_IDCT(5)
FFJ_IDCT(6)
FFJ_IDCT(7)
FFJ_IDCT(9)
FFJ_IDCT(10)
FFJ_IDCT(11)
FFJ_IDCT(12)
FFJ_IDCT(13)
FFJ_IDCT(14)
FFJ_IDCT(15)
FFJ_IDCT(16)

/* libjpeg's own scaled IDCTs (exported by libjpeg-turbo, declared only in
 * its internal jdct.h), weak so that a library without them links and is
 * simply never hooked. */
#define FFJ_LIBJPEG_IDCT(N) \
	extern void jpeg_idct_##N##x##N(j_decompress_ptr, jpeg_component_info *, JCOEFPTR, JSAMPARRAY, JDIMENSION) __attribute__((weak));
FFJ_LIBJPEG_IDCT(3)
FFJ_LIBJPEG_IDCT(5)
FFJ_LIBJPEG_IDCT(6)
FFJ_LIBJPEG_IDCT(7)
FFJ_LIBJPEG_IDCT(9)
FFJ_LIBJPEG_IDCT(10)
FFJ_LIBJPEG_IDCT(11)
FFJ_LIBJPEG_IDCT(12)
FFJ_LIBJPEG_IDCT(13)
FFJ_LIBJPEG_IDCT(14)
FFJ_LIBJPEG_IDCT(15)
FFJ_LIBJPEG_IDCT(16)

/* ffj_idct_for returns, for an n-point IDCT, libjpeg's method (what
 * jddctmgr.c installs for n with JDCT_ISLOW) and ours; both NULL for the
 * sizes libjpeg-turbo has SIMD code for (1, 2, 4, 8). */
static void ffj_idct_for(int n, ffj_idct_method *theirs, ffj_idct_method *ours) {
	*theirs = *ours = NULL;
	switch (n) {
#define FFJ_CASE(N)                         \
	case N:                                 \
		*theirs = jpeg_idct_##N##x##N;      \
		*ours = ffj_idct_##N;               \
		break;
	FFJ_CASE(3)
	FFJ_CASE(5)
	FFJ_CASE(6)
	FFJ_CASE(7)
	FFJ_CASE(9)
	FFJ_CASE(10)
	FFJ_CASE(11)
	FFJ_CASE(12)
	FFJ_CASE(13)
	FFJ_CASE(14)
	FFJ_CASE(15)
	FFJ_CASE(16)
#undef FFJ_CASE
	}
}

void ffj_hook_idct(j_decompress_ptr cinfo, ffj_idct_quant *quant) {
#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && JPEG_LIB_VERSION < 70
	struct ffj_inverse_dct *idct = (struct ffj_inverse_dct *)cinfo->idct;
	jpeg_component_info *c = cinfo->comp_info;
	int ci;
	if (idct == NULL || cinfo->dct_method != JDCT_ISLOW) {
		return;
	}
	for (ci = 0; ci < cinfo->num_components && ci < MAX_COMPONENTS; ci++, c++) {
		ffj_idct_method theirs, ours;
		ffj_idct_for(c->DCT_scaled_size, &theirs, &ours);
		/* Replace only a method recognized as libjpeg's own for this size:
		 * then the module is laid out as assumed. */
		if (theirs != NULL && idct->inverse_DCT[ci] == theirs && c->quant_table != NULL) {
			int i;
			for (i = 0; i < 64; i++) {
				quant->q[ci][i] = (float)c->quant_table->quantval[i];
			}
			c->dct_table = quant->q[ci];
			idct->inverse_DCT[ci] = ours;
		}
	}
#else
	(void)cinfo;
	(void)quant;
#endif
}
