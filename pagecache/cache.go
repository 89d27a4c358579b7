package pagecache

// Lock order: Cache.mu is the only lock. It is never held during source I/O
// or while waiting; waiters wait on channels (a load's done channel, or the
// cache's changed channel, closed and replaced at every change).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
)

// ErrClosed is returned by operations on a closed Cache.
var ErrClosed = errors.New("page cache closed")

// Options configures a Cache.
type Options struct {
	// Budget is the memory for page slots, in bytes, rounded down to whole
	// pages (and to the file's pages when it has fewer). It must hold at
	// least one page. Slots are allocated once, by New; the cache never
	// holds more.
	Budget int64
	// Readers is the number of goroutines that prefetch pages (default 16).
	// Demand reads are made by the goroutine that needs the page.
	Readers int
	// Window is how far, in samples, a consumer may read ahead of the first
	// sample of its plan it has not read yet (default 8192). Reads further
	// ahead mean the consumer skipped what it left behind.
	Window int
	// Logger receives errors and warnings (default slog.Default()).
	Logger *slog.Logger
	// Debug checks the cache's invariants after every change, panicking on
	// a violation. For tests.
	Debug bool
}

// Validate fills defaults and checks the options against a page size.
func (o *Options) Validate(pageSize int64) error {
	if o.Readers == 0 {
		o.Readers = 16
	}
	if o.Window == 0 {
		o.Window = 8192
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.Readers < 0:
		return fmt.Errorf("readers must be at least 1, got %d", o.Readers)
	case o.Window < 0:
		return fmt.Errorf("window must be at least 0, got %d", o.Window)
	case o.Budget < pageSize:
		return fmt.Errorf("cache budget of %d bytes is less than one page (%d bytes)", o.Budget, pageSize)
	}
	return nil
}

// Cache holds pages of one beton in a fixed number of slots, reads them
// from a Source, and prefetches along announced plans. It is safe for
// concurrent use.
type Cache struct {
	// Immutable after New.
	src       Source
	f         *beton.File
	opts      Options
	pageSize  int64
	firstPage int64
	slots     []slot
	arena     []byte // the slots' memory
	jobs      chan prefetchJob
	stop      context.CancelFunc
	done      chan struct{} // closed by Close
	wg        sync.WaitGroup

	mu sync.Mutex
	// Guarded by mu.
	pageSlot  []int32 // per data page: its slot, or -1
	loads     map[int32]*loadOp
	changed   chan struct{}
	tick      uint64
	plans     map[string]*plan
	inflight  int // prefetch loads under way
	epochRead []uint64
	pageRead  []int32 // per data page: samples read this epoch
	epochN    int     // samples read this epoch
	withPage  int     // samples that have a page
	stats     Stats
	closed    bool
	onEvict   func(page int64)
}

// INVARIANT (slot): page < 0 means empty, and then pins == 0 and !ready.
// page >= 0 means pageSlot[page] is this slot, and either ready or a load of
// it is in loads. pins > 0 only on a ready slot or on the slot of a demand
// load, which its loader holds pinned.
type slot struct {
	buf        []byte
	page       int32
	ready      bool
	pins       int32
	lastUse    uint64
	prefetched bool // loaded by prefetch and not used since
}

type loadOp struct {
	done chan struct{}
	err  error
}

type prefetchJob struct {
	slot int32
	dp   int32
	op   *loadOp
}

