package beton

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strings"
)

// Value is one field's value for Writer.WriteSample. Which members count
// depends on the field's type: Int for int, Float for float, Mode, Width,
// Height and Data for RGB images, Data for bytes, JSON (text without the
// trailing NUL, which the writer adds) and arrays (raw little-endian
// elements).
type Value struct {
	Int           int64
	Float         float64
	Mode          ImageMode
	Width, Height int
	Data          []byte
}

// WriterOptions configures a Writer.
type WriterOptions struct {
	// PageSize is the page size in bytes: a power of two, 2 MiB ≤ PageSize
	// < 4 GiB. Zero means DefaultPageSize.
	PageSize int64
}

// Validate fills defaults and checks the options.
func (o *WriterOptions) Validate() error {
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.PageSize < 0 {
		return fmt.Errorf("page size %d is negative", o.PageSize)
	}
	return validPageSize(uint64(o.PageSize))
}

// Writer writes a .beton the way the reference writer lays it out: header,
// descriptors, metadata table, zero padding to a page boundary, whole data
// pages, then the allocation table. Samples are written in id order and
// packed into pages in that order; a sample that does not fit the rest of the
// current page starts a new one.
//
// Everything after the metadata table goes to its Destination in one pass,
// in file order; the head (header, descriptors, metadata), known only at
// the end, is handed over by Close. A Writer is not safe for concurrent use.
type Writer struct {
	name   string
	dst    Destination
	closed bool
	out    *countingWriter

	header Header
	fields []Field
	layout RecordLayout
	// meta is the metadata table of the samples written so far: it grows
	// as they arrive, so that a count no one delivers (a stream's header
	// may claim four billion samples) allocates nothing. metaSize is the
	// table's size once every sample is written, which places the pages.
	meta     []byte
	metaSize uint64

	pageSize  uint64
	dataStart uint64 // file offset of the first data page
	page      []byte // the page being filled: its bytes so far, grown as they come
	pageNo    int64  // index of the page being filled from dataStart, -1 before the first
	pageOff   uint64 // bytes used in page
	written   uint64 // bytes written after the metadata region (padding + pages)

	allocs []Alloc
	count  int // samples written
	// seen marks the samples written, once one came out of id order
	// (WriteSampleAt); nil while they come in order.
	seen []uint64
	err  error
	size int64 // of the file, once written

	// The names index (SetNames), if any.
	nameField int
	names     []string
}

// Create starts writing a .beton with the given fields and number of samples
// to the local file path (a FileDestination: nothing appears at path before
// Close succeeds).
func Create(path string, fields []Field, numSamples int, opts WriterOptions) (*Writer, error) {
	if err := checkWriter(fields, numSamples, &opts); err != nil {
		return nil, err
	}
	dst, err := NewFileDestination(path)
	if err != nil {
		return nil, err
	}
	w, err := NewWriter(dst, fields, numSamples, opts)
	if err != nil {
		dst.Abort()
		return nil, err
	}
	return w, nil
}

// checkWriter checks what NewWriter checks before anything is created.
func checkWriter(fields []Field, numSamples int, opts *WriterOptions) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	if len(fields) == 0 || len(fields) > math.MaxUint16 {
		return fmt.Errorf("a beton needs 1 to %d fields, got %d", math.MaxUint16, len(fields))
	}
	if numSamples < 0 || numSamples >= math.MaxUint32 {
		return fmt.Errorf("sample count %d out of range", numSamples)
	}
	return nil
}

// NewWriter starts writing a .beton with the given fields and number of
// samples to dst, which the Writer owns from now on: Close commits it,
// Abort (or a failed Close) aborts it. On error dst is left to the caller.
func NewWriter(dst Destination, fields []Field, numSamples int, opts WriterOptions) (*Writer, error) {
	if err := checkWriter(fields, numSamples, &opts); err != nil {
		return nil, err
	}
	layout, err := NewRecordLayout(fields)
	if err != nil {
		return nil, err
	}
	for i := range fields {
		if len(fields[i].Name) > NameSize {
			return nil, fmt.Errorf("field name %q is longer than %d bytes", fields[i].Name, NameSize)
		}
		if t := fields[i].Type; t == TypeNDArray || t == TypeTorchTensor {
			if err := fields[i].parseArgs(); err != nil {
				return nil, fmt.Errorf("field %q: %w", fields[i].Name, err)
			}
		}
	}
	w := &Writer{
		name:     dst.Name(),
		dst:      dst,
		out:      newCountingWriter(dst),
		fields:   fields,
		layout:   layout,
		metaSize: uint64(numSamples) * uint64(layout.RecordSize),
		pageSize: uint64(opts.PageSize),
		pageNo:   -1,
	}
	w.header = Header{
		Version:    Version,
		NumFields:  uint16(len(fields)),
		PageSize:   uint32(opts.PageSize),
		NumSamples: uint64(numSamples),
	}
	metaEnd := uint64(HeaderSize+len(fields)*DescriptorSize) + w.metaSize
	w.dataStart = (metaEnd + w.pageSize - 1) / w.pageSize * w.pageSize
	if err := dst.Reserve(int64(metaEnd)); err != nil {
		return nil, err
	}
	return w, nil
}

