package pagecache

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ffcvfs/ffcvfs/pagecache/tier"
)

// The peer tier: the cluster's nodes, below the cache's own tiers and above
// storage (Options.Peers). A read the slots and the tiers miss asks the
// page's owner; a page this node owns is read from storage here, once for
// the node and its peers (concurrent reads of it share one read), and kept
// in the tiers before any other page: in Options.PeerBudget of RAM, and in
// the disk and compressed RAM tiers, where it displaces the pages the
// node does not own. Peers that ask for a page are answered by ServePeer,
// from the slots and tiers or from storage in the same way. The peer
// tier's package (peer) is transport, members and placement: it never
// reads storage and never calls into the cache but through ServePeer.

// PeerTier is a cluster's tier, as the cache reads through it (package
// peer's Object).
type PeerTier interface {
	// Owns reports whether this node owns absolute page p now.
	Owns(p int64) bool
	// Read copies bytes [off, off+len(b)) of absolute page p from the
	// node that owns it. When it cannot, its error says why the cache
	// must read storage (a StorageReason method returning one of
	// the names PeerStats.StorageReasons counts; "owner_error" without
	// one), and whether this node
	// fills the page for the cluster meanwhile (a FillsForCluster method
	// returning true: it reads the whole page once and keeps it), or is
	// ctx's.
	Read(ctx context.Context, p, off int64, b []byte) error
}

// Why a read below the tiers went to storage (PeerStats.StorageReasons),
// as the peer tier's errors name them.
const (
	// ReasonOwned: this node owns the page: the cluster's one read of it.
	ReasonOwned = "owned"
	// ReasonOwnerGone: the owner could not be reached, or failed lately;
	// also a page this node fills for a peer without owning it (its owner
	// is down for that peer).
	ReasonOwnerGone = "owner_gone"
	// ReasonOwnerError: the owner answered an error.
	ReasonOwnerError = "owner_error"
)

// peerReasons are the reasons a storage read is counted by
// (PeerStats.StorageReasons).
var peerReasons = [...]string{ReasonOwned, "owner_timeout", ReasonOwnerGone, ReasonOwnerError, "corrupt_value"}

// PeerStats are what the cache read through the peer tier.
type PeerStats struct {
	Reads     uint64 `json:"reads"`      // reads below the tiers
	BytesRead uint64 `json:"bytes_read"` // their bytes: from peers or storage
	// StorageReads and StorageBytes are the reads below the tiers that
	// went to storage; StorageReasons counts them by why (owned,
	// owner_timeout, owner_gone, owner_error, corrupt_value, each
	// present), and they sum to StorageReads.
	StorageReads   uint64            `json:"storage_reads"`
	StorageBytes   uint64            `json:"storage_bytes"`
	StorageReasons map[string]uint64 `json:"storage_reasons"`
	// HeldReads counts the values served to peers from the slots and
	// tiers, without reading storage.
	HeldReads uint64 `json:"held_reads"`
	// CacheBytes is the pages Options.PeerBudget holds.
	CacheBytes int64 `json:"cache_bytes"`
}

// peerEntryOverhead is the room an entry's header and index take beside
// its page in the peer tier's RAM: PeerBudget counts pages.
const peerEntryOverhead = 8 << 10

// fillsForCluster reports whether err says that this node fills the page
// for the cluster.
func fillsForCluster(err error) bool {
	var f interface{ FillsForCluster() bool }
	return errors.As(err, &f) && f.FillsForCluster()
}

// reasonOf returns the index in peerReasons of why err sent a read to
// storage.
func reasonOf(err error) int {
	var r interface{ StorageReason() string }
	if errors.As(err, &r) {
		if i := slices.Index(peerReasons[:], r.StorageReason()); i >= 0 {
			return i
		}
	}
	return reasonIndex(ReasonOwnerError)
}

// reasonIndex returns the index in peerReasons of a reason's name.
func reasonIndex(name string) int {
	i := slices.Index(peerReasons[:], name)
	if i < 0 {
		panic("pagecache: no peer reason " + name)
	}
	return i
}

// owns reports whether this node owns data page dp.
func (t *tiered) owns(dp int32) bool {
	return t.peers != nil && t.peers.Owns(int64(dp)+t.firstPage)
}

