package beton_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// sparseFile is a virtual file of size bytes: zeros, overlaid by segments in
// order (a later segment wins where two overlap). It lets tests describe
// corrupt variants of a file without copying it, and files of any size
// without storing their zero-filled data pages.
type sparseFile struct {
	size int64
	segs []segment
}

type segment struct {
	off  int64
	data []byte
}

func (s *sparseFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("sparse file: negative offset %d", off)
	}
	if off >= s.size {
		return 0, io.EOF
	}
	// Reads that reach the end report io.EOF, as io.ReaderAt allows.
	var err error
	if rest := s.size - off; int64(len(p)) >= rest {
		p, err = p[:rest], io.EOF
	}
	clear(p)
	end := off + int64(len(p))
	for _, sg := range s.segs {
		lo, hi := max(off, sg.off), min(end, sg.off+int64(len(sg.data)))
		if lo < hi {
			copy(p[lo-off:hi-off], sg.data[lo-sg.off:hi-sg.off])
		}
	}
	return len(p), err
}

// bytesAt returns n bytes of s at off.
func (s *sparseFile) bytesAt(off int64, n int) []byte {
	b := make([]byte, n)
	s.ReadAt(b, off)
	return b
}

// victim is a valid file being corrupted: the original, what Open made of
// it, and the patches and length of the corrupt copy.
type victim struct {
	name string
	orig []byte
	f    *beton.File // the original, opened
	out  sparseFile
}

func newVictim(name string, orig []byte) (*victim, error) {
	f, err := beton.Open(bytes.NewReader(orig), int64(len(orig)), name)
	if err != nil {
		return nil, err
	}
	return &victim{name: name, orig: orig, f: f, out: sparseFile{size: int64(len(orig)), segs: []segment{{0, orig}}}}, nil
}

func (v *victim) set(off int64, b []byte)  { v.out.segs = append(v.out.segs, segment{off, b}) }
func (v *victim) putU8(off int64, x uint8) { v.set(off, []byte{x}) }
func (v *victim) putU16(off int64, x uint16) {
	v.set(off, binary.LittleEndian.AppendUint16(nil, x))
}
func (v *victim) putU32(off int64, x uint32) {
	v.set(off, binary.LittleEndian.AppendUint32(nil, x))
}
func (v *victim) putU64(off int64, x uint64) {
	v.set(off, binary.LittleEndian.AppendUint64(nil, x))
}
func (v *victim) truncate(n int64) { v.out.size = n }

func (v *victim) metaStart() int64 {
	return beton.HeaderSize + int64(len(v.f.Fields()))*beton.DescriptorSize
}
func (v *victim) metaEnd() int64 {
	return v.metaStart() + int64(v.f.NumSamples()*v.f.RecordLayout().RecordSize)
}

// member returns the file offset of sample i's member for field fi.
func (v *victim) member(i, fi int) int64 {
	return v.metaStart() + int64(i*v.f.RecordLayout().RecordSize+v.f.RecordLayout().Offsets[fi])
}

// entry returns the file offset of the allocation table entry for a, which
// must be in the table.
func (v *victim) entry(a beton.Alloc) int64 {
	tp := v.f.Header().AllocTablePtr
	for i := int64(0); tp+uint64(i+1)*beton.AllocEntrySize <= uint64(len(v.orig)); i++ {
		e := v.orig[tp+uint64(i)*beton.AllocEntrySize:]
		if binary.LittleEndian.Uint64(e) == a.Sample && binary.LittleEndian.Uint64(e[8:]) == a.Ptr && binary.LittleEndian.Uint64(e[16:]) == a.Size {
			return int64(tp) + i*beton.AllocEntrySize
		}
	}
	panic(fmt.Sprintf("allocation %+v not in the table", a))
}

// fieldOf returns the index of the first field of type t, or -1.
func (v *victim) fieldOf(types ...beton.TypeID) int {
	for i, fd := range v.f.Fields() {
		if slices.Contains(types, fd.Type) {
			return i
		}
	}
	return -1
}

// find returns the first sample and field of one of types whose value has
// data and satisfies ok (nil: any).
func (v *victim) find(ok func(s, fi int, a beton.Alloc) bool, types ...beton.TypeID) (int, int, bool) {
	for fi, fd := range v.f.Fields() {
		if !slices.Contains(types, fd.Type) {
			continue
		}
		for s := 0; s < v.f.NumSamples(); s++ {
			a, err := v.f.Data(s, fi)
			if err == nil && a.Size > 0 && (ok == nil || ok(s, fi, a)) {
				return s, fi, true
			}
		}
	}
	return 0, 0, false
}

func (v *victim) imageOf(mode beton.ImageMode) (int, int, bool) {
	return v.find(func(s, fi int, _ beton.Alloc) bool {
		img, _ := v.f.Image(s, fi)
		return img.Mode == mode
	}, beton.TypeRGBImage)
}

// Where a corruption shows.
type stage int

const (
	atOpen   stage = iota // Open fails
	atSample              // Open succeeds; Data, Image, ReadData and Verify fail for the target
	atVerify              // Open succeeds; Verify fails
	atAny                 // Open or, failing that, Verify fails
)

// target is the sample and field a per-sample corruption hits.
type target struct {
	sample, field int
}

type corruption struct {
	name string
	// apply corrupts v; it returns false when the file has nothing the case
	// needs (every case applies to the file built by testFile).
	apply    func(v *victim) (target, bool)
	stage    stage
	sentinel error
	want     []string // regexps the message must match, besides the file name
}

// The causes Open names, as regexps.
const (
	reTruncated  = `truncated|shorter than`
	reTablePast  = `allocation table pointer \d+ is past the end of the file`
	reTableShape = `not a whole number of 24-byte entries`
	rePage       = `page size \d+ is not a power of two`
)