// New returns a cache for f, whose bytes come from src. The slot memory,
// opts.Budget rounded down to whole pages but no more than the file's pages,
// is reserved here, outside the Go heap (see arena), and becomes resident
// as pages are loaded.
func New(src Source, f *beton.File, opts Options) (*Cache, error) {
	ps := f.PageSize()
	if err := opts.Validate(ps); err != nil {
		return nil, err
	}
	n := int(min(opts.Budget/ps, int64(max(1, f.NumPages()))))
	mem, err := newArena(n, ps)
	if err != nil {
		return nil, fmt.Errorf("page cache for %s: %w", src.Name(), err)
	}
	c := &Cache{
		arena: mem,
		src:   src, f: f, opts: opts, pageSize: ps, firstPage: f.FirstPage(),
		slots:     make([]slot, n),
		jobs:      make(chan prefetchJob, opts.Readers),
		pageSlot:  make([]int32, f.NumPages()),
		loads:     map[int32]*loadOp{},
		changed:   make(chan struct{}),
		done:      make(chan struct{}),
		plans:     map[string]*plan{},
		epochRead: make([]uint64, (f.NumSamples()+63)/64),
		pageRead:  make([]int32, f.NumPages()),
	}
	for i := range c.slots {
		c.slots[i] = slot{buf: mem[int64(i)*ps : int64(i+1)*ps : int64(i+1)*ps], page: -1}
	}
	for i := range c.pageSlot {
		c.pageSlot[i] = -1
	}
	for s := 0; s < f.NumSamples(); s++ {
		if f.SamplePage(s) != beton.NoPage {
			c.withPage++
		}
	}
	c.stats.Slots = n
	c.stats.BudgetBytes = int64(n) * ps
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	for range opts.Readers {
		c.wg.Add(1)
		go c.reader(ctx)
	}
	return c, nil
}

// File returns the beton the cache serves.
func (c *Cache) File() *beton.File { return c.f }

// Source returns the cache's source.
func (c *Cache) Source() Source { return c.src }

// Close stops the prefetchers and waits for them. Pages still pinned are
// reported as leaks. It does not close the source.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	pinned := 0
	for i := range c.slots {
		pinned += int(c.slots[i].pins)
	}
	c.broadcast()
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	if pinned > 0 {
		// Pinned pages may still be read, and demand loads still write
		// into their slots: the slot memory stays mapped.
		c.opts.Logger.Warn("page cache closed with pages still pinned; its memory is not returned", "source", c.src.Name(), "pins", pinned)
		return nil
	}
	return freeArena(c.arena)
}

// OnEvict makes the cache call fn with the absolute number of every page
// that leaves it from now on. fn is called with the cache's lock held: it
// must return at once and must not call the cache.
func (c *Cache) OnEvict(fn func(page int64)) {
	c.mu.Lock()
	c.onEvict = fn
	c.mu.Unlock()
}

// Page is a pinned page: its Data stay valid and unchanged until Release.
type Page struct {
	c    *Cache
	slot int32
	// Num is the absolute page number; Data starts at file offset
	// Num × page size.
	Num  int64
	Data []byte
}

// Release unpins the page. Data must not be used afterwards.
func (p *Page) Release() {
	c := p.c
	c.mu.Lock()
	s := &c.slots[p.slot]
	if s.pins <= 0 {
		c.mu.Unlock()
		panic("pagecache: Release of a page that is not pinned")
	}
	s.pins--
	if s.pins == 0 {
		c.broadcast()
		c.schedule()
	}
	c.check()
	c.mu.Unlock()
}

