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
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/pagecache/policy"
	"github.com/ffcvfs/ffcvfs/storage"
)

// ErrClosed is returned by operations on a closed Cache.
var ErrClosed = errors.New("page cache closed")

// MaxReaders bounds Options.Readers, which sizes the prefetch queue and
// the requests in flight.
const MaxReaders = 4096

// DefaultReaders is the default of Options.Readers: enough requests in
// flight to fill a link of about 100 MB/s with 10 ms latency with ranges
// of 30 KB or more (the bandwidth-delay product is about 1 MB).
const DefaultReaders = 64

// Options configures a Cache.
type Options struct {
	// Budget is the memory for page slots, in bytes, rounded down to whole
	// pages (and to the file's pages when it has fewer). It must hold at
	// least one page. Slots are allocated once, by New; the cache never
	// holds more.
	Budget int64
	// Readers is the most prefetch requests in flight (default 64), each
	// a page or a range (several neighbouring samples in one request).
	// Demand reads are made by the goroutine that needs the data, besides.
	Readers int
	// InflightBytes caps the bytes of the prefetch requests in flight
	// (default: 4 pages, at least 8 MiB). Requests beyond the link's
	// bandwidth-delay product only split the link among data needed later,
	// and pages ready soon wait longer; many small ranges are needed to
	// fill it, few pages.
	InflightBytes int64
	// Window is how far, in samples, a consumer may read ahead of the first
	// sample of its plan it has not read yet (default 8192). Reads further
	// ahead mean the consumer skipped what it left behind.
	Window int
	// Logger receives errors and warnings (default slog.Default()).
	Logger *slog.Logger
	// PagesOnly serves every miss with its whole page, never with a range
	// of it (see ranges.go).
	PagesOnly bool
	// DiskDir turns on a disk tier in that folder, of DiskBudget bytes
	// (see tiers.go and package tier). Two slots of the budget become
	// fill buffers.
	DiskDir    string
	DiskBudget int64
	// CompressRAM keeps most of the budget as a tier of compressed pages:
	// a sixteenth of the slots (at least two) stay slots, the rest hold
	// pages compressed, when they compress (raw pixels, arrays; not
	// JPEG).
	CompressRAM bool
	// Peers is the cluster's tier, below the cache's tiers and above
	// storage (peers.go): a read they miss asks the page's owner, and the
	// pages this node owns are read from storage here and kept before any
	// other. PeerBudget is RAM beyond Budget that keeps them (0: the disk
	// or compressed RAM tier keeps them).
	Peers      PeerTier
	PeerBudget int64
	// Debug checks the invariants of the cache and of its policy on every
	// unlock, panicking on a violation. For tests.
	Debug bool
}

// Validate fills defaults and checks the options against a page size.
func (o *Options) Validate(pageSize int64) error {
	if o.Readers == 0 {
		o.Readers = DefaultReaders
	}
	if o.Window == 0 {
		o.Window = 8192
	}
	if o.InflightBytes == 0 {
		o.InflightBytes = max(4*pageSize, 8<<20)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.Readers < 0 || o.Readers > MaxReaders:
		return fmt.Errorf("readers must be 1 to %d, got %d", MaxReaders, o.Readers)
	case o.InflightBytes < 0:
		return fmt.Errorf("bytes in flight must be positive, got %d", o.InflightBytes)
	case o.Window < 0:
		return fmt.Errorf("window must be at least 0, got %d", o.Window)
	case o.Budget < pageSize:
		return fmt.Errorf("cache budget of %d bytes is less than one page (%d bytes)", o.Budget, pageSize)
	case o.DiskDir != "" && o.DiskBudget < pageSize:
		return fmt.Errorf("disk cache budget of %d bytes is less than one page (%d bytes)", o.DiskBudget, pageSize)
	case o.PeerBudget < 0:
		return fmt.Errorf("peer cache budget of %d bytes is negative", o.PeerBudget)
	case o.Peers != nil && o.PeerBudget < pageSize && o.DiskDir == "" && !o.CompressRAM:
		return fmt.Errorf("the peer tier keeps the pages this node owns in RAM (a budget of at least a page, %d bytes) or in a disk or compressed RAM tier; none was given", pageSize)
	}
	return nil
}