func corruptions() []corruption {
	var cases []corruption
	trunc := func(name string, at func(v *victim) int64, want ...string) {
		cases = append(cases, corruption{
			name: "truncate/" + name,
			apply: func(v *victim) (target, bool) {
				v.truncate(at(v))
				return target{}, true
			},
			stage: atOpen, sentinel: beton.ErrCorrupt, want: want,
		})
	}
	tablePtr := func(v *victim) int64 { return int64(v.f.Header().AllocTablePtr) }
	trunc("empty", func(*victim) int64 { return 0 }, `file of 0 bytes is shorter than the 24-byte header`)
	trunc("inside-header", func(*victim) int64 { return 13 }, `file of 13 bytes is shorter than the 24-byte header`)
	trunc("header-end", func(*victim) int64 { return beton.HeaderSize }, `truncated: \d+ field descriptors need \d+ bytes, file has 24`)
	trunc("inside-descriptors", func(*victim) int64 { return beton.HeaderSize + beton.DescriptorSize/2 }, `truncated: \d+ field descriptors`)
	trunc("descriptors-minus-1", func(v *victim) int64 { return v.metaStart() - 1 }, `truncated: \d+ field descriptors`)
	trunc("descriptors-end", func(v *victim) int64 { return v.metaStart() }, `truncated: metadata for \d+ samples`)
	trunc("inside-metadata", func(v *victim) int64 { return (v.metaStart() + v.metaEnd()) / 2 }, `truncated: metadata for \d+ samples`)
	trunc("metadata-minus-1", func(v *victim) int64 { return v.metaEnd() - 1 }, `truncated: metadata for \d+ samples`)
	trunc("metadata-end", func(v *victim) int64 { return v.metaEnd() }, reTablePast)
	trunc("inside-padding", func(v *victim) int64 { return v.metaEnd() + 7 }, reTablePast)
	trunc("first-page", func(v *victim) int64 { return v.f.PageOffset(v.f.FirstPage()) }, reTablePast)
	trunc("inside-first-page", func(v *victim) int64 { return v.f.PageOffset(v.f.FirstPage()) + v.f.PageSize()/3 }, reTablePast)
	trunc("inside-last-page", func(v *victim) int64 { return tablePtr(v) - v.f.PageSize()/2 }, reTablePast)
	trunc("table-minus-1", func(v *victim) int64 { return tablePtr(v) - 1 }, reTablePast)
	trunc("table-plus-1", func(v *victim) int64 { return tablePtr(v) + 1 }, reTableShape)
	trunc("last-byte", func(v *victim) int64 { return int64(len(v.orig)) - 1 }, reTableShape)
	trunc("table-cut-mid-entry", func(v *victim) int64 { return int64(len(v.orig)) - 2*beton.AllocEntrySize - 5 }, reTableShape)
	trunc("table-cut-23", func(v *victim) int64 { return int64(len(v.orig)) - 23 }, reTableShape)

	// A table shortened by whole entries, or removed, still opens: the
	// samples that lost their allocations are caught at lookup.
	cases = append(cases, corruption{
		name: "truncate/table-whole-entry",
		apply: func(v *victim) (target, bool) {
			es := tableEntries(v)
			last := es[len(es)-1]
			v.truncate(int64(len(v.orig)) - beton.AllocEntrySize)
			return target{int(last.Sample), fieldAt(v, last)}, true
		},
		stage: atSample, sentinel: beton.ErrCorrupt, want: []string{`pointer \d+ has no allocation for this sample`},
	}, corruption{
		name: "truncate/whole-table",
		apply: func(v *victim) (target, bool) {
			s, fi, ok := v.find(nil, beton.TypeRGBImage, beton.TypeBytes, beton.TypeJSON, beton.TypeNDArray)
			v.truncate(tablePtr(v))
			return target{s, fi}, ok
		},
		stage: atSample, sentinel: beton.ErrCorrupt, want: []string{`pointer \d+ has no allocation for this sample`},
	})

	header := func(name string, apply func(v *victim), st stage, sentinel error, want ...string) {
		cases = append(cases, corruption{
			name:  name,
			apply: func(v *victim) (target, bool) { apply(v); return target{}, true },
			stage: st, sentinel: sentinel, want: want,
		})
	}
	for _, ver := range []uint16{0, 1, 3, 0xFFFF} {
		header(fmt.Sprintf("version/%d", ver), func(v *victim) { v.putU16(0, ver) },
			atOpen, beton.ErrVersion, fmt.Sprintf(`version is %d\b.*version 2\b`, ver))
	}
	for _, ps := range []uint32{0, 1, 4096, 1 << 20, 3 << 20, 1<<21 + 1, 1<<31 + 1, 0xFFFFFFFF, 0x80000000 - 1} {
		header(fmt.Sprintf("page-size/%#x", ps), func(v *victim) { v.putU32(4, ps) },
			atOpen, beton.ErrCorrupt, fmt.Sprintf(`page size %d is not a power of two`, ps))
	}
	header("num-fields/0", func(v *victim) { v.putU16(2, 0) }, atOpen, beton.ErrCorrupt, `declares no fields`)
	header("num-fields/65535", func(v *victim) { v.putU16(2, 0xFFFF) }, atOpen, beton.ErrCorrupt, `truncated: 65535 field descriptors need 68221959 bytes`)
	header("num-fields/plus-1", func(v *victim) { v.putU16(2, uint16(len(v.f.Fields())+1)) }, atAny, beton.ErrCorrupt)
	header("num-fields/minus-1", func(v *victim) {
		if len(v.f.Fields()) == 1 {
			v.putU16(2, 2)
			return
		}
		v.putU16(2, uint16(len(v.f.Fields())-1))
	}, atAny, beton.ErrCorrupt)
	for _, n := range []uint64{1 << 40, math.MaxUint32, math.MaxUint32 - 1, math.MaxInt64, math.MaxUint64} {
		header(fmt.Sprintf("num-samples/%#x", n), func(v *victim) { v.putU64(8, n) },
			atOpen, beton.ErrCorrupt, fmt.Sprintf(`truncated: metadata for %d samples`, n))
	}
	header("num-samples/minus-1", func(v *victim) { v.putU64(8, uint64(v.f.NumSamples()-1)) },
		atOpen, beton.ErrCorrupt, `allocation table entry \d+ names sample \d+, file has \d+ samples`)
	header("num-samples/plus-1", func(v *victim) { v.putU64(8, uint64(v.f.NumSamples()+1)) }, atAny, beton.ErrCorrupt)
	header("alloc-table-ptr/past-eof", func(v *victim) { v.putU64(16, uint64(len(v.orig))+beton.AllocEntrySize) },
		atOpen, beton.ErrCorrupt, reTablePast)
	header("alloc-table-ptr/max", func(v *victim) { v.putU64(16, math.MaxUint64) }, atOpen, beton.ErrCorrupt, reTablePast)
	header("alloc-table-ptr/1<<63", func(v *victim) { v.putU64(16, 1<<63) }, atOpen, beton.ErrCorrupt, reTablePast)
	header("alloc-table-ptr/inside-metadata", func(v *victim) { v.putU64(16, uint64(v.metaStart())) },
		atOpen, beton.ErrCorrupt, `allocation table pointer \d+ lies inside the metadata table`)
	header("alloc-table-ptr/zero", func(v *victim) { v.putU64(16, 0) },
		atOpen, beton.ErrCorrupt, `allocation table pointer 0 lies inside the metadata table`)
	header("alloc-table-ptr/not-page-aligned", func(v *victim) { v.putU64(16, v.f.Header().AllocTablePtr-beton.AllocEntrySize) },
		atOpen, beton.ErrCorrupt, `data region ends at \d+, which is not a page boundary`)
	header("alloc-table-ptr/odd", func(v *victim) { v.putU64(16, v.f.Header().AllocTablePtr+1) },
		atOpen, beton.ErrCorrupt, reTableShape)

	// Field descriptors.
	for _, id := range []uint8{7, 8, 42, 200, 254} {
		cases = append(cases, corruption{
			name: fmt.Sprintf("type-id/%d", id),
			apply: func(v *victim) (target, bool) {
				fi := len(v.f.Fields()) - 1
				v.putU8(beton.HeaderSize+int64(fi)*beton.DescriptorSize, id)
				return target{field: fi}, true
			},
			stage: atOpen, sentinel: beton.ErrCorrupt,
			want: []string{fmt.Sprintf(`field \d+ \("[^"]+"\) has unknown type id %d`, id)},
		})
	}
	cases = append(cases, corruption{
		name: "ndarray/bad-dtype-json",
		apply: func(v *victim) (target, bool) {
			fi := v.fieldOf(beton.TypeNDArray, beton.TypeTorchTensor)
			v.set(beton.HeaderSize+int64(fi)*beton.DescriptorSize+1+beton.NameSize+264, []byte("{{{{"))
			return target{field: fi}, fi >= 0
		},
		stage: atOpen, sentinel: beton.ErrCorrupt, want: []string{`field "[^"]+": dtype description .* is not numpy's descr JSON`},
	}, corruption{
		name: "ndarray/dtype-length",
		apply: func(v *victim) (target, bool) {
			fi := v.fieldOf(beton.TypeNDArray, beton.TypeTorchTensor)
			v.putU64(beton.HeaderSize+int64(fi)*beton.DescriptorSize+1+beton.NameSize+256, 1<<60)
			return target{field: fi}, fi >= 0
		},
		stage: atOpen, sentinel: beton.ErrCorrupt, want: []string{`dtype description of \d+ bytes does not fit`},
	})

	// Allocation table entries.
	entry := func(name string, pick func(v *victim) (beton.Alloc, bool), change func(v *victim, a beton.Alloc, off int64), st stage, want string) {
		cases = append(cases, corruption{
			name: "alloc/" + name,
			apply: func(v *victim) (target, bool) {
				a, ok := pick(v)
				if !ok {
					return target{}, false
				}
				change(v, a, v.entry(a))
				return target{int(a.Sample), fieldAt(v, a)}, true
			},
			stage: st, sentinel: beton.ErrCorrupt, want: []string{`samples? \d+`, want},
		})
	}
	anyAlloc := func(v *victim) (beton.Alloc, bool) {
		for _, a := range v.f.Allocs() {
			if a.Size > 0 {
				return a, true
			}
		}
		return beton.Alloc{}, false
	}
	// An allocation that is not in the last data page.
	notLast := func(v *victim) (beton.Alloc, bool) {
		last := v.f.FirstPage() + int64(v.f.NumPages()) - 1
		for _, a := range v.f.Allocs() {
			if a.Size > 0 && v.f.PageOf(a.Ptr) < last {
				return a, true
			}
		}
		return beton.Alloc{}, false
	}
	const outside = `allocation at \d+ of \d+ bytes lies outside the data region`
	entry("ptr-past-eof", anyAlloc, func(v *victim, _ beton.Alloc, off int64) { v.putU64(off+8, uint64(len(v.orig))+100) }, atOpen, outside)
	entry("ptr-in-table", anyAlloc, func(v *victim, _ beton.Alloc, off int64) { v.putU64(off+8, v.f.Header().AllocTablePtr) }, atOpen, outside)
	entry("ptr-max", anyAlloc, func(v *victim, _ beton.Alloc, off int64) { v.putU64(off+8, math.MaxUint64) }, atOpen, outside)
	entry("ptr-in-metadata", anyAlloc, func(v *victim, _ beton.Alloc, off int64) { v.putU64(off+8, uint64(v.metaStart())) }, atOpen, outside)
	entry("size-max", anyAlloc, func(v *victim, _ beton.Alloc, off int64) { v.putU64(off+16, math.MaxUint64) }, atOpen, outside)
	entry("size-past-eof", anyAlloc, func(v *victim, _ beton.Alloc, off int64) { v.putU64(off+16, uint64(len(v.orig))) }, atOpen, outside)
	entry("crosses-page", notLast, func(v *victim, a beton.Alloc, off int64) {
		end := uint64(v.f.PageOffset(v.f.PageOf(a.Ptr) + 1))
		v.putU64(off+16, end-a.Ptr+1)
	}, atOpen, `allocation at \d+ of \d+ bytes crosses the end of page \d+`)
	entry("sample-past-end", anyAlloc, func(v *victim, _ beton.Alloc, off int64) { v.putU64(off, uint64(v.f.NumSamples())) },
		atOpen, `allocation table entry \d+ names sample \d+, file has \d+ samples`)
	entry("two-pages", func(v *victim) (beton.Alloc, bool) {
		// A small allocation of a sample with more than one, in a page that
		// is not the last, moved to the free end of the last page.
		last := v.f.FirstPage() + int64(v.f.NumPages()) - 1
		free := uint64(v.f.PageSize()) - v.f.PageUsed(last)
		n := map[uint64]int{}
		for _, a := range v.f.Allocs() {
			if a.Size > 0 {
				n[a.Sample]++
			}
		}
		for _, a := range v.f.Allocs() {
			if a.Size > 0 && a.Size < free && v.f.PageOf(a.Ptr) < last && n[a.Sample] > 1 {
				return a, true
			}
		}
		return beton.Alloc{}, false
	}, func(v *victim, a beton.Alloc, off int64) {
		v.putU64(off+8, uint64(v.f.PageOffset(v.f.FirstPage()+int64(v.f.NumPages())))-a.Size)
	}, atOpen, `has data in pages \d+ and \d+; a sample must lie in one page`)
	entry("overlap", func(v *victim) (beton.Alloc, bool) {
		// The second of two neighbouring allocations of different samples.
		as := v.f.Allocs()
		for i := 1; i < len(as); i++ {
			if as[i-1].Size > 1 && as[i].Size > 0 && as[i-1].Sample != as[i].Sample && as[i-1].Ptr+as[i-1].Size == as[i].Ptr {
				return as[i], true
			}
		}
		return beton.Alloc{}, false
	}, func(v *victim, a beton.Alloc, off int64) { v.putU64(off+8, a.Ptr-1) }, atOpen, `overlap`)
	entry("overlap-across-empty", func(v *victim) (beton.Alloc, bool) {
		// An allocation followed by an empty one at its end and by another
		// allocation there: grown by a byte, it overlaps the third, with the
		// empty one sorted between them.
		as := v.f.Allocs()
		for i := 2; i < len(as); i++ {
			p, z, n := as[i-2], as[i-1], as[i]
			if p.Size > 0 && z.Size == 0 && n.Size > 0 && p.Ptr+p.Size == z.Ptr && z.Ptr == n.Ptr {
				return p, true
			}
		}
		return beton.Alloc{}, false
	}, func(v *victim, a beton.Alloc, off int64) { v.putU64(off+16, a.Size+1) }, atOpen, `overlap`)

	// Metadata members.
	sample := func(name string, find func(v *victim) (int, int, bool), change func(v *victim, s, fi int, a beton.Alloc), st stage, want ...string) {
		cases = append(cases, corruption{
			name: "sample/" + name,
			apply: func(v *victim) (target, bool) {
				s, fi, ok := find(v)
				if !ok {
					return target{}, false
				}
				a, _ := v.f.Data(s, fi)
				change(v, s, fi, a)
				return target{s, fi}, true
			},
			stage: st, sentinel: beton.ErrCorrupt, want: want,
		})
	}
	anyData := func(v *victim) (int, int, bool) {
		return v.find(nil, beton.TypeRGBImage, beton.TypeBytes, beton.TypeJSON, beton.TypeNDArray, beton.TypeTorchTensor)
	}
	ptrOff := func(v *victim, s, fi int) int64 {
		if v.f.Fields()[fi].Type == beton.TypeRGBImage {
			return v.member(s, fi) + 5
		}
		return v.member(s, fi)
	}
	const noAlloc = `pointer \d+ has no allocation for this sample`
	sample("pointer-no-allocation", anyData, func(v *victim, s, fi int, a beton.Alloc) { v.putU64(ptrOff(v, s, fi), a.Ptr+1) }, atSample, noAlloc)
	sample("pointer-zero", anyData, func(v *victim, s, fi int, a beton.Alloc) { v.putU64(ptrOff(v, s, fi), 0) }, atSample, noAlloc)
	sample("pointer-max", anyData, func(v *victim, s, fi int, a beton.Alloc) { v.putU64(ptrOff(v, s, fi), math.MaxUint64) }, atSample, noAlloc)
	sample("pointer-of-other-sample", func(v *victim) (int, int, bool) {
		return v.find(func(s, fi int, a beton.Alloc) bool { return s+1 < v.f.NumSamples() && otherData(v, s+1, fi) }, beton.TypeRGBImage, beton.TypeBytes, beton.TypeJSON, beton.TypeNDArray)
	}, func(v *victim, s, fi int, a beton.Alloc) {
		b, _ := v.f.Data(s+1, fi)
		v.putU64(ptrOff(v, s, fi), b.Ptr)
	}, atSample, noAlloc)
	sample("raw-image-width", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeRaw) }, func(v *victim, s, fi int, a beton.Alloc) {
		img, _ := v.f.Image(s, fi)
		v.putU16(v.member(s, fi)+1, uint16(img.Width+1))
	}, atSample, `raw image \d+x\d+ needs \d+ bytes, allocation has \d+`)
	sample("raw-image-height-zero", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeRaw) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.putU16(v.member(s, fi)+3, 0)
	}, atSample, `raw image \d+x0 needs 0 bytes, allocation has \d+`)
	sample("jpeg-marked-raw", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeJPEG) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.putU8(v.member(s, fi), uint8(beton.ModeRaw))
	}, atSample, `raw image \d+x\d+ needs \d+ bytes, allocation has \d+`)
	sample("image-mode", func(v *victim) (int, int, bool) { return v.find(nil, beton.TypeRGBImage) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.putU8(v.member(s, fi), 7)
	}, atSample, `unknown image mode 7`)
	sample("bytes-size", func(v *victim) (int, int, bool) { return v.find(nil, beton.TypeBytes, beton.TypeJSON) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.putU64(v.member(s, fi)+8, a.Size+1)
	}, atSample, `metadata says \d+ bytes, allocation table \d+`)
	sample("ndarray-size", func(v *victim) (int, int, bool) { return v.find(nil, beton.TypeNDArray, beton.TypeTorchTensor) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.putU64(v.entry(a)+16, a.Size-1)
	}, atSample, `shape \[[0-9 ]+\] of \S+ needs \d+ bytes, allocation has \d+`)

	// Data only Verify reads.
	sample("jpeg-no-soi", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeJPEG) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.set(int64(a.Ptr), []byte{0x00, 0x00})
	}, atVerify, `not a JPEG: no start-of-image marker`)
	sample("jpeg-garbled-header", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeJPEG) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.set(int64(a.Ptr)+2, bytes.Repeat([]byte{0x12}, 64))
	}, atVerify, `JPEG: expected a marker`)
	sample("jpeg-segment-length", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeJPEG) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.set(int64(a.Ptr)+4, []byte{0xFF, 0xFF})
	}, atVerify, `JPEG is truncated: marker 0x[0-9A-F]{2} segment of 65535 bytes runs past the end`)
	sample("jpeg-size-mismatch", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeJPEG) }, func(v *victim, s, fi int, a beton.Alloc) {
		img, _ := v.f.Image(s, fi)
		v.putU16(v.member(s, fi)+1, uint16(img.Width+1))
	}, atVerify, `JPEG is \d+x\d+, metadata says \d+x\d+`)
	sample("jpeg-zero-width", func(v *victim) (int, int, bool) { return v.imageOf(beton.ModeJPEG) }, func(v *victim, s, fi int, a beton.Alloc) {
		sof := sofOffset(v.out.bytesAt(int64(a.Ptr), int(a.Size)))
		v.set(int64(a.Ptr)+int64(sof)+7, []byte{0, 0})
	}, atVerify, `JPEG frame header says 0x\d+`)
	sample("json-no-nul", func(v *victim) (int, int, bool) { return v.find(isJSON(v), beton.TypeJSON) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.set(int64(a.Ptr+a.Size-1), []byte{'}'})
	}, atVerify, `JSON value does not end with NUL`)
	sample("json-invalid", func(v *victim) (int, int, bool) { return v.find(isJSON(v), beton.TypeJSON) }, func(v *victim, s, fi int, a beton.Alloc) {
		v.set(int64(a.Ptr), []byte{'{', '{'})
	}, atVerify, `value is not valid JSON`)
	return cases
}

