package pagecache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/storage"
	"golang.org/x/sys/unix"
)

// latencySource adds a fixed delay to every read, like storage far away.
type latencySource struct {
	storage.Source
	delay time.Duration
	bytes atomic.Int64
}

func (l *latencySource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	time.Sleep(l.delay)
	n, err := l.Source.ReadAt(ctx, p, off)
	l.bytes.Add(int64(n))
	return n, err
}

// benchBeton returns the path of a 1 GiB beton of 8 MiB pages holding
// ImageNet-sized samples (~110 KB), made once and kept in
// $FFCVFS_BENCH_DIR or the system temp folder.
func benchBeton(b *testing.B) string {
	dir := os.Getenv("FFCVFS_BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "ffcvfs-cache-bench-1g.beton")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	const pageSize, pages = 8 << 20, 128
	rng := rand.New(rand.NewPCG(1, 1))
	var sizes []int
	used, total := 0, 0
	for total < pages*pageSize {
		n := 80<<10 + rng.IntN(60<<10)
		if used+n > pageSize {
			total += pageSize
			used = 0
			if total >= pages*pageSize {
				break
			}
		}
		sizes = append(sizes, n)
		used += n
	}
	fields := []beton.Field{{Type: beton.TypeBytes, Name: "data"}, {Type: beton.TypeInt, Name: "label"}}
	w, err := beton.Create(path, fields, len(sizes), beton.WriterOptions{PageSize: pageSize})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 140<<10)
	for i, n := range sizes {
		for j := 0; j < n; j += 4096 {
			buf[j] = byte(i)
		}
		if err := w.WriteSample([]beton.Value{{Data: buf[:n]}, {Int: int64(i % 1000)}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// dropPageCache evicts the file from the kernel page cache, so every run
// reads from the disk.
func dropPageCache(b *testing.B, path string) {
	fh, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	fh.Sync()
	if err := unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCacheEpochs reads every sample of a 1 GiB beton through the
// cache, from a file source with 5 ms added to every read, along announced
// quasi-random orders (a new one each epoch), with a budget of 10 % of the
// data. The baselines in the same run are a plain sequential read of the
// file and the same sequential read with the latency. Metrics: MB/s of
// sample data delivered, and source bytes read per dataset byte.
func BenchmarkCacheEpochs(b *testing.B) {
	path := benchBeton(b)
	ctx := context.Background()
	open := func(delay time.Duration) (*latencySource, *beton.File) {
		src, err := storage.Open(ctx, path, storage.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ls := &latencySource{Source: src, delay: delay}
		f, err := beton.Open(storage.ReaderAt(ctx, ls), ls.Size(), path)
		if err != nil {
			b.Fatal(err)
		}
		ls.bytes.Store(0)
		return ls, f
	}
	dataBytes := func(f *beton.File) int64 { return int64(f.NumPages()) * f.PageSize() }

	for _, delay := range []time.Duration{0, 5 * time.Millisecond} {
		b.Run(fmt.Sprintf("sequential-read/latency=%v", delay), func(b *testing.B) {
			for range b.N {
				dropPageCache(b, path)
				ls, f := open(delay)
				buf := make([]byte, f.PageSize())
				b.SetBytes(dataBytes(f))
				start := time.Now()
				for p := f.FirstPage(); p < f.FirstPage()+int64(f.NumPages()); p++ {
					if _, err := ls.ReadAt(ctx, buf, f.PageOffset(p)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(dataBytes(f))/1e6/time.Since(start).Seconds(), "MB/s")
				ls.Close()
			}
		})
	}
	for _, tc := range []struct {
		name   string
		epochs int
		plan   bool
	}{{"quasi-random-plan", 1, true}, {"quasi-random-plan", 2, true}, {"random-no-plan", 1, false}} {
		b.Run(fmt.Sprintf("%s/epochs=%d/latency=5ms", tc.name, tc.epochs), func(b *testing.B) {
			for range b.N {
				dropPageCache(b, path)
				ls, f := open(5 * time.Millisecond)
				c, err := New(ls, f, Options{Budget: dataBytes(f) / 10})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(7, uint64(tc.epochs)))
				var delivered atomic.Int64
				start := time.Now()
				for e := 0; e < tc.epochs; e++ {
					var order []uint32
					if tc.plan {
						order = quasiRandomOrder(f, 4, rng)
						if err := c.Announce("bench", order); err != nil {
							b.Fatal(err)
						}
					} else {
						order = randomOrder(f.NumSamples(), rng)
					}
					var next atomic.Int64
					var wg sync.WaitGroup
					for range 4 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							out := make([]byte, 140<<10)
							for {
								i := next.Add(1) - 1
								if i >= int64(len(order)) {
									return
								}
								s := int(order[i])
								pg, err := c.AcquireSample(ctx, s)
								if err != nil {
									b.Error(err)
									return
								}
								a, _ := f.Data(s, 0)
								delivered.Add(int64(copy(out, pg.Data[int64(a.Ptr)-pg.Off:][:a.Size])))
								pg.Release()
							}
						}()
					}
					wg.Wait()
				}
				el := time.Since(start).Seconds()
				c.Close()
				ls.Close()
				b.SetBytes(delivered.Load() / int64(tc.epochs))
				b.ReportMetric(float64(delivered.Load())/1e6/el, "MB/s")
				b.ReportMetric(float64(ls.bytes.Load())/float64(dataBytes(f))/float64(tc.epochs), "src/dataset/epoch")
			}
		})
	}
}
