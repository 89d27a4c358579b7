package pagecache

import (
	"context"
	"fmt"
	"io"
)

// ReadAt reads len(p) bytes of the beton at off: data pages through the
// cache, the rest (header, metadata, allocation table) from the source. It
// returns io.EOF for a read past the end of the file.
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
			m, err := c.src.ReadAt(rest, o)
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
		n += copy(rest, pg.Data[o-page*c.pageSize:])
		pg.Release()
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}
