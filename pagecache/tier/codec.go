package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/huff0"
	"github.com/klauspost/compress/zstd"
)

// Chunk is one piece of a page as the page's layout cuts it: an
// allocation (a sample's image, array, bytes) or the bytes between two.
// Width > 0 marks raw RGB pixels, Width pixels to a row.
type Chunk struct {
	Len   uint32
	Width uint16
}

// Codecs of a stored chunk.
const (
	codecRaw  = 0 // the bytes as they are
	codecRLE  = 1 // one byte, repeated
	codecPix  = 2 // MED-predicted pixels, Huffman-coded in pieces (huff0)
	codecZstd = 3 // zstd
)

// pixPiece is the most bytes of residuals coded with one Huffman table
// (huff0 takes less than 256 KiB at a time).
const pixPiece = 128 << 10

// saving is the share of its bytes a page must save to be stored
// compressed: a page that saves less is stored as it is, and costs no
// decoding.
const saving = 0.2

var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(1<<31))
)

// huffPool holds huff0 scratch, which is not safe for concurrent use.
var huffPool = sync.Pool{New: func() any {
	s := &huff0.Scratch{Reuse: huff0.ReusePolicyNone}
	return s
}}

// encodeChunk appends the stored form of raw to dst: compressed by the
// codec that suits it when that is smaller, else raw.
func encodeChunk(dst, raw []byte, width uint16, filt []byte) ([]byte, uint8) {
	if len(raw) == 0 {
		return dst, codecRaw
	}
	if uniform(raw) {
		return append(dst, raw[0]), codecRLE
	}
	start := len(dst)
	if width > 0 && len(raw)%(3*int(width)) == 0 {
		filt = filt[:len(raw)]
		medFilter(filt, raw, 3*int(width))
		dst = encodePix(dst, filt)
		if len(dst)-start < len(raw) {
			return dst, codecPix
		}
		return append(dst[:start], raw...), codecRaw
	}
	dst = zenc.EncodeAll(raw, dst)
	if len(dst)-start < len(raw) {
		return dst, codecZstd
	}
	return append(dst[:start], raw...), codecRaw
}

// encodePix appends residuals in pieces of pixPiece bytes: per piece, a
// 4-byte length whose top bit marks a piece stored raw (Huffman coding did
// not pay), then the piece.
func encodePix(dst, res []byte) []byte {
	s := huffPool.Get().(*huff0.Scratch)
	defer huffPool.Put(s)
	for len(res) > 0 {
		n := min(len(res), pixPiece)
		p := res[:n]
		res = res[n:]
		out, _, err := huff0.Compress4X(p, s)
		if err != nil || len(out) >= n {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(n)|1<<31)
			dst = append(dst, p...)
			continue
		}
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(out)))
		dst = append(dst, out...)
	}
	return dst
}

var errChunk = errors.New("chunk does not decode")

// decodeChunk decodes a stored chunk into raw, whose length is the
// chunk's.
func decodeChunk(raw, stored []byte, codec uint8, width uint16) error {
	if len(raw) == 0 {
		if len(stored) != 0 {
			return fmt.Errorf("%w: %d bytes stored for none", errChunk, len(stored))
		}
		return nil
	}
	switch codec {
	case codecRaw:
		if len(stored) != len(raw) {
			return fmt.Errorf("%w: %d bytes stored raw for %d", errChunk, len(stored), len(raw))
		}
		copy(raw, stored)
	case codecRLE:
		if len(stored) != 1 {
			return fmt.Errorf("%w: a run of %d bytes", errChunk, len(stored))
		}
		for i := range raw {
			raw[i] = stored[0]
		}
	case codecPix:
		if width == 0 || len(raw)%(3*int(width)) != 0 {
			return fmt.Errorf("%w: pixels %d wide in %d bytes", errChunk, width, len(raw))
		}
		if err := decodePix(raw, stored); err != nil {
			return err
		}
		medUnfilter(raw, 3*int(width))
	case codecZstd:
		// The frame must say it holds the chunk's bytes before any is
		// decoded: a corrupt header could ask for any memory.
		var h zstd.Header
		if err := h.Decode(stored); err != nil || !h.HasFCS || h.FrameContentSize != uint64(len(raw)) || h.WindowSize > uint64(len(raw))+1<<20 {
			return fmt.Errorf("%w: zstd frame header does not fit the chunk", errChunk)
		}
		out, err := zdec.DecodeAll(stored, raw[:0])
		if err != nil {
			return fmt.Errorf("%w: %v", errChunk, err)
		}
		if len(out) != len(raw) || &out[0] != &raw[0] {
			return fmt.Errorf("%w: zstd gave %d bytes for %d", errChunk, len(out), len(raw))
		}
	default:
		return fmt.Errorf("%w: unknown codec %d", errChunk, codec)
	}
	return nil
}

