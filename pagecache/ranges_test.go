package pagecache

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/storage"
)

// bytesOf returns the bytes of the samples of order.
func bytesOf(c *Cache, order []uint32) int64 {
	n := int64(0)
	for _, s := range order {
		n += int64(c.extLen[s])
	}
	return n
}

// A random order announced with a budget of 4 % of the data is read as
// ranges: the bytes fetched are about the bytes read, in no more requests
// than samples, and every sample is right (readSample checks its bytes).
func TestRandomPlanFetchesOnlyWhatIsRead(t *testing.T) {
	slots := testPages / 25
	c, src := newTestCache(t, slots, Options{Readers: 8})
	f := c.File()
	rng := rand.New(rand.NewPCG(4, 4))
	for epoch := 0; epoch < 3; epoch++ {
		order := randomOrder(f.NumSamples(), rng)
		if err := c.Announce("trainer", order); err != nil {
			t.Fatal(err)
		}
		src.resetReads()
		before := c.Stats()
		consume(t, c, order, 4)
		st := c.Stats()
		fetched, read := src.BytesRead(), bytesOf(c, order)
		reqs := st.Requests - before.Requests
		t.Logf("epoch %d: %d misses, %d range evictions", epoch, st.Misses-before.Misses, st.RangeEvictions-before.RangeEvictions)
		t.Logf("epoch %d: fetched %d bytes for %d read (%.3f×) in %d requests (%d pages, %d range requests for %d ranges); %d prefetch hits",
			epoch, fetched, read, float64(fetched)/float64(read), reqs, st.PagesRead-before.PagesRead, st.RangeRequests-before.RangeRequests, st.RangesRead-before.RangesRead, st.PrefetchHits-before.PrefetchHits)
		if float64(fetched) > 1.1*float64(read) {
			t.Errorf("epoch %d: fetched %d bytes for %d read", epoch, fetched, read)
		}
		if reqs > uint64(len(order)) {
			t.Errorf("epoch %d: %d requests for %d samples", epoch, reqs, len(order))
		}
		if st.PrefetchHits == before.PrefetchHits {
			t.Errorf("epoch %d: nothing prefetched", epoch)
		}
		if st.RangeBytes > int64(st.LentSlots)*beton.MinPageSize || st.Resident+st.LentSlots > st.Slots {
			t.Errorf("epoch %d: over budget: %+v", epoch, st)
		}
	}
	if st := c.Stats(); len(st.EpochRequests) < 2 {
		t.Errorf("requests of %d epochs counted, want at least 2: %+v", len(st.EpochRequests), st)
	}
}

// Quasi-random and sequential plans are read by pages, each once per
// epoch, as with PagesOnly.
func TestLocalPlansReadPages(t *testing.T) {
	const window, depth = 4, 4
	for _, kind := range []string{"quasi-random", "sequential"} {
		t.Run(kind, func(t *testing.T) {
			c, src := newTestCache(t, window+depth, Options{Readers: 4})
			f := c.File()
			rng := rand.New(rand.NewPCG(5, 5))
			for epoch := 0; epoch < 3; epoch++ {
				var order []uint32
				if kind == "sequential" {
					for s := range f.NumSamples() {
						order = append(order, uint32(s))
					}
				} else {
					order = quasiRandomOrder(f, window, rng)
				}
				if err := c.Announce("trainer", order); err != nil {
					t.Fatal(err)
				}
				src.resetReads()
				consume(t, c, order, 2)
				for p, n := range src.pageReads() {
					if n != 1 {
						t.Errorf("epoch %d: page %d read %d times", epoch, p, n)
					}
				}
				if st := c.Stats(); st.RangesRead != 0 {
					t.Errorf("epoch %d: %d ranges read", epoch, st.RangesRead)
				}
			}
		})
	}
}