// isJSON accepts values that hold JSON text ended by a NUL (the reference
// stores JSON fields of some files as bytes).
func isJSON(v *victim) func(s, fi int, a beton.Alloc) bool {
	return func(s, fi int, a beton.Alloc) bool {
		return a.Size > 2 && v.orig[a.Ptr+a.Size-1] == 0
	}
}

// otherData reports whether sample s has data of its own for field fi.
func otherData(v *victim, s, fi int) bool {
	a, err := v.f.Data(s, fi)
	return err == nil && a.Size > 0
}

// fieldAt returns the field whose metadata points at allocation a, or 0.
func fieldAt(v *victim, a beton.Alloc) int {
	for fi, fd := range v.f.Fields() {
		if fd.Type.Variable() {
			if p, _ := v.f.Pointer(int(a.Sample), fi); p == a.Ptr {
				return fi
			}
		}
	}
	return 0
}

func tableEntries(v *victim) []beton.Alloc {
	tp := v.f.Header().AllocTablePtr
	var out []beton.Alloc
	for off := tp; off+beton.AllocEntrySize <= uint64(len(v.orig)); off += beton.AllocEntrySize {
		e := v.orig[off:]
		out = append(out, beton.Alloc{Sample: binary.LittleEndian.Uint64(e), Ptr: binary.LittleEndian.Uint64(e[8:]), Size: binary.LittleEndian.Uint64(e[16:])})
	}
	return out
}

