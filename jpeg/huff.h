#ifndef FFCVFS_DECODE_HUFF_H
#define FFCVFS_DECODE_HUFF_H

#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

/* Bits of lookahead in the decoding tables. */
#define FFH_FAST 10

typedef struct ffh_table {
	/* By the next FFH_FAST bits: symbol << 8 | code length, 0 for a
	 * longer code. */
	uint16_t sym[1 << FFH_FAST];
	/* By the next FFH_FAST bits, where the code and its value bits fit in
	 * them: value << 16 | run << 8 | bits used (an EOB is a run of 64 and
	 * a ZRL one of 15, both of value 0; DC tables have no run); 0
	 * elsewhere. */
	int32_t fast[1 << FFH_FAST];
	int32_t maxcode[18];
	int32_t valoff[17];
	uint8_t val[256];
} ffh_table;

/* Most bytes of data one MCU can take: D_MAX_BLOCKS_IN_MCU blocks of 64
 * symbols of at most 31 bits (a 16-bit code and 15 value bits) are 2,480
 * bytes, and a refill reads 8 bytes ahead. */
#define FFH_MCU_BYTES 2560

/* Bytes of the entropy-coded data held unstuffed at once. */
#define FFH_BUF 16384

/* A position in the unstuffed data (ffh_state.buf); see huff.c. */
typedef struct ffh_reader {
	const uint8_t *p; /* the next byte of buf not yet in bits */
	uint64_t bits;
	int nbits;
} ffh_reader;

/* libjpeg's entropy-decoder module as jpegint.h lays it out (that header
 * is not installed); the layout has been the same since IJG's libjpeg 6b. */
typedef struct ffh_entropy_view {
	void (*start_pass)(j_decompress_ptr cinfo);
	boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
	boolean insufficient_data;
} ffh_entropy_view;

/* The entropy decoder of one decompression; the caller owns it, and it
 * must outlive the decompression it is hooked into. */
typedef struct ffh_state {
	ffh_entropy_view view; /* first: libjpeg sees the state as its entropy module */
	j_decompress_ptr cinfo;
	ffh_reader r;
	/* The entropy-coded data not yet in buf, in the caller's input. */
	const uint8_t *src, *end;
	/* Where copying into buf stopped: 0 (it goes on), FFH_AT_MARKER (src
	 * is at the marker's first FF) or FFH_AT_END (the input's end). */
	int stopped;
	size_t fill; /* bytes of data in buf */
	unsigned togo;
	int next_rst;
	int dc[4];
	const ffh_table *dct[D_MAX_BLOCKS_IN_MCU], *act[D_MAX_BLOCKS_IN_MCU];
	char used[2 * NUM_HUFF_TBLS];
	ffh_table tables[2 * NUM_HUFF_TBLS];
	JCOEF scratch[64 + 16];
	/* The data without its byte stuffing, and room for an MCU's reads
	 * past its end (see top_up). */
	uint8_t buf[FFH_BUF + FFH_MCU_BYTES + 16];
} ffh_state;

enum { FFH_AT_MARKER = 1, FFH_AT_END = 2 };

/* ffh_hook replaces the entropy decoder of a started single-scan
 * sequential Huffman decompression by s's, which gives the same
 * coefficients. Call it after jpeg_start_decompress and before the first
 * row is read or skipped. Returns 0, leaving libjpeg's in place, for
 * other JPEGs. */
int ffh_hook(j_decompress_ptr cinfo, ffh_state *s);

#endif
