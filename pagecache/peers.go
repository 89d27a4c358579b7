package pagecache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
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
	// the names of peerstats.Reasons; "owner_error" without
	// one), and whether this node
	// fills the page for the cluster meanwhile (a FillsForCluster method
	// returning true: it reads the whole page once and keeps it), or is
	// ctx's.
	Read(ctx context.Context, p, off int64, b []byte) error
	// Stats returns the tier's own figures (members, pages owned,
	// requests); the cache adds its reads through it.
	Stats() peerstats.Stats
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

// reasonOf returns the index in peerstats.Reasons of why err sent a read
// to storage.
func reasonOf(err error) int {
	var r interface{ StorageReason() string }
	if errors.As(err, &r) {
		if i := slices.Index(peerstats.Reasons[:], r.StorageReason()); i >= 0 {
			return i
		}
	}
	return reasonOwnerError
}

// Indexes in peerstats.Reasons.
var (
	reasonOwned      = slices.Index(peerstats.Reasons[:], peerstats.ReasonOwned)
	reasonOwnerGone  = slices.Index(peerstats.Reasons[:], peerstats.ReasonOwnerGone)
	reasonOwnerError = slices.Index(peerstats.Reasons[:], peerstats.ReasonOwnerError)
)

// peerLevel is the chain's level of the peer tier, above storage: a read
// of a page this node does not own asks the page's owner; a page this node
// owns is read from storage here, once for the node and its peers
// (owned), and kept in the tiers before any other page (keepIn).
type peerLevel struct {
	// Immutable after newChain.
	peers     PeerTier
	next      *sourceLevel
	store     *tier.Store   // the RAM for the pages this node owns (Options.PeerBudget); nil without
	keepIn    []*tier.Store // every store of the chain, store last
	pageSize  int64
	firstPage int64

	mu    sync.Mutex
	owned flight // pages being read whole for the cluster; guarded by mu
	// recent holds the last pages asked a range of where the node cannot
	// keep its share (readOwned), oldest first; guarded by mu.
	recent []int32

	// Reads through the level and their bytes, the bytes of those that
	// went to storage, the values served to peers from the tiers and
	// slots, and the storage reads by reason (peerstats.Reasons).
	reads, bytes, storageBytes, held atomic.Uint64
	why                              [len(peerstats.Reasons)]atomic.Uint64
}

func newPeerLevel(opts Options, geom tier.Geometry, next *sourceLevel) *peerLevel {
	l := &peerLevel{peers: opts.Peers, next: next, store: newPeerStore(geom, opts.PeerBudget, opts), pageSize: geom.PageSize, firstPage: next.firstPage}
	l.owned = newFlight(&l.mu, nil)
	return l
}

// owns reports whether this node owns data page dp.
func (l *peerLevel) owns(dp int32) bool {
	return l.peers.Owns(int64(dp) + l.firstPage)
}

func (l *peerLevel) keepsWhole(dp int32) bool { return l.owns(dp) }

// read reads bytes [lo, lo+len(p)) of data page dp: a page this node owns
// for the cluster (readOwned), another from its owner, or from storage
// when the owner cannot serve it.
func (l *peerLevel) read(ctx context.Context, dp int32, lo int64, p []byte) error {
	l.reads.Add(1)
	err := l.fetch(ctx, dp, lo, p)
	if err == nil {
		l.bytes.Add(uint64(len(p)))
	}
	return err
}

func (l *peerLevel) fetch(ctx context.Context, dp int32, lo int64, p []byte) error {
	why := reasonOwned
	if !l.owns(dp) {
		err := l.peers.Read(ctx, int64(dp)+l.firstPage, lo, p)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !fillsForCluster(err):
			return l.fromStorage(ctx, dp, lo, p, reasonOf(err))
		}
		// Its owner is down, and this node fills it for the others,
		// who ask it: read once, kept.
		why = reasonOf(err)
	}
	return l.readOwned(ctx, dp, lo, p, why)
}

// fromStorage reads from storage for the peer tier, counted by reason.
func (l *peerLevel) fromStorage(ctx context.Context, dp int32, lo int64, p []byte, why int) error {
	err := l.next.read(ctx, dp, lo, p)
	l.why[why].Add(1)
	if err == nil {
		l.storageBytes.Add(uint64(len(p)))
	}
	return err
}