// sofOffset returns the offset of the frame header marker (0xFF 0xCn) in a
// JPEG, or -1.
func sofOffset(b []byte) int {
	for i := 2; i+4 <= len(b); {
		if b[i] != 0xFF {
			return -1
		}
		m := b[i+1]
		if m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC {
			return i
		}
		i += 2 + int(binary.BigEndian.Uint16(b[i+2:]))
	}
	return -1
}

// validFile is a valid file to corrupt.
type validFile struct {
	name  string
	data  []byte
	built bool // made by testFile, not a fixture
}

// victims returns the files to corrupt: one built here with every kind of
// field over several pages, and every fixture.
func victims(t *testing.T) []validFile {
	t.Helper()
	out := []validFile{{"built.beton", testFile(t), true}}
	for _, p := range fixtureBetons(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, validFile{filepath.Base(p), b, false})
	}
	return out
}

func TestCorrupt(t *testing.T) {
	for _, vf := range victims(t) {
		t.Run(vf.name, func(t *testing.T) {
			for _, c := range corruptions() {
				t.Run(c.name, func(t *testing.T) {
					name := "corrupt-" + vf.name
					v, err := newVictim(name, vf.data)
					if err != nil {
						t.Fatal(err)
					}
					tg, ok := c.apply(v)
					if !ok {
						if vf.built {
							t.Fatalf("case does not apply to the built file, which must cover every case")
						}
						t.Logf("not applicable: %s has nothing this case needs", vf.name)
						return
					}
					checkCorruption(t, v, c, tg)
				})
			}
		})
	}
}

