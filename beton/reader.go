package beton

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/ffcvfs/ffcvfs/internal/readfile"
)

// NoPage is what SamplePage returns for a sample with no data in any page
// (a sample of scalar fields only).
const NoPage = -1

// File is an opened .beton. It holds the header, the field descriptors, the
// metadata table and the allocation table in memory; sample data is read from
// the underlying io.ReaderAt on demand. A File is immutable after Open and
// safe for concurrent use.
type File struct {
	name string
	r    io.ReaderAt
	size int64

	header Header
	fields []Field
	layout RecordLayout
	meta   []byte // the metadata table, NumSamples × RecordSize

	pageShift uint
	firstPage int64 // first data page
	numPages  int   // data pages, from firstPage up to the allocation table

	// The allocation table, sorted by (pointer, sample, size).
	allocs []Alloc

	samplePage  []int32  // data-page index (page - firstPage) per sample, or NoPage
	pageStart   []uint32 // pageSamples[pageStart[i]:pageStart[i+1]] are the samples of data page i
	pageSamples []uint32

	names   nameIndex // the names index, if any (names.go)
	dataEnd uint64    // the end of the data pages: the names index or the allocation table

	closer io.Closer
}

// Alloc is one entry of the allocation table.
type Alloc struct {
	Sample uint64
	Ptr    uint64
	Size   uint64
}

// Image is the metadata of one RGB image value.
type Image struct {
	Mode          ImageMode
	Width, Height int
	Ptr, Size     uint64
}

// Schema is what the first two sections of a file say: header and fields.
type Schema struct {
	Header Header
	Fields []Field
}

// ReadSchema reads and checks the header and field descriptors only. It
// succeeds on files with custom fields, which Open refuses.
func ReadSchema(r io.ReaderAt, size int64, name string) (*Schema, error) {
	if size < HeaderSize {
		return nil, fmt.Errorf("%s: file of %d bytes is shorter than the %d-byte header: %w", name, size, HeaderSize, ErrCorrupt)
	}
	var hb [HeaderSize]byte
	if err := readAt(r, hb[:], 0); err != nil {
		return nil, fmt.Errorf("%s: reading header: %w", name, err)
	}
	h := unmarshalHeader(hb[:])
	if h.Version != Version {
		if kind := sniffKind(hb[:]); kind != "" {
			return nil, notBeton(fmt.Sprintf("%s: its first bytes are those of %s, not of a beton (whose header starts with format version %d)", name, kind, Version))
		}
		return nil, fmt.Errorf("%s: file version is %d, this reader reads version %d: %w", name, h.Version, Version, ErrVersion)
	}
	if err := validPageSize(uint64(h.PageSize)); err != nil {
		return nil, fmt.Errorf("%s: header: %v: %w", name, err, ErrCorrupt)
	}
	if h.NumFields == 0 {
		return nil, fmt.Errorf("%s: header declares no fields: %w", name, ErrCorrupt)
	}
	descEnd := int64(HeaderSize) + int64(h.NumFields)*DescriptorSize
	if descEnd > size {
		return nil, fmt.Errorf("%s: truncated: %d field descriptors need %d bytes, file has %d: %w", name, h.NumFields, descEnd, size, ErrCorrupt)
	}
	db := make([]byte, descEnd-HeaderSize)
	if err := readAt(r, db, HeaderSize); err != nil {
		return nil, fmt.Errorf("%s: reading field descriptors: %w", name, err)
	}
	s := &Schema{Header: h, Fields: make([]Field, h.NumFields)}
	for i := range s.Fields {
		f := unmarshalField(db[i*DescriptorSize : (i+1)*DescriptorSize])
		if !f.Type.Known() {
			return nil, fmt.Errorf("%s: field %d (%q) has unknown type id %d: %w", name, i, f.Name, uint8(f.Type), ErrCorrupt)
		}
		if err := f.parseArgs(); err != nil {
			return nil, fmt.Errorf("%s: field %q: %v: %w", name, f.Name, err, ErrCorrupt)
		}
		s.Fields[i] = f
	}
	return s, nil
}

