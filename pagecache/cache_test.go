package pagecache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/pagecache/policy"
	"github.com/ffcvfs/ffcvfs/storage"
	"github.com/ffcvfs/ffcvfs/storage/storagetest"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

const (
	testPages          = 50
	testSamplesPerPage = 8
	testSampleSize     = beton.MinPageSize / testSamplesPerPage
)

var (
	testFileOnce sync.Once
	testFileData []byte
	testFileErr  error
)

// testBeton returns the bytes of a beton of testPages whole pages, each
// holding testSamplesPerPage samples whose data start with their id.
func testBeton(t testing.TB) []byte {
	t.Helper()
	testFileOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pagecache-test-")
		if err != nil {
			testFileErr = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "t.beton")
		n := testPages * testSamplesPerPage
		fields := []beton.Field{{Type: beton.TypeBytes, Name: "data"}, {Type: beton.TypeInt, Name: "label"}}
		w, err := beton.Create(path, fields, n, beton.WriterOptions{PageSize: beton.MinPageSize})
		if err != nil {
			testFileErr = err
			return
		}
		buf := make([]byte, testSampleSize)
		pattern := make([]byte, testSampleSize+256)
		for j := range pattern {
			pattern[j] = byte(j)
		}
		for i := 0; i < n; i++ {
			copy(buf, pattern[(i*31)&255:]) // buf[j] = byte(i*31 + j)
			binary.LittleEndian.PutUint64(buf, uint64(i))
			if err := w.WriteSample([]beton.Value{{Data: buf}, {Int: int64(i % 10)}}); err != nil {
				testFileErr = err
				return
			}
		}
		if err := w.Close(); err != nil {
			testFileErr = err
			return
		}
		testFileData, testFileErr = os.ReadFile(path)
	})
	if testFileErr != nil {
		t.Fatal(testFileErr)
	}
	return testFileData
}

// testSource serves the test beton from memory, with faults to inject.
type testSource struct {
	*storagetest.Source
	pageSize int64
}

// pageReads returns how many times each page was read whole.
func (m testSource) pageReads() map[int64]int {
	out := map[int64]int{}
	for off, n := range m.Reads() {
		if off%m.pageSize == 0 {
			out[off/m.pageSize] += n
		}
	}
	return out
}

func (m testSource) resetReads() { m.Reset() }

func newTestCache(t *testing.T, slots int, opts Options) (*Cache, testSource) {
	t.Helper()
	src := testSource{storagetest.New("mem://test.beton", testBeton(t)), beton.MinPageSize}
	f, err := beton.Open(storage.ReaderAt(t.Context(), src), src.Size(), src.Name())
	if err != nil {
		t.Fatal(err)
	}
	src.resetReads()
	opts.Budget = int64(slots) * beton.MinPageSize
	opts.Debug = true
	c, err := New(src, f, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, src
}

// readSample reads sample s through the cache and checks its bytes.
func readSample(t testing.TB, c *Cache, s int) {
	pg, err := c.AcquireSample(context.Background(), s)
	if err != nil {
		t.Error(err)
		return
	}
	defer pg.Release()
	a, err := c.File().Data(s, 0)
	if err != nil {
		t.Error(err)
		return
	}
	off := int64(a.Ptr) - pg.Off
	d := pg.Data[off : off+int64(a.Size)]
	if got := binary.LittleEndian.Uint64(d); got != uint64(s) || d[100] != byte(s*31+100) || d[len(d)-1] != byte(s*31+len(d)-1) {
		t.Errorf("sample %d: read data of sample %d", s, got)
	}
}

// quasiRandomOrder shuffles the pages, then draws samples at random from a
// window of open pages, opening the next page when one is used up.
func quasiRandomOrder(f *beton.File, window int, rng *rand.Rand) []uint32 {
	pages := make([]int64, f.NumPages())
	for i := range pages {
		pages[i] = f.FirstPage() + int64(i)
	}
	rng.Shuffle(len(pages), func(i, j int) { pages[i], pages[j] = pages[j], pages[i] })
	var open [][]uint32
	var order []uint32
	next := 0
	for {
		for len(open) < window && next < len(pages) {
			s := append([]uint32(nil), f.PageSamples(pages[next])...)
			rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
			open = append(open, s)
			next++
		}
		if len(open) == 0 {
			return order
		}
		k := rng.IntN(len(open))
		order = append(order, open[k][0])
		open[k] = open[k][1:]
		if len(open[k]) == 0 {
			open = append(open[:k], open[k+1:]...)
		}
	}
}

func randomOrder(n int, rng *rand.Rand) []uint32 {
	o := make([]uint32, n)
	for i := range o {
		o[i] = uint32(i)
	}
	rng.Shuffle(n, func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

// belady returns the fewest page reads any cache of k slots needs for the
// plan's page sequence (Belady's MIN).
func belady(f *beton.File, order []uint32, k int) int {
	sp := make([]int32, f.NumSamples())
	for s := range sp {
		sp[s] = -1
		if p := f.SamplePage(s); p != beton.NoPage {
			sp[s] = int32(p - f.FirstPage())
		}
	}
	return policy.MinLoads(sp, order, k)
}

// consume reads order with the given number of goroutines, each taking the
// next position in turn (so reads arrive slightly out of order).
func consume(t *testing.T, c *Cache, order []uint32, workers int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(len(order)) {
					return
				}
				readSample(t, c, int(order[i]))
			}
		}()
	}
	wg.Wait()
}