func checkCorruption(t *testing.T, v *victim, c corruption, tg target) {
	t.Helper()
	var f *beton.File
	var err error
	noPanic(t, "Open", func() { f, err = beton.Open(&v.out, v.out.size, v.name) })
	if c.stage == atOpen {
		if err == nil {
			t.Fatalf("Open succeeded")
		}
		checkErr(t, "Open", err, v.name, c.sentinel, c.want...)
		return
	}
	if err != nil {
		if c.stage == atAny {
			checkErr(t, "Open", err, v.name, c.sentinel, c.want...)
			return
		}
		t.Fatalf("Open: %v", err)
	}
	exercise(t, f)
	field := ""
	if tg.field < len(f.Fields()) {
		field = fmt.Sprintf("%q", f.Fields()[tg.field].Name)
	}
	per := append([]string{fmt.Sprintf(`sample %d, field %s`, tg.sample, regexp.QuoteMeta(field))}, c.want...)
	if c.stage == atSample {
		_, err := f.Data(tg.sample, tg.field)
		checkErr(t, "Data", err, v.name, c.sentinel, per...)
		_, err = f.ReadData(tg.sample, tg.field, nil)
		checkErr(t, "ReadData", err, v.name, c.sentinel, per...)
		if f.Fields()[tg.field].Type == beton.TypeRGBImage {
			_, err = f.Image(tg.sample, tg.field)
			checkErr(t, "Image", err, v.name, c.sentinel, per...)
		}
	}
	var errs []error
	noPanic(t, "Verify", func() { errs = beton.Verify(f, beton.VerifyOptions{All: true}) })
	if len(errs) == 0 {
		t.Fatalf("Verify found nothing")
	}
	if c.stage == atAny {
		checkErr(t, "Verify", errs[0], v.name, c.sentinel)
		return
	}
	// One of the problems is the one made here.
	var msgs []string
	for _, e := range errs {
		if matchesAll(e.Error(), per) {
			checkErr(t, "Verify", e, v.name, c.sentinel, per...)
			return
		}
		msgs = append(msgs, e.Error())
	}
	t.Fatalf("Verify did not report %q; it reported:\n%s", per, strings.Join(msgs, "\n"))
}

