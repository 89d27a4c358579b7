package pagecache

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/pagecache/tier"
	"github.com/ffcvfs/ffcvfs/storage"
)

// fillBuffers is how many slots become fill buffers with a disk tier;
// a compressed RAM tier alone takes one.
const fillBuffers = 2

// tierLevel is the chain's level of the compressed RAM (Options.CompressRAM)
// and disk (Options.DiskDir) tiers (package tier keeps their entries):
// what their stores miss (chain.read asks them first) it reads from the
// level below, the peer tier or storage, and offers to them.
//
// A tier stores whole pages. A page read whole is copied into a fill
// buffer and offered; a range of a page the tiers want is read as the
// whole page into a fill buffer (one request, shared by the readers of
// that page meanwhile: fills), so that a random order, which the slots
// serve by ranges, fills the tiers all the same: each page comes from
// storage once. Fill buffers are slots of the budget; when none is free, a
// read goes below as it would without tiers, and nothing waits for a tier.
//
// Backfill: a page read whole that the tiers want but cannot take at once
// (no fill buffer free, or a tier's queue full, as when its writer is slow
// on a busy machine) is owed: a goroutine reads it again once a fill
// buffer is free and offers it, one page at a time, so that the tiers end
// up with every page they were offered while under budget, and a later
// epoch finds them there. It backfills only into a tier with room for the
// page without evicting (tier.Store.HasRoom): a full tier would take it
// only in place of another, and reading pages again to churn a full tier
// is no saving. Nothing in a reader's path waits for it.
//
// Fill buffers: the fill buffers are slots of the budget kept for the
// tiers. Once no tier will take a page any more (each holds every page, or
// stores nothing), they are handed back to the cache as page slots for
// good (release): a later epoch from a full disk tier, or a fresh mount
// over one, has the whole budget for pages read ahead of the readers.
type tierLevel struct {
	// Immutable after newTierLevel.
	stores   []*tier.Store // compressed RAM, then disk
	next     level
	pageSize int64
	free     chan []byte // fill buffers not in use

	mu        sync.Mutex
	fills     flight        // pages read whole for the tiers; guarded by mu
	owed      []bool        // pages to backfill; guarded by mu
	owedQueue []int32       // the owed pages, oldest first; guarded by mu
	filled    atomic.Uint64 // pages read whole for the tiers
	backfills atomic.Uint64 // pages read again for the tiers (backfill)

	kick   chan struct{} // wakes the backfill; capacity 1
	cancel context.CancelFunc
	done   chan struct{} // closed when the backfill has ended

	// giveBack makes fill buffers page slots of the cache (release);
	// called with none of the tiers' locks held.
	giveBack func([][]byte)
	kept     atomic.Int32 // fill buffers not handed back

	storedCh chan struct{} // closed when a tier is next done with a page offered; guarded by mu
}

// TierStats are the tiers' counters.
type TierStats struct {
	// StorageBytes is what was read from storage (each tier's hits are
	// what it saved).
	StorageBytes    uint64 `json:"storage_bytes"`
	StorageRequests uint64 `json:"storage_requests"`
	// PageFills counts pages read whole from storage for the tiers, to
	// serve a range.
	PageFills uint64 `json:"page_fills"`
	// Backfills counts pages read from storage again because the tiers
	// could not take them when they were first read (see Backfill).
	Backfills uint64 `json:"backfills"`
	// Owed counts the pages waiting to be backfilled.
	Owed int `json:"owed"`
	// FillBuffers is how many slots of the budget are kept for reading
	// pages into the tiers; 0 once no tier will take a page any more
	// (they are page slots then).
	FillBuffers int          `json:"fill_buffers"`
	Tiers       []tier.Stats `json:"tiers"`
}

// layouts cuts each data page of f into chunks for the tiers: one per
// allocation and one per gap, raw RGB images marked with their width.
func layouts(f *beton.File) func(dp int32) []tier.Chunk {
	width := map[uint64]uint16{}
	for fi, fd := range f.Fields() {
		if fd.Type != beton.TypeRGBImage {
			continue
		}
		for i := range f.NumSamples() {
			if im, err := f.Image(i, fi); err == nil && im.Mode == beton.ModeRaw && im.Width > 0 {
				width[im.Ptr] = uint16(im.Width)
			}
		}
	}
	type alloc struct {
		off, n uint64
		w      uint16
	}
	per := make([][]alloc, f.NumPages())
	for _, a := range f.Allocs() {
		p := f.PageOf(a.Ptr) - f.FirstPage()
		if a.Size == 0 || p < 0 || p >= int64(len(per)) {
			continue
		}
		per[p] = append(per[p], alloc{a.Ptr - uint64(f.PageOffset(p+f.FirstPage())), a.Size, width[a.Ptr]})
	}
	for _, as := range per {
		slices.SortFunc(as, func(a, b alloc) int { return cmp.Compare(a.off, b.off) })
	}
	ps := uint64(f.PageSize())
	return func(dp int32) []tier.Chunk {
		as := per[dp]
		var out []tier.Chunk
		at := uint64(0)
		add := func(n uint64, w uint16) {
			for n > 0 {
				k := min(n, 1<<31)
				out = append(out, tier.Chunk{Len: uint32(k), Width: w})
				n -= k
			}
		}
		for _, a := range as {
			if a.off < at || a.off+a.n > ps {
				continue // overlapping or past the page: part of a gap
			}
			add(a.off-at, 0)
			add(a.n, a.w)
			at = a.off + a.n
		}
		add(ps-at, 0)
		return out
	}
}