// Open reads a .beton from r, whose length is size; name is used in error
// messages. It reads the header, the descriptors, the metadata table and the
// allocation table, once each, and checks the rules of the format that do not
// need sample data. Pointers in the metadata are checked when a sample is
// looked up (and all at once by Verify).
func Open(r io.ReaderAt, size int64, name string) (*File, error) {
	s, err := ReadSchema(r, size, name)
	if err != nil {
		return nil, err
	}
	for _, fd := range s.Fields {
		if fd.Type == TypeCustom {
			return nil, fmt.Errorf("%s: field %q is a custom field (type 255), which needs the code that wrote it: %w", name, fd.Name, ErrUnsupported)
		}
	}
	layout, err := NewRecordLayout(s.Fields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	h := s.Header
	f := &File{name: name, r: r, size: size, header: h, fields: s.Fields, layout: layout}
	f.pageShift = uint(bits.TrailingZeros32(h.PageSize))

	metaStart := int64(HeaderSize) + int64(h.NumFields)*DescriptorSize
	avail := uint64(size - metaStart)
	if h.NumSamples > avail/uint64(layout.RecordSize) || h.NumSamples > math.MaxUint32-1 {
		return nil, fmt.Errorf("%s: truncated: metadata for %d samples needs %d bytes after the descriptors, file has %d: %w",
			name, h.NumSamples, satMul(h.NumSamples, uint64(layout.RecordSize)), avail, ErrCorrupt)
	}
	metaEnd := metaStart + int64(h.NumSamples)*int64(layout.RecordSize)
	if h.AllocTablePtr > uint64(size) {
		return nil, fmt.Errorf("%s: allocation table pointer %d is past the end of the file (%d bytes): %w", name, h.AllocTablePtr, size, ErrCorrupt)
	}
	if h.AllocTablePtr < uint64(metaEnd) {
		return nil, fmt.Errorf("%s: allocation table pointer %d lies inside the metadata table (which ends at %d): %w", name, h.AllocTablePtr, metaEnd, ErrCorrupt)
	}
	tableLen := uint64(size) - h.AllocTablePtr
	if tableLen%AllocEntrySize != 0 {
		return nil, fmt.Errorf("%s: allocation table of %d bytes is not a whole number of %d-byte entries (file truncated or pointer wrong): %w", name, tableLen, AllocEntrySize, ErrCorrupt)
	}
	// What the tables take in memory, checked before any of it is given:
	// a header may claim billions of samples of a file that is all zeros.
	if need := tableMemory(h.NumSamples, uint64(metaEnd-metaStart), tableLen/AllocEntrySize); need > maxTableMemory() {
		return nil, fmt.Errorf("%s: its metadata and allocation tables (%d samples, %d allocations) would take %d MiB of memory, more than half of what this machine has free (%d MiB): %w",
			name, h.NumSamples, tableLen/AllocEntrySize, need>>20, maxTableMemory()*2>>20, ErrTooLarge)
	}
	f.meta = make([]byte, metaEnd-metaStart)
	if err := readAt(r, f.meta, metaStart); err != nil {
		return nil, fmt.Errorf("%s: reading metadata table: %w", name, err)
	}
	f.dataEnd = h.AllocTablePtr
	if ix, ok := findNameIndex(f.fields); ok {
		// The names index lies between the data pages and the table.
		if ix.off < uint64(metaEnd) || ix.size > h.AllocTablePtr || ix.off != h.AllocTablePtr-ix.size {
			return nil, fmt.Errorf("%s: field %q: names index at %d of %d bytes is not right before the allocation table at %d: %w", name, f.fields[ix.field].Name, ix.off, ix.size, h.AllocTablePtr, ErrCorrupt)
		}
		f.names, f.dataEnd = ix, ix.off
	}
	ps := int64(h.PageSize)
	f.firstPage = (metaEnd + ps - 1) / ps
	// A table right after the metadata means there are no data pages (every
	// allocation is empty).
	if tableLen > 0 && f.dataEnd != uint64(metaEnd) {
		if f.dataEnd%uint64(ps) != 0 {
			return nil, fmt.Errorf("%s: data region ends at %d, which is not a page boundary (page size %d): last page truncated: %w", name, f.dataEnd, ps, ErrCorrupt)
		}
		f.numPages = int(int64(f.dataEnd)/ps - f.firstPage)
	}
	if err := f.readAllocTable(); err != nil {
		return nil, err
	}
	return f, nil
}

// OpenFile opens a .beton on the local file system. Close releases it.
func OpenFile(path string) (*File, error) {
	fh, size, err := readfile.Open(path) // a FIFO refused, not waited on
	if err != nil {
		return nil, err
	}
	f, err := Open(fh, size, path)
	if err != nil {
		fh.Close()
		return nil, err
	}
	f.closer = fh
	return f, nil
}

// Close closes the underlying file if OpenFile opened it.
func (f *File) Close() error {
	if f.closer != nil {
		return f.closer.Close()
	}
	return nil
}

// readAt fills p from r at off. io.ReaderAt allows io.EOF with a full p
// when p ends at the end of the input: that is no error.
func readAt(r io.ReaderAt, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) && (err == nil || err == io.EOF) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}

func satMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

func (f *File) readAllocTable() error {
	h := f.header
	n := (uint64(f.size) - h.AllocTablePtr) / AllocEntrySize
	buf := make([]byte, n*AllocEntrySize)
	if err := readAt(f.r, buf, int64(h.AllocTablePtr)); err != nil {
		return fmt.Errorf("%s: reading allocation table: %w", f.name, err)
	}
	f.allocs = make([]Alloc, n)
	dataStart := uint64(f.firstPage) << f.pageShift
	dataEnd := f.dataEnd
	f.samplePage = make([]int32, h.NumSamples)
	for i := range f.samplePage {
		f.samplePage[i] = NoPage
	}
	counts := make([]uint32, f.numPages+1)
	sorted := true
	for i := range f.allocs {
		b := buf[i*AllocEntrySize:]
		a := Alloc{
			Sample: binary.LittleEndian.Uint64(b[0:]),
			Ptr:    binary.LittleEndian.Uint64(b[8:]),
			Size:   binary.LittleEndian.Uint64(b[16:]),
		}
		f.allocs[i] = a
		if i > 0 && allocLess(a, f.allocs[i-1]) {
			sorted = false
		}
		if a.Sample >= h.NumSamples {
			return fmt.Errorf("%s: allocation table entry %d names sample %d, file has %d samples: %w", f.name, i, a.Sample, h.NumSamples, ErrCorrupt)
		}
		if a.Size == 0 {
			continue // holds no bytes: nothing to place
		}
		if a.Ptr < dataStart || a.Ptr > dataEnd || a.Size > dataEnd-a.Ptr {
			return fmt.Errorf("%s: sample %d: allocation at %d of %d bytes lies outside the data region [%d, %d): %w", f.name, a.Sample, a.Ptr, a.Size, dataStart, dataEnd, ErrCorrupt)
		}
		page := a.Ptr >> f.pageShift
		if (a.Ptr+a.Size-1)>>f.pageShift != page {
			return fmt.Errorf("%s: sample %d: allocation at %d of %d bytes crosses the end of page %d: %w", f.name, a.Sample, a.Ptr, a.Size, page, ErrCorrupt)
		}
		dp := int32(int64(page) - f.firstPage)
		switch sp := f.samplePage[a.Sample]; {
		case sp == NoPage:
			f.samplePage[a.Sample] = dp
			counts[dp]++
		case sp != dp:
			return fmt.Errorf("%s: sample %d has data in pages %d and %d; a sample must lie in one page: %w", f.name, a.Sample, int64(sp)+f.firstPage, page, ErrCorrupt)
		}
	}
	if !sorted {
		slices.SortFunc(f.allocs, func(a, b Alloc) int {
			if allocLess(a, b) {
				return -1
			}
			if allocLess(b, a) {
				return 1
			}
			return 0
		})
	}
	// Empty allocations may sit between two that overlap: compare each
	// with the end of the last non-empty one.
	var prev Alloc
	for _, a := range f.allocs {
		if a.Size == 0 {
			continue
		}
		if prev.Size > 0 && prev.Ptr+prev.Size > a.Ptr {
			return fmt.Errorf("%s: allocations of samples %d (at %d, %d bytes) and %d (at %d) overlap: %w", f.name, prev.Sample, prev.Ptr, prev.Size, a.Sample, a.Ptr, ErrCorrupt)
		}
		prev = a
	}

	// Samples of every page, in id order.
	f.pageStart = make([]uint32, f.numPages+1)
	var acc uint32
	for i := 0; i < f.numPages; i++ {
		f.pageStart[i] = acc
		acc += counts[i]
	}
	f.pageStart[f.numPages] = acc
	f.pageSamples = make([]uint32, acc)
	next := counts[:f.numPages]
	copy(next, f.pageStart[:f.numPages])
	for s, dp := range f.samplePage {
		if dp != NoPage {
			f.pageSamples[next[dp]] = uint32(s)
			next[dp]++
		}
	}
	return nil
}