func decodePix(raw, stored []byte) error {
	s := huffPool.Get().(*huff0.Scratch)
	defer func() {
		// Out is the caller's memory: a later use of the scratch must not
		// write there.
		s.Out = nil
		huffPool.Put(s)
	}()
	for len(raw) > 0 {
		n := min(len(raw), pixPiece)
		if len(stored) < 4 {
			return fmt.Errorf("%w: pixels cut short", errChunk)
		}
		l := binary.LittleEndian.Uint32(stored)
		stored = stored[4:]
		plain := l&(1<<31) != 0
		l &^= 1 << 31
		if int64(l) > int64(len(stored)) {
			return fmt.Errorf("%w: a piece of %d bytes in %d", errChunk, l, len(stored))
		}
		p := stored[:l]
		stored = stored[l:]
		if plain {
			if int(l) != n {
				return fmt.Errorf("%w: a raw piece of %d bytes for %d", errChunk, l, n)
			}
			copy(raw, p)
		} else {
			s.Out = raw[:0:n]
			s2, rem, err := huff0.ReadTable(p, s)
			if err != nil {
				return fmt.Errorf("%w: %v", errChunk, err)
			}
			s2.MaxDecodedSize = n
			out, err := s2.Decompress4X(rem, n)
			if err != nil {
				return fmt.Errorf("%w: %v", errChunk, err)
			}
			if len(out) != n {
				return fmt.Errorf("%w: a piece gave %d bytes for %d", errChunk, len(out), n)
			}
			if &out[0] != &raw[0] {
				copy(raw, out)
			}
		}
		raw = raw[n:]
	}
	if len(stored) != 0 {
		return fmt.Errorf("%w: %d bytes after the pixels", errChunk, len(stored))
	}
	return nil
}

func uniform(b []byte) bool {
	for _, c := range b[1:] {
		if c != b[0] {
			return false
		}
	}
	return true
}

// medFilter writes to res the residuals of the median edge detector
// (LOCO-I's predictor) over pixels of row bytes a row, 3 bytes a pixel:
// each byte minus the median of its left and upper neighbours and of
// left+upper−upper-left, in the same channel. The first row predicts
// from the left, the first pixel of a row from above.
func medFilter(res, px []byte, row int) {
	first := px[:row]
	r := res[:row]
	copy(r[:3], first[:3])
	for x := 3; x < row; x++ {
		r[x] = first[x] - first[x-3]
	}
	for y := row; y < len(px); y += row {
		up, cur, r := px[y-row:y], px[y:y+row], res[y:y+row]
		for x := range 3 {
			r[x] = cur[x] - up[x]
		}
		for x := 3; x < row; x++ {
			r[x] = cur[x] - med(cur[x-3], up[x], up[x-3])
		}
	}
}

// medUnfilter turns residuals back into pixels, in place.
func medUnfilter(b []byte, row int) {
	first := b[:row]
	for x := 3; x < row; x++ {
		first[x] += first[x-3]
	}
	for y := row; y < len(b); y += row {
		up, cur := b[y-row:y], b[y:y+row]
		for x := range 3 {
			cur[x] += up[x]
		}
		for x := 3; x < row; x++ {
			cur[x] += med(cur[x-3], up[x], up[x-3])
		}
	}
}

// med is the median edge detector's prediction from the left (a), upper
// (b) and upper-left (c) neighbours: the median of a, b and a+b−c, without
// branches (the compiler makes min and max conditional moves), since the
// pixels make them unpredictable.
func med(a, b, c byte) byte {
	x, y := int(a), int(b)
	return byte(max(min(x, y), min(max(x, y), x+y-int(c))))
}
