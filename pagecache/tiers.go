package pagecache

import (
	"cmp"
	"context"
	"errors"
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

// tiered is the cache's read path when it has tiers (or a peer tier,
// peers.go, below them).
//
// Below the slots, a read may be served by a compressed RAM tier
// (Options.CompressRAM) and then a disk tier (Options.DiskDir), before
// storage (package tier). The cache reads through tiered, a Source that
// asks the tiers first and offers what storage returns to them.
//
// A tier stores whole pages. A page read whole from storage is copied
// into a fill buffer and offered; a range of a page the tiers want is
// read as the whole page into a fill buffer (one request, shared by
// the readers of that page meanwhile), so that a random order, which the
// slots serve by ranges, fills the tiers all the same: each page comes
// from storage once. Fill buffers are slots of the budget; when none is
// free, a read goes to storage as it would without tiers, and nothing
// waits for a tier.
//
// Backfill: a page read whole that the tiers want but cannot take at once (no fill
// buffer free, or a tier's queue full, as when its writer is slow on a
// busy machine) is owed: a goroutine reads it from storage again once a
// fill buffer is free and offers it, one page at a time, so that the tiers end up with every
// page they were offered while under budget, and a later epoch finds them
// there. It backfills only into a tier with room for the page without
// evicting (tier.Store.HasRoom): a full tier would take it only in place
// of another, and reading pages again to churn a full tier is no saving.
// Nothing in a reader's path waits for it.
//
// Fill buffers: the fill buffers are slots of the budget kept for the tiers. Once no
// tier will take a page any more (each holds every page, or stores
// nothing), they are handed back to the cache as page slots for good
// (release): a later epoch from a full disk tier, or a fresh mount over
// one, has the whole budget for pages read ahead of the readers.
type tiered struct {
	storage.Source
	// Immutable after newTiered.
	stores    []*tier.Store
	pageSize  int64
	firstPage int64
	numPages  int64
	free      chan []byte // fill buffers not in use

	mu        sync.Mutex
	fills     map[int32]*fill // guarded by mu
	owed      []bool          // pages to backfill; guarded by mu
	owedQueue []int32         // the owed pages, oldest first; guarded by mu
	stored    atomic.Uint64   // bytes read from storage
	reqs      atomic.Uint64   // requests to storage
	filled    atomic.Uint64   // pages read whole for the tiers
	backfills atomic.Uint64   // pages read again for the tiers (backfill)

	kick   chan struct{} // wakes the backfill; capacity 1
	cancel context.CancelFunc
	done   chan struct{} // closed when the backfill has ended

	// giveBack makes fill buffers page slots of the cache (release);
	// called with none of the tiers' locks held.
	giveBack func([][]byte)
	kept     atomic.Int32 // fill buffers not handed back

	storedCh chan struct{} // closed when a tier is next done with a page offered; guarded by mu

	// The peer tier (peers.go); nil without one. all is stores and
	// peerStore, the RAM for the pages this node owns (nil without
	// Options.PeerBudget), which takes pages only through keep.
	peers     PeerTier
	peerStore *tier.Store
	all       []*tier.Store
	owning    map[int32]*fill // pages being read for the cluster; guarded by mu
	// recent holds the last pages asked a range of where the node cannot
	// keep its share (readOwned), oldest first; guarded by mu.
	recent []int32
	// Reads below the tiers and their bytes, those of storage, the
	// values served to peers from the tiers and slots, and the storage
	// reads by reason (peerReasons).
	peerReads, peerBytes, peerStorage, held atomic.Uint64
	why                                     [len(peerReasons)]atomic.Uint64
}

// fill is a page on its way from storage to the tiers.
type fill struct {
	done chan struct{}
	buf  []byte
	err  error
	refs int // guarded by tiered.mu: its reader, waiters, tiers storing it
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

// newTiered opens the tiers the options ask for, and the peer tier's.
// Fill buffers come from fills. start begins the backfill.
func newTiered(src storage.Source, f *beton.File, opts Options, memBudget int64, fills [][]byte) (*tiered, error) {
	t := &tiered{
		Source: src, pageSize: f.PageSize(), firstPage: f.FirstPage(), numPages: int64(f.NumPages()),
		free: make(chan []byte, len(fills)), fills: map[int32]*fill{},
		owed: make([]bool, f.NumPages()), kick: make(chan struct{}, 1), done: make(chan struct{}),
		peers: opts.Peers, owning: map[int32]*fill{},
	}
	for _, b := range fills {
		t.free <- b
	}
	t.kept.Store(int32(len(fills)))
	geom := tier.Geometry{PageSize: f.PageSize(), NumPages: f.NumPages(), Layout: layouts(f)}
	if memBudget > 0 {
		t.stores = append(t.stores, tier.NewMem(geom, tier.Options{Budget: memBudget, Compress: true, Logger: opts.Logger, Stored: t.tierStored}))
	}
	if opts.DiskDir != "" {
		id := ""
		if i, ok := src.(storage.Identifier); ok {
			id = i.Identity()
		}
		d, err := tier.OpenDisk(opts.DiskDir, tier.Object{Name: src.Name(), Identity: id}, geom, tier.Options{Budget: opts.DiskBudget, Compress: true, Logger: opts.Logger, Stored: t.tierStored})
		if err != nil {
			t.close()
			return nil, err
		}
		t.stores = append(t.stores, d)
	}
	t.all = t.stores
	if t.peers != nil {
		if t.peerStore = newPeerStore(geom, opts.PeerBudget, opts); t.peerStore != nil {
			t.all = append(slices.Clip(t.stores), t.peerStore)
		}
		// The pages this node owns displace any other in every tier.
		for _, s := range t.all {
			s.SetKeep(func(dp int32) bool { return t.owns(dp) })
		}
	}
	return t, nil
}

// start begins the backfill, which hands fill buffers to giveBack once
// the tiers take no more pages.
func (t *tiered) start(giveBack func([][]byte)) {
	t.giveBack = giveBack
	t.release() // a tier opened full: at once, before the first read
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go t.backfill(ctx)
}

// owe records that the tiers want page dp but could not take it, and
// wakes the backfill. Called with mu held.
func (t *tiered) owe(dp int32) {
	if !t.owed[dp] {
		t.owed[dp] = true
		t.owedQueue = append(t.owedQueue, dp)
	}
	t.wake()
}

// tierStored is called by a tier done with a page offered: the backfill may
// release the fill buffers, and waiters on storedSignal look again.
func (t *tiered) tierStored() {
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
func (t *tiered) storedSignal() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.storedCh == nil {
		t.storedCh = make(chan struct{})
	}
	return t.storedCh
}

// wake wakes the backfill, without waiting.
func (t *tiered) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// backfill reads owed pages from storage into free fill buffers and
// offers them, until ctx ends. See Backfill.
func (t *tiered) backfill(ctx context.Context) {
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
			_, err := t.below(ctx, buf, (int64(dp)+t.firstPage)*t.pageSize)
			f := &fill{done: make(chan struct{}), buf: buf, refs: 1}
			close(f.done)
			t.mu.Lock()
			if err == nil {
				t.backfills.Add(1)
				t.offer(dp, f)
			}
			t.unref(f)
			t.mu.Unlock()
		}
	}
}