func matchesAll(s string, res []string) bool {
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(s) {
			return false
		}
	}
	return true
}

// checkErr checks that err is a corrupt-file error of the right kind, that
// names the file and matches every regexp in want.
func checkErr(t *testing.T, what string, err error, name string, sentinel error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	msg := err.Error()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: error does not wrap %q: %v", what, sentinel, err)
	}
	if !strings.Contains(msg, name) {
		t.Errorf("%s: error does not name the file %q: %v", what, name, err)
	}
	for _, re := range want {
		if !regexp.MustCompile(re).MatchString(msg) {
			t.Errorf("%s: error does not match %q: %v", what, re, err)
		}
	}
}

func noPanic(t testing.TB, what string, fn func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v\n%s", what, r, debug.Stack())
		}
	}()
	fn()
}

// exercise calls every accessor of f for every sample, field and page, and
// reports any error that does not wrap a sentinel and name the file.
func exercise(t testing.TB, f *beton.File) {
	t.Helper()
	noPanic(t, "accessors", func() {
		var buf []byte
		for s := 0; s < f.NumSamples(); s++ {
			page := f.SamplePage(s)
			if page != beton.NoPage && !slices.Contains(f.PageSamples(page), uint32(s)) {
				t.Errorf("sample %d: SamplePage says %d, whose PageSamples do not list it", s, page)
			}
			for fi, fd := range f.Fields() {
				f.Record(s)
				f.Pointer(s, fi)
				switch fd.Type {
				case beton.TypeInt:
					f.Int(s, fi)
				case beton.TypeFloat:
					f.Float(s, fi)
				default:
					a, err := f.Data(s, fi)
					checkSampleErr(t, f, err)
					if err == nil && a.Size > 0 && f.PageOf(a.Ptr) != page {
						t.Errorf("sample %d: data at %d is in page %d, SamplePage says %d", s, a.Ptr, f.PageOf(a.Ptr), page)
					}
					if fd.Type == beton.TypeRGBImage {
						_, err := f.Image(s, fi)
						checkSampleErr(t, f, err)
					}
					buf, err = f.ReadData(s, fi, buf)
					checkSampleErr(t, f, err)
				}
			}
		}
		for p := f.FirstPage() - 1; p <= f.FirstPage()+int64(f.NumPages()); p++ {
			for _, s := range f.PageSamples(p) {
				if f.SamplePage(int(s)) != p {
					t.Errorf("page %d lists sample %d, which SamplePage puts in page %d", p, s, f.SamplePage(int(s)))
				}
			}
			if used := f.PageUsed(p); used > uint64(f.PageSize()) {
				t.Errorf("page %d: %d bytes used, more than a page", p, used)
			}
		}
	})
}

func checkSampleErr(t testing.TB, f *beton.File, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !errors.Is(err, beton.ErrCorrupt) && !errors.Is(err, beton.ErrUnsupported) {
		t.Errorf("error wraps no sentinel: %v", err)
	}
	if !strings.HasPrefix(err.Error(), f.Name()+": ") {
		t.Errorf("error does not begin with the file name: %v", err)
	}
}