func TestQuasiRandomPlanReadsEachPageOncePerEpoch(t *testing.T) {
	const window, depth = 4, 4
	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			c, src := newTestCache(t, window+depth, Options{Readers: 4, PagesOnly: true})
			f := c.File()
			rng := rand.New(rand.NewPCG(1, uint64(workers)))
			for epoch := 0; epoch < 3; epoch++ {
				order := quasiRandomOrder(f, window, rng)
				if err := c.Announce("trainer", order); err != nil {
					t.Fatal(err)
				}
				src.resetReads()
				consume(t, c, order, workers)
				reads := src.pageReads()
				total := 0
				for p, n := range reads {
					if n != 1 {
						t.Errorf("epoch %d: page %d read %d times", epoch, p, n)
					}
					total += n
				}
				// Pages still cached from the epoch before need no read.
				if min := f.NumPages() - (window + depth); total < min || total > f.NumPages() {
					t.Errorf("epoch %d: %d page reads, want between %d and %d", epoch, total, min, f.NumPages())
				}
				t.Logf("epoch %d: %d page reads for %d pages; %+v", epoch, total, f.NumPages(), c.Stats())
			}
		})
	}
}

func TestRandomPlanNearBelady(t *testing.T) {
	slots := testPages / 10 // 10 % of the data
	c, src := newTestCache(t, slots, Options{Readers: 4, PagesOnly: true})
	f := c.File()
	rng := rand.New(rand.NewPCG(2, 2))
	for epoch := 0; epoch < 2; epoch++ {
		order := randomOrder(f.NumSamples(), rng)
		// Start each epoch from an empty cache so the optimum is comparable.
		c.evictAll()
		if err := c.Announce("trainer", order); err != nil {
			t.Fatal(err)
		}
		src.resetReads()
		consume(t, c, order, 1)
		total := 0
		for _, n := range src.pageReads() {
			total += n
		}
		opt := belady(f, order, slots)
		t.Logf("epoch %d: %d page reads, Belady's optimum %d (%d samples, %d pages, %d slots)", epoch, total, opt, len(order), f.NumPages(), slots)
		if float64(total) > 1.03*float64(opt)+1 {
			t.Errorf("epoch %d: %d page reads, more than 3%% over the optimum %d", epoch, total, opt)
		}
	}
}

func TestNoPlanReadsAtMostSampleReads(t *testing.T) {
	c, src := newTestCache(t, 5, Options{Readers: 4, PagesOnly: true})
	f := c.File()
	rng := rand.New(rand.NewPCG(3, 3))
	reads := 0
	for epoch := 0; epoch < 3; epoch++ {
		order := randomOrder(f.NumSamples(), rng)
		consume(t, c, order, 4)
		reads += len(order)
	}
	total := 0
	for _, n := range src.pageReads() {
		total += n
	}
	st := c.Stats()
	if total > reads || uint64(total) != st.PagesRead || st.Misses != st.PagesRead || st.PrefetchHits != 0 {
		t.Errorf("%d page reads for %d sample reads; stats %+v", total, reads, st)
	}
	t.Logf("no plan: %d page reads for %d sample reads over %d pages, %d slots", total, reads, f.NumPages(), 5)
}