// WriteSample appends the next sample, the one after the last written.
// values holds one Value per field, in field order.
func (w *Writer) WriteSample(values []Value) error {
	return w.WriteSampleAt(len(w.meta)/w.layout.RecordSize, values)
}

// WriteSampleAt appends sample id, in the pages after the samples written
// before it, whatever their ids: a beton's samples need not lie in id
// order (FFCV's writer interleaves its workers' pages). Each id is written
// once. The first sample out of id order makes the Writer hold the whole
// metadata table (the count given to NewWriter times the record size) and
// a bit a sample: its caller bounds the count, as a beton read whole does.
func (w *Writer) WriteSampleAt(id int, values []Value) error {
	if w.err != nil {
		return w.err
	}
	if id < 0 || id >= int(w.header.NumSamples) {
		return fmt.Errorf("sample %d: the file was created for %d samples", id, w.header.NumSamples)
	}
	rs := w.layout.RecordSize
	inOrder := w.seen == nil && id == len(w.meta)/rs
	written := id < len(w.meta)/rs
	if w.seen != nil {
		written = w.seen[id/64]&(1<<(id%64)) != 0
	}
	if written {
		return fmt.Errorf("sample %d: written twice", id)
	}
	if len(values) != len(w.fields) {
		return fmt.Errorf("sample %d: %d values for %d fields", id, len(values), len(w.fields))
	}
	// Sizes of this sample's allocations, to place it in one page.
	var need uint64
	for fi := range w.fields {
		n, err := w.dataSize(id, fi, &values[fi])
		if err != nil {
			return err
		}
		need += n
	}
	if need > w.pageSize {
		return fmt.Errorf("sample %d: its data take %d bytes, more than a page (%d bytes); use a larger page size", id, need, w.pageSize)
	}
	if w.pageNo < 0 && need > 0 || need > w.pageSize-w.pageOff {
		if err := w.flushPage(); err != nil {
			return w.fail(err)
		}
	}
	switch {
	case inOrder:
		w.meta = slices.Grow(w.meta, rs)[:len(w.meta)+rs]
	case w.seen == nil:
		// The first sample out of order: the samples before it were
		// written in order, 0 to len(meta)/rs.
		w.seen = make([]uint64, (w.header.NumSamples+63)/64)
		for i := range len(w.meta) / rs {
			w.seen[i/64] |= 1 << (i % 64)
		}
		w.meta = slices.Grow(w.meta, int(w.metaSize)-len(w.meta))[:w.metaSize]
	}
	if w.seen != nil {
		w.seen[id/64] |= 1 << (id % 64)
	}
	rec := w.meta[id*rs : (id+1)*rs]
	clear(rec)
	for fi := range w.fields {
		m := rec[w.layout.Offsets[fi]:]
		v := &values[fi]
		switch w.fields[fi].Type {
		case TypeInt:
			binary.LittleEndian.PutUint64(m, uint64(v.Int))
		case TypeFloat:
			binary.LittleEndian.PutUint64(m, math.Float64bits(v.Float))
		case TypeRGBImage:
			m[0] = byte(v.Mode)
			binary.LittleEndian.PutUint16(m[1:], uint16(v.Width))
			binary.LittleEndian.PutUint16(m[3:], uint16(v.Height))
			binary.LittleEndian.PutUint64(m[5:], w.alloc(id, v.Data, false))
		case TypeBytes:
			binary.LittleEndian.PutUint64(m, w.alloc(id, v.Data, false))
			binary.LittleEndian.PutUint64(m[8:], uint64(len(v.Data)))
		case TypeJSON:
			binary.LittleEndian.PutUint64(m, w.alloc(id, v.Data, true))
			binary.LittleEndian.PutUint64(m[8:], uint64(len(v.Data))+1)
		case TypeNDArray, TypeTorchTensor:
			binary.LittleEndian.PutUint64(m, w.alloc(id, v.Data, false))
		}
	}
	w.count++
	return nil
}