// allocLess orders allocations by pointer, then sample, then size, so that
// lookup finds a sample's allocations at a pointer by binary search however
// many empty ones other samples have there.
func allocLess(a, b Alloc) bool {
	if a.Ptr != b.Ptr {
		return a.Ptr < b.Ptr
	}
	if a.Sample != b.Sample {
		return a.Sample < b.Sample
	}
	return a.Size < b.Size
}

// Name returns the name given to Open.
func (f *File) Name() string { return f.name }

// Size returns the file's length in bytes.
func (f *File) Size() int64 { return f.size }

// ReaderAt returns the reader the file was opened from.
func (f *File) ReaderAt() io.ReaderAt { return f.r }

// Header returns the file header.
func (f *File) Header() Header { return f.header }

// Fields returns the field descriptors, in file order. Do not modify.
func (f *File) Fields() []Field { return f.fields }

// RecordLayout returns the metadata record layout.
func (f *File) RecordLayout() RecordLayout { return f.layout }

// FieldIndex returns the index of the field called name, or -1.
func (f *File) FieldIndex(name string) int {
	for i := range f.fields {
		if f.fields[i].Name == name {
			return i
		}
	}
	return -1
}

// ImageField returns the index of the field called name, of any type, or
// with name "" that of the first RGB image field; -1 if there is none.
func (f *File) ImageField(name string) int {
	if name != "" {
		return f.FieldIndex(name)
	}
	for i := range f.fields {
		if f.fields[i].Type == TypeRGBImage {
			return i
		}
	}
	return -1
}

// FieldNames lists the fields' names, for messages: "image, label".
func (f *File) FieldNames() string {
	names := make([]string, len(f.fields))
	for i := range f.fields {
		names[i] = f.fields[i].Name
	}
	return strings.Join(names, ", ")
}

// NumSamples returns the number of samples.
func (f *File) NumSamples() int { return int(f.header.NumSamples) }

// PageSize returns the page size in bytes.
func (f *File) PageSize() int64 { return int64(f.header.PageSize) }

// FirstPage returns the absolute number of the first data page.
func (f *File) FirstPage() int64 { return f.firstPage }

// NumPages returns the number of data pages.
func (f *File) NumPages() int { return f.numPages }

// PageOffset returns the file offset of absolute page p.
func (f *File) PageOffset(p int64) int64 { return p << f.pageShift }