// Without a plan, random reads switch to ranges and sequential reads to
// pages.
func TestNoPlanChoosesGranularity(t *testing.T) {
	c, src := newTestCache(t, 3, Options{Readers: 4})
	f := c.File()
	rng := rand.New(rand.NewPCG(6, 6))
	order := randomOrder(f.NumSamples(), rng)
	consume(t, c, order, 1)
	st := c.Stats()
	fetched, read := src.BytesRead(), bytesOf(c, order)
	t.Logf("random: fetched %d for %d read (%.3f×), %d pages, %d ranges; %s", fetched, read, float64(fetched)/float64(read), st.PagesRead, st.RangesRead, st.UnplannedReads)
	if float64(fetched) > 1.2*float64(read) || st.UnplannedReads != "ranges" {
		t.Errorf("random order without a plan: fetched %d bytes for %d read, reads by %s", fetched, read, st.UnplannedReads)
	}
	// Then sequential: pages come back.
	src.resetReads()
	var seq []uint32
	for s := range f.NumSamples() {
		seq = append(seq, uint32(s))
	}
	before := c.Stats()
	consume(t, c, seq, 1)
	st = c.Stats()
	pages := st.PagesRead - before.PagesRead
	t.Logf("sequential: %d pages, %d ranges; %s", pages, st.RangesRead-before.RangesRead, st.UnplannedReads)
	// The detector forgets the random reads over about detectorSpan reads
	// (here 64 samples, 8 pages); from then on every page is read whole.
	if st.UnplannedReads != "pages" || pages < uint64(f.NumPages())/3 {
		t.Errorf("sequential order without a plan: %d pages read of %d, reads by %s", pages, f.NumPages(), st.UnplannedReads)
	}
}

// Ranges and pages share the budget under concurrent readers of random and
// planned orders, re-announced; the debug lock checks every invariant;
// nothing leaks.
func TestRangesBudgetHeldUnderConcurrency(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		c, _ := newTestCache(t, 3, Options{Readers: 8, Window: 64})
		f := c.File()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(9, 9))
			for i := 0; i < 20; i++ {
				var order []uint32
				if i%2 == 0 {
					order = randomOrder(f.NumSamples(), rng)
				} else {
					order = quasiRandomOrder(f, 2, rng)
				}
				c.Announce(fmt.Sprintf("p%d", i%3), order)
				time.Sleep(time.Millisecond)
			}
		}()
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 6))
				for i := 0; i < 150; i++ {
					readSample(t, c, rng.IntN(f.NumSamples()))
				}
			}(g)
		}
		wg.Wait()
		st := c.Stats()
		if st.Pinned != 0 || st.RangeBytes > int64(st.LentSlots)*beton.MinPageSize {
			t.Errorf("after the reads: %+v", st)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	checkNoGoroutinesLeft(t, base)
}

// A failed range read reaches its reader and every waiter; the next read
// succeeds.
func TestRangeReadErrors(t *testing.T) {
	c, src := newTestCache(t, 2, Options{Readers: 1})
	f := c.File()
	order := randomOrder(f.NumSamples(), rand.New(rand.NewPCG(7, 7)))
	if err := c.Announce("trainer", order); err != nil {
		t.Fatal(err)
	}
	c.Withdraw("trainer") // nothing prefetched from here on
	c.evictAll()
	for i := range 64 { // make the detector choose ranges
		readSample(t, c, int(order[i]))
	}
	if st := c.Stats(); st.UnplannedReads != "ranges" {
		t.Fatalf("reads by %s", st.UnplannedReads)
	}
	src.Fail(fmt.Errorf("boom"))
	s := int(order[100])
	if _, err := c.AcquireSample(t.Context(), s); err == nil {
		t.Fatal("read succeeded from a failing source")
	} else {
		t.Logf("error: %v", err)
	}
	src.Fail(nil)
	readSample(t, c, s)
}

