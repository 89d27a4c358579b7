#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "huff.h"
#include "idct.h"
#include "jpeg.h"

/* Extra columns decoded on each side of a crop; see ffj_decode_region. */
#define FFJ_PAD 4

/* Most rows handed to one jpeg_read_scanlines call. */
#define FFJ_ROWS 16

struct ffj_decoder {
	struct jpeg_decompress_struct d;
	struct jpeg_error_mgr err;
	jmp_buf jb;
	char msg[JMSG_LENGTH_MAX];
	char warn[JMSG_LENGTH_MAX];
	unsigned char *row; /* one scanline of the (widened) cropped output */
	size_t rowcap;
	unsigned char *raw; /* one iMCU row of every component (ffj_decode_planes) */
	size_t rawcap;
	int libjpeg_idct; /* use libjpeg's IDCT at every scale (idct.c's otherwise) */
	int libjpeg_entropy; /* use libjpeg's Huffman decoder (huff.c's otherwise) */
	int huff_hooked;     /* the last decode used huff.c's */
	ffh_state huff;
	ffj_idct_quant quant; /* idct.c's quantization tables */
};

static void ffj_error_exit(j_common_ptr c) {
	ffj_decoder *d = (ffj_decoder *)c->client_data;
	(*c->err->format_message)(c, d->msg);
	longjmp(d->jb, 1);
}

/* Keeps libjpeg quiet: warnings are recorded, never printed. Warnings that
 * mean the data ran out or is damaged inside the entropy-coded segment are
 * turned into errors, since the pixels after them are made up. */
static void ffj_emit_message(j_common_ptr c, int level) {
	ffj_decoder *d = (ffj_decoder *)c->client_data;
	if (level >= 0) {
		return; /* trace messages */
	}
	c->err->num_warnings++;
	switch (c->err->msg_code) {
	case JWRN_JPEG_EOF:
	case JWRN_HIT_MARKER:
	case JWRN_MUST_RESYNC:
	case JWRN_NOT_SEQUENTIAL:
	case JWRN_HUFF_BAD_CODE:
		(*c->err->format_message)(c, d->msg);
		longjmp(d->jb, 1);
	default:
		(*c->err->format_message)(c, d->warn);
	}
}

static void ffj_output_message(j_common_ptr c) {
	ffj_decoder *d = (ffj_decoder *)c->client_data;
	(*c->err->format_message)(c, d->warn);
}

ffj_decoder *ffj_new(void) {
	ffj_decoder *d = calloc(1, sizeof(*d));
	if (d == NULL) {
		return NULL;
	}
	d->d.err = jpeg_std_error(&d->err);
	d->err.error_exit = ffj_error_exit;
	d->err.emit_message = ffj_emit_message;
	d->err.output_message = ffj_output_message;
	d->d.client_data = d;
	if (setjmp(d->jb)) {
		jpeg_destroy_decompress(&d->d);
		free(d);
		return NULL;
	}
	jpeg_create_decompress(&d->d);
	return d;
}

void ffj_free(ffj_decoder *d) {
	if (d == NULL) {
		return;
	}
	jpeg_destroy_decompress(&d->d);
	free(d->row);
	free(d->raw);
	free(d);
}

const char *ffj_message(ffj_decoder *d) { return d->msg; }
void ffj_use_libjpeg_idct(ffj_decoder *d, int on) { d->libjpeg_idct = on; }
void ffj_use_libjpeg_entropy(ffj_decoder *d, int on) { d->libjpeg_entropy = on; }
int ffj_entropy_hooked(ffj_decoder *d) { return d->huff_hooked; }
const char *ffj_warning(ffj_decoder *d) { return d->warn; }

static void ffj_reset(ffj_decoder *d) {
	d->msg[0] = 0;
	d->warn[0] = 0;
	d->err.num_warnings = 0;
}

