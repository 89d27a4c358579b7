package pagecache

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/imagefolder"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache/tier"
	"github.com/ffcvfs/ffcvfs/storage"
)

// rawPhotos writes the fixture photos as a raw-pixel beton of 2 MiB pages,
// no side longer than res, and returns its path and bytes: converted once
// per test binary and resolution, since the tests only read it.
func rawPhotos(t *testing.T, res int) (string, []byte) {
	t.Helper()
	rawMu.Lock()
	defer rawMu.Unlock()
	if b, ok := rawBetons[res]; ok {
		return b.path, b.data
	}
	out := filepath.Join(rawDir(t), fmt.Sprintf("raw-%d.beton", res))
	_, err := imagefolder.Convert(context.Background(), testenv.Fixture(t, "imagefolder-small"), out,
		imagefolder.ConvertOptions{Image: imagefolder.Options{Mode: "raw", MaxResolution: res}, PageSize: beton.MinPageSize, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	rawBetons[res] = rawBeton{out, data}
	return out, data
}

// rawBetons holds rawPhotos' betons by resolution, converted once per test
// binary, in rawDir (removed by TestMain).
var (
	rawMu      sync.Mutex
	rawBetons  = map[int]rawBeton{}
	rawDirPath string
)

type rawBeton struct {
	path string
	data []byte
}

func rawDir(t *testing.T) string {
	if rawDirPath == "" {
		d, err := os.MkdirTemp("", "pagecache-test-")
		if err != nil {
			t.Fatal(err)
		}
		rawDirPath = d
	}
	return rawDirPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if rawDirPath != "" {
		os.RemoveAll(rawDirPath)
	}
	os.Exit(code)
}

func openTiered(t *testing.T, path string, opts Options) (*Cache, *beton.File) {
	t.Helper()
	src, f, err := OpenBeton(context.Background(), path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	opts.Debug = true
	c, err := New(src, f, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

// readAllSamples reads every sample, in a random order, from workers
// goroutines, and checks its bytes against data.
func readAllSamples(t *testing.T, c *Cache, f *beton.File, data []byte, seed uint64, workers int) {
	t.Helper()
	order := rand.New(rand.NewPCG(seed, 2)).Perm(f.NumSamples())
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(order) {
					return
				}
				s := order[i]
				im, err := f.Image(s, 0)
				if err != nil {
					errs <- err
					return
				}
				got := make([]byte, im.Size)
				if _, err := c.ReadAt(context.Background(), got, int64(im.Ptr)); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, data[im.Ptr:im.Ptr+im.Size]) {
					errs <- &os.PathError{Op: "read", Path: "sample " + strconv.Itoa(s), Err: os.ErrInvalid}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// waitTierEntries waits until c's first tier holds n pages, woken each
// time a tier is done with a page offered, for at most testenv.Patience.
func waitTierEntries(c *Cache, n int) {
	timeout := time.After(testenv.Patience)
	for {
		ch := c.below.tiers.storedSignal()
		if c.Stats().Tiers.Tiers[0].Entries >= n {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			return // the caller's assertions report what did not happen
		}
	}
}

// waitLoadsDone waits until c has no load under way, prefetch or demand.
func waitLoadsDone(c *Cache) {
	waitCache(c, func() bool { return c.inflight == 0 && len(c.loads.calls) == 0 })
}

// waitCache waits until cond, called with c's lock held, holds, woken at
// each change of the cache's state, for at most testenv.Patience.
func waitCache(c *Cache, cond func() bool) {
	timeout := time.After(testenv.Patience)
	c.mu.Lock()
	defer c.mu.Unlock()
	for !cond() {
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch := c.changed
		c.mu.Unlock()
		select {
		case <-ch:
			c.mu.Lock()
		case <-timeout:
			c.mu.Lock()
			return // the caller's assertions report what did not happen
		}
	}
}

// The tiers hold their budgets while readers race (race detector), serve
// right bytes, and the disk tier serves a second cache of the same file
// with no read from storage.
func TestTiersBudgetAndWarmStart(t *testing.T) {
	path, data := rawPhotos(t, 128)
	dir := filepath.Join(t.TempDir(), "disk")
	ps := int64(beton.MinPageSize)
	opts := Options{Budget: 7 * ps, DiskDir: dir, DiskBudget: 5 * ps, CompressRAM: true}
	c, f := openTiered(t, path, opts)
	stop := make(chan struct{})
	var over atomic.Value
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for _, ts := range c.Stats().Tiers.Tiers {
				if ts.Bytes > ts.BudgetBytes {
					over.Store(ts)
				}
			}
		}
	}()
	for epoch := range 3 {
		readAllSamples(t, c, f, data, uint64(epoch), 4)
	}
	close(stop)
	if v := over.Load(); v != nil {
		t.Errorf("a tier over its budget: %+v", v)
	}
	st := c.Stats()
	if st.BudgetBytes != opts.Budget {
		t.Errorf("RAM budget %d, want %d", st.BudgetBytes, opts.Budget)
	}
	ram, disk := st.Tiers.Tiers[0], st.Tiers.Tiers[1]
	if ram.Kind != "ram" || disk.Kind != "disk" || ram.Hits == 0 || disk.Entries == 0 || ram.CompressionRatio < 1.5 {
		t.Errorf("tiers %+v", st.Tiers)
	}
	c.Close()
	// A new cache over the same file starts from the disk tier.
	c2, _ := openTiered(t, path, Options{Budget: 4 * ps, DiskDir: dir, DiskBudget: 64 * ps})
	defer c2.Close()
	readAllSamples(t, c2, f, data, 9, 2)
	st2 := c2.Stats().Tiers
	if st2.Tiers[0].Hits == 0 || st2.StorageBytes >= uint64(len(data)) {
		t.Errorf("second cache: %d disk hits, %d bytes from storage of %d", st2.Tiers[0].Hits, st2.StorageBytes, len(data))
	}
}

// With CompressRAM, the tier holds at least 1.8 times the pages of raw
// photos that its bytes would hold raw.
func TestCompressRAMHoldsMorePages(t *testing.T) {
	path, data := rawPhotos(t, 256)
	ps := int64(beton.MinPageSize)
	c, f := openTiered(t, path, Options{Budget: 6 * ps, CompressRAM: true})
	defer c.Close()
	// Pages offered while the tier is busy are not stored: read until it
	// is full.
	var st Stats
	var ram tier.Stats
	for epoch := range 10 {
		readAllSamples(t, c, f, data, uint64(epoch), 1)
		time.Sleep(50 * time.Millisecond)
		st = c.Stats()
		ram = st.Tiers.Tiers[0]
		if ram.Evictions > 0 && ram.Bytes+3*ps/2 > ram.BudgetBytes {
			break
		}
	}
	t.Logf("%d pages in a tier of %d pages' bytes; compression ratio %.2f; %d slots", ram.Entries, ram.BudgetBytes/ps, ram.CompressionRatio, st.Slots)
	if ram.Entries == f.NumPages() || float64(ram.Entries) < 1.8*float64(ram.BudgetBytes/ps) {
		t.Errorf("%d pages of %d in a tier of %d pages' bytes, want at least 1.8 times as many, and not all", ram.Entries, f.NumPages(), ram.BudgetBytes/ps)
	}
}

// A flipped byte in a disk entry is caught: the page is read from storage
// again, the bytes are right, the failure is counted.
func TestDiskTierCorruptEntry(t *testing.T) {
	path, data := rawPhotos(t, 128)
	dir := filepath.Join(t.TempDir(), "disk")
	ps := int64(beton.MinPageSize)
	c, f := openTiered(t, path, Options{Budget: 4 * ps, DiskDir: dir, DiskBudget: 64 * ps})
	readAllSamples(t, c, f, data, 1, 2)
	c.Close()
	entries, _ := filepath.Glob(filepath.Join(dir, "*", "p*"))
	if len(entries) == 0 {
		t.Fatal("no entries")
	}
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x40
		if err := os.WriteFile(e, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c2, _ := openTiered(t, path, Options{Budget: 4 * ps, DiskDir: dir, DiskBudget: 64 * ps})
	defer c2.Close()
	readAllSamples(t, c2, f, data, 2, 2)
	st := c2.Stats().Tiers
	if st.Tiers[0].ChecksumFailures == 0 || st.StorageBytes == 0 {
		t.Errorf("after corrupting every entry: %+v", st)
	}
}

// A page the tiers want but cannot take when it is read (no fill buffer
// free, a writer behind) is owed and backfilled once a buffer frees: the
// disk tier ends up with every page it was offered while under budget, so
// a later epoch reads nothing from storage. Here every fill buffer is held
// while an epoch is read, so each page read is owed; then they are given
// back.
func TestDiskTierBackfillsSkippedPages(t *testing.T) {
	path, data := rawPhotos(t, 256)
	ps := int64(beton.MinPageSize)
	c, f := openTiered(t, path, Options{Budget: 6 * ps, DiskDir: filepath.Join(t.TempDir(), "disk"), DiskBudget: 64 * ps})
	defer c.Close()
	var held [][]byte
	for range fillBuffers {
		held = append(held, <-c.below.tiers.free)
	}
	readAllSamples(t, c, f, data, 1, 4)
	if st := c.Stats().Tiers; st.Tiers[0].Entries != 0 || st.Owed != f.NumPages() {
		t.Fatalf("with no fill buffer: %d entries, %d pages owed; want 0 and %d", st.Tiers[0].Entries, st.Owed, f.NumPages())
	}
	c.below.tiers.mu.Lock()
	for _, b := range held {
		c.below.tiers.free <- b
	}
	c.below.tiers.wake()
	c.below.tiers.mu.Unlock()
	waitTierEntries(c, f.NumPages())
	st := c.Stats().Tiers
	if st.Owed != 0 || st.Backfills != uint64(f.NumPages()) {
		t.Errorf("%d owed, %d backfilled, want 0 and %d", st.Owed, st.Backfills, f.NumPages())
	}
	before := st.StorageBytes
	readAllSamples(t, c, f, data, 2, 4)
	if got := c.Stats().Tiers.StorageBytes - before; got != 0 {
		t.Errorf("the next epoch read %d bytes from storage, want 0", got)
	}
}

// Once the disk tier holds every page, its fill buffers become page
// slots, and a quasi-random epoch along an announced order reads each
// page from the tier once, ahead of the reader: no read waits on the
// tier. The order keeps more pages open (5) than the slots left beside
// the fill buffers (6 − 2), so that with fill buffers kept the reader
// would load pages itself. Between reads the test lets the prefetch
// settle, as a reader slower than the tier would: only what the cache
// read ahead counts, never how fast.
func TestDiskTierReadAheadAlongOrder(t *testing.T) {
	path, data := rawPhotos(t, 256)
	dir := filepath.Join(t.TempDir(), "disk")
	ps := int64(beton.MinPageSize)
	c1, f := openTiered(t, path, Options{Budget: 6 * ps, DiskDir: dir, DiskBudget: 64 * ps})
	readAllSamples(t, c1, f, data, 1, 2)
	waitTierEntries(c1, f.NumPages())
	waitCache(c1, func() bool { return c1.pageSlots() == 6 }) // the backfill hands them over
	if st := c1.Stats(); st.Slots != 6 || st.Tiers.FillBuffers != 0 {
		t.Errorf("with every page on the disk tier: %d slots and %d fill buffers, want 6 and 0", st.Slots, st.Tiers.FillBuffers)
	}
	c1.Close()
	if f.NumPages() < 10 {
		t.Fatalf("%d pages: the test needs more pages than slots", f.NumPages())
	}

	c, _ := openTiered(t, path, Options{Budget: 6 * ps, DiskDir: dir, DiskBudget: 64 * ps})
	defer c.Close()
	if st := c.Stats(); st.Slots != 6 {
		t.Fatalf("a cache opened over a full disk tier has %d slots, want 6", st.Slots)
	}
	ord, err := order.Generate(f, order.Options{Kind: order.QuasiRandom, Seed: 3, Window: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Announce("r", ord); err != nil {
		t.Fatal(err)
	}
	for _, s := range ord {
		waitLoadsDone(c)
		pg, err := c.AcquireSample(context.Background(), int(s))
		if err != nil {
			t.Fatal(err)
		}
		im, err := f.Image(int(s), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := pg.Data[im.Ptr-uint64(pg.Off):][:im.Size]; !bytes.Equal(got, data[im.Ptr:im.Ptr+im.Size]) {
			t.Fatalf("sample %d: wrong bytes", s)
		}
		pg.Release()
	}
	st := c.Stats()
	if st.TierWaits != 0 || st.Misses != 0 {
		t.Errorf("%d reads waited on the disk tier (%d demand loads), want 0", st.TierWaits, st.Misses)
	}
	if hits := st.Tiers.Tiers[0].Hits; hits != uint64(f.NumPages()) || st.Tiers.StorageBytes != 0 {
		t.Errorf("%d loads from the disk tier and %d bytes from storage; want %d (each page once) and 0", hits, st.Tiers.StorageBytes, f.NumPages())
	}
}

// TestTierBudgetTooSmall: a cache too small for its tiers is refused with
// the --cache-size that works, in bytes.
func TestTierBudgetTooSmall(t *testing.T) {
	ps := int64(beton.MinPageSize)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{DiskDir: "/nonexistent"}, "a cache of 2 pages of 2 MiB is too small for a disk tier: it needs at least "},
		{Options{CompressRAM: true}, "a cache of 2 pages of 2 MiB is too small to compress: it needs at least 5 pages (--cache-size 10 MiB or more)"},
	} {
		_, _, _, err := tierBudget(2, ps, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--cache-size ") {
			t.Errorf("%+v: %v; want %q", tc.opts, err, tc.want)
		}
	}
}