// Cache holds pages of one beton in a fixed number of slots, reads them
// from a Source, and prefetches along announced plans. It is safe for
// concurrent use.
type Cache struct {
	// Immutable after New.
	src       storage.Source
	below     *chain // the levels below the slots
	f         *beton.File
	opts      Options
	pageSize  int64
	firstPage int64
	slots     []slot
	// reserved is how many of the last slots are the tiers' fill buffers,
	// not page slots (addSlots); guarded by mu.
	reserved int
	arena    []byte // the slots' memory
	jobs     chan job
	stop     context.CancelFunc
	done     chan struct{} // closed by Close
	wg       sync.WaitGroup

	mu lock
	// Guarded by mu.
	pageSlot []int32       // per data page: its slot, or -1
	free     []int32       // empty slots
	loads    flight        // the slots' loads under way
	changed  chan struct{} // closed at the next change; nil if nobody waits
	pol      *policy.Policy
	inflight int // prefetch loads under way
	// inflightBytes is their bytes.
	inflightBytes int64
	stats         Stats
	closed        bool
	onEvict       func(page int64, sample int)

	// Ranges (ranges.go). samplePage, extOff and extLen are immutable:
	// each sample's data page (-1: none) and extent in it.
	rng        rangeSet
	samplePage []int32
	extOff     []uint32
	extLen     []uint32
	meanExtent int64
	epochSeen  int
}

// lock is the cache's mutex. With Options.Debug, every Unlock first checks
// the invariants of the cache and its policy, and panics if one fails.
type lock struct {
	sync.Mutex
	check func()
}

func (l *lock) Unlock() {
	if l.check != nil {
		// Unlocked even when the check panics, so that the test fails
		// rather than hangs.
		defer l.Mutex.Unlock()
		l.check()
		return
	}
	l.Mutex.Unlock()
}

// INVARIANT (slot): page < 0 means empty (and listed in free), and then
// pins == 0 and !ready. page >= 0 means pageSlot[page] is this slot, and
// either ready or a load of it is in loads. pins > 0 only on a ready slot
// or on the slot of a demand load, which its loader holds pinned.
type slot struct {
	pg         Page // handed to every holder of a pin while the page stays
	buf        []byte
	page       int32
	ready      bool
	pins       int32
	prefetched bool // loaded by prefetch and not used since
}

// New returns a cache for f, whose bytes come from src. The slot memory,
// opts.Budget rounded down to whole pages but no more than the file's pages,
// is reserved here, outside the Go heap (see arena), and becomes resident
// as pages are loaded.
func New(src storage.Source, f *beton.File, opts Options) (*Cache, error) {
	ps := f.PageSize()
	if err := opts.Validate(ps); err != nil {
		return nil, err
	}
	n, nFills, nMem, err := tierBudget(int(opts.Budget/ps), ps, opts)
	if err != nil {
		return nil, err
	}
	n = min(n, max(1, f.NumPages()))
	mem, err := newArena(n+nFills, ps)
	if err != nil {
		return nil, fmt.Errorf("page cache for %s: %w", src.Name(), err)
	}
	var fills [][]byte
	for i := range nFills {
		fills = append(fills, mem[int64(n+i)*ps:int64(n+i+1)*ps:int64(n+i+1)*ps])
	}
	below, err := newChain(src, f, opts, int64(nMem)*ps, fills)
	if err != nil {
		freeArena(mem)
		return nil, err
	}
	samplePage := make([]int32, f.NumSamples())
	for s := range samplePage {
		samplePage[s] = -1
		if p := f.SamplePage(s); p != beton.NoPage {
			samplePage[s] = int32(p - f.FirstPage())
		}
	}
	c := &Cache{
		arena: mem,
		src:   src, below: below, f: f, opts: opts, pageSize: ps, firstPage: f.FirstPage(),
		// The last nFills slots are the fill buffers, reserved for the
		// tiers until they take no more pages (addSlots).
		slots:    make([]slot, n+nFills),
		reserved: nFills,
		free:     make([]int32, n),
		jobs:     make(chan job, opts.Readers),
		pageSlot: make([]int32, f.NumPages()),
		done:     make(chan struct{}),
		pol:      policy.New(samplePage, f.NumPages(), n, opts.Window),
		rng:      rangeSet{m: map[int32]*rangeEntry{}},

		samplePage: samplePage,
	}
	c.extOff, c.extLen = extents(f, samplePage)
	pageBytes := make([]uint32, f.NumPages())
	withData, total := int64(0), int64(0)
	for s, dp := range samplePage {
		if dp >= 0 {
			pageBytes[dp] += c.extLen[s]
			withData++
			total += int64(c.extLen[s])
		}
	}
	c.meanExtent = max(1, total/max(1, withData))
	if !opts.PagesOnly {
		c.pol.SetSizes(c.extLen, pageBytes)
	}
	for i := range c.slots {
		if i >= n {
			// Reserved: addSlots gives it the fill buffer that comes back.
			c.slots[i] = slot{page: -1}
			continue
		}
		c.slots[i] = slot{buf: mem[int64(i)*ps : int64(i+1)*ps : int64(i+1)*ps], page: -1}
		c.free[i] = int32(n - 1 - i) // slot 0 is used first
	}
	for i := range c.pageSlot {
		c.pageSlot[i] = -1
	}
	c.loads = newFlight(&c.mu, nil)
	if opts.Debug {
		c.mu.check = c.check
	}
	c.stats.Slots = n
	c.stats.BudgetBytes = int64(n+nFills+nMem) * ps
	below.setRank(func(dp int32) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pol.Distance(dp)
	})
	below.start(c.addSlots)
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	for range opts.Readers {
		c.wg.Add(1)
		go c.reader(ctx)
	}
	return c, nil
}