/* Drops the decoder's references to the caller's input buffer. */
static void ffj_release_src(ffj_decoder *d) {
	if (d->d.src != NULL) {
		d->d.src->next_input_byte = NULL;
		d->d.src->bytes_in_buffer = 0;
	}
	d->huff.src = NULL;
	d->huff.end = NULL;
}

/* ffj_end ends the decompression (whatever its state) and drops the
 * references to the input; it returns rc, for the exits of ffj_header and
 * ffj_decode_region. */
static int ffj_end(ffj_decoder *d, int rc) {
	jpeg_abort_decompress(&d->d);
	ffj_release_src(d);
	return rc;
}

int ffj_header(ffj_decoder *d, const unsigned char *src, size_t n, int *w, int *h) {
	ffj_reset(d);
	if (n == 0) {
		snprintf(d->msg, sizeof(d->msg), "empty input");
		return FFJ_ERR_ARG;
	}
	if (setjmp(d->jb)) {
		return ffj_end(d, FFJ_ERR_LIBJPEG);
	}
	jpeg_mem_src(&d->d, src, (unsigned long)n);
	jpeg_read_header(&d->d, TRUE);
	*w = (int)d->d.image_width;
	*h = (int)d->d.image_height;
	return ffj_end(d, FFJ_OK);
}

/* ffj_read_rows reads rows [y0, y1) of the started, cropped decompression
 * into dst, row r at dst + (r - y0) * stride, libjpeg writing each row in
 * place: no row is copied. libjpeg's rows hold output_width pixels. */
static int ffj_read_rows(ffj_decoder *d, int y0, int y1, unsigned char *dst, size_t stride) {
	JSAMPROW rows[FFJ_ROWS];
	int r, k, want;
	JDIMENSION got;

	for (r = y0; r < y1; r += (int)got) {
		want = y1 - r < FFJ_ROWS ? y1 - r : FFJ_ROWS;
		for (k = 0; k < want; k++) {
			rows[k] = dst + (size_t)(r - y0 + k) * stride;
		}
		got = jpeg_read_scanlines(&d->d, rows, (JDIMENSION)want);
		if (got == 0) {
			snprintf(d->msg, sizeof(d->msg), "read no scanline at row %d", r);
			return FFJ_ERR_LIBJPEG;
		}
	}
	return FFJ_OK;
}

/* ffj_crop_safe reports whether libjpeg-turbo 2.1 crops scanlines of this
 * JPEG correctly. A component upsampled by more than 4 in all (its
 * horizontal times its vertical ratio to the largest sampling factors, as
 * in 4:1:0, Y 4x2 against chroma 1x1, or Y 2x4) decodes cropped columns
 * from memory it never wrote, at DCT scales below 8/8: two decodes of the
 * same region differ (valgrind: uninitialised reads). Such JPEGs are
 * decoded full width, the region's columns copied out; every other layout
 * (ratios 1x1, 2x1, 1x2, 2x2, 4x1, 1x4) crops, as tested. */
static int ffj_crop_safe(const struct jpeg_decompress_struct *c) {
	int ci;
	for (ci = 0; ci < c->num_components; ci++) {
		const jpeg_component_info *comp = &c->comp_info[ci];
		int hr = c->max_h_samp_factor / comp->h_samp_factor;
		int vr = c->max_v_samp_factor / comp->v_samp_factor;
		if (hr * vr > 4) {
			return 0;
		}
	}
	return 1;
}

/* ffj_check_frame checks the frame header just read, the truth about the
 * image, before libjpeg allocates anything for it: at most max_pixels
 * pixels (when max_pixels > 0), and frame_w x frame_h (when frame_w > 0). */
static int ffj_check_frame(ffj_decoder *d, int frame_w, int frame_h, long long max_pixels) {
	const struct jpeg_decompress_struct *c = &d->d;
	if (max_pixels > 0 && (long long)c->image_width * c->image_height > max_pixels) {
		snprintf(d->msg, sizeof(d->msg), "the image is %ux%u, more than %lld pixels",
		         c->image_width, c->image_height, max_pixels);
		return FFJ_ERR_CORRUPT;
	}
	if (frame_w > 0 && ((long)c->image_width != frame_w || (long)c->image_height != frame_h)) {
		snprintf(d->msg, sizeof(d->msg), "the JPEG's frame header says %ux%u, the sample's metadata %dx%d",
		         c->image_width, c->image_height, frame_w, frame_h);
		return FFJ_ERR_CORRUPT;
	}
	return FFJ_OK;
}