// below reads [off, off+len(p)), which lies in one data page this node
// does not own, from the page's owner, or from storage when the owner
// cannot serve it.
func (t *tiered) below(ctx context.Context, p []byte, off int64) (int, error) {
	if t.peers == nil {
		return t.fromStorage(ctx, p, off)
	}
	t.peerReads.Add(1)
	page := off / t.pageSize
	err := t.peers.Read(ctx, page, off-page*t.pageSize, p)
	if err == nil {
		t.peerBytes.Add(uint64(len(p)))
		return len(p), nil
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if fillsForCluster(err) {
		// Its owner is down, and this node fills it for the others,
		// who ask it: read once, kept.
		if dp, lo, ok := t.locate(off, len(p)); ok {
			if err := t.readOwned(ctx, dp, lo, p, reasonOf(err)); err != nil {
				return 0, err
			}
			t.peerBytes.Add(uint64(len(p)))
			return len(p), nil
		}
	}
	n, err := t.storageFor(ctx, p, off, reasonOf(err))
	t.peerBytes.Add(uint64(n))
	return n, err
}

// storageFor reads from storage for the peer tier, counted by reason.
// (Reads and BytesRead count the cache's own reads below the tiers: their
// callers count them.)
func (t *tiered) storageFor(ctx context.Context, p []byte, off int64, why int) (int, error) {
	n, err := t.fromStorage(ctx, p, off)
	t.why[why].Add(1)
	t.peerStorage.Add(uint64(n))
	return n, err
}

// readOwned reads bytes [lo, lo+len(p)) of data page dp, which this node
// owns (or fills for the cluster while its owner is down), for itself or a
// peer. Where the node keeps its share, the whole page, kept (ownedRead).
// Where it cannot (its share is larger than what keeps it), a page read
// whole for one range would be gone before its next, and each range would
// cost a page from storage (an epoch of random reads, as many pages as
// samples): a range is read alone, unless its page is being read or was
// asked among the last K pages asked, K the pages the node keeps: its next
// ranges are then likely near (orders by pages), and the whole page is
// read and kept. So an epoch reads about the share's bytes from storage,
// whatever the order.
func (t *tiered) readOwned(ctx context.Context, dp int32, lo int64, p []byte, why int) error {
	if int64(len(p)) < t.pageSize {
		if keep, all := t.keeps(); !all && !t.askedLately(dp, keep) {
			n, err := t.storageFor(ctx, p, (int64(dp)+t.firstPage)*t.pageSize+lo, why)
			if err == nil && n != len(p) {
				err = fmt.Errorf("short read of %d bytes", n)
			}
			return err
		}
	}
	return t.ownedRead(ctx, dp, lo, p, why)
}

// maxRecentOwned bounds askedLately's memory of pages.
const maxRecentOwned = 1024

// keeps returns the peer tier's Keeps: the pages this node keeps of those
// it owns, and whether that is all of them (true without it).
func (t *tiered) keeps() (int64, bool) {
	k, ok := t.peers.(interface{ Keeps() (int64, bool) })
	if !ok {
		return -1, true
	}
	return k.Keeps()
}

// askedLately reports whether data page dp is being read for the cluster
// or was asked a range of among the last k pages so asked; and notes it.
func (t *tiered) askedLately(dp int32, k int64) bool {
	k = min(max(k, 1), maxRecentOwned)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.owning[dp] != nil {
		return true
	}
	if int64(len(t.recent)) > k {
		t.recent = t.recent[int64(len(t.recent))-k:]
	}
	if slices.Contains(t.recent, dp) {
		return true
	}
	if int64(len(t.recent)) == k {
		copy(t.recent, t.recent[1:])
		t.recent = t.recent[:k-1]
	}
	t.recent = append(t.recent, dp)
	return false
}

// ownedRead reads bytes [lo, lo+len(p)) of data page dp for this node or
// a peer: the whole page from storage, once for every reader of it
// meanwhile, kept in the tiers (the pages this node owns before any
// other). why is the reason counted.
func (t *tiered) ownedRead(ctx context.Context, dp int32, lo int64, p []byte, why int) error {
	for {
		t.mu.Lock()
		f := t.owning[dp]
		if f == nil {
			f = &fill{done: make(chan struct{}), buf: make([]byte, t.pageSize)}
			t.owning[dp] = f
			t.mu.Unlock()
			var n int
			n, f.err = t.storageFor(ctx, f.buf, (int64(dp)+t.firstPage)*t.pageSize, why)
			if f.err == nil && n != len(f.buf) {
				f.err = fmt.Errorf("short read of %d bytes", n)
			}
			if f.err == nil {
				// Into the tiers before it is no longer being read: a
				// reader that misses it meanwhile would read it again.
				t.keep(ctx, dp, f.buf)
			}
			t.mu.Lock()
			delete(t.owning, dp)
			close(f.done)
			t.mu.Unlock()
			if f.err != nil {
				return f.err
			}
			copy(p, f.buf[lo:])
			return nil
		}
		t.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if f.err == nil {
			copy(p, f.buf[lo:])
			return nil
		}
		if !errors.Is(f.err, context.Canceled) && !errors.Is(f.err, context.DeadlineExceeded) {
			return f.err
		}
		// The reader that read it went away: read it again.
	}
}

// keep offers page dp, read whole from storage for the cluster, to every
// tier that takes it, waiting while their queues are full (until ctx
// ends): a page the node keeps for its cluster is not read from storage
// again for want of a place in a queue. buf is the tiers' until stored.
func (t *tiered) keep(ctx context.Context, dp int32, buf []byte) {
	for _, s := range t.all {
		s.PutWait(ctx, dp, buf, func() {})
	}
}

// readHeld copies bytes [lo, lo+len(p)) of data page dp for a peer from a
// tier, and reports whether one held them.
func (t *tiered) readHeld(dp int32, lo int64, p []byte) bool {
	for _, s := range t.all {
		if s.Read(dp, lo, p) {
			t.held.Add(1)
			return true
		}
	}
	return false
}

// serve reads bytes [lo, lo+len(p)) of data page dp for a peer: from a
// tier, or from storage for the cluster.
func (t *tiered) serve(ctx context.Context, dp int32, lo int64, p []byte) error {
	if t.readHeld(dp, lo, p) {
		return nil
	}
	why := reasonIndex(ReasonOwned)
	if !t.owns(dp) {
		why = reasonIndex(ReasonOwnerGone)
	}
	return t.readOwned(ctx, dp, lo, p, why)
}

// peerStats returns the peer tier's counters; nil without one.
func (t *tiered) peerStats() *PeerStats {
	if t.peers == nil {
		return nil
	}
	st := &PeerStats{
		Reads: t.peerReads.Load(), BytesRead: t.peerBytes.Load(), StorageBytes: t.peerStorage.Load(),
		HeldReads: t.held.Load(), StorageReasons: make(map[string]uint64, len(peerReasons)),
	}
	for i, name := range peerReasons {
		n := t.why[i].Load()
		st.StorageReasons[name] = n
		st.StorageReads += n
	}
	if t.peerStore != nil {
		st.CacheBytes = t.peerStore.Stats().RawBytes
	}
	return st
}

// newPeerStore returns the RAM the pages this node owns are kept in, of
// budget bytes of pages; nil for 0.
func newPeerStore(geom tier.Geometry, budget int64, opts Options) *tier.Store {
	if budget <= 0 {
		return nil
	}
	return tier.NewMem(geom, tier.Options{Budget: budget + (budget/geom.PageSize+1)*peerEntryOverhead, Logger: opts.Logger})
}

// ServePeer reads bytes [off, off+len(b)) of absolute page p for a peer
// that asked (package peer's ServeFunc): from a tier, a slot, or storage,
// read once for the cluster and kept (the pages this node owns before any
// other). It counts no read of the cache's consumers. The tiers come
// first: a page served from a slot counts as a use of it, which would keep
// pages the node's own readers are done with.
func (c *Cache) ServePeer(ctx context.Context, p, off int64, b []byte) error {
	dp := p - c.firstPage
	if dp < 0 || dp >= int64(len(c.pageSlot)) || off < 0 || off+int64(len(b)) > c.pageSize {
		return fmt.Errorf("%s: bytes %d to %d of page %d are not in a data page", c.src.Name(), off, off+int64(len(b)), p)
	}
	t := c.tiers
	if t == nil || t.peers == nil {
		return fmt.Errorf("%s: the cache has no peer tier", c.src.Name())
	}
	if t.readHeld(int32(dp), off, b) {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if si := c.pageSlot[dp]; si >= 0 && c.slots[si].ready {
		pg := c.pin(si, -1)
		copy(b, pg.Data[off:])
		pg.Release()
		t.held.Add(1)
		return nil
	}
	c.mu.Unlock()
	if err := t.serve(ctx, int32(dp), off, b); err != nil {
		return fmt.Errorf("%s: reading page %d for a peer: %w", c.src.Name(), p, err)
	}
	return nil
}