// Pages whose samples were all read this epoch go first, without a plan.
func TestNoPlanEvictsFullyReadPagesFirst(t *testing.T) {
	c, src := newTestCache(t, 2, Options{Readers: 1, PagesOnly: true})
	f := c.File()
	p0, p1, p2 := f.PageSamples(f.FirstPage()), f.PageSamples(f.FirstPage()+1), f.PageSamples(f.FirstPage()+2)
	for _, s := range p0 { // page 0 read in full
		readSample(t, c, int(s))
	}
	readSample(t, c, int(p1[0])) // page 1 read in part, and more recently
	readSample(t, c, int(p0[0])) // page 0 used again: now the most recent
	readSample(t, c, int(p2[0])) // needs a slot: page 0 must go, not page 1
	src.resetReads()
	readSample(t, c, int(p1[1]))
	if n := src.pageReads()[f.FirstPage()+1]; n != 0 {
		t.Errorf("page 1 was evicted before the fully read page 0")
	}
}

func TestBudgetHeldUnderConcurrency(t *testing.T) {
	base := runtime.NumGoroutine()
	func() {
		c, _ := newTestCache(t, 3, Options{Readers: 8, Window: 64, PagesOnly: true})
		f := c.File()
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var maxHeld atomic.Int64
		// A watcher checks the budget while 32 readers and a planner work.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				st := c.Stats()
				if held := int64(st.Resident + st.Loading); held > maxHeld.Load() {
					maxHeld.Store(held)
				}
				runtime.Gosched()
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(9, 9))
			for i := 0; i < 20; i++ {
				c.Announce(fmt.Sprintf("p%d", i%3), quasiRandomOrder(f, 2, rng))
				time.Sleep(time.Millisecond)
			}
		}()
		var readers sync.WaitGroup
		for g := 0; g < 32; g++ {
			readers.Add(1)
			go func(g int) {
				defer readers.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 5))
				for i := 0; i < 150; i++ {
					readSample(t, c, rng.IntN(f.NumSamples()))
				}
			}(g)
		}
		readers.Wait()
		close(stop)
		wg.Wait()
		st := c.Stats()
		if maxHeld.Load() > int64(st.Slots) || st.Pinned != 0 || st.BudgetBytes != 3*beton.MinPageSize {
			t.Errorf("held up to %d pages in %d slots; %+v", maxHeld.Load(), st.Slots, st)
		}
		c.Close()
	}()
	checkNoGoroutinesLeft(t, base)
}

// With every slot pinned, a reader waits for a release; the cache does not
// grow.
func TestFullCacheOfPinnedPagesWaits(t *testing.T) {
	c, _ := newTestCache(t, 2, Options{Readers: 1, PagesOnly: true})
	f := c.File()
	ctx := context.Background()
	a, err := c.AcquirePage(ctx, f.FirstPage())
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcquirePage(ctx, f.FirstPage()+1)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.AcquirePage(short, f.FirstPage()+2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third page with two slots pinned: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		p, err := c.AcquirePage(ctx, f.FirstPage()+2)
		if err == nil {
			p.Release()
		}
		got <- err
	}()
	a.Release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	b.Release()
	if st := c.Stats(); st.Resident > 2 || st.Waits < 1 {
		t.Errorf("%+v", st)
	}
}

func TestReadErrorsAreReportedAndRecoverable(t *testing.T) {
	c, src := newTestCache(t, 2, Options{Readers: 1, PagesOnly: true})
	f := c.File()
	src.Fail(errors.New("injected failure"))
	_, err := c.AcquireSample(context.Background(), 0)
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	want := fmt.Sprintf("mem://test.beton: reading page %d", f.FirstPage())
	if got := err.Error(); len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("error %q does not start with %q", got, want)
	}
	src.Fail(nil)
	readSample(t, c, 0)
	if st := c.Stats(); st.ReadErrors != 1 || st.PagesRead != 1 {
		t.Errorf("%+v", st)
	}
}

