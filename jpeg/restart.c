#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg.h"

/* Lossless transcoding of a JPEG to one with restart markers: the DCT
 * coefficients are read (jpeg_read_coefficients) and written again
 * (jpeg_write_coefficients), as jpegtran -restart does, so every decoder
 * gives the same pixels as from the original. Where it could not promise
 * that, it refuses:
 *  - a progressive image whose scans leave some coefficient incomplete (cut
 *    short, or DC only): decoders smooth such an image's blocks (libjpeg's
 *    block smoothing, PIL's and torchvision's through it), and a sequential
 *    copy, complete by definition, would be decoded unsmoothed;
 *  - markers: the source's JFIF and Adobe markers are copied as they were,
 *    and the compressor writes none of its own, since decoders read them
 *    (libjpeg takes the colour space from them, and a reader may take
 *    CMYK's inversion from the Adobe marker's presence);
 *  - damaged data: any warning (see rst_emit_message).
 * What it holds, the whole image's coefficients, is checked against a
 * bound before they are read. */

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	char *msg;
	int msglen;
} rst_err;

static void rst_error_exit(j_common_ptr c) {
	rst_err *e = (rst_err *)c->err;
	char buf[JMSG_LENGTH_MAX];
	(*c->err->format_message)(c, buf);
	snprintf(e->msg, (size_t)e->msglen, "%s", buf);
	longjmp(e->jb, 1);
}

/* Any warning is an error here: a warning while reading the coefficients
 * means damaged data, and the coefficients after it are made up. */
static void rst_emit_message(j_common_ptr c, int level) {
	if (level < 0) {
		rst_error_exit(c);
	}
}

/* A destination that grows a malloc'd buffer the caller frees. */
typedef struct {
	struct jpeg_destination_mgr pub;
	unsigned char *buf;
	size_t cap;
	int failed;
} rst_dest;

static void rst_init_destination(j_compress_ptr c) {
	rst_dest *d = (rst_dest *)c->dest;
	d->pub.next_output_byte = d->buf;
	d->pub.free_in_buffer = d->cap;
}

static boolean rst_empty_output_buffer(j_compress_ptr c) {
	rst_dest *d = (rst_dest *)c->dest;
	size_t ncap = d->cap * 2;
	unsigned char *p = realloc(d->buf, ncap);
	if (p == NULL) {
		d->failed = 1;
		ERREXIT1(c, JERR_OUT_OF_MEMORY, 10);
	}
	d->pub.next_output_byte = p + d->cap;
	d->pub.free_in_buffer = ncap - d->cap;
	d->buf = p;
	d->cap = ncap;
	return TRUE;
}

static void rst_term_destination(j_compress_ptr c) { (void)c; }

/* interval returns the divisor of per_row nearest target (the smaller on
 * a tie): restart intervals that divide an MCU row into equal parts start
 * at the same columns in every row. */
static int interval(int per_row, int target) {
	int best = per_row, k;
	for (k = 1; k <= per_row; k++) {
		if (per_row % k == 0 && abs(k - target) < abs(best - target)) {
			best = k;
		}
	}
	return best;
}

/* coef_bytes returns what the whole image's coefficients take once read
 * (jdcoefct.c's virtual arrays: each component's blocks, rounded up to its
 * sampling factors, 128 bytes a block), from the header alone. */
static long long coef_bytes(j_decompress_ptr d) {
	long long total = 0;
	int ci;
	for (ci = 0; ci < d->num_components; ci++) {
		jpeg_component_info *comp = &d->comp_info[ci];
		long long w = ((long long)comp->width_in_blocks + comp->h_samp_factor - 1) / comp->h_samp_factor * comp->h_samp_factor;
		long long h = ((long long)comp->height_in_blocks + comp->v_samp_factor - 1) / comp->v_samp_factor * comp->v_samp_factor;
		total += w * h * (long long)sizeof(JBLOCK);
	}
	return total;
}

/* incomplete reports whether a progressive image's scans left a coefficient
 * of some component unsent or short of its last bits. */