// SampleBytes is what a sample of values vals of fields takes in a page,
// as WriteSample counts it: every value's data, and a NUL after JSON.
func SampleBytes(vals []Value, fields []Field) int64 {
	var n int64
	for fi := range vals {
		n += int64(len(vals[fi].Data))
		if fields[fi].Type == TypeJSON {
			n++
		}
	}
	return n
}

// dataSize checks v against field fi and returns the bytes it takes in a page.
func (w *Writer) dataSize(id, fi int, v *Value) (uint64, error) {
	fd := &w.fields[fi]
	switch fd.Type {
	case TypeRGBImage:
		if v.Width <= 0 || v.Height <= 0 || v.Width > MaxImageSide || v.Height > MaxImageSide {
			return 0, fmt.Errorf("sample %d, field %q: image size %dx%d out of range (1 to %d a side)", id, fd.Name, v.Width, v.Height, MaxImageSide)
		}
		switch v.Mode {
		case ModeRaw:
			if len(v.Data) != v.Width*v.Height*3 {
				return 0, fmt.Errorf("sample %d, field %q: raw image %dx%d needs %d bytes, got %d", id, fd.Name, v.Width, v.Height, v.Width*v.Height*3, len(v.Data))
			}
		case ModeJPEG:
			if len(v.Data) == 0 {
				return 0, fmt.Errorf("sample %d, field %q: empty JPEG", id, fd.Name)
			}
		default:
			return 0, fmt.Errorf("sample %d, field %q: unknown image mode %d", id, fd.Name, v.Mode)
		}
	case TypeJSON:
		return uint64(len(v.Data)) + 1, nil
	case TypeNDArray, TypeTorchTensor:
		want, err := fd.DataSize()
		if err != nil {
			return 0, fmt.Errorf("field %q: %w", fd.Name, err)
		}
		if uint64(len(v.Data)) != want {
			return 0, fmt.Errorf("sample %d, field %q: shape %v of %s needs %d bytes, got %d", id, fd.Name, fd.Shape, fd.DType, want, len(v.Data))
		}
	}
	return uint64(len(v.Data)), nil
}

// alloc copies data (and a NUL when nul) into the current page and records
// the allocation. WriteSample has made sure it fits.
func (w *Writer) alloc(id int, data []byte, nul bool) uint64 {
	size := uint64(len(data))
	if nul {
		size++
	}
	var ptr uint64
	if w.pageNo >= 0 {
		ptr = w.dataStart + uint64(w.pageNo)*w.pageSize + w.pageOff
		w.page = append(w.page, data...)
		if nul {
			w.page = append(w.page, 0)
		}
		w.pageOff += size
	} else {
		// Only empty allocations happen before the first page.
		ptr = w.dataStart
	}
	w.allocs = append(w.allocs, Alloc{Sample: uint64(id), Ptr: ptr, Size: size})
	return ptr
}

// flushPage writes the current page, if any, and starts a new one.
func (w *Writer) flushPage() error {
	if w.pageNo < 0 {
		// Zero padding between the metadata and the first page.
		metaEnd := uint64(HeaderSize+len(w.fields)*DescriptorSize) + w.metaSize
		if err := w.out.pad(w.dataStart - metaEnd); err != nil {
			return err
		}
		w.written += w.dataStart - metaEnd
	} else if err := w.writePage(); err != nil {
		return err
	}
	w.pageNo++
	w.pageOff = 0
	return nil
}

// writePage writes the page being filled, its bytes and zeros to its end,
// and empties it. A page holds only the bytes given it: a beton of pages of
// 2 GiB and samples of kilobytes takes kilobytes of memory, and, on a
// local file, of disk (its zeros are a hole).
func (w *Writer) writePage() error {
	if _, err := w.out.Write(w.page); err != nil {
		return err
	}
	if err := w.out.pad(w.pageSize - uint64(len(w.page))); err != nil {
		return err
	}
	w.written += w.pageSize
	w.page = w.page[:0]
	return nil
}