// Truncating a file anywhere makes Open fail or, where the cut falls between
// allocation table entries, Verify.
func TestTruncateAnywhere(t *testing.T) {
	for _, vf := range victims(t) {
		t.Run(vf.name, func(t *testing.T) {
			v, err := newVictim(vf.name, vf.data)
			if err != nil {
				t.Fatal(err)
			}
			size := int64(len(vf.data))
			tp := int64(v.f.Header().AllocTablePtr)
			rng := rand.New(rand.NewPCG(uint64(size), 1))
			var offs []int64
			for range 100 {
				offs = append(offs,
					rng.Int64N(size),          // anywhere, mostly in data pages
					rng.Int64N(v.metaEnd()+1), // header, descriptors, metadata
					tp+rng.Int64N(size-tp),    // the allocation table
					tp+beton.AllocEntrySize*rng.Int64N((size-tp)/beton.AllocEntrySize), // between entries
				)
			}
			for _, n := range offs {
				var f *beton.File
				noPanic(t, fmt.Sprintf("Open cut at %d", n), func() { f, err = beton.Open(io.NewSectionReader(bytes.NewReader(vf.data), 0, n), n, vf.name) })
				if err != nil {
					checkErr(t, fmt.Sprintf("Open cut at %d", n), err, vf.name, beton.ErrCorrupt)
					continue
				}
				if n < tp || (n-tp)%beton.AllocEntrySize != 0 {
					t.Errorf("cut at %d (table at %d): Open succeeded", n, tp)
					continue
				}
				var errs []error
				noPanic(t, "Verify", func() { errs = beton.Verify(f, beton.VerifyOptions{}) })
				if len(errs) == 0 {
					t.Errorf("cut at %d (table at %d): Verify found nothing", n, tp)
				} else {
					checkErr(t, fmt.Sprintf("Verify cut at %d", n), errs[0], vf.name, beton.ErrCorrupt)
				}
			}
		})
	}
}

// A custom field is reported by name: Open refuses the file, ReadSchema
// still describes it.
func TestCustomField(t *testing.T) {
	for _, vf := range victims(t) {
		t.Run(vf.name, func(t *testing.T) {
			orig, err := newVictim(vf.name, vf.data)
			if err != nil {
				t.Fatal(err)
			}
			for fi, fd := range orig.f.Fields() {
				v, _ := newVictim(vf.name, vf.data)
				v.putU8(beton.HeaderSize+int64(fi)*beton.DescriptorSize, uint8(beton.TypeCustom))
				_, err := beton.Open(&v.out, v.out.size, vf.name)
				checkErr(t, "Open", err, vf.name, beton.ErrUnsupported, regexp.QuoteMeta(fmt.Sprintf("field %q is a custom field (type 255)", fd.Name)))
				s, err := beton.ReadSchema(&v.out, v.out.size, vf.name)
				if err != nil {
					t.Fatalf("ReadSchema: %v", err)
				}
				if got := s.Fields[fi]; got.Name != fd.Name || got.Type != beton.TypeCustom {
					t.Errorf("ReadSchema field %d: %q %v, want %q custom", fi, got.Name, got.Type, fd.Name)
				}
				if len(s.Fields) != len(v.f.Fields()) {
					t.Errorf("ReadSchema: %d fields, want %d", len(s.Fields), len(v.f.Fields()))
				}
			}
		})
	}
}

// A header that declares a huge sample or field count fails at once, without
// allocating for what it declares, even when the file claims to be huge.
func TestHugeCountsFailFast(t *testing.T) {
	data := testFile(t)
	v, err := newVictim("huge.beton", data)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		off  int64
		val  uint64
		size int64
	}{
		{"samples-1<<40", 8, 1 << 40, int64(len(data))},
		{"samples-max", 8, math.MaxUint64, int64(len(data))},
		{"samples-1<<40-file-1TiB", 8, 1 << 40, 1 << 40},
		{"samples-1<<33-file-1PiB", 8, 1 << 33, 1 << 50},
		{"fields-65535", 2, 0xFFFF, int64(len(data))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := *v
			w.out.segs = slices.Clone(v.out.segs)
			w.out.size = c.size
			if c.off == 2 {
				w.putU16(c.off, uint16(c.val))
			} else {
				w.putU64(c.off, c.val)
			}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			_, err := beton.Open(&w.out, w.out.size, w.name)
			runtime.ReadMemStats(&ms1)
			checkErr(t, "Open", err, w.name, beton.ErrCorrupt, `truncated|past the end`)
			if got := ms1.TotalAlloc - ms0.TotalAlloc; got > 64<<10 {
				t.Errorf("Open allocated %d bytes before failing", got)
			}
			allocs := testing.AllocsPerRun(10, func() { beton.Open(&w.out, w.out.size, w.name) })
			if allocs > 100 { // the descriptors' worth, whatever the counts say
				t.Errorf("Open made %v allocations before failing", allocs)
			}
		})
	}
}

// Verify passes every fixture and the built file.
func TestVerifyValid(t *testing.T) {
	for _, vf := range victims(t) {
		t.Run(vf.name, func(t *testing.T) {
			f, err := beton.Open(bytes.NewReader(vf.data), int64(len(vf.data)), vf.name)
			if err != nil {
				t.Fatal(err)
			}
			exercise(t, f)
			pages := 0
			errs := beton.Verify(f, beton.VerifyOptions{All: true, Progress: func(done, total int) {
				pages++
				if done != pages || total != f.NumPages() {
					t.Errorf("progress %d/%d after %d pages of %d", done, total, pages, f.NumPages())
				}
			}})
			for _, err := range errs {
				t.Error(err)
			}
			if pages != f.NumPages() {
				t.Errorf("progress reported %d pages of %d", pages, f.NumPages())
			}
		})
	}
}