// newTierLevel opens the tiers the options ask for, above next. Fill
// buffers come from fills. start begins the backfill.
func newTierLevel(src storage.Source, geom tier.Geometry, opts Options, memBudget int64, fills [][]byte, next level) (*tierLevel, error) {
	t := &tierLevel{
		next: next, pageSize: geom.PageSize, free: make(chan []byte, len(fills)),
		owed: make([]bool, geom.NumPages), kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	t.fills = newFlight(&t.mu, func(b []byte) {
		t.free <- b
		t.wake() // to backfill or release it
	})
	for _, b := range fills {
		t.free <- b
	}
	t.kept.Store(int32(len(fills)))
	if memBudget > 0 {
		t.stores = append(t.stores, tier.NewMem(geom, tier.Options{Budget: memBudget, Compress: true, Logger: opts.Logger, Stored: t.tierStored}))
	}
	if opts.DiskDir != "" {
		d, err := tier.OpenDisk(opts.DiskDir, tier.Object{Name: src.Name(), Identity: storage.IdentityOf(src)}, geom, tier.Options{Budget: opts.DiskBudget, Compress: true, Logger: opts.Logger, Stored: t.tierStored})
		if err != nil {
			for _, s := range t.stores {
				s.Close()
			}
			return nil, err
		}
		t.stores = append(t.stores, d)
	}
	return t, nil
}

// read reads what the tiers' stores missed from the level below, for
// them too: a page read whole is offered; a range of a page they want is
// read out of the whole page, filled once for its readers meanwhile.
func (t *tierLevel) read(ctx context.Context, dp int32, lo int64, p []byte) error {
	if t.next.keepsWhole(dp) {
		return t.next.read(ctx, dp, lo, p)
	}
	if int64(len(p)) == t.pageSize {
		err := t.next.read(ctx, dp, 0, p)
		if err == nil {
			t.offerCopy(dp, p)
		}
		return err
	}
	return t.fills.share(ctx, dp, lo, p, func() []byte { return t.fillBuffer(dp) }, t.next, t.filledPage(dp))
}

// filledPage returns what share does with page dp read whole for the
// tiers: offer it.
func (t *tierLevel) filledPage(dp int32) func(context.Context, *call) {
	return func(_ context.Context, c *call) {
		t.filled.Add(1)
		t.mu.Lock()
		t.offer(dp, c)
		t.mu.Unlock()
	}
}

func (t *tierLevel) keepsWhole(dp int32) bool { return t.next.keepsWhole(dp) }

// fillBuffer returns a free fill buffer to read page dp into for the
// tiers; nil when no tier wants the page or no buffer is free. Called
// with mu held.
func (t *tierLevel) fillBuffer(dp int32) []byte {
	if !t.wanted(dp) {
		return nil
	}
	select {
	case buf := <-t.free:
		return buf
	default:
		// Not owed: a page read by ranges is missed again by the next
		// sample of it read, which fills it when a buffer is free;
		// owing it would read it twice.
		return nil
	}
}

// start begins the backfill, which hands fill buffers to giveBack once
// the tiers take no more pages.
func (t *tierLevel) start(giveBack func([][]byte)) {
	t.giveBack = giveBack
	t.release() // a tier opened full: at once, before the first read
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go t.backfill(ctx)
}

// stop ends the backfill.
func (t *tierLevel) stop() {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
}

// owe records that the tiers want page dp but could not take it, and
// wakes the backfill. Called with mu held.
func (t *tierLevel) owe(dp int32) {
	if !t.owed[dp] {
		t.owed[dp] = true
		t.owedQueue = append(t.owedQueue, dp)
	}
	t.wake()
}

// tierStored is called by a tier done with a page offered: the backfill may
// release the fill buffers, and waiters on storedSignal look again.
func (t *tierLevel) tierStored() {
	t.wake()
	t.mu.Lock()
	if t.storedCh != nil {
		close(t.storedCh)
		t.storedCh = nil
	}
	t.mu.Unlock()
}

// storedSignal returns a channel closed when a tier is next done with a
// page offered.
func (t *tierLevel) storedSignal() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.storedCh == nil {
		t.storedCh = make(chan struct{})
	}
	return t.storedCh
}

// wake wakes the backfill, without waiting.
func (t *tierLevel) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// backfill reads owed pages from below into free fill buffers and offers
// them, until ctx ends. See Backfill.
func (t *tierLevel) backfill(ctx context.Context) {
	defer close(t.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
		}
		for ctx.Err() == nil {
			dp, buf, ok := t.nextOwed()
			if !ok {
				t.release()
				break // nothing owed, or no buffer free: wait for a kick
			}
			err := t.next.read(ctx, dp, 0, buf)
			c := &call{buf: buf, refs: 1}
			t.mu.Lock()
			if err == nil {
				t.backfills.Add(1)
				t.offer(dp, c)
			}
			t.fills.unref(c)
			t.mu.Unlock()
		}
	}
}