// PageOf returns the absolute page that holds file offset off.
func (f *File) PageOf(off uint64) int64 { return int64(off >> f.pageShift) }

// SamplePage returns the absolute page that holds sample i's data, or NoPage.
func (f *File) SamplePage(i int) int64 {
	dp := f.samplePage[i]
	if dp == NoPage {
		return NoPage
	}
	return int64(dp) + f.firstPage
}

// PageSamples returns the ids of the samples whose data lie in absolute page
// p, in increasing order. Do not modify the result.
func (f *File) PageSamples(p int64) []uint32 {
	dp := p - f.firstPage
	if dp < 0 || dp >= int64(f.numPages) {
		return nil
	}
	return f.pageSamples[f.pageStart[dp]:f.pageStart[dp+1]]
}

// PageUsed returns how many bytes of absolute page p hold allocations.
func (f *File) PageUsed(p int64) uint64 {
	lo := uint64(p) << f.pageShift
	hi := lo + uint64(f.header.PageSize)
	i, _ := slices.BinarySearchFunc(f.allocs, lo, func(a Alloc, t uint64) int { return cmpU64(a.Ptr, t) })
	var used uint64
	for ; i < len(f.allocs) && f.allocs[i].Ptr < hi; i++ {
		used += f.allocs[i].Size
	}
	return used
}

// Allocs returns the allocation table sorted by pointer (then sample and
// size). Do not modify.
func (f *File) Allocs() []Alloc { return f.allocs }

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Record returns sample i's raw metadata record. Do not modify.
func (f *File) Record(i int) []byte {
	rs := f.layout.RecordSize
	return f.meta[i*rs : (i+1)*rs]
}

func (f *File) member(i, field int) []byte {
	return f.Record(i)[f.layout.Offsets[field]:]
}

// Int returns the value of int field of sample i.
func (f *File) Int(i, field int) int64 {
	return int64(binary.LittleEndian.Uint64(f.member(i, field)))
}

// Float returns the value of float field of sample i.
func (f *File) Float(i, field int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(f.member(i, field)))
}

// Pointer returns the raw data pointer stored in the metadata for a variable
// field, and for bytes and JSON fields the stored size (0 otherwise).
func (f *File) Pointer(i, field int) (ptr, size uint64) {
	m := f.member(i, field)
	switch f.fields[field].Type {
	case TypeRGBImage:
		return binary.LittleEndian.Uint64(m[5:]), 0
	case TypeBytes, TypeJSON:
		return binary.LittleEndian.Uint64(m), binary.LittleEndian.Uint64(m[8:])
	case TypeNDArray, TypeTorchTensor:
		return binary.LittleEndian.Uint64(m), 0
	}
	return 0, 0
}

// lookup finds the allocation of sample i at ptr. A sample may have several
// there, empty ones before the one that holds data: take the one of size
// want if sized, else the largest.
func (f *File) lookup(i int, ptr uint64, want uint64, sized bool) (Alloc, bool) {
	j, _ := slices.BinarySearchFunc(f.allocs, Alloc{Ptr: ptr, Sample: uint64(i)}, func(a, t Alloc) int {
		if c := cmpU64(a.Ptr, t.Ptr); c != 0 {
			return c
		}
		return cmpU64(a.Sample, t.Sample)
	})
	found, ok := Alloc{}, false
	for ; j < len(f.allocs) && f.allocs[j].Ptr == ptr && f.allocs[j].Sample == uint64(i); j++ {
		found, ok = f.allocs[j], true
		if sized && found.Size == want {
			break
		}
	}
	return found, ok
}