// pageSlots is the number of slots pages and ranges may use: all but
// those reserved for the tiers. Called with mu held.
func (c *Cache) pageSlots() int { return len(c.slots) - c.reserved }

// addSlots makes the buffers (fill buffers the tiers kept) page slots:
// reserved slots become usable with them.
func (c *Cache) addSlots(bufs [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// No more slots than pages.
	bufs = bufs[:max(0, min(len(bufs), c.reserved, len(c.pageSlot)-c.pageSlots()))]
	if c.closed || len(bufs) == 0 {
		return
	}
	for _, b := range bufs {
		si := c.pageSlots()
		c.slots[si].buf = b
		c.reserved--
		c.free = append(c.free, int32(si))
	}
	c.pol.Grow(len(bufs))
	c.pol.SetSlots(c.pageSlots() - len(c.rng.lent))
	c.stats.Slots = c.pageSlots()
	c.broadcast()
	c.schedule()
}

// extents returns, per sample, the offset in its page of its first
// allocation and the bytes from there to the end of its last.
func extents(f *beton.File, samplePage []int32) (off, n []uint32) {
	off, n = make([]uint32, len(samplePage)), make([]uint32, len(samplePage))
	hi := make([]uint64, len(samplePage))
	for _, a := range f.Allocs() {
		s := a.Sample
		dp := samplePage[s]
		if dp < 0 || a.Size == 0 {
			continue
		}
		base := uint64(f.PageOffset(int64(dp) + f.FirstPage()))
		lo := a.Ptr - base
		if hi[s] == 0 || lo < uint64(off[s]) {
			if hi[s] == 0 {
				hi[s] = lo + a.Size
			}
			off[s] = uint32(lo)
		}
		hi[s] = max(hi[s], lo+a.Size)
	}
	for s := range n {
		if hi[s] > 0 {
			n[s] = uint32(hi[s] - uint64(off[s]))
		}
	}
	return off, n
}

// File returns the beton the cache serves.
func (c *Cache) File() *beton.File { return c.f }

// Source returns the cache's source.
func (c *Cache) Source() storage.Source { return c.src }

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
	for _, e := range c.rng.m {
		pinned += int(e.pins)
	}
	c.broadcast()
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	// Stores what the tiers took: their fill buffers are arena memory.
	c.below.close()
	if pinned > 0 {
		// Pinned pages may still be read, and demand loads still write
		// into their slots: the slot memory stays mapped.
		c.opts.Logger.Warn("page cache closed with pages still pinned; its memory is not returned", "source", c.src.Name(), "pins", pinned)
		return nil
	}
	c.mu.Lock()
	for _, e := range c.rng.m {
		// Loads have ended: the readers are gone, and demand loads
		// hold pins.
		syscall.Munmap(e.buf)
	}
	c.trimPool(0)
	c.rng = rangeSet{m: map[int32]*rangeEntry{}, lent: c.rng.lent}
	c.mu.Unlock()
	return freeArena(c.arena)
}

// OnEvict makes the cache call fn for every page and range that leaves it
// from now on: with the absolute page number and -1 for a page, with the
// page and the sample for a range. fn is called with the cache's lock
// held: it must return at once and must not call the cache.
func (c *Cache) OnEvict(fn func(page int64, sample int)) {
	c.mu.Lock()
	c.onEvict = fn
	c.mu.Unlock()
}

// Page is pinned data: a whole page, or a range of one (one sample's
// bytes). Its Data stay valid and unchanged until Release. Holders of pins
// on the same data may share one *Page; each releases once.
type Page struct {
	c    *Cache
	slot int32       // a page's slot
	r    *rangeEntry // or a range
	// Num is the absolute page number; Data starts at file offset Off
	// (Num × page size for a whole page).
	Num  int64
	Off  int64
	Data []byte
}

