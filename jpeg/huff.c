/* An entropy (Huffman) decoder for single-scan sequential JPEGs, installed
 * in a started libjpeg-turbo decompression in place of libjpeg's own
 * (ffh_hook); the rest of the decompression (IDCT, upsampling, colour) stays
 * libjpeg's. libjpeg-turbo turns its fast Huffman path off whenever a JPEG
 * has restart markers, the JPEGs ffcvfeed crops from intervals. This one
 * first copies the data up to the next marker (or 16 KiB of it) without its
 * byte stuffing into a buffer of its own, so that its bit reader reads 8
 * bytes at once with no test for FF, and decodes a DC difference or an AC
 * coefficient whose code and value bits fit in FFH_FAST bits, and every EOB
 * and ZRL, with one table lookup. It gives libjpeg's coefficients for every valid stream, and
 * on damaged data warns where libjpeg warns (a code no table has, bits
 * needed past a marker, a marker other than the next RSTn). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "huff.h"

/* Zigzag position to natural (row-major) position, with 80 extra entries
 * so that a run past the block's end (an EOB's 64, or up to 15 in damaged
 * data) stays inside it, as libjpeg's jpeg_natural_order does. */
static const uint8_t natural[64 + 64 + 16] = {
	0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
	63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
	63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
	63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
	63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
	63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
};