// fail records err as the write's, naming the file unless err does (a
// destination's errors may).
func (w *Writer) fail(err error) error {
	if strings.HasPrefix(err.Error(), "writing "+w.name+": ") {
		w.err = err
	} else {
		w.err = fmt.Errorf("writing %s: %w", w.name, err)
	}
	return w.err
}

// Close writes the last page, the allocation table, the metadata and the
// header, and commits the destination: only now does the beton appear.
// After an error the destination is aborted.
func (w *Writer) Close() error {
	if w.closed {
		return errors.New("beton writer already closed")
	}
	if w.err == nil && w.count != int(w.header.NumSamples) {
		w.err = fmt.Errorf("writing %s: %d of %d samples written", w.name, w.count, w.header.NumSamples)
	}
	if w.err != nil {
		return WithAbort(w.err, w.Abort())
	}
	if err := w.finish(); err != nil {
		return WithAbort(w.fail(err), w.Abort())
	}
	return nil
}

func (w *Writer) finish() error {
	metaStart := uint64(HeaderSize + len(w.fields)*DescriptorSize)
	tablePtr := metaStart + w.metaSize
	if w.pageNo >= 0 {
		if err := w.writePage(); err != nil {
			return err
		}
		tablePtr += w.written
	}
	if w.names != nil {
		blob := encodeNames(w.names)
		if _, err := w.out.Write(blob); err != nil {
			return err
		}
		a := &w.fields[w.nameField].Args
		copy(a[:16], namesMagic)
		binary.LittleEndian.PutUint64(a[16:], tablePtr)
		binary.LittleEndian.PutUint64(a[24:], uint64(len(blob)))
		binary.LittleEndian.PutUint32(a[32:], crc32.Checksum(blob, castagnoli))
		tablePtr += uint64(len(blob))
	}
	entry := make([]byte, AllocEntrySize)
	for _, a := range w.allocs {
		binary.LittleEndian.PutUint64(entry[0:], a.Sample)
		binary.LittleEndian.PutUint64(entry[8:], a.Ptr)
		binary.LittleEndian.PutUint64(entry[16:], a.Size)
		if _, err := w.out.Write(entry); err != nil {
			return err
		}
	}
	if err := w.out.Flush(); err != nil {
		return err
	}
	w.header.AllocTablePtr = tablePtr
	head := w.header.marshal()
	for i := range w.fields {
		head = append(head, w.fields[i].marshal()...)
	}
	head = append(head, w.meta...)
	w.size = int64(w.out.count + len(head))
	w.closed = true
	return w.dst.Commit(head)
}

// Abort stops writing and aborts the destination: nothing appears. It
// returns the destination's error when that fails (an upload that stays,
// Destination.Abort), and nil once closed.
func (w *Writer) Abort() error {
	if w.closed {
		return nil
	}
	w.closed = true
	return w.dst.Abort()
}

// Size returns the size of the file Close wrote, 0 before.
func (w *Writer) Size() int64 { return w.size }

// Pages returns the number of data pages written or begun so far.
func (w *Writer) Pages() int { return int(w.pageNo + 1) }

// countingWriter buffers writes to a Destination and counts them.
type countingWriter struct {
	*bufio.Writer
	dst   io.Writer
	count int
}

func newCountingWriter(dst io.Writer) *countingWriter {
	return &countingWriter{Writer: bufio.NewWriterSize(dst, 1<<20), dst: dst}
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.Writer.Write(p)
	c.count += n
	return n, err
}

// Skipper is a Destination that can pass over bytes, which read as zeros
// (a hole in a local file): Skip(n) is Write of n zeros.
type Skipper interface {
	Skip(n int64) error
}

// pad writes n zero bytes: skipped where the destination can (Skipper),
// else written from a small buffer.
func (c *countingWriter) pad(n uint64) error {
	if s, ok := c.dst.(Skipper); ok && n >= 64<<10 {
		if err := c.Flush(); err != nil {
			return err
		}
		if err := s.Skip(int64(n)); err != nil {
			return err
		}
		c.count += int(n)
		return nil
	}
	var zero [64 << 10]byte
	for n > 0 {
		k := min(n, uint64(len(zero)))
		if _, err := c.Write(zero[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// PageSize returns the page size the file is written with.
func (w *Writer) PageSize() int64 { return int64(w.pageSize) }
