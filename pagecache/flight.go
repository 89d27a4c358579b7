package pagecache

import (
	"context"
	"sync"
)

// call is one read that every reader of its key shares while it is under
// way: a slot's load, a page filled for the tiers, a page this node reads
// for its cluster.
type call struct {
	done chan struct{} // closed when the read has ended
	// Set before done is closed.
	err error
	// cancelled: the reader that made the call went away (its context
	// ended) before the read did; the others ask again, one of them
	// reading.
	cancelled bool
	fromTier  bool // a tier served it (slot loads)
	// buf is the whole page a shared read (flight.share) read into; refs
	// counts who holds it: its reader, its waiters, the tiers storing it.
	// Guarded by the flight's lock.
	buf  []byte
	refs int
}

func newCall() *call { return &call{done: make(chan struct{})} }

// finish records how the read ended and wakes its waiters.
func (c *call) finish(err error, cancelled bool) {
	c.err, c.cancelled = err, err != nil && cancelled
	close(c.done)
}

// wait waits for the call to end, or for ctx: the call's error, or ctx's.
func (c *call) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flight is the cache's one keyed single flight: the calls under way, by
// data page. The slots' loads (Cache.loads), the pages the tiers fill
// (tierLevel.fills) and the pages this node reads whole for its cluster
// (peerLevel.owned) each have one. Its methods but share are called with
// mu held; waiting on a call is done without it.
type flight struct {
	mu    sync.Locker
	calls map[int32]*call
	// give takes back a call's buffer once its last holder lets go; nil:
	// the buffer is the garbage collector's.
	give func([]byte)
}

func newFlight(mu sync.Locker, give func([]byte)) flight {
	return flight{mu: mu, calls: map[int32]*call{}, give: give}
}

// get returns the call under way for page k, or nil.
func (f *flight) get(k int32) *call { return f.calls[k] }

// begin returns a new call for page k, which the caller makes and ends.
func (f *flight) begin(k int32) *call {
	c := newCall()
	f.calls[k] = c
	return c
}

// end removes page k's call c and wakes its waiters.
func (f *flight) end(k int32, c *call, err error, cancelled bool) {
	if f.calls[k] == c {
		delete(f.calls, k)
	}
	c.finish(err, cancelled)
}

// unref lets go of c's buffer; the last holder gives it back.
func (f *flight) unref(c *call) {
	c.refs--
	if c.refs == 0 && f.give != nil && c.buf != nil {
		f.give(c.buf)
	}
}

// share reads bytes [lo, lo+len(p)) of data page dp from below: out of
// the whole page, read once for every reader that asks for it meanwhile;
// alone when take has no buffer for the page.
//
// The first reader leads: take gives it a buffer (called with mu held;
// nil: none now), it reads the page into it from below, and kept hands the
// page on (to the tiers, within ctx) before the others are woken, so that
// a reader that misses the page meanwhile does not read it again. The
// others wait and copy. A leader whose context ended leaves its waiters to
// ask again, one of them leading; any other error of its read is theirs
// too.
func (f *flight) share(ctx context.Context, dp int32, lo int64, p []byte, take func() []byte, below level, kept func(context.Context, *call)) error {
	for {
		f.mu.Lock()
		c := f.calls[dp]
		if c == nil {
			buf := take()
			if buf == nil {
				f.mu.Unlock()
				return below.read(ctx, dp, lo, p)
			}
			c = f.begin(dp)
			c.buf, c.refs = buf, 1
			f.mu.Unlock()
			err := below.read(ctx, dp, 0, buf)
			if err == nil {
				copy(p, buf[lo:])
				kept(ctx, c)
			}
			cancelled := err != nil && ctx.Err() != nil
			f.mu.Lock()
			f.end(dp, c, err, cancelled)
			f.unref(c)
			f.mu.Unlock()
			return err
		}
		c.refs++
		f.mu.Unlock()
		err := c.wait(ctx)
		if err == nil {
			copy(p, c.buf[lo:])
		}
		f.mu.Lock()
		f.unref(c)
		f.mu.Unlock()
		// ctx first: c.cancelled is set only once c.done is closed.
		if err == nil || ctx.Err() != nil || !c.cancelled {
			return err
		}
	}
}