int ffj_decode_region(ffj_decoder *d, const unsigned char *src, size_t n,
                      int x, int y, int w, int h, int m,
                      unsigned char *dst, size_t dst_len, int dst_stride,
                      int frame_w, int frame_h, long long max_pixels,
                      ffj_region *out) {
	/* volatile: read after a longjmp. */
	volatile int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
	JDIMENSION xoff, cw;
	size_t stride, off, need;
	int r, ci, pad, rc;

	ffj_reset(d);
	memset(out, 0, sizeof(*out));
	d->huff_hooked = 0;
	if (n == 0) {
		snprintf(d->msg, sizeof(d->msg), "empty input");
		return FFJ_ERR_ARG;
	}
	if (m < 1 || m > 8) {
		snprintf(d->msg, sizeof(d->msg), "scale %d/8 not in 1/8..8/8", m);
		return FFJ_ERR_ARG;
	}
	if (x < 0 || y < 0 || w <= 0 || h <= 0) {
		snprintf(d->msg, sizeof(d->msg), "bad region %dx%d+%d+%d", w, h, x, y);
		return FFJ_ERR_ARG;
	}
	if (setjmp(d->jb)) {
		return ffj_end(d, FFJ_ERR_LIBJPEG);
	}
	jpeg_mem_src(&d->d, src, (unsigned long)n);
	jpeg_read_header(&d->d, TRUE);
	rc = ffj_check_frame(d, frame_w, frame_h, max_pixels);
	if (rc != FFJ_OK) {
		return ffj_end(d, rc);
	}
	if ((long)x + w > (long)d->d.image_width || (long)y + h > (long)d->d.image_height) {
		snprintf(d->msg, sizeof(d->msg), "region %dx%d+%d+%d outside %ux%u image",
		         w, h, x, y, d->d.image_width, d->d.image_height);
		return ffj_end(d, FFJ_ERR_ARG);
	}
	d->d.out_color_space = JCS_RGB;
	d->d.dct_method = JDCT_ISLOW;
	d->d.scale_num = (unsigned int)m;
	d->d.scale_denom = 8;
	jpeg_start_decompress(&d->d);

	/* Scaled region, rounded outward, clamped to the scaled image: source
	 * column c maps to scaled column c*m/8. */
	x0 = (int)((long)x * m / 8);
	y0 = (int)((long)y * m / 8);
	x1 = (int)(((long)(x + w) * m + 7) / 8);
	y1 = (int)(((long)(y + h) * m + 7) / 8);
	if (x1 > (int)d->d.output_width) x1 = (int)d->d.output_width;
	if (y1 > (int)d->d.output_height) y1 = (int)d->d.output_height;
	if (x1 <= x0 || y1 <= y0) {
		snprintf(d->msg, sizeof(d->msg), "empty scaled region");
		return ffj_end(d, FFJ_ERR_ARG);
	}
	if (dst_stride < 0 || (dst_stride > 0 && ((x1 - x0) * 3 > dst_stride ||
	    (size_t)(y1 - y0 - 1) * (size_t)dst_stride + (size_t)(x1 - x0) * 3 > dst_len))) {
		snprintf(d->msg, sizeof(d->msg), "destination too small for %dx%d", x1 - x0, y1 - y0);
		return ffj_end(d, FFJ_ERR_ARG);
	}

	/* jpeg_crop_scanline widens the region leftward to an iMCU boundary
	 * (and may widen it rightward); the requested columns start at
	 * x0 - xoff within each decoded row. */
	/* When a component is upsampled horizontally, the decoded columns are
	 * padded on both sides: libjpeg treats the cropped columns' ends as the
	 * image edges when upsampling chroma, which changes the outer columns
	 * of a crop inside the image. The left pad moves the start back an iMCU
	 * only when x0 lies within FFJ_PAD columns of an iMCU boundary. When
	 * DCT scaling makes every component full size (4:2:0 below 8/8),
	 * nothing is upsampled and no pad is needed. */
	pad = 0;
	for (ci = 0; ci < d->d.num_components; ci++) {
		jpeg_component_info *c = &d->d.comp_info[ci];
		if (c->h_samp_factor * c->DCT_scaled_size != d->d.max_h_samp_factor * d->d.min_DCT_scaled_size) {
			pad = FFJ_PAD;
		}
	}
	xoff = (JDIMENSION)(x0 > pad ? x0 - pad : 0);
	cw = (JDIMENSION)(x1 - (int)xoff + pad);
	if (xoff + cw > d->d.output_width) {
		cw = d->d.output_width - xoff;
	}
	if (!ffj_crop_safe(&d->d)) {
		xoff = 0;
		cw = d->d.output_width;
	}
	if (xoff != 0 || cw != d->d.output_width) {
		jpeg_crop_scanline(&d->d, &xoff, &cw);
	}
	if (!d->libjpeg_idct) {
		ffj_hook_idct(&d->d, &d->quant);
	}
	d->huff_hooked = !d->libjpeg_entropy && ffh_hook(&d->d, &d->huff);
	if (y0 > 0) {
		JDIMENSION skipped = jpeg_skip_scanlines(&d->d, (JDIMENSION)y0);
		if ((int)skipped != y0) {
			snprintf(d->msg, sizeof(d->msg), "skipped %u of %d rows", skipped, y0);
			return ffj_end(d, FFJ_ERR_LIBJPEG);
		}
	}
	/* libjpeg's rows (output_width pixels from column xoff) go straight
	 * into dst when they fit there: with dst_stride 0 the rows are
	 * libjpeg's, and the region starts (x0 - xoff) pixels into the first;
	 * with a stride, when libjpeg's rows start at x0 and fit in it. Else
	 * each row is decoded into d->row and its region copied. */
	off = (size_t)(x0 - (int)xoff) * 3;
	stride = dst_stride > 0 ? (size_t)dst_stride : (size_t)d->d.output_width * 3;
	need = (size_t)(y1 - y0 - 1) * stride + (size_t)d->d.output_width * 3;
	if (dst_stride == 0 || (off == 0 && (size_t)d->d.output_width * 3 <= stride && need <= dst_len)) {
		if (need > dst_len) {
			snprintf(d->msg, sizeof(d->msg), "destination of %zu bytes too small for %ux%d decoded pixels",
			         dst_len, d->d.output_width, y1 - y0);
			return ffj_end(d, FFJ_ERR_ARG);
		}
		rc = ffj_read_rows(d, y0, y1, dst, stride);
		if (rc != FFJ_OK) {
			return ffj_end(d, rc);
		}
	} else {
		if ((size_t)d->d.output_width * 3 > d->rowcap) {
			size_t want = (size_t)d->d.output_width * 3;
			unsigned char *p = realloc(d->row, want);
			if (p == NULL) {
				return ffj_end(d, FFJ_ERR_NOMEM);
			}
			d->row = p;
			d->rowcap = want;
		}
		for (r = y0; r < y1; r++) {
			JSAMPROW rp = d->row;
			if (jpeg_read_scanlines(&d->d, &rp, 1) != 1) {
				snprintf(d->msg, sizeof(d->msg), "read no scanline at row %d", r);
				return ffj_end(d, FFJ_ERR_LIBJPEG);
			}
			memcpy(dst + (size_t)(r - y0) * stride, d->row + off, (size_t)(x1 - x0) * 3);
		}
		off = 0;
	}
	out->w = x1 - x0;
	out->h = y1 - y0;
	out->off = off;
	out->stride = stride;
	/* The rows below the region are never decoded. */
	return ffj_end(d, FFJ_OK);
}