// Verify reports one problem by default and every problem with All.
func TestVerifyAll(t *testing.T) {
	v, err := newVictim("many.beton", testFile(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{}
	for fi, fd := range v.f.Fields() {
		for s := 0; s < v.f.NumSamples(); s++ {
			a, err := v.f.Data(s, fi)
			if err != nil || a.Size == 0 {
				continue
			}
			img, _ := v.f.Image(s, fi)
			switch {
			case fd.Type == beton.TypeRGBImage && img.Mode == beton.ModeJPEG && len(want) < 3:
				v.set(int64(a.Ptr), []byte{0x00})
				want[s] = "not a JPEG"
			case fd.Type == beton.TypeJSON && want[s] == "" && len(want) < 5:
				v.set(int64(a.Ptr), []byte{'!'})
				want[s] = "not valid JSON"
			}
		}
	}
	if len(want) != 5 {
		t.Fatalf("set up %d problems, want 5", len(want))
	}
	f, err := beton.Open(&v.out, v.out.size, v.name)
	if err != nil {
		t.Fatal(err)
	}
	if errs := beton.Verify(f, beton.VerifyOptions{}); len(errs) != 1 {
		t.Errorf("Verify without All: %d problems, want 1: %v", len(errs), errs)
	}
	errs := beton.Verify(f, beton.VerifyOptions{All: true})
	if len(errs) != len(want) {
		t.Errorf("Verify with All: %d problems, want %d: %v", len(errs), len(want), errs)
	}
	for s, cause := range want {
		found := false
		for _, err := range errs {
			found = found || strings.Contains(err.Error(), fmt.Sprintf("sample %d,", s)) && strings.Contains(err.Error(), cause)
		}
		if !found {
			t.Errorf("sample %d (%s) not reported: %v", s, cause, errs)
		}
	}
	for _, err := range errs {
		checkErr(t, "Verify", err, v.name, beton.ErrCorrupt)
	}
}

// Files whose samples hold only empty values have no data pages; they open
// and verify, and looking up any of them is cheap although all their
// allocations share one pointer.
func TestEmptyValues(t *testing.T) {
	const n = 100000
	fields := []beton.Field{{Type: beton.TypeBytes, Name: "blob"}, {Type: beton.TypeInt, Name: "label"}}
	path := filepath.Join(t.TempDir(), "empty.beton")
	w, err := beton.Create(path, fields, n, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.WriteSample([]beton.Value{{}, {Int: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.NumPages() != 0 {
		t.Errorf("%d data pages, want 0", f.NumPages())
	}
	if errs := beton.Verify(f, beton.VerifyOptions{All: true}); len(errs) > 0 {
		t.Errorf("Verify: %v", errs[0])
	}
	for i := range n {
		if a, err := f.Data(i, 0); err != nil || a.Size != 0 || f.Int(i, 1) != int64(i) {
			t.Fatalf("sample %d: %+v, %v", i, a, err)
		}
	}
	if a := testing.AllocsPerRun(100, func() { f.Data(n/2, 0) }); a != 0 {
		t.Errorf("looking up an empty value made %v allocations", a)
	}
}

// A file without data pages may declare the largest page size; Verify does
// not allocate a page for it.
func TestVerifyNoPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scalars.beton")
	w, err := beton.Create(path, []beton.Field{{Type: beton.TypeInt, Name: "label"}}, 3, beton.WriterOptions{PageSize: 1 << 31})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := w.WriteSample([]beton.Value{{Int: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	errs := beton.Verify(f, beton.VerifyOptions{All: true})
	runtime.ReadMemStats(&ms1)
	if len(errs) > 0 {
		t.Errorf("Verify: %v", errs)
	}
	if used := ms1.TotalAlloc - ms0.TotalAlloc; used > 1<<20 {
		t.Errorf("Verify of a %d-byte file allocated %d bytes", f.Size(), used)
	}
}

var built struct {
	once sync.Once
	data []byte
	err  error
}

// testFile returns a valid file, built once, with a field of every kind
// (JPEG and raw images, int, float, ndarray, bytes, JSON) whose samples
// spread over several pages of the smallest size, some with empty values.
func testFile(t testing.TB) []byte {
	t.Helper()
	built.once.Do(func() { built.data, built.err = buildTestFile(24, 200<<10) })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.data
}

func buildTestFile(n, blobSize int) ([]byte, error) {
	features, err := beton.NDArrayField("features", []uint64{3, 4}, "<f4")
	if err != nil {
		return nil, err
	}
	fields := []beton.Field{
		{Type: beton.TypeRGBImage, Name: "image"},
		{Type: beton.TypeInt, Name: "label"},
		{Type: beton.TypeFloat, Name: "weight"},
		features,
		{Type: beton.TypeBytes, Name: "blob"},
		{Type: beton.TypeJSON, Name: "meta"},
	}
	dir, err := os.MkdirTemp("", "beton-test-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "built.beton")
	w, err := beton.Create(path, fields, n, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		return nil, err
	}
	for i := range n {
		img := beton.Value{Mode: beton.ModeRaw, Width: 8 + i%5, Height: 6, Data: make([]byte, (8+i%5)*6*3)}
		for k := range img.Data {
			img.Data[k] = byte(i + k)
		}
		if i%2 == 0 {
			img = beton.Value{Mode: beton.ModeJPEG, Width: 16 + i, Height: 12, Data: testJPEG(16+i, 12, byte(i))}
		}
		arr := make([]byte, 12*4)
		for k := range 12 {
			binary.LittleEndian.PutUint32(arr[4*k:], math.Float32bits(float32(i*k)))
		}
		var blob []byte
		if i%5 != 0 { // every fifth sample has an empty blob
			blob = bytes.Repeat([]byte{byte(i)}, blobSize+i)
		}
		vals := []beton.Value{
			img,
			{Int: int64(i)},
			{Float: float64(i) / 4},
			{Data: arr},
			{Data: blob},
			{Data: fmt.Appendf(nil, `{"id": %d, "tags": ["a", "b"]}`, i)},
		}
		if err := w.WriteSample(vals); err != nil {
			w.Abort()
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// testJPEG encodes a small w×h JPEG.
func testJPEG(w, h int, seed byte) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{byte(x*8) + seed, byte(y * 8), seed, 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 80}); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