// Release unpins the data. Data must not be used afterwards.
func (p *Page) Release() {
	c := p.c
	c.mu.Lock()
	if e := p.r; e != nil {
		if e.pins <= 0 {
			c.mu.Unlock()
			panic("pagecache: Release of a range that is not pinned")
		}
		e.pins--
		if e.pins == 0 {
			c.broadcast()
			c.schedule()
		}
		c.mu.Unlock()
		return
	}
	s := &c.slots[p.slot]
	if s.pins <= 0 {
		c.mu.Unlock()
		panic("pagecache: Release of a page that is not pinned")
	}
	s.pins--
	if s.pins == 0 {
		c.pol.Unpin(s.page)
		c.broadcast()
		c.schedule()
	}
	c.mu.Unlock()
}

// AcquireSample records that the sample is being read (for plans and the
// epoch) and returns its data pinned: its page, or a range of the page that
// holds at least the sample's bytes. A sample with no data has no page:
// the result is nil, nil.
func (c *Cache) AcquireSample(ctx context.Context, sample int) (*Page, error) {
	if sample < 0 || sample >= c.f.NumSamples() {
		return nil, fmt.Errorf("%s: sample %d out of range [0, %d)", c.src.Name(), sample, c.f.NumSamples())
	}
	p := c.f.SamplePage(sample)
	if p == beton.NoPage {
		c.mu.Lock()
		c.recordRead(sample)
		c.mu.Unlock()
		return nil, nil
	}
	// The read is recorded once the page is pinned: it may be the page's
	// last use, and the page must not be evicted before it is read.
	return c.acquire(ctx, int32(p-c.firstPage), sample)
}

// AcquirePage returns absolute page p, pinned.
func (c *Cache) AcquirePage(ctx context.Context, p int64) (*Page, error) {
	dp := p - c.firstPage
	if dp < 0 || dp >= int64(len(c.pageSlot)) {
		return nil, fmt.Errorf("%s: page %d is not a data page (pages %d to %d)", c.src.Name(), p, c.firstPage, c.firstPage+int64(len(c.pageSlot))-1)
	}
	return c.acquire(ctx, int32(dp), -1)
}

// pin pins a ready slot, records that sample (if >= 0) is read, and
// unlocks.
func (c *Cache) pin(si int32, sample int) *Page {
	s := &c.slots[si]
	s.pins++
	if s.pins == 1 {
		c.pol.Pin(s.page)
	}
	if sample >= 0 {
		c.recordRead(sample)
	}
	p := &s.pg
	c.mu.Unlock()
	return p
}

// victim returns the slot a demand load should use: a free one, one the
// ranges can spare, else the one of the policy's victim, else one the
// ranges give up; -1 if every slot is pinned or loading.
func (c *Cache) victim() int32 {
	if c.spareSlots() {
		return c.free[len(c.free)-1]
	}
	if dp, _ := c.pol.Victim(); dp >= 0 {
		return c.pageSlot[dp]
	}
	if len(c.rng.lent) > 0 && c.makeRoom(c.pageSize, -1) {
		// Room for a page's worth of ranges is a slot's worth.
		if c.spareSlots() {
			return c.free[len(c.free)-1]
		}
	}
	return -1
}

// startLoad assigns slot si (free, or holding an evictable page) to data
// page dp, evicting what it held. A demand load keeps the slot pinned for
// its loader.
func (c *Cache) startLoad(si, dp int32, prefetch bool) *call {
	s := &c.slots[si]
	if s.page >= 0 {
		c.pol.Evict(s.page)
		c.pageSlot[s.page] = -1
		c.stats.Evictions++
		if c.onEvict != nil {
			c.onEvict(int64(s.page)+c.firstPage, -1)
		}
	} else {
		// A free slot is always taken from the top of the stack.
		if c.free[len(c.free)-1] != si {
			panic(fmt.Sprintf("pagecache: loading into slot %d, which is not the free one on top", si))
		}
		c.free = c.free[:len(c.free)-1]
	}
	s.page, s.ready, s.prefetched = dp, false, prefetch
	s.pg = Page{c: c, slot: si, Num: int64(dp) + c.firstPage, Off: c.f.PageOffset(int64(dp) + c.firstPage), Data: s.buf}
	if !prefetch {
		s.pins = 1
	}
	c.pageSlot[dp] = si
	op := c.loads.begin(dp)
	c.pol.Loading(dp)
	return op
}

