#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg.h"

/* Lossless transcoding of a JPEG to one with restart markers: the DCT
 * coefficients are read (jpeg_read_coefficients) and written again
 * (jpeg_write_coefficients), as jpegtran -restart does, so every decoder
 * gives the same pixels as from the original. */

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

int ffj_add_restarts(const unsigned char *src, size_t n, int target,
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
	coefs = jpeg_read_coefficients(&d);

	jpeg_create_compress(&c);
	cinit = 1;
	jpeg_copy_critical_parameters(&d, &c);
	mcu_w = d.num_components == 1 ? DCTSIZE : d.max_h_samp_factor * DCTSIZE;
	per_row = (int)((d.image_width + (JDIMENSION)mcu_w - 1) / (JDIMENSION)mcu_w);
	*k_out = interval(per_row, target < 1 ? 1 : target);
	c.restart_interval = (unsigned int)*k_out;
	c.optimize_coding = TRUE;
	c.dest = &dest.pub;
	dest.pub.init_destination = rst_init_destination;
	dest.pub.empty_output_buffer = rst_empty_output_buffer;
	dest.pub.term_destination = rst_term_destination;
	jpeg_write_coefficients(&c, coefs);
	/* The source's markers, as jpegtran -copy all keeps them, but the
	 * JFIF and Adobe ones the compressor writes itself. */
	for (mk = d.marker_list; mk != NULL; mk = mk->next) {
		if (c.write_JFIF_header && mk->marker == JPEG_APP0 && mk->data_length >= 5 &&
		    memcmp(mk->data, "JFIF", 5) == 0) {
			continue;
		}
		if (c.write_Adobe_marker && mk->marker == JPEG_APP0 + 14 && mk->data_length >= 5 &&
		    memcmp(mk->data, "Adobe", 5) == 0) {
			continue;
		}
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