// release hands the free fill buffers to the cache once no tier will
// take a page any more; those in use follow as they come free (their
// return wakes the backfill).
func (t *tierLevel) release() {
	if t.giveBack == nil || t.kept.Load() == 0 {
		return
	}
	for _, s := range t.stores {
		if !s.Complete() {
			return
		}
	}
	var bufs [][]byte
	for more := true; more; {
		select {
		case b := <-t.free:
			bufs = append(bufs, b)
		default:
			more = false
		}
	}
	if len(bufs) > 0 {
		t.kept.Add(-int32(len(bufs)))
		t.giveBack(bufs)
	}
}

// nextOwed takes the oldest owed page that a tier has room for, and a
// free fill buffer for it. Pages no tier wants any more, or has room for,
// are forgotten; the rest stay owed while no buffer is free.
func (t *tierLevel) nextOwed() (int32, []byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.owedQueue) > 0 {
		dp := t.owedQueue[0]
		if t.fills.get(dp) != nil {
			return 0, nil, false // being filled: offered when done; look again then
		}
		room := false
		for _, s := range t.stores {
			room = room || s.HasRoom(dp)
		}
		if room {
			select {
			case buf := <-t.free:
				t.owedQueue = t.owedQueue[1:]
				t.owed[dp] = false
				return dp, buf, true
			default:
				return 0, nil, false
			}
		}
		t.owedQueue = t.owedQueue[1:]
		t.owed[dp] = false
	}
	t.owedQueue = nil // let the array go
	return 0, nil, false
}

// wanted reports whether a tier would store page dp.
func (t *tierLevel) wanted(dp int32) bool {
	for _, s := range t.stores {
		if s.Wants(dp) {
			return true
		}
	}
	return false
}

// offer hands a filled page to every tier that takes it; each holds its
// buffer until stored. Called with mu held.
func (t *tierLevel) offer(dp int32, c *call) {
	for _, s := range t.stores {
		c.refs++
		if !s.Put(dp, c.buf, func() {
			t.mu.Lock()
			t.fills.unref(c)
			t.mu.Unlock()
		}) {
			c.refs--
			if s.Wants(dp) {
				t.owe(dp) // its queue was full
			}
		}
	}
}

// offerCopy offers a page read whole into a slot: it is copied into a
// fill buffer if one is free, since the slot may be reused before a tier
// has stored it.
func (t *tierLevel) offerCopy(dp int32, page []byte) {
	if !t.wanted(dp) {
		return
	}
	var buf []byte
	select {
	case buf = <-t.free:
	default:
		t.mu.Lock()
		t.owe(dp)
		t.mu.Unlock()
		return
	}
	copy(buf, page)
	c := &call{buf: buf, refs: 1}
	t.mu.Lock()
	t.offer(dp, c)
	t.fills.unref(c)
	t.mu.Unlock()
}

// addStats adds the tiers' figures to st.
func (t *tierLevel) addStats(st *TierStats) {
	st.PageFills, st.Backfills = t.filled.Load(), t.backfills.Load()
	t.mu.Lock()
	st.Owed = len(t.owedQueue)
	st.FillBuffers = int(t.kept.Load())
	t.mu.Unlock()
	for _, s := range t.stores {
		st.Tiers = append(st.Tiers, s.Stats())
	}
}

// tierBudget splits n slots between pages, fill buffers and a compressed
// RAM tier: with CompressRAM, a sixteenth of the slots (at least 2) stay
// slots and the rest hold compressed pages.
//
// The peer tier's RAM (Options.PeerBudget) is beyond the budget, and
// needs no fill buffer: it takes the pages this node reads whole for its
// cluster.
func tierBudget(n int, ps int64, opts Options) (slots, fills, memSlots int, err error) {
	if opts.DiskDir == "" && !opts.CompressRAM {
		return n, 0, 0, nil
	}
	fills = fillBuffers
	if opts.DiskDir == "" {
		fills = 1
	}
	if n < 1+fills {
		return 0, 0, 0, fmt.Errorf("a cache of %d pages of %s is too small for a %s tier: it needs at least %d pages (--cache-size %s or more)",
			n, bytesize.Format(ps), tierName(opts), 1+fills, bytesize.Format(int64(1+fills)*ps))
	}
	slots = n - fills
	if opts.CompressRAM {
		if slots < 4 {
			return 0, 0, 0, fmt.Errorf("a cache of %d pages of %s is too small to compress: it needs at least %d pages (--cache-size %s or more)",
				n, bytesize.Format(ps), 4+fills, bytesize.Format(int64(4+fills)*ps))
		}
		keep := max(2, slots/16)
		memSlots, slots = slots-keep, keep
	}
	return slots, fills, memSlots, nil
}

func tierName(opts Options) string {
	if opts.CompressRAM {
		return "compressed RAM"
	}
	return "disk"
}