// release hands the free fill buffers to the cache once no tier will
// take a page any more; those in use follow as they come free (unref
// wakes the backfill).
func (t *tiered) release() {
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
func (t *tiered) nextOwed() (int32, []byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.owedQueue) > 0 {
		dp := t.owedQueue[0]
		if t.fills[dp] != nil {
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

// locate returns the data page and the offset in it of bytes [off,
// off+n), if they lie in one data page.
func (t *tiered) locate(off int64, n int) (int32, int64, bool) {
	p := off / t.pageSize
	dp := p - t.firstPage
	if dp < 0 || dp >= t.numPages || off+int64(n) > (p+1)*t.pageSize {
		return 0, 0, false
	}
	return int32(dp), off - p*t.pageSize, true
}

func (t *tiered) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, _, err := t.read(ctx, p, off)
	return n, err
}

// read is ReadAt, also reporting whether a tier served the bytes.
func (t *tiered) read(ctx context.Context, p []byte, off int64) (n int, fromTier bool, err error) {
	dp, lo, ok := t.locate(off, len(p))
	if !ok {
		n, err = t.fromStorage(ctx, p, off)
		return n, false, err
	}
	for _, s := range t.all {
		if s.Read(dp, lo, p) {
			return len(p), true, nil
		}
	}
	n, err = t.fromBelow(ctx, dp, lo, p, off)
	return n, false, err
}

// fromBelow reads what the tiers did not hold from the peer tier or
// storage, for them too. A page this node owns is read whole and kept.
func (t *tiered) fromBelow(ctx context.Context, dp int32, lo int64, p []byte, off int64) (int, error) {
	if t.owns(dp) {
		t.peerReads.Add(1)
		if err := t.readOwned(ctx, dp, lo, p, reasonIndex(ReasonOwned)); err != nil {
			return 0, err
		}
		t.peerBytes.Add(uint64(len(p)))
		return len(p), nil
	}
	if int64(len(p)) == t.pageSize {
		n, err := t.below(ctx, p, off)
		if err == nil {
			t.offerCopy(dp, p)
		}
		return n, err
	}
	if t.fillRead(ctx, dp, lo, p) {
		return len(p), nil
	}
	return t.below(ctx, p, off)
}

func (t *tiered) fromStorage(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := t.Source.ReadAt(ctx, p, off)
	t.reqs.Add(1)
	t.stored.Add(uint64(n))
	return n, err
}

// wanted reports whether a tier would store page dp.
func (t *tiered) wanted(dp int32) bool {
	for _, s := range t.stores {
		if s.Wants(dp) {
			return true
		}
	}
	return false
}

// fillRead serves bytes [lo, lo+len(p)) of page dp from a fill of the
// whole page (its own, or one under way), and reports whether it did: no
// fill buffer free, a page no tier wants, or a failed fill leave the read
// to the caller.
func (t *tiered) fillRead(ctx context.Context, dp int32, lo int64, p []byte) bool {
	t.mu.Lock()
	f := t.fills[dp]
	if f == nil {
		if !t.wanted(dp) {
			t.mu.Unlock()
			return false
		}
		select {
		case buf := <-t.free:
			f = &fill{done: make(chan struct{}), buf: buf, refs: 1}
			t.fills[dp] = f
		default:
			// Not owed: a page read by ranges is missed again by the
			// next sample of it read, which fills it when a buffer is
			// free; owing it would read it twice.
			t.mu.Unlock()
			return false
		}
		t.mu.Unlock()
		_, f.err = t.below(ctx, f.buf, (int64(dp)+t.firstPage)*t.pageSize)
		if f.err == nil {
			t.filled.Add(1)
			copy(p, f.buf[lo:])
		}
		t.mu.Lock()
		delete(t.fills, dp)
		close(f.done)
		if f.err == nil {
			t.offer(dp, f)
		}
		t.unref(f)
		t.mu.Unlock()
		return f.err == nil
	}
	f.refs++
	t.mu.Unlock()
	ok := false
	select {
	case <-f.done:
		if f.err == nil {
			copy(p, f.buf[lo:])
			ok = true
		}
	case <-ctx.Done():
	}
	t.mu.Lock()
	t.unref(f)
	t.mu.Unlock()
	return ok
}

// offer hands a filled page to every tier that takes it. Called with mu
// held.
func (t *tiered) offer(dp int32, f *fill) {
	for _, s := range t.stores {
		f.refs++
		if !s.Put(dp, f.buf, func() {
			t.mu.Lock()
			t.unref(f)
			t.mu.Unlock()
		}) {
			f.refs--
			if s.Wants(dp) {
				t.owe(dp) // its queue was full
			}
		}
	}
}

// unref drops a reference to a fill; the last returns its buffer. Called
// with mu held.
func (t *tiered) unref(f *fill) {
	f.refs--
	if f.refs == 0 {
		t.free <- f.buf
		t.wake() // to backfill or release it
	}
}

// offerCopy offers a page read whole into a slot: it is copied into a
// fill buffer if one is free, since the slot may be reused before a tier
// has stored it.
func (t *tiered) offerCopy(dp int32, page []byte) {
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
	f := &fill{done: make(chan struct{}), buf: buf, refs: 1}
	close(f.done)
	t.mu.Lock()
	t.offer(dp, f)
	t.unref(f)
	t.mu.Unlock()
}

// setRank lets the tiers evict by the cache's announced orders.
func (t *tiered) setRank(rank func(dp int32) int) {
	for _, s := range t.all {
		s.SetRank(rank)
	}
}

func (t *tiered) stats() *TierStats {
	st := &TierStats{StorageBytes: t.stored.Load(), StorageRequests: t.reqs.Load(), PageFills: t.filled.Load(), Backfills: t.backfills.Load()}
	t.mu.Lock()
	st.Owed = len(t.owedQueue)
	st.FillBuffers = int(t.kept.Load())
	t.mu.Unlock()
	for _, s := range t.stores {
		st.Tiers = append(st.Tiers, s.Stats())
	}
	return st
}

// close stores what the tiers took and closes them. The fill buffers are
// free afterwards.
func (t *tiered) close() error {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
	var errs []error
	for _, s := range t.all {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
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
