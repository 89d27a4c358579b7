package beton

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// PathField is the bytes field in which `ffcvfs write --keep-names` keeps
// each image's path relative to the ImageFolder root ("class/a.jpg", with
// forward slashes).
//
// Beside the per-sample values, which every reader (FFCV's included) sees,
// such a beton holds all the paths in one names index, so that a mount
// learns every name with one read instead of one per page: the index
// lies between the last data page and the allocation table, and the path
// field's descriptor arguments, which FFCV's BytesField ignores, say where
// (names magic, offset, length and CRC-32C, little-endian):
//
//	args[0:16]  "ffcvfs-names-v1\x00"
//	args[16:24] offset of the index (the end of the data pages)
//	args[24:32] its length
//	args[32:36] CRC-32C of the index
//
// The index: u64 count (the number of samples), count+1 u64 offsets into
// the names that follow, the names.
const PathField = "path"

const namesMagic = "ffcvfs-names-v1\x00"

// MaxNameBytes bounds one sample's path in the names index.
const MaxNameBytes = 4096

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// nameIndex locates a beton's names index.
type nameIndex struct {
	field     int
	off, size uint64
	crc       uint32
}

// findNameIndex returns the names index the fields declare, if any.
func findNameIndex(fields []Field) (nameIndex, bool) {
	for i, fd := range fields {
		if fd.Type == TypeBytes && bytes.Equal(fd.Args[:16], []byte(namesMagic)) {
			return nameIndex{field: i, off: binary.LittleEndian.Uint64(fd.Args[16:]),
				size: binary.LittleEndian.Uint64(fd.Args[24:]), crc: binary.LittleEndian.Uint32(fd.Args[32:])}, true
		}
	}
	return nameIndex{}, false
}

// encodeNames makes a names index of names.
func encodeNames(names []string) []byte {
	total := 0
	for _, n := range names {
		total += len(n)
	}
	b := make([]byte, 0, 8*(len(names)+2)+total)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(names)))
	off := uint64(0)
	b = binary.LittleEndian.AppendUint64(b, 0)
	for _, n := range names {
		off += uint64(len(n))
		b = binary.LittleEndian.AppendUint64(b, off)
	}
	for _, n := range names {
		b = append(b, n...)
	}
	return b
}

// HasNames reports whether the beton holds a names index (see PathField).
func (f *File) HasNames() bool { return f.names.size > 0 }

// Names reads the names index: each sample's path, in sample order. The
// index is checked (CRC, count, offsets) before anything is taken from it.
func (f *File) Names() ([]string, error) {
	ix := f.names
	if ix.size == 0 {
		return nil, fmt.Errorf("%s has no names index (written without ffcvfs write --keep-names)", f.name)
	}
	b := make([]byte, ix.size) // bounded by the file's size (Open)
	if err := readAt(f.r, b, int64(ix.off)); err != nil {
		return nil, fmt.Errorf("%s: reading the names index: %w", f.name, err)
	}
	if c := crc32.Checksum(b, castagnoli); c != ix.crc {
		return nil, fmt.Errorf("%s: names index: CRC-32C %08x, its descriptor says %08x: %w", f.name, c, ix.crc, ErrCorrupt)
	}
	n := uint64(f.NumSamples())
	if len(b) < 8 || binary.LittleEndian.Uint64(b) != n || uint64(len(b)-8)/8 < n+1 {
		return nil, fmt.Errorf("%s: names index of %d bytes does not hold %d names: %w", f.name, len(b), n, ErrCorrupt)
	}
	offs, text := b[8:8+8*(n+1)], b[8+8*(n+1):]
	names := make([]string, n)
	prev := uint64(0)
	for i := range n {
		end := binary.LittleEndian.Uint64(offs[8*(i+1):])
		if end < prev || end > uint64(len(text)) || end-prev > MaxNameBytes {
			return nil, fmt.Errorf("%s: names index: name of sample %d runs from %d to %d in %d bytes: %w", f.name, i, prev, end, len(text), ErrCorrupt)
		}
		names[i] = string(text[prev:end])
		prev = end
	}
	return names, nil
}

// SetNames makes the writer keep names, sample i's being names[i], in a
// names index of bytes field field (see PathField). Call it before
// Close; the values of the field must still be written with each sample.
func (w *Writer) SetNames(field int, names []string) error {
	if field < 0 || field >= len(w.fields) || w.fields[field].Type != TypeBytes {
		return fmt.Errorf("names index: field %d is not a bytes field", field)
	}
	if len(names) != int(w.header.NumSamples) {
		return fmt.Errorf("names index: %d names for %d samples", len(names), w.header.NumSamples)
	}
	for i, n := range names {
		if len(n) > MaxNameBytes {
			return fmt.Errorf("names index: the name of sample %d is %d bytes long; at most %d", i, len(n), MaxNameBytes)
		}
	}
	w.nameField, w.names = field, names
	return nil
}

// NamesField returns the index of the field whose descriptor locates the
// names index (see PathField), or -1.
func (f *File) NamesField() int {
	if f.names.size == 0 {
		return -1
	}
	return f.names.field
}
