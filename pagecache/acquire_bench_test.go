package pagecache

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/storage"
)

// hollowSource is a beton of whole 2 MiB pages of 76 samples each whose
// header, metadata and allocation table are real and whose data pages are
// never written: a page read leaves the slot as it is. It costs no memory
// for data, so the cache's own CPU can be measured at ImageNet's page count
// (16,384 pages of 2 MiB would be 32 GiB).
type hollowSource struct {
	head, table []byte
	tablePtr    int64
}

const (
	hollowPageSize   = beton.MinPageSize
	hollowPerPage    = 76
	hollowSampleSize = hollowPageSize / hollowPerPage
)

func newHollowSource(pages int) *hollowSource {
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	const rs = 24 // image at 0, label at 16
	n := pages * hollowPerPage
	metaStart := beton.HeaderSize + len(fields)*beton.DescriptorSize
	head := make([]byte, metaStart+n*rs)
	for i, fd := range fields {
		d := head[beton.HeaderSize+i*beton.DescriptorSize:]
		d[0] = byte(fd.Type)
		copy(d[1:], fd.Name)
	}
	first := (int64(len(head)) + hollowPageSize - 1) / hollowPageSize
	table := make([]byte, 0, n*beton.AllocEntrySize)
	for i := range n {
		ptr := (first+int64(i/hollowPerPage))*hollowPageSize + int64(i%hollowPerPage)*hollowSampleSize
		m := head[metaStart+i*rs:]
		m[0] = byte(beton.ModeJPEG)
		binary.LittleEndian.PutUint16(m[1:], 320)
		binary.LittleEndian.PutUint16(m[3:], 240)
		binary.LittleEndian.PutUint64(m[5:], uint64(ptr))
		binary.LittleEndian.PutUint64(m[16:], uint64(i%1000))
		table = binary.LittleEndian.AppendUint64(table, uint64(i))
		table = binary.LittleEndian.AppendUint64(table, uint64(ptr))
		table = binary.LittleEndian.AppendUint64(table, hollowSampleSize)
	}
	tablePtr := (first + int64(pages)) * hollowPageSize
	h := head[:beton.HeaderSize]
	binary.LittleEndian.PutUint16(h[0:], beton.Version)
	binary.LittleEndian.PutUint16(h[2:], uint16(len(fields)))
	binary.LittleEndian.PutUint32(h[4:], hollowPageSize)
	binary.LittleEndian.PutUint64(h[8:], uint64(n))
	binary.LittleEndian.PutUint64(h[16:], uint64(tablePtr))
	return &hollowSource{head: head, table: table, tablePtr: tablePtr}
}

func (h *hollowSource) ReadAt(_ context.Context, p []byte, off int64) (int, error) {
	if off+int64(len(p)) > h.Size() {
		return 0, fmt.Errorf("read of %d bytes at %d past the end (%d)", len(p), off, h.Size())
	}
	if off < int64(len(h.head)) {
		copy(p, h.head[off:])
	}
	if end := off + int64(len(p)); end > h.tablePtr {
		lo := max(off, h.tablePtr)
		copy(p[lo-off:], h.table[lo-h.tablePtr:])
	}
	return len(p), nil
}
func (h *hollowSource) Size() int64  { return h.tablePtr + int64(len(h.table)) }
func (h *hollowSource) Name() string { return "hollow.beton" }
func (h *hollowSource) Close() error { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAcquireHit reads samples one by one (AcquireSample, Release)
// along announced quasi-random orders, a new one each epoch, after a first
// epoch that warmed the cache, with a cache of all the data (every read a
// hit) and of a tenth of it (prefetching along the plan, evicting by next
// use). The source costs nothing, so what is measured is the cache's own
// work: cpu-ns/sample is the process's CPU time (every thread, prefetchers
// included) per sample read. It should not grow with the page count.
func BenchmarkAcquireHit(b *testing.B) {
	ctx := context.Background()
	for _, pages := range []int{64, 1024, 16384} {
		src := newHollowSource(pages)
		f, err := beton.Open(storage.ReaderAt(ctx, src), src.Size(), src.Name())
		if err != nil {
			b.Fatal(err)
		}
		for _, share := range []int{100, 10} {
			b.Run(fmt.Sprintf("pages=%d/cache=%d%%", pages, share), func(b *testing.B) {
				slots := max(1, pages*share/100)
				restore := arenaFlags
				arenaFlags |= syscall.MAP_NORESERVE // untouched slots: no RAM
				defer func() { arenaFlags = restore }()
				c, err := New(src, f, Options{Budget: int64(slots) * hollowPageSize, Readers: 4})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				rng := rand.New(rand.NewPCG(uint64(pages), uint64(share)))
				window := max(1, min(8, slots/2))
				read := func(s uint32) {
					pg, err := c.AcquireSample(ctx, int(s))
					if err != nil {
						b.Fatal(err)
					}
					pg.Release()
				}
				order := quasiRandomOrder(f, window, rng)
				if err := c.Announce("bench", order); err != nil {
					b.Fatal(err)
				}
				for _, s := range order {
					read(s)
				}
				// Orders are made beforehand and taken in turn: making one
				// is not the cache's work.
				var orders [][]uint32
				for range 3 {
					orders = append(orders, quasiRandomOrder(f, window, rng))
				}
				epochs, i := 0, len(order)
				read0 := c.Stats().PagesRead
				b.ResetTimer()
				cpu := cpuTime()
				for range b.N {
					if i == len(order) {
						order, i = orders[epochs%len(orders)], 0
						epochs++
						if err := c.Announce("bench", order); err != nil {
							b.Fatal(err)
						}
					}
					read(order[i])
					i++
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/sample")
				epochReads := float64(b.N) / float64(len(order))
				b.ReportMetric(float64(c.Stats().PagesRead-read0)/float64(pages)/epochReads, "reads/page/epoch")
			})
		}
	}
}
