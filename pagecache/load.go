package pagecache

import (
	"context"
	"fmt"
)

// job is a load: data page dp into slot, or the ranges, which bytes [lo,
// hi) of the file cover, all of them in data page dp.
type job struct {
	slot   int32
	dp     int32
	op     *call
	ranges []*rangeEntry
	lo, hi int64
}

// fetch reads a job's bytes through the chain below the slots and
// publishes them: made by the reader that needs them, or by a prefetcher.
func (c *Cache) fetch(ctx context.Context, j *job) {
	var buf []byte
	lo := int64(0)
	switch {
	case j.ranges == nil:
		// The slot's buffer is set while the slot is in use.
		buf = c.slots[j.slot].buf
	case len(j.ranges) == 1:
		buf = j.ranges[0].pg.Data
	default:
		buf = make([]byte, j.hi-j.lo)
	}
	if j.ranges != nil {
		lo = j.lo - c.f.PageOffset(int64(j.dp)+c.firstPage)
	}
	fromTier, err := c.below.read(ctx, j.dp, lo, buf)
	// A read its reader's end stopped is no error of the page's: another
	// reader of it reads it again.
	cancelled := err != nil && ctx.Err() != nil
	c.mu.Lock()
	defer c.mu.Unlock()
	if j.ranges != nil {
		c.rangesLoaded(j, buf, fromTier, err, cancelled)
	} else {
		c.pageLoaded(j, fromTier, err, cancelled)
	}
	c.broadcast()
	c.schedule()
}

// pageLoaded publishes a page's load into its slot. Called with mu held.
func (c *Cache) pageLoaded(j *job, fromTier bool, err error, cancelled bool) {
	s := &c.slots[j.slot]
	dp, op := j.dp, j.op
	p := int64(dp) + c.firstPage
	off := c.f.PageOffset(p)
	if err == nil && fromTier {
		op.fromTier = true
		c.countTier(len(s.buf))
	}
	if err != nil {
		err = fmt.Errorf("%s: reading page %d (bytes %d to %d): %w", c.src.Name(), p, off, off+c.pageSize, err)
		if !cancelled {
			c.stats.ReadErrors++
		}
		c.pageSlot[dp] = -1
		s.page, s.ready, s.pins, s.prefetched = -1, false, 0, false
		c.free = append(c.free, j.slot)
		c.pol.Failed(dp)
		// The error goes to every reader of the page, who reports it
		// (fs once per cause); a failed prefetch is read again on demand.
		c.opts.Logger.Debug("page read failed", "err", err)
	} else {
		s.ready = true
		c.pol.Loaded(dp, s.pins > 0)
		c.stats.PagesRead++
		c.stats.BytesRead += uint64(len(s.buf))
	}
	c.countRequest()
	c.loads.end(dp, op, err, cancelled)
}

// rangesLoaded publishes a range request's bytes, buf, into its ranges.
// Called with mu held.
func (c *Cache) rangesLoaded(j *job, buf []byte, fromTier bool, err error, cancelled bool) {
	es, op := j.ranges, j.op
	if err == nil && len(es) > 1 {
		for _, e := range es {
			copy(e.pg.Data, buf[e.pg.Off-j.lo:])
		}
	}
	c.countRequest()
	if err == nil && fromTier {
		op.fromTier = true
		c.countTier(len(buf))
	}
	if err != nil {
		err = fmt.Errorf("%s: reading sample %d (bytes %d to %d): %w", c.src.Name(), es[0].s, j.lo, j.hi, err)
		if !cancelled {
			c.stats.ReadErrors++
		}
		for _, e := range es {
			e.pins = 0
			c.unmapRange(e)
		}
		c.opts.Logger.Debug("range read failed", "err", err)
	} else {
		c.stats.RangeRequests++
		c.stats.RangesRead += uint64(len(es))
		c.stats.BytesRead += uint64(len(buf))
		for _, e := range es {
			e.ready, e.op = true, nil
			c.rekey(e)
		}
	}
	op.finish(err, cancelled)
}

// reader makes prefetch jobs until ctx ends.
func (c *Cache) reader(ctx context.Context) {
	defer c.wg.Done()
	for {
		select {
		case j := <-c.jobs:
			n := c.pageSize
			if j.ranges != nil {
				n = j.hi - j.lo
			}
			c.fetch(ctx, &j)
			c.mu.Lock()
			c.inflight--
			c.inflightBytes -= n
			c.schedule()
			c.broadcast()
			c.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}