static int incomplete(j_decompress_ptr d) {
	int ci, k;
	if (!d->progressive_mode || d->coef_bits == NULL) {
		return 0;
	}
	for (ci = 0; ci < d->num_components; ci++) {
		for (k = 0; k < DCTSIZE2; k++) {
			if (d->coef_bits[ci][k] != 0) {
				return 1;
			}
		}
	}
	return 0;
}

int ffj_add_restarts(const unsigned char *src, size_t n, int target,
                     long long max_pixels, long long max_mem,
                     unsigned char **out, size_t *out_len, int *k_out,
                     char *msg, int msglen) {
	struct jpeg_decompress_struct d;
	struct jpeg_compress_struct c;
	rst_err e;
	rst_dest dest;
	jvirt_barray_ptr *coefs;
	jpeg_saved_marker_ptr mk;
	volatile int dinit = 0, cinit = 0;
	int m, mcu_w, per_row;

	*out = NULL;
	*out_len = 0;
	msg[0] = 0;
	memset(&d, 0, sizeof(d));
	memset(&c, 0, sizeof(c));
	memset(&dest, 0, sizeof(dest));
	d.err = jpeg_std_error(&e.pub);
	c.err = &e.pub;
	e.pub.error_exit = rst_error_exit;
	e.pub.emit_message = rst_emit_message;
	e.msg = msg;
	e.msglen = msglen;
	dest.cap = n + n / 8 + 4096;
	dest.buf = malloc(dest.cap);
	if (dest.buf == NULL) {
		return FFJ_ERR_NOMEM;
	}
	if (setjmp(e.jb)) {
		if (cinit) jpeg_destroy_compress(&c);
		if (dinit) jpeg_destroy_decompress(&d);
		free(dest.buf);
		return dest.failed ? FFJ_ERR_NOMEM : FFJ_ERR_LIBJPEG;
	}
	jpeg_create_decompress(&d);
	dinit = 1;
	jpeg_mem_src(&d, src, (unsigned long)n);
	jpeg_save_markers(&d, JPEG_COM, 0xFFFF);
	for (m = 0; m < 16; m++) {
		jpeg_save_markers(&d, JPEG_APP0 + m, 0xFFFF);
	}
	jpeg_read_header(&d, TRUE);
	if (max_pixels > 0 && (long long)d.image_width * (long long)d.image_height > max_pixels) {
		snprintf(msg, (size_t)msglen, "%ux%u is more than %lld pixels", d.image_width, d.image_height, max_pixels);
		jpeg_destroy_decompress(&d);
		free(dest.buf);
		return FFJ_ERR_TOOBIG;
	}
	if (max_mem > 0 && coef_bytes(&d) + (long long)dest.cap > max_mem) {
		snprintf(msg, (size_t)msglen, "%ux%u: its coefficients take %lld MiB, more than a transcode may hold (%lld MiB)",
		         d.image_width, d.image_height, (coef_bytes(&d) + (long long)dest.cap) >> 20, max_mem >> 20);
		jpeg_destroy_decompress(&d);
		free(dest.buf);
		return FFJ_ERR_TOOBIG;
	}
	coefs = jpeg_read_coefficients(&d);
	if (incomplete(&d)) {
		snprintf(msg, (size_t)msglen, "a progressive JPEG with incomplete scans, whose blocks decoders smooth");
		jpeg_destroy_decompress(&d);
		free(dest.buf);
		return FFJ_ERR_INEXACT;
	}

	jpeg_create_compress(&c);
	cinit = 1;
	jpeg_copy_critical_parameters(&d, &c);
	mcu_w = d.num_components == 1 ? DCTSIZE : d.max_h_samp_factor * DCTSIZE;
	per_row = (int)((d.image_width + (JDIMENSION)mcu_w - 1) / (JDIMENSION)mcu_w);
	*k_out = interval(per_row, target < 1 ? 1 : target);
	c.restart_interval = (unsigned int)*k_out;
	/* The source's JFIF and Adobe markers, as they were, below. */
	c.write_JFIF_header = FALSE;
	c.write_Adobe_marker = FALSE;
	c.optimize_coding = TRUE;
	c.dest = &dest.pub;
	dest.pub.init_destination = rst_init_destination;
	dest.pub.empty_output_buffer = rst_empty_output_buffer;
	dest.pub.term_destination = rst_term_destination;
	jpeg_write_coefficients(&c, coefs);
	/* The source's markers, every one as it was. */
	for (mk = d.marker_list; mk != NULL; mk = mk->next) {
		jpeg_write_marker(&c, mk->marker, mk->data, mk->data_length);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	cinit = 0;
	jpeg_finish_decompress(&d);
	jpeg_destroy_decompress(&d);
	dinit = 0;
	*out = dest.buf;
	*out_len = dest.cap - dest.pub.free_in_buffer;
	return FFJ_OK;
}

/* Restart intervals, found by a scan for FF bytes 64 at a time (AVX2 where
 * the CPU has it): in entropy-coded data, stuffing and markers put an FF
 * about every hundred bytes, so a search that returns at every FF (memchr)
 * spends more on its calls than on the bytes, and a test per kind of FF
 * more on mispredicted branches than on the scan. Intervals are stored at
 * index count < n only. */

typedef struct {
	int32_t *starts, *ends;
	int n, count;
	size_t start;
	int how;
} rst_scan;

/* rst_other handles the FF at src[q] followed by neither a fill or stuffed
 * byte nor an RSTn: EOI ends the last interval; any other marker is an
 * error. Returns 1 (always: the scan stops). */
static int rst_other(rst_scan *r, const unsigned char *src, size_t q) {
	if (src[q + 1] != 0xD9) {
		r->how = FFJ_RST_BAD; /* another scan, or a marker inside one */
		return 1;
	}
	r->starts[r->count] = (int32_t)r->start;
	r->ends[r->count] = (int32_t)q;
	r->count++;
	r->how = FFJ_RST_EOI;
	return 1;
}

/* rst_ff handles the FF at src[q], q+1 < len, and returns 1 when the scan
 * stops there. The common cases, a stuffed byte and an RSTn in turn, take
 * no branch: the interval is stored at count whatever the byte after FF,
 * and count moves on only for an RSTn. */
static inline __attribute__((always_inline)) int rst_ff(rst_scan *r, const unsigned char *src,
                                                        size_t q, int *count, size_t *start) {
	unsigned m = src[q + 1], rst = m - 0xD0;
	int mark = rst < 8;
	if (__builtin_expect(!mark && m != 0x00 && m != 0xFF, 0)) {
		r->count = *count;
		r->start = *start;
		return rst_other(r, src, q);
	}
	if (__builtin_expect(mark && (int)rst != (*count & 7), 0)) {
		r->how = FFJ_RST_BAD;
		r->count = *count;
		return 1;
	}
	r->starts[*count] = (int32_t)*start;
	r->ends[*count] = (int32_t)q;
	*count += mark;
	*start = mark ? q + 2 : *start;
	if (__builtin_expect(*count == r->n, 0)) {
		r->how = FFJ_RST_N;
		r->count = *count;
		return 1;
	}
	return 0;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define FFJ_RST_AVX2 1
static int rst_have_avx2;
__attribute__((constructor)) static void rst_init(void) {
	__builtin_cpu_init();
	rst_have_avx2 = __builtin_cpu_supports("avx2");
}

/* rst_classify returns the FFs of the 32 bytes at p followed by an RSTn
 * (*rm) and by a byte that is neither an RSTn nor stuffing nor fill
 * (*other); p[32] is read. */
__attribute__((target("avx2"), always_inline)) static inline void
rst_classify(const unsigned char *p, uint32_t *rm, uint32_t *other) {
	const __m256i ff = _mm256_set1_epi8((char)0xFF), zero = _mm256_setzero_si256();
	const __m256i f8 = _mm256_set1_epi8((char)0xF8), d0 = _mm256_set1_epi8((char)0xD0);
	__m256i a = _mm256_loadu_si256((const __m256i *)p);
	__m256i b = _mm256_loadu_si256((const __m256i *)(p + 1));
	__m256i rst = _mm256_cmpeq_epi8(_mm256_and_si256(b, f8), d0);
	__m256i fill = _mm256_or_si256(_mm256_cmpeq_epi8(b, zero), _mm256_cmpeq_epi8(b, ff));
	uint32_t ffs = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, ff));
	*rm = ffs & (uint32_t)_mm256_movemask_epi8(rst);
	*other = ffs & ~(uint32_t)_mm256_movemask_epi8(_mm256_or_si256(rst, fill));
}