// broadcast wakes everyone waiting for a change.
func (c *Cache) broadcast() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// recordRead notes that sample s is read: its plan's progress and the
// epoch's bookkeeping.
func (c *Cache) recordRead(s int) {
	c.pol.Read(s)
	if e := c.rng.m[int32(s)]; e != nil && e.ready {
		c.rekey(e)
	}
	c.schedule()
}

// Announce sets the plan of consumer id, replacing its previous one: the
// order in which it will read samples. The cache prefetches along it and
// keeps the pages it needs soonest. An empty order withdraws the plan.
func (c *Cache) Announce(id string, order []uint32) error {
	pl, err := c.pol.Prepare(id, order) // outside the lock: O(len(order))
	if err != nil {
		return fmt.Errorf("%s: %w", c.src.Name(), err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.pol.Install(pl, time.Now())
	c.rekeyAll()
	c.schedule()
	return nil
}

// Plans returns the live plans' progress, in order of announcement.
func (c *Cache) Plans() []policy.PlanStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pol.Plans()
}

// Withdraw removes consumer id's plan.
func (c *Cache) Withdraw(id string) {
	c.mu.Lock()
	if c.pol.Withdraw(id) {
		c.rekeyAll()
	}
	c.mu.Unlock()
}

// WithdrawIdle removes the plans of which no position was read for idle
// (since their announcement, if none was), and returns their ids: their
// readers have stalled or gone, and should not steer the cache. The read
// path keeps no clock: a plan counts as idle from the first call that
// finds no reads since the call before, so it goes one call period or so
// after idle.
func (c *Cache) WithdrawIdle(idle time.Duration) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.pol.WithdrawIdle(time.Now(), idle)
	if len(ids) > 0 {
		c.rekeyAll()
	}
	return ids
}

// schedule starts prefetches while readers are free, as the policy says:
// ranges, then pages; up to Readers requests and InflightBytes bytes (or
// one request) in flight.
func (c *Cache) schedule() {
	for c.inflight < c.opts.Readers && (c.inflight == 0 || c.inflightBytes < c.opts.InflightBytes) && !c.closed {
		if c.prefetchRange() {
			continue
		}
		w, v, ok := c.pol.Prefetch()
		if !ok {
			return
		}
		si := int32(-1)
		switch {
		case v >= 0 && len(c.rng.lent) > 0 && c.spareSlots():
			// The ranges spared a slot: nothing is evicted.
			si = c.free[len(c.free)-1]
		case v >= 0:
			si = c.pageSlot[v]
		default:
			si = c.free[len(c.free)-1]
		}
		op := c.startLoad(si, w, true)
		c.inflight++
		c.inflightBytes += c.pageSize
		c.jobs <- job{slot: si, dp: w, op: op}
	}
}

// check verifies the invariants, panicking on a violation (Options.Debug).
func (c *Cache) check() {
	used := 0
	for i := range c.slots {
		s := &c.slots[i]
		if i >= c.pageSlots() {
			if s.page >= 0 || s.pins != 0 || slices.Contains(c.free, int32(i)) {
				panic(fmt.Sprintf("pagecache: slot %d reserved for the tiers is in use", i))
			}
			continue
		}
		if s.page < 0 {
			if free, lent := slices.Contains(c.free, int32(i)), slices.Contains(c.rng.lent, int32(i)); s.pins != 0 || s.ready || free == lent {
				panic(fmt.Sprintf("pagecache: empty slot %d has pins %d ready %v, listed free %v, lent %v", i, s.pins, s.ready, free, lent))
			}
			continue
		}
		used++
		if c.pageSlot[s.page] != int32(i) {
			panic(fmt.Sprintf("pagecache: slot %d holds page %d, which maps to slot %d", i, s.page, c.pageSlot[s.page]))
		}
		if loading := c.loads.get(s.page) != nil; s.ready == loading {
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
	if mapped != used || used+len(c.free)+len(c.rng.lent)+c.reserved != len(c.slots) || used != c.pol.Resident() || c.inflight < 0 || c.inflight > c.opts.Readers {
		panic(fmt.Sprintf("pagecache: %d pages mapped, %d slots used, %d free, %d lent, %d resident for the policy, %d prefetches in flight", mapped, used, len(c.free), len(c.rng.lent), c.pol.Resident(), c.inflight))
	}
	c.checkRanges()
	if err := c.pol.Check(); err != nil {
		panic("pagecache: policy: " + err.Error())
	}
}
