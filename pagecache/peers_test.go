package pagecache

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/peerstats"
)

// cachePeer is the peer tier between caches of one process: the cache it
// is given to asks the other's ServePeer for the pages it does not own, as
// package peer's Object asks a node over the network (the tests of several
// processes and the network are integration's TestPeer*).
type cachePeer struct {
	owns  func(p int64) bool
	other *Cache
	down  atomic.Bool // the other node is gone
	asked atomic.Int64
}

type peerError struct {
	reason string
	fill   bool
}

func (e *peerError) Error() string         { return "peer: " + e.reason }
func (e *peerError) StorageReason() string { return e.reason }
func (e *peerError) FillsForCluster() bool { return e.fill }

func (c *cachePeer) Owns(p int64) bool { return c.owns(p) }

func (c *cachePeer) Stats() peerstats.Stats { return peerstats.Stats{} }

func (c *cachePeer) Read(ctx context.Context, p, off int64, b []byte) error {
	c.asked.Add(1)
	if c.down.Load() {
		return &peerError{reason: peerstats.ReasonOwnerGone}
	}
	if err := c.other.ServePeer(ctx, p, off, b); err != nil {
		return errors.Join(&peerError{reason: peerstats.ReasonOwnerError}, err)
	}
	return nil
}

// peerStorage returns the bytes c read from storage for the peer tier,
// after checking that its reasons sum to its storage reads and count only
// those allowed.
func peerStorage(t *testing.T, c *Cache, allowed ...string) uint64 {
	t.Helper()
	st := c.Stats().Peers
	var sum uint64
	for _, why := range peerstats.Reasons {
		n, ok := st.StorageReasons[why]
		if !ok || n > 0 && !slices.Contains(allowed, why) {
			t.Errorf("storage reasons %v, want reads for %v alone (every reason named)", st.StorageReasons, allowed)
		}
		sum += n
	}
	if sum != st.StorageReads {
		t.Errorf("storage reasons %v sum to %d, storage reads %d", st.StorageReasons, sum, st.StorageReads)
	}
	return st.StorageBytes
}

// TestPeerTierReadsEachPageOnce: two nodes, each owning half the pages,
// read every sample, right bytes: storage sees each page once between
// them (the owner's read; the other asks it), and nothing in a second
// epoch; every storage read is an owned page's. With its owner gone, a
// node reads the owner's pages from storage (owner_gone), without an
// error.
func TestPeerTierReadsEachPageOnce(t *testing.T) {
	path, data := rawPhotos(t, 128)
	ps := int64(beton.MinPageSize)
	pa := &cachePeer{}
	pb := &cachePeer{}
	a, f := openTiered(t, path, Options{Budget: 2 * ps, Peers: pa, PeerBudget: 64 * ps})
	b, _ := openTiered(t, path, Options{Budget: 2 * ps, Peers: pb, PeerBudget: 64 * ps})
	defer a.Close()
	defer b.Close()
	first := f.FirstPage()
	pa.owns = func(p int64) bool { return (p-first)%2 == 0 }
	pb.owns = func(p int64) bool { return (p-first)%2 == 1 }
	pa.other, pb.other = b, a
	dataBytes := uint64(f.NumPages()) * uint64(ps)
	for epoch := 1; epoch <= 2; epoch++ {
		before := peerStorage(t, a, peerstats.ReasonOwned) + peerStorage(t, b, peerstats.ReasonOwned)
		readAllSamples(t, a, f, data, uint64(epoch), 2)
		readAllSamples(t, b, f, data, uint64(epoch)+10, 2)
		got := peerStorage(t, a, peerstats.ReasonOwned) + peerStorage(t, b, peerstats.ReasonOwned) - before
		t.Logf("epoch %d: %d bytes from storage for %d bytes of pages", epoch, got, dataBytes)
		if epoch == 1 && got != dataBytes || epoch == 2 && got != 0 {
			t.Errorf("epoch %d: %d bytes from storage, want %d", epoch, got, map[int]uint64{1: dataBytes, 2: 0}[epoch])
		}
	}
	if pa.asked.Load() == 0 || pb.asked.Load() == 0 || a.Stats().Peers.HeldReads == 0 {
		t.Errorf("asked %d and %d times, %d held reads: want the nodes to ask each other", pa.asked.Load(), pb.asked.Load(), a.Stats().Peers.HeldReads)
	}
	if st := a.Stats().Peers; st.CacheBytes > int64(f.NumPages()+1)/2*ps {
		t.Errorf("node a keeps %d bytes for the cluster, more than its pages", st.CacheBytes)
	}

	// b gone: a reads b's pages from storage, right bytes, no error.
	pa.down.Store(true)
	before := peerStorage(t, a, peerstats.ReasonOwned)
	readAllSamples(t, a, f, data, 5, 2)
	if got := peerStorage(t, a, peerstats.ReasonOwned, peerstats.ReasonOwnerGone) - before; got == 0 || a.Stats().Peers.StorageReasons[peerstats.ReasonOwnerGone] == 0 {
		t.Errorf("with its peer gone, a read %d bytes from storage, reasons %v: want b's pages, owner_gone", got, a.Stats().Peers.StorageReasons)
	}
	if n := a.Stats().ReadErrors; n != 0 {
		t.Errorf("%d read errors with a peer gone", n)
	}
}

