package pagecache

import (
	"context"
	"fmt"
	"io"
	"sort"
)

// ReadAt reads len(p) bytes of the beton at off: data pages through the
// cache, the rest (header, metadata, allocation table) from the source. It
// returns io.EOF for a read past the end of the file. A sample counts as
// read (for plans and the epoch, as with AcquireSample) when a ReadAt
// covers the last byte of its data.
func (c *Cache) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	size := c.f.Size()
	if off < 0 {
		return 0, fmt.Errorf("%s: negative offset %d", c.src.Name(), off)
	}
	if off >= size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > size-off {
		p = p[:size-off]
	}
	dataStart := c.f.PageOffset(c.firstPage)
	dataEnd := c.f.PageOffset(c.firstPage + int64(len(c.pageSlot)))
	n := 0
	for n < len(p) {
		o := off + int64(n)
		rest := p[n:]
		if o < dataStart || o >= dataEnd || len(c.pageSlot) == 0 {
			// Outside the data pages: straight from the source, up to the
			// next boundary.
			if o < dataStart && int64(len(rest)) > dataStart-o && len(c.pageSlot) > 0 {
				rest = rest[:dataStart-o]
			}
			m, err := c.below.readAt(ctx, rest, o)
			n += m
			if err != nil && !(err == io.EOF && m == len(rest)) {
				return n, err
			}
			continue
		}
		page := o / c.pageSize
		pg, err := c.AcquirePage(ctx, page)
		if err != nil {
			return n, err
		}
		k := copy(rest, pg.Data[o-page*c.pageSize:])
		c.recordBytes(uint64(o), uint64(o)+uint64(k))
		pg.Release()
		n += k
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// recordBytes records as read the samples whose data end in the bytes
// [lo, hi) of one data page, so that a consumer reading the file by byte
// ranges advances its plan as it goes: the pages it is in the middle of
// stay near, and the pages it has finished are the first to go.
func (c *Cache) recordBytes(lo, hi uint64) {
	allocs := c.f.Allocs()
	pageEnd := uint64(c.f.PageOffset(c.f.PageOf(lo) + 1))
	// Allocations do not overlap: sorted by pointer, they are sorted by end.
	i := sort.Search(len(allocs), func(i int) bool { return allocs[i].Ptr+allocs[i].Size > lo })
	var done []uint32
	for ; i < len(allocs) && allocs[i].Ptr < hi; i++ {
		a := allocs[i]
		if a.Size == 0 || a.Ptr+a.Size > hi || a.Sample >= uint64(c.f.NumSamples()) {
			continue
		}
		last := true // the sample's last allocation (all lie in one page)
		for j := i + 1; j < len(allocs) && allocs[j].Ptr < pageEnd; j++ {
			if allocs[j].Sample == a.Sample {
				last = false
				break
			}
		}
		if last {
			done = append(done, uint32(a.Sample))
		}
	}
	if len(done) == 0 {
		return
	}
	c.mu.Lock()
	for _, s := range done {
		c.recordRead(int(s))
	}
	c.mu.Unlock()
}