/* ffj_read_planes_header reads src's header and checks it as
 * ffj_decode_region does, then fills *p; FFJ_ERR_NOPLANES for a layout
 * ffj_planes_rgb does not convert. The decompression is left started at
 * the header (the caller ends it). */
static int ffj_read_planes_header(ffj_decoder *d, const unsigned char *src, size_t n,
                                  int frame_w, int frame_h, long long max_pixels, ffj_planes *p) {
	struct jpeg_decompress_struct *c = &d->d;
	int ci, rc;

	jpeg_mem_src(c, src, (unsigned long)n);
	jpeg_read_header(c, TRUE);
	rc = ffj_check_frame(d, frame_w, frame_h, max_pixels);
	if (rc != FFJ_OK) {
		return rc;
	}
	memset(p, 0, sizeof(*p));
	p->w = (int)c->image_width;
	p->h = (int)c->image_height;
	p->n = c->num_components;
	if (!(c->jpeg_color_space == JCS_GRAYSCALE && c->num_components == 1) &&
	    !(c->jpeg_color_space == JCS_YCbCr && c->num_components == 3)) {
		snprintf(d->msg, sizeof(d->msg), "colour space %d with %d components", (int)c->jpeg_color_space, c->num_components);
		return FFJ_ERR_NOPLANES;
	}
	for (ci = 0; ci < c->num_components; ci++) {
		const jpeg_component_info *comp = &c->comp_info[ci];
		int hr = c->max_h_samp_factor / comp->h_samp_factor;
		int vr = c->max_v_samp_factor / comp->v_samp_factor;
		if (c->max_h_samp_factor % comp->h_samp_factor != 0 || c->max_v_samp_factor % comp->v_samp_factor != 0 ||
		    hr > 2 || vr > 2 || (ci == 0 && (hr != 1 || vr != 1))) {
			snprintf(d->msg, sizeof(d->msg), "component %d sampled %dx%d of %dx%d", ci,
			         comp->h_samp_factor, comp->v_samp_factor, c->max_h_samp_factor, c->max_v_samp_factor);
			return FFJ_ERR_NOPLANES;
		}
		p->hr[ci] = hr;
		p->vr[ci] = vr;
		/* libjpeg's downsampled_width and _height at 8/8. */
		p->pw[ci] = (int)(((long long)c->image_width * comp->h_samp_factor + c->max_h_samp_factor - 1) / c->max_h_samp_factor);
		p->ph[ci] = (int)(((long long)c->image_height * comp->v_samp_factor + c->max_v_samp_factor - 1) / c->max_v_samp_factor);
		/* libjpeg upsamples a plane of 2 columns or fewer by replication,
		 * not its fancy filter. */
		if (hr == 2 && p->pw[ci] <= 2) {
			snprintf(d->msg, sizeof(d->msg), "component %d is %d columns wide", ci, p->pw[ci]);
			return FFJ_ERR_NOPLANES;
		}
	}
	return FFJ_OK;
}