func TestReadAtMatchesFile(t *testing.T) {
	c, _ := newTestCache(t, 3, Options{Readers: 2, PagesOnly: true})
	data := testBeton(t)
	rng := rand.New(rand.NewPCG(4, 4))
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		off := rng.Int64N(int64(len(data)))
		n := rng.IntN(3 * beton.MinPageSize)
		buf := make([]byte, n)
		m, err := c.ReadAt(ctx, buf, off)
		want := data[off:min(int64(len(data)), off+int64(n))]
		if m != len(want) || (err != nil && m == n) || string(buf[:m]) != string(want) {
			t.Fatalf("ReadAt(%d, %d) = %d, %v; want %d bytes", n, off, m, err, len(want))
		}
	}
}

func TestAnnounceRejectsUnknownSamples(t *testing.T) {
	c, _ := newTestCache(t, 2, Options{PagesOnly: true})
	if err := c.Announce("x", []uint32{0, uint32(c.File().NumSamples())}); err == nil {
		t.Fatal("a plan naming a sample past the end was accepted")
	}
}

// TestReadAtAdvancesPlan reads the file by byte ranges, as a program reading
// a mount's dataset.beton does: whole pages in their order of first use in
// the announced plan, several at a time, in pieces. Samples count as read as
// their bytes pass, so the plan moves on and no page is read twice.
func TestReadAtAdvancesPlan(t *testing.T) {
	const window, depth, streams, piece = 4, 4, 4, 128 << 10
	c, src := newTestCache(t, window+depth, Options{Readers: 4, PagesOnly: true})
	f := c.File()
	order := quasiRandomOrder(f, window, rand.New(rand.NewPCG(5, 5)))
	if err := c.Announce("reader", order); err != nil {
		t.Fatal(err)
	}
	var pages []int64
	seen := map[int64]bool{}
	for _, s := range order {
		if p := f.SamplePage(int(s)); !seen[p] {
			seen[p] = true
			pages = append(pages, p)
		}
	}
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, piece)
			for {
				i := next.Add(1) - 1
				if i >= int64(len(pages)) {
					return
				}
				for off := f.PageOffset(pages[i]); off < f.PageOffset(pages[i]+1); off += piece {
					if _, err := c.ReadAt(ctx, buf, off); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for p, n := range src.pageReads() {
		if n != 1 {
			t.Errorf("page %d read %d times", p, n)
		}
	}
	if st := c.Stats(); len(st.Plans) != 0 {
		t.Errorf("plan not finished after every byte was read: %+v", st.Plans)
	}
}

// evictAll empties every slot that holds a page nobody uses.
func (c *Cache) evictAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.slots {
		if s := &c.slots[i]; s.page >= 0 && s.ready && s.pins == 0 {
			c.pol.Evict(s.page)
			c.pageSlot[s.page] = -1
			s.page, s.ready = -1, false
			c.free = append(c.free, int32(i))
		}
	}
}

// A read whose context ends stops its fetch; another reader waiting for
// the same page loads it again instead of getting the first one's error.
func TestCancelledReadStopsItsFetch(t *testing.T) {
	c, src := newTestCache(t, 2, Options{Readers: 1, PagesOnly: true})
	src.Hang(true)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.AcquireSample(ctx, 0)
		first <- err
	}()
	for c.Stats().Loading == 0 {
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		pg, err := c.AcquireSample(context.Background(), 1) // same page
		if err == nil {
			pg.Release()
		}
		second <- err
	}()
	for c.Stats().Waits == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v, want context.Canceled", err)
	}
	if src.Cancelled() != 1 {
		t.Fatalf("%d source reads cancelled, want 1", src.Cancelled())
	}
	src.Hang(false)
	if err := <-second; err != nil {
		t.Fatalf("the other reader of the page: %v", err)
	}
	if st := c.Stats(); st.ReadErrors != 0 || st.PagesRead != 1 {
		t.Fatalf("%d read errors, %d pages read; want 0 and 1", st.ReadErrors, st.PagesRead)
	}
	readSample(t, c, 0)
}

// checkNoGoroutinesLeft fails the test if more goroutines than base are
// still running a few seconds on (the time only bounds a leak's wait).
func checkNoGoroutinesLeft(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(testenv.Patience)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left after Close, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