/* rst_scan_avx2 scans the blocks of 64 bytes from pos on whose last byte
 * has a byte after it, and returns where it stopped. Each block is
 * classified whole, each FF by the byte after it: stuffed or fill bytes
 * need nothing, a block with one RSTn (the common case) takes no branch,
 * and anything else goes through rst_ff in order. */
__attribute__((target("avx2"))) static size_t rst_scan_avx2(rst_scan *r, const unsigned char *src,
                                                           size_t len, size_t pos) {
	int32_t *starts = r->starts, *ends = r->ends;
	const int n = r->n;
	int count = r->count;
	size_t start = r->start;
	for (; pos + 65 <= len; pos += 64) {
		uint32_t rlo, rhi, olo, ohi;
		rst_classify(src + pos, &rlo, &olo);
		rst_classify(src + pos + 32, &rhi, &ohi);
		uint64_t rm = (uint64_t)rhi << 32 | rlo, other = (uint64_t)ohi << 32 | olo;
		if (__builtin_expect((other | (rm & (rm - 1))) != 0, 0)) {
			/* Another marker, or more than one RSTn: in order. */
			uint64_t m;
			for (m = rm | other; m != 0; m &= m - 1) {
				if (rst_ff(r, src, pos + (size_t)__builtin_ctzll(m), &count, &start)) {
					return pos;
				}
			}
			continue;
		}
		/* None or one RSTn: stored at count either way, counted only
		 * when there is one. */
		size_t q = pos + (size_t)__builtin_ctzll(rm | 1ull << 63);
		int one = rm != 0;
		if (__builtin_expect(one && (src[q + 1] & 7) != (count & 7), 0)) {
			r->how = FFJ_RST_BAD;
			r->count = count;
			return pos;
		}
		starts[count] = (int32_t)start;
		ends[count] = (int32_t)q;
		count += one;
		start = one ? q + 2 : start;
		if (__builtin_expect(count == n, 0)) {
			r->how = FFJ_RST_N;
			r->count = count;
			return pos;
		}
	}
	r->count = count;
	r->start = start;
	return pos;
}
#endif

int ffj_rst_scan(const unsigned char *src, size_t len, size_t scan, int n,
                 int32_t *starts, int32_t *ends, int *how) {
	rst_scan r = {starts, ends, n, 0, scan, 0};
	size_t pos = scan;
	if (n <= 0 || len > INT32_MAX) {
		*how = FFJ_RST_BAD;
		return 0;
	}
#if defined(FFJ_RST_AVX2)
	if (rst_have_avx2) {
		pos = rst_scan_avx2(&r, src, len, pos);
		if (r.how != 0) {
			*how = r.how;
			return r.count;
		}
	}
#endif
	{
		int count = r.count;
		size_t start = r.start;
		for (; pos + 1 < len; pos++) {
			if (src[pos] == 0xFF && rst_ff(&r, src, pos, &count, &start)) {
				*how = r.how;
				return r.count;
			}
		}
		r.count = count;
	}
	*how = FFJ_RST_BAD; /* the data ended first */
	return r.count;
}

int ffj_path(void) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
	__builtin_cpu_init();
	return __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
#else
	return 0;
#endif
}
