package pagecache

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// TestHeldPages: what a node serves its peers from. ReadHeld serves a
// page from its slot or a tier, and reads nothing from storage; Keep
// stores pages in the tiers beyond the RAM budget; the pages KeepFirst
// names stay in a full tier while the cache's own reads pass through it.
func TestHeldPages(t *testing.T) {
	path, data := rawPhotos(t, 128)
	ps := int64(beton.MinPageSize)
	dir := filepath.Join(t.TempDir(), "disk")
	c, f := openTiered(t, path, Options{Budget: 4 * ps, DiskDir: dir, DiskBudget: 3 * ps / 2})
	defer c.Close()
	first, n := f.FirstPage(), int64(f.NumPages())
	if n < 5 {
		t.Fatalf("a beton of %d pages; the test needs 5", n)
	}
	page := func(p int64) []byte { return data[p*ps : (p+1)*ps] }
	owned := func(p int64) bool { return (p-first)%2 == 0 && p-first < 6 } // 3 pages, more than the 2 slots and the tier's raw bytes
	c.KeepFirst(owned)
	b := make([]byte, 1000)
	if c.ReadHeld(first, 0, b) {
		t.Fatal("ReadHeld served a page the cache never read")
	}
	if c.ReadHeld(first-1, 0, b) || c.ReadHeld(first+n, 0, b) || c.ReadHeld(first, ps-10, b) || c.ReadHeld(first, -1, b) {
		t.Fatal("ReadHeld served bytes outside the data pages")
	}
	before := c.Stats().Tiers.StorageBytes
	// The pages kept first, then all the others, more than the tier
	// holds; then the cache's own reads offer pages too (a random order
	// through 2 slots: 9 times the beton's bytes, too long for -short).
	for _, kept := range []bool{true, false} {
		for p := first; p < first+n; p++ {
			if owned(p) == kept {
				c.Keep(context.Background(), p, bytes.Clone(page(p)))
			}
		}
	}
	if !testing.Short() {
		readAllSamples(t, c, f, data, 1, 2)
	}
	waitLoadsDone(c)
	// A page in a slot is served from it, with no read of storage.
	pg, err := c.AcquirePage(context.Background(), first+n-1)
	if err != nil {
		t.Fatal(err)
	}
	after := c.Stats().Tiers.StorageBytes
	whole := make([]byte, ps)
	if !c.ReadHeld(first+n-1, 0, whole) || !bytes.Equal(whole, page(first+n-1)) {
		t.Error("the page pinned in a slot was not served from it")
	}
	pg.Release()
	if got := c.Stats().Tiers.StorageBytes; got != after {
		t.Errorf("ReadHeld read %d bytes from storage", got-after)
	}
	// Closed, the tier has stored what it took; a new cache over the
	// folder holds the pages kept first.
	c.Close()
	disk := c.Stats().Tiers.Tiers[0]
	if disk.Bytes > disk.BudgetBytes || disk.Evictions+disk.Refused == 0 {
		t.Errorf("disk tier %+v: want within its budget, full (evictions or pages refused)", disk)
	}
	c2, _ := openTiered(t, path, Options{Budget: 4 * ps, DiskDir: dir, DiskBudget: 3 * ps / 2})
	defer c2.Close()
	for p := first; p < first+n; p++ {
		if !owned(p) {
			continue
		}
		got := make([]byte, 4096)
		if !c2.ReadHeld(p, 5000, got) || !bytes.Equal(got, page(p)[5000:5000+4096]) {
			t.Errorf("page %d, kept first, not held after the cache's reads through a full tier", p)
		}
	}
	t.Logf("storage: %d bytes before the cache's reads, %d after; disk tier %+v", before, after, disk)
}