// Random reads, of samples of many sizes through a cache far smaller than
// the data, unannounced and then announced (prefetched), are served as
// ranges whose memory changes hands: after the first epoch, few ranges
// need a mapping of their own
// (each costs an mmap and, when its memory goes back, an munmap), and the
// ranges' memory stays within the slots lent.
func TestUnplannedRangesReuseMappings(t *testing.T) {
	// 1,500 samples of 4 to 64 KiB, about 25 pages; a budget of 4.
	path := filepath.Join(t.TempDir(), "sizes.beton")
	const n = 1500
	w, err := beton.Create(path, []beton.Field{{Type: beton.TypeBytes, Name: "data"}}, n, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	sizes := rand.New(rand.NewPCG(7, 7))
	for i := range n {
		b := make([]byte, 4<<10+sizes.IntN(60<<10)) // as readSample checks them
		for j := range b {
			b[j] = byte(i*31 + j)
		}
		binary.LittleEndian.PutUint64(b, uint64(i))
		if err := w.WriteSample([]beton.Value{{Data: b}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	src, err := storage.Open(t.Context(), path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f, err := beton.Open(storage.ReaderAt(t.Context(), src), src.Size(), path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(src, f, Options{Budget: 4 * f.PageSize(), Readers: 4, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	for epoch := 0; epoch < 6; epoch++ {
		order := randomOrder(f.NumSamples(), rng)
		if epoch >= 3 { // the same, announced: ranges are prefetched
			if err := c.Announce("trainer", order); err != nil {
				t.Fatal(err)
			}
		}
		before := c.Stats()
		consume(t, c, order, 4)
		st := c.Stats()
		ranges, maps := st.RangesRead-before.RangesRead, st.RangeMappings-before.RangeMappings
		t.Logf("epoch %d: %d ranges read, %d mappings made, %d range evictions, %d requests", epoch, ranges, maps, st.RangeEvictions-before.RangeEvictions, st.Requests-before.Requests)
		if ranges < uint64(len(order))/2 {
			t.Fatalf("epoch %d: %d of %d samples read as ranges; the test needs ranges", epoch, ranges, len(order))
		}
		// Unannounced, a range takes the mapping of the range it evicts
		// (epochs 1 and 2 map nothing). Announced, the prefetcher takes
		// mappings as ranges go, and how many sizes the pool offers it
		// then depends on how far it runs behind the readers: under the
		// race detector, which slows the cache's goroutines unevenly,
		// a third of them or more are mapped anew (the epochs are logged);
		// at normal speed, busy machine or not, under a fifth.
		if epoch > 0 && (epoch < 3 || !raceEnabled) && float64(maps) > 0.25*float64(ranges) {
			t.Errorf("epoch %d: %d mappings made for %d ranges read, want at most a quarter", epoch, maps, ranges)
		}
		if st.RangeBytes > int64(st.LentSlots)*f.PageSize() {
			t.Errorf("epoch %d: ranges use %d bytes of %d slots lent", epoch, st.RangeBytes, st.LentSlots)
		}
	}
}

// A random order of pairs of neighbours (the first two samples of each
// page, read one after the other; the page's other samples never) is read
// as ranges, one request per pair: the requests are the pairs plus the
// reads that missed (and so could not wait to be coalesced), and the bytes
// fetched are those of the samples and of the gaps between the pairs'
// members.
func TestCoalescedNeighboursCountGETs(t *testing.T) {
	c, src := newTestCache(t, testPages/10, Options{Readers: 8})
	var pairs [][2]uint32
	for s := 0; s+1 < c.File().NumSamples(); s++ {
		if c.samplePage[s] == c.samplePage[s+1] && (s == 0 || c.samplePage[s-1] != c.samplePage[s]) {
			pairs = append(pairs, [2]uint32{uint32(s), uint32(s + 1)})
		}
	}
	rand.New(rand.NewPCG(5, 5)).Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	var order []uint32
	gaps := int64(0)
	for _, p := range pairs {
		order = append(order, p[0], p[1])
		alo, an := c.extent(int(p[0]))
		blo, _ := c.extent(int(p[1]))
		gaps += blo - (alo + int64(an))
	}
	if err := c.Announce("trainer", order); err != nil {
		t.Fatal(err)
	}
	src.resetReads()
	before := c.Stats()
	consume(t, c, order, 1)
	st := c.Stats()
	reqs, misses := st.Requests-before.Requests, st.Misses-before.Misses
	fetched, read := src.BytesRead(), bytesOf(c, order)
	t.Logf("%d pairs: %d requests, %d misses; fetched %d bytes for %d read, %d of gaps", len(pairs), reqs, misses, fetched, read, gaps)
	if st.PagesRead != before.PagesRead {
		t.Errorf("%d pages read for pairs of samples", st.PagesRead-before.PagesRead)
	}
	if reqs > uint64(len(pairs))+misses {
		t.Errorf("%d requests for %d pairs and %d misses: neighbours were not read together", reqs, len(pairs), misses)
	}
	if reqs >= uint64(len(order)) {
		t.Errorf("%d requests for %d samples: nothing coalesced", reqs, len(order))
	}
	if fetched > read+gaps {
		t.Errorf("fetched %d bytes for %d read and %d of gaps", fetched, read, gaps)
	}
}