// Data returns the location of sample i's data for a variable field, checked
// against the allocation table and the page rules.
func (f *File) Data(i, field int) (Alloc, error) {
	if i < 0 || i >= f.NumSamples() {
		return Alloc{}, fmt.Errorf("%s: sample %d out of range [0, %d)", f.name, i, f.NumSamples())
	}
	fd := &f.fields[field]
	if !fd.Type.Variable() {
		return Alloc{}, fmt.Errorf("%s: field %q is a %s field and has no data", f.name, fd.Name, fd.Type)
	}
	ptr, size := f.Pointer(i, field)
	sized := fd.Type == TypeBytes || fd.Type == TypeJSON
	a, ok := f.lookup(i, ptr, size, sized)
	if !ok {
		return Alloc{}, fmt.Errorf("%s: sample %d, field %q: pointer %d has no allocation for this sample: %w", f.name, i, fd.Name, ptr, ErrCorrupt)
	}
	switch fd.Type {
	case TypeBytes, TypeJSON:
		if size != a.Size {
			return Alloc{}, fmt.Errorf("%s: sample %d, field %q: metadata says %d bytes, allocation table %d: %w", f.name, i, fd.Name, size, a.Size, ErrCorrupt)
		}
	case TypeNDArray, TypeTorchTensor:
		want, err := fd.DataSize()
		if err != nil {
			return Alloc{}, fmt.Errorf("%s: field %q: %v: %w", f.name, fd.Name, err, ErrUnsupported)
		}
		if want != a.Size {
			return Alloc{}, fmt.Errorf("%s: sample %d, field %q: shape %v of %s needs %d bytes, allocation has %d: %w", f.name, i, fd.Name, fd.Shape, fd.DType, want, a.Size, ErrCorrupt)
		}
	case TypeRGBImage:
		m := f.member(i, field)
		mode, w, h := ImageMode(m[0]), uint64(binary.LittleEndian.Uint16(m[1:])), uint64(binary.LittleEndian.Uint16(m[3:]))
		switch mode {
		case ModeRaw:
			if w*h*3 != a.Size {
				return Alloc{}, fmt.Errorf("%s: sample %d, field %q: raw image %dx%d needs %d bytes, allocation has %d: %w", f.name, i, fd.Name, w, h, w*h*3, a.Size, ErrCorrupt)
			}
		case ModeJPEG:
			if a.Size == 0 {
				return Alloc{}, fmt.Errorf("%s: sample %d, field %q: empty JPEG image: %w", f.name, i, fd.Name, ErrCorrupt)
			}
		default:
			return Alloc{}, fmt.Errorf("%s: sample %d, field %q: unknown image mode %d: %w", f.name, i, fd.Name, uint8(mode), ErrCorrupt)
		}
	}
	return a, nil
}

// Image returns sample i's RGB image metadata with its data location.
func (f *File) Image(i, field int) (Image, error) {
	if f.fields[field].Type != TypeRGBImage {
		return Image{}, fmt.Errorf("%s: field %q is not an RGB image field", f.name, f.fields[field].Name)
	}
	a, err := f.Data(i, field)
	if err != nil {
		return Image{}, err
	}
	m := f.member(i, field)
	return Image{
		Mode:   ImageMode(m[0]),
		Width:  int(binary.LittleEndian.Uint16(m[1:])),
		Height: int(binary.LittleEndian.Uint16(m[3:])),
		Ptr:    a.Ptr,
		Size:   a.Size,
	}, nil
}

// ReadData reads sample i's data for a variable field into buf (grown when
// too small) and returns the filled slice. JSON values keep their NUL.
func (f *File) ReadData(i, field int, buf []byte) ([]byte, error) {
	a, err := f.Data(i, field)
	if err != nil {
		return buf, err
	}
	if uint64(cap(buf)) < a.Size {
		buf = make([]byte, a.Size)
	}
	buf = buf[:a.Size]
	if err := readAt(f.r, buf, int64(a.Ptr)); err != nil {
		return buf, fmt.Errorf("%s: sample %d, field %q: reading %d bytes at %d: %w", f.name, i, f.fields[field].Name, a.Size, a.Ptr, err)
	}
	return buf, nil
}
