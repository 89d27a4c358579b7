package pagecache

import (
	"context"
	"errors"
	"slices"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/peerstats"
	"github.com/ffcvfs/ffcvfs/pagecache/tier"
	"github.com/ffcvfs/ffcvfs/storage"
)

// The chain below the slots. A read the slots miss goes down its levels,
// in pages, until one serves it:
//
//	tiers' stores (compressed RAM, disk, the peer tier's RAM)   chain.read
//	tierLevel: what they miss, read below and offered to them    tiers.go
//	peerLevel: the page's owner among the nodes                   peers.go
//	sourceLevel: storage                                          source.go
//
// Each level reads bytes [lo, lo+len(p)) of a data page, and counts what
// it served; the figures of them all are gathered here (stats). A cache
// without tiers or peers has a chain of storage alone.

// level is a step of the chain below the tiers' stores.
type level interface {
	// read copies bytes [lo, lo+len(p)) of data page dp, which lie in the
	// page, into p: from this level or those below it.
	read(ctx context.Context, dp int32, lo int64, p []byte) error
	// keepsWhole reports whether the level reads page dp whole and keeps
	// it in the tiers itself (the pages this node owns for its cluster):
	// the levels above leave the page to it.
	keepsWhole(dp int32) bool
}

type chain struct {
	// Immutable after newChain.
	stores []*tier.Store // every tier's store, the peer tier's RAM last
	top    level         // the first level below the stores
	tiers  *tierLevel    // nil without tiers
	peer   *peerLevel    // nil without a peer tier
	src    *sourceLevel
}

// newChain opens the levels the options ask for: the tiers, with memBudget
// bytes of compressed RAM and the fill buffers fills, the peer tier, and
// storage.
func newChain(src storage.Source, f *beton.File, opts Options, memBudget int64, fills [][]byte) (*chain, error) {
	ch := &chain{src: &sourceLevel{src: src, pageSize: f.PageSize(), firstPage: f.FirstPage()}}
	ch.top = ch.src
	geom := tier.Geometry{PageSize: f.PageSize(), NumPages: f.NumPages(), Layout: layouts(f)}
	if opts.Peers != nil {
		ch.peer = newPeerLevel(opts, geom, ch.src)
		ch.top = ch.peer
	}
	if len(fills) > 0 {
		t, err := newTierLevel(src, geom, opts, memBudget, fills, ch.top)
		if err != nil {
			if ch.peer != nil && ch.peer.store != nil {
				ch.peer.store.Close()
			}
			return nil, err
		}
		ch.tiers, ch.top = t, t
		ch.stores = slices.Clip(t.stores)
	}
	if ch.peer != nil {
		if ch.peer.store != nil {
			ch.stores = append(ch.stores, ch.peer.store)
		}
		ch.peer.keepIn = ch.stores
		// The pages this node owns displace any other in every tier.
		for _, s := range ch.stores {
			s.SetKeep(ch.peer.owns)
		}
	}
	return ch, nil
}

// bare reports whether the chain is storage alone.
func (ch *chain) bare() bool { return ch.tiers == nil && ch.peer == nil }

// read copies bytes [lo, lo+len(p)) of data page dp into p, and reports
// whether a tier's store held them.
func (ch *chain) read(ctx context.Context, dp int32, lo int64, p []byte) (fromTier bool, err error) {
	for _, s := range ch.stores {
		if s.Read(dp, lo, p) {
			return true, nil
		}
	}
	return false, ch.top.read(ctx, dp, lo, p)
}

// readAt reads bytes outside the data pages (header, tables) from
// storage.
func (ch *chain) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	return ch.src.readAt(ctx, p, off)
}

// start begins the tiers' backfill; giveBack makes their fill buffers
// page slots once no tier takes pages any more.
func (ch *chain) start(giveBack func([][]byte)) {
	if ch.tiers != nil {
		ch.tiers.start(giveBack)
	}
}

// setRank lets the stores evict by the cache's announced orders.
func (ch *chain) setRank(rank func(dp int32) int) {
	for _, s := range ch.stores {
		s.SetRank(rank)
	}
}

// stats returns the figures of the levels: the tiers' and storage's (nil
// for a bare chain) and the peer tier's (nil without one).
func (ch *chain) stats() (*TierStats, *peerstats.Stats) {
	if ch.bare() {
		return nil, nil
	}
	ts := &TierStats{StorageBytes: ch.src.bytes.Load(), StorageRequests: ch.src.reqs.Load()}
	if ch.tiers != nil {
		ch.tiers.addStats(ts)
	}
	var ps *peerstats.Stats
	if ch.peer != nil {
		ps = ch.peer.stats()
	}
	return ts, ps
}

// close stores what the tiers took and closes them. The fill buffers are
// free afterwards.
func (ch *chain) close() error {
	if ch.tiers != nil {
		ch.tiers.stop()
	}
	var errs []error
	for _, s := range ch.stores {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