// AcquireSample records that the sample is being read (for plans and the
// epoch) and returns its page, pinned. A sample with no data has no page:
// the result is nil, nil.
func (c *Cache) AcquireSample(ctx context.Context, sample int) (*Page, error) {
	if sample < 0 || sample >= c.f.NumSamples() {
		return nil, fmt.Errorf("%s: sample %d out of range [0, %d)", c.src.Name(), sample, c.f.NumSamples())
	}
	p := c.f.SamplePage(sample)
	var pg *Page
	if p != beton.NoPage {
		// Pin first: recording the read may make this the page's last use,
		// and it must not be evicted before it is read.
		var err error
		if pg, err = c.acquire(ctx, int32(p-c.firstPage)); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	c.recordRead(sample)
	c.mu.Unlock()
	return pg, nil
}

// AcquirePage returns absolute page p, pinned.
func (c *Cache) AcquirePage(ctx context.Context, p int64) (*Page, error) {
	dp := p - c.firstPage
	if dp < 0 || dp >= int64(len(c.pageSlot)) {
		return nil, fmt.Errorf("%s: page %d is not a data page (pages %d to %d)", c.src.Name(), p, c.firstPage, c.firstPage+int64(len(c.pageSlot))-1)
	}
	return c.acquire(ctx, int32(dp))
}

func (c *Cache) acquire(ctx context.Context, dp int32) (*Page, error) {
	c.mu.Lock()
	waited := false
	var start time.Time
	wait := func(ch <-chan struct{}) error {
		if !waited {
			waited, start = true, time.Now()
			c.stats.Waits++
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-c.done:
		case <-ctx.Done():
			c.mu.Lock()
			c.stats.WaitTime += time.Since(start)
			c.mu.Unlock()
			return ctx.Err()
		}
		c.mu.Lock()
		return nil
	}
	for {
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if si := c.pageSlot[dp]; si >= 0 {
			s := &c.slots[si]
			if !s.ready {
				op := c.loads[dp]
				if err := wait(op.done); err != nil {
					return nil, err
				}
				if op.err != nil {
					c.mu.Unlock()
					return nil, op.err
				}
				continue
			}
			if waited {
				c.stats.WaitTime += time.Since(start)
			} else {
				c.stats.Hits++
			}
			if s.prefetched {
				s.prefetched = false
				c.stats.PrefetchHits++
			}
			return c.pin(si), nil
		}
		si := c.victim()
		if si < 0 {
			// Every slot is pinned or loading: wait for a change.
			if err := wait(c.changed); err != nil {
				return nil, err
			}
			continue
		}
		c.stats.Misses++
		op := c.startLoad(si, dp, false)
		c.mu.Unlock()
		c.load(si, dp, op)
		c.mu.Lock()
		if op.err != nil {
			c.mu.Unlock()
			return nil, op.err
		}
		if waited {
			c.stats.WaitTime += time.Since(start)
		}
		// The loader's pin becomes the caller's.
		s := &c.slots[si]
		c.tick++
		s.lastUse = c.tick
		c.check()
		c.mu.Unlock()
		return &Page{c: c, slot: si, Num: int64(dp) + c.firstPage, Data: s.buf}, nil
	}
}

// pin pins a ready slot and unlocks.
func (c *Cache) pin(si int32) *Page {
	s := &c.slots[si]
	s.pins++
	c.tick++
	s.lastUse = c.tick
	p := &Page{c: c, slot: si, Num: int64(s.page) + c.firstPage, Data: s.buf}
	c.check()
	c.mu.Unlock()
	return p
}

// startLoad assigns slot si to data page dp, evicting what it held. A
// demand load keeps the slot pinned for its loader.
func (c *Cache) startLoad(si, dp int32, prefetch bool) *loadOp {
	s := &c.slots[si]
	if s.page >= 0 {
		c.pageSlot[s.page] = -1
		c.stats.Evictions++
		if c.onEvict != nil {
			c.onEvict(int64(s.page) + c.firstPage)
		}
	}
	s.page, s.ready, s.prefetched = dp, false, prefetch
	if !prefetch {
		s.pins = 1
	}
	c.pageSlot[dp] = si
	op := &loadOp{done: make(chan struct{})}
	c.loads[dp] = op
	return op
}

// load reads data page dp into slot si, then publishes the result.
func (c *Cache) load(si, dp int32, op *loadOp) {
	s := &c.slots[si]
	p := int64(dp) + c.firstPage
	off := c.f.PageOffset(p)
	n, err := c.src.ReadAt(s.buf, off)
	if err == nil && n != len(s.buf) {
		err = fmt.Errorf("short read of %d bytes", n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.loads, dp)
	if err != nil {
		op.err = fmt.Errorf("%s: reading page %d (bytes %d to %d): %w", c.src.Name(), p, off, off+c.pageSize, err)
		c.stats.ReadErrors++
		c.pageSlot[dp] = -1
		s.page, s.ready, s.pins, s.prefetched = -1, false, 0, false
		// The error goes to every reader of the page, who reports it
		// (fs once per cause); a failed prefetch is read again on demand.
		c.opts.Logger.Debug("page read failed", "err", op.err)
	} else {
		s.ready = true
		c.stats.PagesRead++
		c.stats.BytesRead += uint64(n)
	}
	close(op.done)
	c.broadcast()
	c.schedule()
	c.check()
}

func (c *Cache) reader(ctx context.Context) {
	defer c.wg.Done()
	for {
		select {
		case j := <-c.jobs:
			c.load(j.slot, j.dp, j.op)
			c.mu.Lock()
			c.inflight--
			c.schedule()
			c.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}

// broadcast wakes everyone waiting for a change.
func (c *Cache) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// nextUse returns the distance to data page dp's next use in any plan.
func (c *Cache) nextUse(dp int32) int {
	d := never
	for _, pl := range c.plans {
		d = min(d, pl.nextUse(dp))
	}
	return d
}

// fullyRead reports whether every sample of data page dp was read this epoch.
func (c *Cache) fullyRead(dp int32) bool {
	return int(c.pageRead[dp]) == len(c.f.PageSamples(int64(dp)+c.firstPage))
}

type candidate struct {
	slot    int32
	dist    int
	read    bool
	lastUse uint64
}

// worse orders eviction candidates: farthest next use first, then pages
// fully read this epoch, then least recently used.
func worse(a, b candidate) int {
	switch {
	case a.dist != b.dist:
		if a.dist > b.dist {
			return -1
		}
		return 1
	case a.read != b.read:
		if a.read {
			return -1
		}
		return 1
	case a.lastUse != b.lastUse:
		if a.lastUse < b.lastUse {
			return -1
		}
		return 1
	}
	return 0
}

// evictable lists the empty slots (first) and the ready unpinned ones,
// worst first.
func (c *Cache) evictable() []candidate {
	var out []candidate
	for i := range c.slots {
		s := &c.slots[i]
		switch {
		case s.page < 0:
			out = append(out, candidate{slot: int32(i), dist: -1})
		case s.ready && s.pins == 0:
			out = append(out, candidate{slot: int32(i), dist: c.nextUse(s.page), read: c.fullyRead(s.page), lastUse: s.lastUse})
		}
	}
	slices.SortFunc(out, func(a, b candidate) int {
		if (a.dist < 0) != (b.dist < 0) {
			if a.dist < 0 {
				return -1
			}
			return 1
		}
		return worse(a, b)
	})
	return out
}

// victim returns the slot a demand load should use: a free one, else the
// evictable page used farthest away; -1 if every slot is pinned or loading.
func (c *Cache) victim() int32 {
	ev := c.evictable()
	if len(ev) == 0 {
		return -1
	}
	return ev[0].slot
}

// recordRead notes that sample s is read: its plan's progress and the
// epoch's bookkeeping.
func (c *Cache) recordRead(s int) {
	if c.epochRead[s>>6]&(1<<(s&63)) == 0 {
		if p := c.f.SamplePage(s); p != beton.NoPage {
			c.epochRead[s>>6] |= 1 << (s & 63)
			c.pageRead[p-c.firstPage]++
			c.epochN++
			if c.epochN == c.withPage {
				clear(c.epochRead)
				clear(c.pageRead)
				c.epochN = 0
			}
		}
	}
	// The read belongs to the plan in which it is nearest.
	var best *plan
	bestPos, bestDist := -1, never
	for _, pl := range c.plans {
		if i := pl.unreadPos(s); i >= 0 && i-pl.pos < bestDist {
			best, bestPos, bestDist = pl, i, i-pl.pos
		}
	}
	if best == nil {
		return
	}
	best.markRead(bestPos, c.opts.Window)
	best.last = time.Now()
	if best.done() {
		delete(c.plans, best.id)
	}
	c.schedule()
}

// Announce sets the plan of consumer id, replacing its previous one: the
// order in which it will read samples. The cache prefetches along it and
// keeps the pages it needs soonest.
func (c *Cache) Announce(id string, order []uint32) error {
	pl, err := newPlan(id, order, c.f)
	if err != nil {
		return fmt.Errorf("%s: %w", c.src.Name(), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if len(order) == 0 {
		delete(c.plans, id)
		return nil
	}
	c.plans[id] = pl
	c.schedule()
	c.check()
	return nil
}

// Withdraw removes consumer id's plan.
func (c *Cache) Withdraw(id string) {
	c.mu.Lock()
	delete(c.plans, id)
	c.mu.Unlock()
}

// WithdrawIdle removes the plans of which no position was read for idle
// (since their announcement, if none was), and returns their ids: their
// readers have stalled or gone, and should not steer the cache.
func (c *Cache) WithdrawIdle(idle time.Duration) []string {
	cut := time.Now().Add(-idle)
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, pl := range c.plans {
		if pl.last.Before(cut) {
			delete(c.plans, id)
			ids = append(ids, id)
		}
	}
	return ids
}

// schedule starts prefetches while readers are free: the pages that plans
// need soonest and that are not in the cache, each into a free slot or in
// place of a page needed later.
func (c *Cache) schedule() {
	free := c.opts.Readers - c.inflight
	if free <= 0 || len(c.plans) == 0 || c.closed {
		return
	}
	want := c.wanted(len(c.slots))
	if len(want) == 0 {
		return
	}
	ev := c.evictable()
	for _, w := range want {
		if free == 0 || len(ev) == 0 {
			break
		}
		v := ev[0]
		if v.dist >= 0 && v.dist != never && (v.dist <= w.dist || !c.harmless(v.slot, w.dist, v.dist)) {
			// Loading w now could cost a read that waiting would not:
			// wait until a page is done or w is needed.
			break
		}
		ev = ev[1:]
		op := c.startLoad(v.slot, w.dp, true)
		c.inflight++
		free--
		c.jobs <- prefetchJob{slot: v.slot, dp: w.dp, op: op}
	}
}

// harmless reports whether evicting the page in slot victim, next used at
// tV, to load a page first used at tW < tV is what Belady's MIN would do
// when that page is needed: every other page in the cache is used again
// in [tW, tV), so at tW the victim is still the page used farthest away.
// Prefetching in order of first use, with this check, reads no page more
// often than demand loading with farthest-next-use eviction.
func (c *Cache) harmless(victim int32, tW, tV int) bool {
	for i := range c.slots {
		s := &c.slots[i]
		if int32(i) == victim || s.page < 0 {
			continue
		}
		if c.useAfter(s.page, tW) >= tV {
			return false
		}
	}
	return true
}

// useAfter returns the distance to data page dp's first use at least t
// positions ahead, in any plan.
func (c *Cache) useAfter(dp int32, t int) int {
	d := never
	for _, pl := range c.plans {
		d = min(d, pl.useAfter(dp, t))
	}
	return d
}

type wantedPage struct {
	dp   int32
	dist int
}

// wanted returns up to limit pages that are not in the cache, nearest next
// use first, found by scanning each plan ahead of its position.
func (c *Cache) wanted(limit int) []wantedPage {
	best := map[int32]int{}
	perPage := max(1, c.f.NumSamples()/max(1, len(c.pageSlot)))
	scan := max(4096, 4*limit*perPage)
	for _, pl := range c.plans {
		found := 0
		end := min(len(pl.order), pl.pos+scan)
		for i := pl.pos; i < end && found < limit; i++ {
			dp := pl.dpage[i]
			if dp < 0 || pl.isRead(i) || c.pageSlot[dp] >= 0 {
				continue
			}
			d := i - pl.pos
			if old, ok := best[dp]; !ok || d < old {
				if !ok {
					found++
				}
				best[dp] = d
			}
		}
	}
	out := make([]wantedPage, 0, len(best))
	for dp, d := range best {
		out = append(out, wantedPage{dp, d})
	}
	slices.SortFunc(out, func(a, b wantedPage) int { return a.dist - b.dist })
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// check verifies the invariants when opts.Debug is set.
func (c *Cache) check() {
	if !c.opts.Debug {
		return
	}
	used := 0
	for i := range c.slots {
		s := &c.slots[i]
		if s.page < 0 {
			if s.pins != 0 || s.ready {
				panic(fmt.Sprintf("pagecache: empty slot %d has pins %d ready %v", i, s.pins, s.ready))
			}
			continue
		}
		used++
		if c.pageSlot[s.page] != int32(i) {
			panic(fmt.Sprintf("pagecache: slot %d holds page %d, which maps to slot %d", i, s.page, c.pageSlot[s.page]))
		}
		if _, loading := c.loads[s.page]; s.ready == loading {
			panic(fmt.Sprintf("pagecache: slot %d page %d ready %v loading %v", i, s.page, s.ready, loading))
		}
		if s.pins < 0 {
			panic(fmt.Sprintf("pagecache: slot %d has %d pins", i, s.pins))
		}
	}
	mapped := 0
	for _, si := range c.pageSlot {
		if si >= 0 {
			mapped++
		}
	}
	if mapped != used || c.inflight < 0 || c.inflight > c.opts.Readers {
		panic(fmt.Sprintf("pagecache: %d pages mapped, %d slots used, %d prefetches in flight", mapped, used, c.inflight))
	}
}