// readOwned reads bytes [lo, lo+len(p)) of data page dp, which this node
// owns (or fills for the cluster while its owner is down), for itself or a
// peer. Where the node keeps its share, the whole page, read once for
// every reader of it meanwhile and kept in the tiers (the pages this node
// owns before any other). Where it cannot (its share is larger than what
// keeps it), a page read whole for one range would be gone before its
// next, and each range would cost a page from storage (an epoch of random
// reads, as many pages as samples): a range is read alone, unless its page
// is being read or was asked among the last K pages asked, K the pages the
// node keeps: its next ranges are then likely near (orders by pages), and
// the whole page is read and kept. So an epoch reads about the share's
// bytes from storage, whatever the order. why is the reason counted.
func (l *peerLevel) readOwned(ctx context.Context, dp int32, lo int64, p []byte, why int) error {
	if int64(len(p)) < l.pageSize {
		if keep, all := l.keeps(); !all && !l.askedLately(dp, keep) {
			return l.fromStorage(ctx, dp, lo, p, why)
		}
	}
	// Kept in the tiers before it is no longer being read: a reader that
	// misses it meanwhile would read it again.
	return l.owned.share(ctx, dp, lo, p, func() []byte { return make([]byte, l.pageSize) }, storageFor{l, why}, l.keep(dp))
}

// storageFor is storage read for the peer tier, counted by a reason.
type storageFor struct {
	l   *peerLevel
	why int
}

func (s storageFor) read(ctx context.Context, dp int32, lo int64, p []byte) error {
	return s.l.fromStorage(ctx, dp, lo, p, s.why)
}

func (s storageFor) keepsWhole(int32) bool { return false }

// maxRecentOwned bounds askedLately's memory of pages.
const maxRecentOwned = 1024

// keeps returns the peer tier's Keeps: the pages this node keeps of those
// it owns, and whether that is all of them (true without it).
func (l *peerLevel) keeps() (int64, bool) {
	k, ok := l.peers.(interface{ Keeps() (int64, bool) })
	if !ok {
		return -1, true
	}
	return k.Keeps()
}

// askedLately reports whether data page dp is being read for the cluster
// or was asked a range of among the last k pages so asked; and notes it.
func (l *peerLevel) askedLately(dp int32, k int64) bool {
	k = min(max(k, 1), maxRecentOwned)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owned.get(dp) != nil {
		return true
	}
	if int64(len(l.recent)) > k {
		l.recent = l.recent[int64(len(l.recent))-k:]
	}
	if slices.Contains(l.recent, dp) {
		return true
	}
	if int64(len(l.recent)) == k {
		copy(l.recent, l.recent[1:])
		l.recent = l.recent[:k-1]
	}
	l.recent = append(l.recent, dp)
	return false
}

// keep returns what share does with page dp, read whole from storage for
// the cluster: offer it to every store that takes it, waiting while their
// queues are full (until ctx ends), so that a page the node keeps for its
// cluster is not read from storage again for want of a place in a queue.
// The buffer is the stores' until stored.
func (l *peerLevel) keep(dp int32) func(context.Context, *call) {
	return func(ctx context.Context, c *call) {
		for _, s := range l.keepIn {
			s.PutWait(ctx, dp, c.buf, func() {})
		}
	}
}

// readHeld copies bytes [lo, lo+len(p)) of data page dp for a peer from a
// store, and reports whether one held them.
func (l *peerLevel) readHeld(dp int32, lo int64, p []byte) bool {
	for _, s := range l.keepIn {
		if s.Read(dp, lo, p) {
			l.held.Add(1)
			return true
		}
	}
	return false
}

// serve reads bytes [lo, lo+len(p)) of data page dp for a peer: from a
// store, or from storage for the cluster.
func (l *peerLevel) serve(ctx context.Context, dp int32, lo int64, p []byte) error {
	if l.readHeld(dp, lo, p) {
		return nil
	}
	why := reasonOwned
	if !l.owns(dp) {
		why = reasonOwnerGone
	}
	return l.readOwned(ctx, dp, lo, p, why)
}

// stats returns the tier's figures with the cache's reads through it.
func (l *peerLevel) stats() *peerstats.Stats {
	st := l.peers.Stats()
	st.Reads, st.BytesRead, st.StorageBytes, st.HeldReads = l.reads.Load(), l.bytes.Load(), l.storageBytes.Load(), l.held.Load()
	st.StorageReads = 0
	st.StorageReasons = make(map[string]uint64, len(peerstats.Reasons))
	for i, name := range peerstats.Reasons {
		n := l.why[i].Load()
		st.StorageReasons[name] = n
		st.StorageReads += n
	}
	if l.store != nil {
		st.CacheBytes = l.store.Stats().RawBytes
	}
	return &st
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
	l := c.below.peer
	if l == nil {
		return fmt.Errorf("%s: the cache has no peer tier", c.src.Name())
	}
	if l.readHeld(int32(dp), off, b) {
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
		l.held.Add(1)
		return nil
	}
	c.mu.Unlock()
	if err := l.serve(ctx, int32(dp), off, b); err != nil {
		return fmt.Errorf("%s: reading page %d for a peer: %w", c.src.Name(), p, err)
	}
	return nil
}