int ffj_planes_info(ffj_decoder *d, const unsigned char *src, size_t n,
                    int frame_w, int frame_h, long long max_pixels, ffj_planes *p) {
	volatile int rc;
	ffj_reset(d);
	if (n == 0) {
		snprintf(d->msg, sizeof(d->msg), "empty input");
		return FFJ_ERR_ARG;
	}
	if (setjmp(d->jb)) {
		return ffj_end(d, FFJ_ERR_LIBJPEG);
	}
	rc = ffj_read_planes_header(d, src, n, frame_w, frame_h, max_pixels, p);
	return ffj_end(d, rc);
}

int ffj_decode_planes(ffj_decoder *d, const unsigned char *src, size_t n,
                      const ffj_planes *want, unsigned char *dst, size_t dst_len) {
	struct jpeg_decompress_struct *c = &d->d;
	JSAMPROW rows[3][4 * DCTSIZE];
	JSAMPARRAY arrays[3];
	ffj_planes p;
	size_t need = 0, raw = 0, off[3], plane[3], rowlen[3];
	int ci, r, rc, rowsper[3];
	JDIMENSION k;

	ffj_reset(d);
	d->huff_hooked = 0;
	if (n == 0) {
		snprintf(d->msg, sizeof(d->msg), "empty input");
		return FFJ_ERR_ARG;
	}
	if (setjmp(d->jb)) {
		return ffj_end(d, FFJ_ERR_LIBJPEG);
	}
	rc = ffj_read_planes_header(d, src, n, want->w, want->h, 0, &p);
	if (rc != FFJ_OK) {
		return ffj_end(d, rc);
	}
	if (memcmp(&p, want, sizeof(p)) != 0) {
		snprintf(d->msg, sizeof(d->msg), "the JPEG's layout changed since its header was read");
		return ffj_end(d, FFJ_ERR_ARG);
	}
	for (ci = 0; ci < p.n; ci++) {
		plane[ci] = need;
		need += (size_t)p.pw[ci] * (size_t)p.ph[ci];
	}
	if (need > dst_len) {
		snprintf(d->msg, sizeof(d->msg), "destination of %zu bytes too small for %zu bytes of planes", dst_len, need);
		return ffj_end(d, FFJ_ERR_ARG);
	}
	c->raw_data_out = TRUE;
	c->dct_method = JDCT_ISLOW;
	jpeg_start_decompress(c);
	/* One iMCU row of each component: v_samp * 8 rows of its blocks. */
	for (ci = 0; ci < p.n; ci++) {
		jpeg_component_info *comp = &c->comp_info[ci];
		rowsper[ci] = comp->v_samp_factor * comp->DCT_scaled_size;
		rowlen[ci] = (size_t)comp->width_in_blocks * (size_t)comp->DCT_scaled_size;
		if (rowsper[ci] > 4 * DCTSIZE || rowlen[ci] < (size_t)p.pw[ci]) {
			snprintf(d->msg, sizeof(d->msg), "component %d: %d rows of %zu bytes an iMCU row", ci, rowsper[ci], rowlen[ci]);
			return ffj_end(d, FFJ_ERR_ARG);
		}
		off[ci] = raw;
		raw += (size_t)rowsper[ci] * rowlen[ci];
	}
	if (raw > d->rawcap) {
		unsigned char *q = realloc(d->raw, raw);
		if (q == NULL) {
			return ffj_end(d, FFJ_ERR_NOMEM);
		}
		d->raw = q;
		d->rawcap = raw;
	}
	for (ci = 0; ci < p.n; ci++) {
		for (r = 0; r < rowsper[ci]; r++) {
			rows[ci][r] = d->raw + off[ci] + (size_t)r * rowlen[ci];
		}
		arrays[ci] = rows[ci];
	}
	if (!d->libjpeg_idct) {
		ffj_hook_idct(c, &d->quant);
	}
	d->huff_hooked = !d->libjpeg_entropy && ffh_hook(c, &d->huff);
	for (k = 0; k < c->total_iMCU_rows; k++) {
		if (jpeg_read_raw_data(c, arrays, (JDIMENSION)(c->max_v_samp_factor * DCTSIZE)) == 0) {
			snprintf(d->msg, sizeof(d->msg), "read no data at iMCU row %u", k);
			return ffj_end(d, FFJ_ERR_LIBJPEG);
		}
		for (ci = 0; ci < p.n; ci++) {
			for (r = 0; r < rowsper[ci]; r++) {
				size_t y = (size_t)k * (size_t)rowsper[ci] + (size_t)r;
				if (y >= (size_t)p.ph[ci]) {
					break;
				}
				memcpy(dst + plane[ci] + y * (size_t)p.pw[ci], rows[ci][r], (size_t)p.pw[ci]);
			}
		}
	}
	return ffj_end(d, FFJ_OK);
}