// TestServePeer: a page and a range of it served to peers are read from
// storage once; a page in a slot is served from it; bytes outside the
// data pages are an error, not a panic; and the pages a node owns stay in
// its full disk tier while other pages pass through it, for the next
// mount of the folder.
func TestServePeer(t *testing.T) {
	path, data := rawPhotos(t, 128)
	ps := int64(beton.MinPageSize)
	dir := filepath.Join(t.TempDir(), "disk")
	owner := &cachePeer{}
	c, f := openTiered(t, path, Options{Budget: 4 * ps, DiskDir: dir, DiskBudget: 3 * ps / 2, Peers: owner})
	defer c.Close()
	first, n := f.FirstPage(), int64(f.NumPages())
	if n < 5 {
		t.Fatalf("a beton of %d pages; the test needs 5", n)
	}
	owner.owns = func(p int64) bool { return p == first+2 }
	owner.down.Store(true) // the others' pages: from storage
	page := func(p int64) []byte { return data[p*ps : (p+1)*ps] }
	ctx := context.Background()
	whole := make([]byte, ps)
	if err := c.ServePeer(ctx, first+2, 0, whole); err != nil || !bytes.Equal(whole, page(first+2)) {
		t.Fatalf("a page served: %v", err)
	}
	part := make([]byte, 1000)
	if err := c.ServePeer(ctx, first+2, 5000, part); err != nil || !bytes.Equal(part, page(first + 2)[5000:6000]) {
		t.Fatalf("a range of it served: %v", err)
	}
	if st := c.Stats().Peers; st.StorageReads != 1 || st.StorageReasons[peerstats.ReasonOwned] != 1 {
		t.Errorf("a page and a range of it served: %+v, want one storage read, owned", st)
	}
	for _, bad := range []struct{ p, off int64 }{{first - 1, 0}, {first + n, 0}, {first, ps - 10}, {first, -1}} {
		if err := c.ServePeer(ctx, bad.p, bad.off, part); err == nil {
			t.Errorf("page %d at %d served", bad.p, bad.off)
		}
	}
	// A page pinned in a slot: from it, no storage read.
	pg, err := c.AcquirePage(ctx, first+n-1)
	if err != nil {
		t.Fatal(err)
	}
	reads := c.Stats().Peers.StorageReads + c.Stats().Peers.HeldReads
	if err := c.ServePeer(ctx, first+n-1, 0, whole); err != nil || !bytes.Equal(whole, page(first+n-1)) {
		t.Errorf("the page pinned in a slot: %v", err)
	}
	pg.Release()
	if st := c.Stats().Peers; st.StorageReads+st.HeldReads != reads+1 || st.HeldReads == 0 {
		t.Errorf("serving a page in a slot: %+v, want it held, no storage read", st)
	}
	// The others' pages through the full disk tier (a random order
	// through 2 slots, as the cache's own reads).
	if !testing.Short() {
		readAllSamples(t, c, f, data, 1, 2)
	}
	waitLoadsDone(c)
	c.Close()
	disk := c.Stats().Tiers.Tiers[0]
	if disk.Bytes > disk.BudgetBytes {
		t.Errorf("disk tier %+v: over its budget", disk)
	}
	c2, _ := openTiered(t, path, Options{Budget: 4 * ps, DiskDir: dir, DiskBudget: 3 * ps / 2, Peers: owner})
	defer c2.Close()
	got := make([]byte, 4096)
	if err := c2.ServePeer(ctx, first+2, 5000, got); err != nil || !bytes.Equal(got, page(first + 2)[5000:5000+4096]) {
		t.Errorf("the page owned: %v", err)
	}
	if st := c2.Stats().Peers; st.StorageReads != 0 || st.HeldReads != 1 {
		t.Errorf("the page owned, kept first, not held after the cache's reads through a full tier: %+v", st)
	}
}
