package pagecache

import (
	"context"
	"time"
)

// waiter is one reader's acquisition of a data page, or of a sample's
// range of one: it pins what is ready, waits for what is loading or for
// room, or makes the load no one is making, and counts its hits, misses
// and waits. Its methods are called with the cache's lock held; wait
// releases it while it waits.
type waiter struct {
	c      *Cache
	dp     int32
	sample int // -1: a page, not a sample's read

	waited  bool
	start   time.Time // of the first wait
	awaited *call     // the last load waited for
}

// acquire pins data page dp, loading it if need be, and records that
// sample (if >= 0) is read.
func (c *Cache) acquire(ctx context.Context, dp int32, sample int) (*Page, error) {
	c.mu.Lock()
	// A page ready, the most common case, at once.
	if si := c.pageSlot[dp]; si >= 0 && c.slots[si].ready && !c.closed {
		(&waiter{c: c}).hit(&c.slots[si].prefetched, false)
		return c.pin(si, sample), nil
	}
	w := waiter{c: c, dp: dp, sample: sample}
	for {
		pg, j, err := w.step(ctx)
		switch {
		case err != nil:
			return nil, err
		case pg != nil:
			return pg, nil
		case j != nil:
			t0 := time.Now()
			c.fetch(ctx, j)
			return w.loaded(j, t0)
		}
	}
}

// step looks once: it returns the data pinned, or a load for the caller
// to make, or an error, each with the lock released; or, having waited
// for a change, nothing, with the lock held: the caller looks again.
func (w *waiter) step(ctx context.Context) (*Page, *job, error) {
	c := w.c
	if c.closed {
		c.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if si := c.pageSlot[w.dp]; si >= 0 {
		s := &c.slots[si]
		if !s.ready {
			return nil, nil, w.await(ctx, c.loads.get(w.dp))
		}
		w.hit(&s.prefetched, false)
		return c.pin(si, w.sample), nil, nil
	}
	if w.sample >= 0 {
		if e := c.rng.m[int32(w.sample)]; e != nil {
			return w.pinRange(ctx, e)
		}
		if c.pol.RangeRead(w.sample) {
			return w.newRange(ctx)
		}
	}
	si := c.victim()
	if si < 0 {
		// Every slot is pinned or loading: wait for a change.
		return nil, nil, w.waitChange(ctx)
	}
	c.stats.Misses++
	op := c.startLoad(si, w.dp, false)
	c.mu.Unlock()
	return nil, &job{slot: si, dp: w.dp, op: op}, nil
}

// pinRange pins the sample's range e once it is ready.
func (w *waiter) pinRange(ctx context.Context, e *rangeEntry) (*Page, *job, error) {
	c := w.c
	if !e.ready {
		return nil, nil, w.await(ctx, e.op)
	}
	w.hit(&e.prefetched, true)
	e.pins++
	c.recordRead(w.sample)
	c.mu.Unlock()
	return &e.pg, nil, nil
}

// newRange makes the sample's range, pinned, once there is room for it,
// and returns its load.
func (w *waiter) newRange(ctx context.Context) (*Page, *job, error) {
	c := w.c
	lo, n := c.extent(w.sample)
	if !c.makeRoom(mappedSize(uint32(n)), -1) {
		return nil, nil, w.waitChange(ctx)
	}
	c.stats.Misses++
	c.stats.RangeMisses++
	op := newCall()
	e, err := c.newRange(w.sample, op, c.rangeRoom())
	if err != nil {
		c.mu.Unlock()
		return nil, nil, err
	}
	e.pins = 1
	c.mu.Unlock()
	return nil, &job{dp: w.dp, op: op, ranges: []*rangeEntry{e}, lo: lo, hi: lo + int64(n)}, nil
}

// wait waits, unlocked, for ch, the cache's end or the reader's; the
// reader's end is its error, with the lock released.
func (w *waiter) wait(ctx context.Context, ch <-chan struct{}) error {
	c := w.c
	if !w.waited {
		w.waited, w.start = true, time.Now()
		c.stats.Waits++
	}
	c.mu.Unlock()
	select {
	case <-ch:
	case <-c.done:
	case <-ctx.Done():
		c.mu.Lock()
		c.stats.WaitTime += time.Since(w.start)
		c.mu.Unlock()
		return ctx.Err()
	}
	c.mu.Lock()
	return nil
}

// waitChange waits for the next change of the cache's state.
func (w *waiter) waitChange(ctx context.Context) error {
	if w.c.changed == nil {
		w.c.changed = make(chan struct{})
	}
	return w.wait(ctx, w.c.changed)
}

// await waits for a load under way; its error, if it failed, with the lock
// released. A cancelled load is another reader's business: the caller
// looks again.
func (w *waiter) await(ctx context.Context, op *call) error {
	w.awaited = op
	if err := w.wait(ctx, op.done); err != nil {
		return err
	}
	if op.err != nil && !op.cancelled {
		w.c.mu.Unlock()
		return op.err
	}
	return nil
}

// hit counts a read of data ready: a hit, or the end of a wait.
func (w *waiter) hit(prefetched *bool, isRange bool) {
	c := w.c
	if w.waited {
		w.waitEnds(w.awaited)
	} else {
		c.stats.Hits++
		if isRange {
			c.stats.RangeHits++
		}
	}
	if *prefetched {
		*prefetched = false
		c.stats.PrefetchHits++
	}
}

// waitEnds counts the time waited, on a tier if the load waited for came
// from one.
func (w *waiter) waitEnds(op *call) {
	d := time.Since(w.start)
	w.c.stats.WaitTime += d
	if op != nil && op.fromTier {
		w.c.countTierWait(d)
	}
}

// loaded ends a load this reader made from t0, called unlocked: the
// load's error, or the wait counted, the read recorded and the data,
// pinned. A load a tier served is a wait on the tier: the page was not
// read ahead of the reader.
func (w *waiter) loaded(j *job, t0 time.Time) (*Page, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if j.op.err != nil {
		return nil, j.op.err
	}
	switch {
	case w.waited:
		w.waitEnds(j.op)
	case j.op.fromTier:
		c.countTierWait(time.Since(t0))
	}
	if w.sample >= 0 {
		c.recordRead(w.sample)
	}
	// The loader's pin becomes the caller's.
	if j.ranges != nil {
		return &j.ranges[0].pg, nil
	}
	return &c.slots[j.slot].pg, nil
}