/* Figure F.12: the s-bit value v as a signed coefficient. */
static inline int extend(unsigned v, int s) {
	return v < (1u << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v;
}

/* build fills t from a DHT table. Returns 0 when the table's code lengths
 * do not form a prefix code. */
static int build(ffh_table *t, const JHUFF_TBL *h, int ac) {
	int l, i, n = 0, k = 0;
	uint32_t code = 0;

	memset(t->sym, 0, sizeof(t->sym));
	memset(t->fast, 0, sizeof(t->fast));
	for (l = 1; l <= 16; l++) {
		n += h->bits[l];
	}
	if (n > 256) {
		return 0;
	}
	for (l = 1; l <= 16; l++) {
		t->valoff[l] = k - (int)code;
		for (i = 0; i < h->bits[l]; i++, k++, code++) {
			uint8_t rs = h->huffval[k];
			if (code >= (1u << l)) {
				return 0;
			}
			if (l <= FFH_FAST) {
				uint32_t lo = code << (FFH_FAST - l), hi = (code + 1) << (FFH_FAST - l), j;
				for (j = lo; j < hi; j++) {
					t->sym[j] = (uint16_t)(rs << 8 | l);
				}
				if (!ac && rs <= 15 && l + rs <= FFH_FAST) {
					/* DC: the code and its value bits fit in the
					 * lookahead: one entry gives the difference and the
					 * bits used (nonzero: a code has a bit). */
					for (j = lo; j < hi; j++) {
						int v = rs == 0 ? 0 : extend((j >> (FFH_FAST - l - rs)) & ((1u << rs) - 1), rs);
						t->fast[j] = (int32_t)((uint32_t)v << 16 | (uint32_t)(l + rs));
					}
				} else if (ac && (rs & 15) != 0 && l + (rs & 15) <= FFH_FAST) {
					/* The code and its value bits fit in the lookahead: one
					 * entry gives the run, the value and the bits used. */
					int s = rs & 15, r = rs >> 4;
					for (j = lo; j < hi; j++) {
						unsigned v = (j >> (FFH_FAST - l - s)) & ((1u << s) - 1);
						t->fast[j] = (int32_t)((uint32_t)extend(v, s) << 16 | (uint32_t)r << 8 | (uint32_t)(l + s));
					}
				} else if (ac && rs == 0xF0) {
					/* ZRL: fifteen zeros, then a zero stored where one is. */
					for (j = lo; j < hi; j++) {
						t->fast[j] = (int32_t)(15u << 8 | (uint32_t)l);
					}
				} else if (ac && (rs & 15) == 0) {
					/* EOB (any other zero-size symbol is one too, as in
					 * libjpeg): a run past the block's end, storing a zero
					 * at 63, which an EOB leaves zero. */
					for (j = lo; j < hi; j++) {
						t->fast[j] = (int32_t)(64u << 8 | (uint32_t)l);
					}
				}
			}
		}
		t->maxcode[l] = h->bits[l] ? (int32_t)code - 1 : -1;
		code <<= 1;
	}
	t->maxcode[17] = 0x7FFFFFFF;
	memcpy(t->val, h->huffval, sizeof(t->val));
	return 1;
}

/* The bit reader (ffh_reader): bits holds nbits unread bits at its top;
 * the bits below them are those of the bytes from p on. It lives in locals
 * of decode_mcu (so in registers) and in ffh_state between calls. */

/* top_up moves the unread data in buf to its start and copies the
 * entropy-coded data after it, without its byte stuffing (FF 00 is a data
 * byte FF, and FFs before it are fill), until buf is full, or up to a
 * marker or the input's end.
 *
 * Past the data the reader sees whatever buf holds: a valid interval never
 * takes those bits (only looks at them), and an MCU that does take them is
 * damaged and reported (decode_mcu), as libjpeg reports bits needed past a
 * marker, whatever they are. FFH_MCU_BYTES of room after FFH_BUF keep its
 * reads inside buf. */
static void top_up(ffh_state *s) {
	size_t keep = (size_t)(s->buf + s->fill - s->r.p);
	uint8_t *o, *lim = s->buf + FFH_BUF;

	if (keep > 0) {
		memmove(s->buf, s->r.p, keep);
	}
	s->r.p = s->buf;
	o = s->buf + keep;
	while (o < lim) {
		size_t n = (size_t)(s->end - s->src);
		const uint8_t *q, *z;
		if (n == 0) {
			s->stopped = FFH_AT_END;
			break;
		}
		if (n > (size_t)(lim - o)) {
			n = (size_t)(lim - o);
		}
		q = memchr(s->src, 0xFF, n);
		if (q == NULL) {
			memcpy(o, s->src, n);
			o += n;
			s->src += n;
			continue;
		}
		memcpy(o, s->src, (size_t)(q - s->src));
		o += q - s->src;
		s->src = q;
		for (z = q + 1; z < s->end && *z == 0xFF; z++) {
		}
		if (z >= s->end) {
			s->stopped = FFH_AT_END;
			break;
		}
		if (*z != 0) {
			s->stopped = FFH_AT_MARKER;
			break;
		}
		*o++ = 0xFF;
		s->src = z + 1;
	}
	s->fill = (size_t)(o - s->buf);
	memset(o, 0, 16); /* for tidiness: the bits looked at past the data are zeros */
}

/* refill tops bits up to at least 56 bits from the next 8 bytes of buf
 * (byte-aligned reads of the bits after the unread ones; a byte read in
 * part is read again next time). With 56 or more already, it reads again
 * the bits it has. */
static inline __attribute__((always_inline)) void refill(ffh_reader *r) {
	uint64_t w;
	memcpy(&w, r->p, 8);
	r->bits |= __builtin_bswap64(w) >> r->nbits;
	r->p += (r->nbits ^ 63) >> 3; /* 63 - nbits, without a register for 63 */
	r->nbits |= 56;
}

/* slow decodes a code longer than the lookahead: symbol << 8 | length,
 * or 0 when no code matches (damaged data). */
static inline __attribute__((always_inline)) unsigned slow(uint64_t bits, const ffh_table *t) {
	int l;
	for (l = FFH_FAST + 1; l <= 16; l++) {
		int32_t code = (int32_t)(bits >> (64 - l));
		if (code <= t->maxcode[l]) {
			return (unsigned)t->val[(code + t->valoff[l]) & 0xFF] << 8 | (unsigned)l;
		}
	}
	return 0;
}

static inline __attribute__((always_inline)) int symbol(ffh_reader *r, const ffh_table *t, volatile int *bad) {
	unsigned e = t->sym[r->bits >> (64 - FFH_FAST)];
	if (e == 0) {
		e = slow(r->bits, t);
		if (e == 0) {
			/* No code: libjpeg warns and takes the symbol as 0. */
			*bad = 1;
			e = 16;
		}
	}
	r->bits <<= e & 0xFF;
	r->nbits -= (int)(e & 0xFF);
	return (int)(e >> 8);
}

static inline __attribute__((always_inline)) unsigned take(ffh_reader *r, int n) {
	unsigned v = (unsigned)(r->bits >> (64 - n));
	r->bits <<= n;
	r->nbits -= n;
	return v;
}

/* restart moves past the RSTn marker that must come next and resets the
 * predictors and the bit reader. Returns 0 when the next marker is another
 * one (or there is none), after a warning. */
static int restart(j_decompress_ptr cinfo, ffh_state *s) {
	const uint8_t *q = s->src, *end = s->end;
	/* The bits left in the buffer are the interval's padding; the data
	 * not yet copied up to the marker is damage libjpeg skips too. */
	while (q < end && !(q[0] == 0xFF && q + 1 < end && q[1] != 0 && q[1] != 0xFF)) {
		q++;
	}
	if (q + 1 >= end) {
		WARNMS(cinfo, JWRN_JPEG_EOF);
		return 0;
	}
	if (q[1] != JPEG_RST0 + s->next_rst) {
		WARNMS2(cinfo, JWRN_MUST_RESYNC, q[1], s->next_rst);
		return 0;
	}
	s->src = q + 2;
	s->fill = 0;
	s->stopped = 0;
	s->r.p = s->buf;
	s->r.bits = 0;
	s->r.nbits = 0;
	s->next_rst = (s->next_rst + 1) & 7;
	s->togo = cinfo->restart_interval;
	memset(s->dc, 0, sizeof(s->dc));
	return 1;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
static boolean decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
	ffh_state *s = (ffh_state *)cinfo->entropy;
	ffh_reader r;
	int b;
	/* In memory: set on damage only, it would take a register of the
	 * symbol loop. */
	volatile int bad = 0;

	if (cinfo->restart_interval) {
		if (s->togo == 0) {
			/* As libjpeg does, an interval after damage decodes again;
			 * past a marker that is not the next RSTn, the blocks stay
			 * zero (where libjpeg may resynchronize further on). */
			s->view.insufficient_data = !restart(cinfo, s);
		}
		s->togo--;
	}
	if (s->view.insufficient_data) {
		return TRUE; /* after damage: the blocks stay zero */
	}
	if (!s->stopped && s->fill - (size_t)(s->r.p - s->buf) < FFH_MCU_BYTES) {
		top_up(s);
	}
	r = s->r;
	for (b = 0; b < cinfo->blocks_in_MCU; b++) {
		JCOEF *blk = MCU_data != NULL ? MCU_data[b][0] : s->scratch;
		const ffh_table *dc = s->dct[b], *ac = s->act[b];
		int ci = cinfo->MCU_membership[b], k, v, rs;

		if (r.nbits < 32) {
			refill(&r);
		}
		v = dc->fast[r.bits >> (64 - FFH_FAST)];
		if (v != 0) {
			r.bits <<= v & 0xFF;
			r.nbits -= v & 0xFF;
			v >>= 16;
		} else {
			v = symbol(&r, dc, &bad);
			if (v > 15) {
				bad = 1;
				v = 0;
			}
			if (v) {
				v = extend(take(&r, v), v);
			}
		}
		s->dc[ci] = (int)((unsigned)s->dc[ci] + (unsigned)v);
		blk[0] = (JCOEF)s->dc[ci];
		/* A refill when fewer than 32 bits are left, tested before
		 * every symbol, mispredicted often (about a tenth of the symbol
		 * loop's time). Fast entries take at most FFH_FAST bits, so the
		 * 56 bits after a refill last four of them: the refill is
		 * unconditional, once per four; a longer code refills for
		 * itself. */
		for (k = 1; k < 64;) {
			int32_t e;
			int i;
			refill(&r);
			for (i = 0; i < 4; i++) {
				e = ac->fast[r.bits >> (64 - FFH_FAST)];
				if (__builtin_expect(e == 0, 0)) {
					break;
				}
				k += (e >> 8) & 0xFF;
				blk[natural[k]] = (JCOEF)(e >> 16);
				r.bits <<= e & 0xFF;
				r.nbits -= e & 0xFF;
				if (++k >= 64) {
					goto block_done;
				}
			}
			if (i == 4) {
				continue;
			}
			if (r.nbits < 32) {
				refill(&r);
			}
			rs = symbol(&r, ac, &bad);
			if (rs & 15) {
				int n = rs & 15;
				k += rs >> 4;
				blk[natural[k]] = (JCOEF)extend(take(&r, n), n);
			} else {
				if (rs >> 4 != 15) {
					break;
				}
				k += 15;
			}
			k++;
		}
	block_done:;
	}
	s->r = r;
	/* As libjpeg does, warn, and leave the rest of the blocks zero. The
	 * bits past the data come first: a code no table has among them says
	 * nothing. */
	if (s->stopped == FFH_AT_END && r.p > s->buf + s->fill) {
		/* No EOI, and the reader has read ahead to the data's end:
		 * libjpeg's source manager warns there, whether or not the bits
		 * are needed. */
		s->view.insufficient_data = TRUE;
		WARNMS(cinfo, JWRN_JPEG_EOF);
	} else if (s->stopped && (long)(r.p - s->buf) * 8 - r.nbits > (long)s->fill * 8) {
		/* The MCU took bits past a marker. */
		s->view.insufficient_data = TRUE;
		WARNMS(cinfo, JWRN_HIT_MARKER);
	} else if (bad) {
		/* A code no table has. */
		s->view.insufficient_data = TRUE;
		WARNMS(cinfo, JWRN_HUFF_BAD_CODE);
	}
	return TRUE;
}

int ffh_hook(j_decompress_ptr cinfo, ffh_state *s) {
	ffh_entropy_view *theirs = (ffh_entropy_view *)cinfo->entropy;
	int b, ci, t;
	const JHUFF_TBL *h;

	if (theirs == NULL || cinfo->progressive_mode || cinfo->arith_code ||
	    cinfo->data_precision != 8 || jpeg_has_multiple_scans(cinfo) ||
	    cinfo->comps_in_scan < 1 || cinfo->comps_in_scan > 4 ||
	    cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU || cinfo->src == NULL ||
	    cinfo->unread_marker != 0 || theirs->insufficient_data) {
		return 0;
	}
	/* Tables: at most four of each kind. */
	for (t = 0; t < NUM_HUFF_TBLS; t++) {
		s->used[t] = s->used[NUM_HUFF_TBLS + t] = 0;
	}
	for (ci = 0; ci < cinfo->comps_in_scan; ci++) {
		jpeg_component_info *c = cinfo->cur_comp_info[ci];
		if (c == NULL || c->dc_tbl_no < 0 || c->dc_tbl_no >= NUM_HUFF_TBLS ||
		    c->ac_tbl_no < 0 || c->ac_tbl_no >= NUM_HUFF_TBLS) {
			return 0;
		}
		if (!s->used[c->dc_tbl_no]) {
			h = cinfo->dc_huff_tbl_ptrs[c->dc_tbl_no];
			if (h == NULL || !build(&s->tables[c->dc_tbl_no], h, 0)) {
				return 0;
			}
			s->used[c->dc_tbl_no] = 1;
		}
		if (!s->used[NUM_HUFF_TBLS + c->ac_tbl_no]) {
			h = cinfo->ac_huff_tbl_ptrs[c->ac_tbl_no];
			if (h == NULL || !build(&s->tables[NUM_HUFF_TBLS + c->ac_tbl_no], h, 1)) {
				return 0;
			}
			s->used[NUM_HUFF_TBLS + c->ac_tbl_no] = 1;
		}
	}
	for (b = 0; b < cinfo->blocks_in_MCU; b++) {
		jpeg_component_info *c;
		ci = cinfo->MCU_membership[b];
		if (ci < 0 || ci >= cinfo->comps_in_scan) {
			return 0;
		}
		c = cinfo->cur_comp_info[ci];
		s->dct[b] = &s->tables[c->dc_tbl_no];
		s->act[b] = &s->tables[NUM_HUFF_TBLS + c->ac_tbl_no];
	}
	s->view.start_pass = theirs->start_pass;
	s->view.decode_mcu = decode_mcu;
	s->view.insufficient_data = FALSE;
	s->cinfo = cinfo;
	memset(&s->r, 0, sizeof(s->r));
	s->r.p = s->buf;
	s->fill = 0;
	s->src = cinfo->src->next_input_byte;
	s->end = s->src + cinfo->src->bytes_in_buffer;
	s->stopped = 0;
	s->togo = cinfo->restart_interval;
	s->next_rst = 0;
	memset(s->dc, 0, sizeof(s->dc));
	cinfo->entropy = (struct jpeg_entropy_decoder *)(void *)s;
	return 1;
}
