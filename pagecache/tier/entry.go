package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
)

// An entry is one page, stored as its chunks. Little-endian:
//
//	0   magic "FFCVPAGE"
//	8   version u16 (1), reserved u16
//	12  data page u32
//	16  page size u32
//	20  chunks u32
//	24  source identity: the first 8 bytes of its SHA-256
//	32  CRC-32C of bytes 0–31 and of the index
//	36  reserved u32
//	40  index: per chunk, raw length u32, stored length u32, codec u8,
//	    reserved u8, width u16, CRC-32C of the raw bytes u32
//	    then the chunks' stored bytes, back to back
//
// Every chunk carries the checksum of its bytes as the page has them, so a
// flipped bit on disk, a torn write or a codec's mistake is caught before
// a byte is served, and a reader of a few samples checks only their
// chunks.
const (
	entryMagic   = "FFCVPAGE"
	entryVersion = 1
	headerSize   = 40
	indexEntry   = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt marks an entry whose bytes do not check out.
var ErrCorrupt = errors.New("corrupt cache entry")

// chunkInfo is a chunk as the index has it, with its offsets.
type chunkInfo struct {
	rawOff, rawLen       uint32
	storedOff, storedLen uint32 // storedOff counts from the entry's start
	codec                uint8
	width                uint16
	crc                  uint32
}

// index is an entry's decoded header and index.
type index struct {
	page, pageSize uint32
	chunks         []chunkInfo
	size           int64 // the whole entry's bytes
}

// scratchPool holds the buffers entries are encoded into and chunks
// decoded through.
var scratchPool = sync.Pool{New: func() any { return new([]byte) }}

func getScratch(n int) *[]byte {
	b := scratchPool.Get().(*[]byte)
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	*b = (*b)[:n]
	return b
}

// encodeEntry appends page dp's entry to dst: each chunk of layout
// compressed when compress is set and a sample of the page shows that it
// saves at least saving of its bytes, else raw.
func encodeEntry(dst []byte, page []byte, dp uint32, id uint64, layout []Chunk, compress bool) ([]byte, error) {
	total := 0
	for _, c := range layout {
		total += int(c.Len)
	}
	if total != len(page) {
		return nil, fmt.Errorf("page layout covers %d bytes of %d", total, len(page))
	}
	if compress {
		compress = worthCompressing(page, layout)
	}
	start := len(dst)
	dst = append(dst, make([]byte, headerSize+indexEntry*len(layout))...)
	hdr := dst[start:]
	copy(hdr, entryMagic)
	binary.LittleEndian.PutUint16(hdr[8:], entryVersion)
	binary.LittleEndian.PutUint32(hdr[12:], dp)
	binary.LittleEndian.PutUint32(hdr[16:], uint32(len(page)))
	binary.LittleEndian.PutUint32(hdr[20:], uint32(len(layout)))
	binary.LittleEndian.PutUint64(hdr[24:], id)
	filt := getScratch(0)
	defer scratchPool.Put(filt)
	off := 0
	for i, c := range layout {
		raw := page[off : off+int(c.Len)]
		off += int(c.Len)
		before := len(dst)
		codec := uint8(codecRaw)
		if compress {
			if cap(*filt) < len(raw) {
				*filt = make([]byte, len(raw))
			}
			dst, codec = encodeChunk(dst, raw, c.Width, (*filt)[:cap(*filt)])
		} else {
			dst = append(dst, raw...)
		}
		e := dst[start+headerSize+indexEntry*i:]
		binary.LittleEndian.PutUint32(e[0:], c.Len)
		binary.LittleEndian.PutUint32(e[4:], uint32(len(dst)-before))
		e[8] = codec
		binary.LittleEndian.PutUint16(e[10:], c.Width)
		binary.LittleEndian.PutUint32(e[12:], crc32.Checksum(raw, castagnoli))
	}
	hdr = dst[start:]
	crc := crc32.Update(crc32.Checksum(hdr[:32], castagnoli), castagnoli, hdr[headerSize:headerSize+indexEntry*len(layout)])
	binary.LittleEndian.PutUint32(hdr[32:], crc)
	return dst, nil
}

// worthCompressing compresses the page's largest chunk and reports whether
// that saved at least saving of its bytes. JPEG does not compress: its
// pages are stored as they are, for the cost of one chunk's try.
func worthCompressing(page []byte, layout []Chunk) bool {
	best, off, at := -1, 0, 0
	for i, c := range layout {
		if best < 0 || c.Len > layout[best].Len {
			best, at = i, off
		}
		off += int(c.Len)
	}
	if best < 0 || layout[best].Len == 0 {
		return false
	}
	c := layout[best]
	raw := page[at : at+int(c.Len)]
	buf := getScratch(2 * len(raw))
	defer scratchPool.Put(buf)
	out, _ := encodeChunk((*buf)[:0:len(raw)], raw, c.Width, (*buf)[len(raw):])
	return float64(len(out)) <= (1-saving)*float64(len(raw))
}

// parseIndex decodes an entry's header and index from b, which holds at
// least the header (and, for the index, headerLen(b) bytes), checking it
// against what the entry must be: page dp of pageSize bytes of the source
// id, size bytes in all (-1: unknown).
func parseIndex(b []byte, dp uint32, pageSize uint32, id uint64, size int64) (*index, error) {
	if len(b) < headerSize || string(b[:8]) != entryMagic {
		return nil, fmt.Errorf("%w: no entry header", ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != entryVersion {
		return nil, fmt.Errorf("%w: entry version %d", ErrCorrupt, v)
	}
	n := binary.LittleEndian.Uint32(b[20:])
	if uint64(n) > uint64(pageSize)+1 || len(b) < headerSize+indexEntry*int(n) {
		return nil, fmt.Errorf("%w: index of %d chunks cut short", ErrCorrupt, n)
	}
	crc := crc32.Update(crc32.Checksum(b[:32], castagnoli), castagnoli, b[headerSize:headerSize+indexEntry*int(n)])
	if crc != binary.LittleEndian.Uint32(b[32:]) {
		return nil, fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)
	}
	if got := binary.LittleEndian.Uint32(b[12:]); got != dp {
		return nil, fmt.Errorf("%w: entry of page %d where page %d was expected", ErrCorrupt, got, dp)
	}
	if got := binary.LittleEndian.Uint32(b[16:]); got != pageSize {
		return nil, fmt.Errorf("%w: page size %d, not %d", ErrCorrupt, got, pageSize)
	}
	if got := binary.LittleEndian.Uint64(b[24:]); got != id {
		return nil, fmt.Errorf("%w: entry of another source (%016x)", ErrCorrupt, got)
	}
	ix := &index{page: dp, pageSize: pageSize, chunks: make([]chunkInfo, n)}
	raw, stored := uint64(0), uint64(headerSize+indexEntry*int(n))
	for i := range ix.chunks {
		e := b[headerSize+indexEntry*i:]
		c := chunkInfo{
			rawOff: uint32(raw), rawLen: binary.LittleEndian.Uint32(e[0:]),
			storedOff: uint32(stored), storedLen: binary.LittleEndian.Uint32(e[4:]),
			codec: e[8], width: binary.LittleEndian.Uint16(e[10:]), crc: binary.LittleEndian.Uint32(e[12:]),
		}
		raw += uint64(c.rawLen)
		stored += uint64(c.storedLen)
		if raw > uint64(pageSize) || stored > 1<<32-1 {
			return nil, fmt.Errorf("%w: chunks beyond the page", ErrCorrupt)
		}
		ix.chunks[i] = c
	}
	if raw != uint64(pageSize) {
		return nil, fmt.Errorf("%w: chunks cover %d bytes of %d", ErrCorrupt, raw, pageSize)
	}
	if size >= 0 && int64(stored) != size {
		return nil, fmt.Errorf("%w: %d bytes where the index says %d", ErrCorrupt, size, stored)
	}
	ix.size = int64(stored)
	return ix, nil
}

// headerLen returns the bytes of header and index that an entry whose
// first headerSize bytes are b has, or 0 if b is no header.
func headerLen(b []byte) int {
	if len(b) < headerSize || string(b[:8]) != entryMagic {
		return 0
	}
	return headerSize + indexEntry*int(binary.LittleEndian.Uint32(b[20:]))
}

// span returns the chunks that hold bytes [lo, hi) of the page.
func (ix *index) span(lo, hi int64) (first, last int) {
	first, last = -1, -1
	for i, c := range ix.chunks {
		end := int64(c.rawOff) + int64(c.rawLen)
		if first < 0 && end > lo {
			first = i
		}
		if int64(c.rawOff) < hi {
			last = i
		}
	}
	return first, last
}

// rawSpan reports whether chunks first to last are stored raw and hold
// exactly bytes [lo, hi) of the page.
func (ix *index) rawSpan(lo, hi int64, first, last int) bool {
	if int64(ix.chunks[first].rawOff) != lo || int64(ix.chunks[last].rawOff)+int64(ix.chunks[last].rawLen) != hi {
		return false
	}
	for i := first; i <= last; i++ {
		if ix.chunks[i].codec != codecRaw || ix.chunks[i].storedLen != ix.chunks[i].rawLen {
			return false
		}
	}
	return true
}

// checkSpan checks the checksums of raw chunks first to last, read into p.
func (ix *index) checkSpan(p []byte, first, last int) error {
	base := ix.chunks[first].rawOff
	for i := first; i <= last; i++ {
		c := &ix.chunks[i]
		if crc32.Checksum(p[c.rawOff-base:c.rawOff-base+c.rawLen], castagnoli) != c.crc {
			return fmt.Errorf("%w: chunk %d (page bytes %d to %d): checksum mismatch", ErrCorrupt, i, c.rawOff, c.rawOff+c.rawLen)
		}
	}
	return nil
}

// decodeSpan decodes chunks first to last, whose stored bytes are stored
// (from the first's storedOff on), and copies bytes [lo, lo+len(p)) of the
// page to p. A chunk that does not decode or whose checksum fails is
// ErrCorrupt.
func (ix *index) decodeSpan(p []byte, lo int64, first, last int, stored []byte) error {
	base := ix.chunks[first].storedOff
	hi := lo + int64(len(p))
	for i := first; i <= last; i++ {
		c := &ix.chunks[i]
		s := stored[c.storedOff-base : c.storedOff-base+c.storedLen]
		cLo, cHi := int64(c.rawOff), int64(c.rawOff)+int64(c.rawLen)
		var raw []byte
		var tmp *[]byte
		if cLo >= lo && cHi <= hi {
			raw = p[cLo-lo : cHi-lo]
		} else {
			tmp = getScratch(int(c.rawLen))
			raw = *tmp
		}
		err := decodeChunk(raw, s, c.codec, c.width)
		if err == nil && crc32.Checksum(raw, castagnoli) != c.crc {
			err = errors.New("checksum mismatch")
		}
		if err == nil && tmp != nil {
			copy(p[max(cLo, lo)-lo:], raw[max(cLo, lo)-cLo:min(cHi, hi)-cLo])
		}
		if tmp != nil {
			scratchPool.Put(tmp)
		}
		if err != nil {
			return fmt.Errorf("%w: chunk %d (page bytes %d to %d): %v", ErrCorrupt, i, cLo, cHi, err)
		}
	}
	return nil
}
