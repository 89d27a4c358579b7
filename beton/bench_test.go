package beton_test

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// An ImageNet-sized file: 1,281,167 samples of {image, label}, JPEGs of
// about 110 KB packed into 8 MiB pages (about 76 a page), as one writer lays
// them out. Only the header, descriptors, metadata and allocation table
// exist in memory; the 140 GB of data pages read as zeros.
const (
	bigSamples  = 1281167
	bigPageSize = beton.DefaultPageSize
)

type bigFile struct {
	sf     sparseFile
	allocs []beton.Alloc // in sample order
}

var bigFiles struct {
	once             sync.Once
	sorted, shuffled *bigFile
}

// imagenetFiles returns the file with its allocation table in sample (and
// pointer) order, and the same file with the table shuffled, as a writer
// with several workers may leave it.
func imagenetFiles() (sorted, shuffled *bigFile) {
	bigFiles.once.Do(func() {
		bigFiles.sorted, bigFiles.shuffled = buildImagenet(false), buildImagenet(true)
	})
	return bigFiles.sorted, bigFiles.shuffled
}

func buildImagenet(shuffle bool) *bigFile {
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	const rs = 24 // image at 0, label at 16
	metaStart := beton.HeaderSize + len(fields)*beton.DescriptorSize
	head := make([]byte, metaStart+bigSamples*rs)
	for i, fd := range fields {
		d := head[beton.HeaderSize+i*beton.DescriptorSize:]
		d[0] = byte(fd.Type)
		copy(d[1:], fd.Name)
	}
	metaEnd := uint64(len(head))
	ptr := (metaEnd + bigPageSize - 1) / bigPageSize * bigPageSize
	pageEnd := ptr + bigPageSize
	rng := rand.New(rand.NewPCG(1, 2))
	allocs := make([]beton.Alloc, bigSamples)
	for i := range allocs {
		size := uint64(80000 + rng.IntN(60000))
		if ptr+size > pageEnd {
			ptr, pageEnd = pageEnd, pageEnd+bigPageSize
		}
		allocs[i] = beton.Alloc{Sample: uint64(i), Ptr: ptr, Size: size}
		m := head[metaStart+i*rs:]
		m[0] = byte(beton.ModeJPEG)
		binary.LittleEndian.PutUint16(m[1:], uint16(300+i%200))
		binary.LittleEndian.PutUint16(m[3:], uint16(200+i%150))
		binary.LittleEndian.PutUint64(m[5:], ptr)
		binary.LittleEndian.PutUint64(m[16:], uint64(i%1000))
		ptr += size
	}
	tablePtr := pageEnd
	order := allocs
	if shuffle {
		order = append([]beton.Alloc(nil), allocs...)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	table := make([]byte, 0, len(order)*beton.AllocEntrySize)
	for _, a := range order {
		table = binary.LittleEndian.AppendUint64(table, a.Sample)
		table = binary.LittleEndian.AppendUint64(table, a.Ptr)
		table = binary.LittleEndian.AppendUint64(table, a.Size)
	}
	h := head[:beton.HeaderSize]
	binary.LittleEndian.PutUint16(h[0:], beton.Version)
	binary.LittleEndian.PutUint16(h[2:], uint16(len(fields)))
	binary.LittleEndian.PutUint32(h[4:], bigPageSize)
	binary.LittleEndian.PutUint64(h[8:], bigSamples)
	binary.LittleEndian.PutUint64(h[16:], tablePtr)
	return &bigFile{
		sf:     sparseFile{size: int64(tablePtr) + int64(len(table)), segs: []segment{{0, head}, {int64(tablePtr), table}}},
		allocs: allocs,
	}
}

// Open reads an ImageNet-sized file without touching its data pages, in a
// bounded number of allocations, and what it reads is right. (How long it
// takes is BenchmarkOpen's business.)
func TestOpenImagenetSize(t *testing.T) {
	sorted, shuffled := imagenetFiles()
	for _, c := range []struct {
		name string
		big  *bigFile
	}{{"sorted", sorted}, {"shuffled", shuffled}} {
		t.Run(c.name, func(t *testing.T) {
			cr := &countingReaderAt{r: &c.big.sf}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			f, err := beton.Open(cr, c.big.sf.size, "imagenet.beton")
			runtime.ReadMemStats(&ms1)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("Open: %d samples in %d pages (%d GB); read %d bytes in %d calls, %d mallocs, %d bytes allocated",
				f.NumSamples(), f.NumPages(), f.Size()>>30, cr.bytes, cr.calls, ms1.Mallocs-ms0.Mallocs, ms1.TotalAlloc-ms0.TotalAlloc)
			// The header, the field descriptors, the metadata and the
			// allocation table; nothing of the pages between them.
			meta := int64(len(c.big.sf.segs[0].data)) + int64(len(c.big.sf.segs[1].data))
			if cr.bytes > meta+meta/8 {
				t.Errorf("Open read %d bytes; the header, metadata and table are %d", cr.bytes, meta)
			}
			// Per-sample work in flat arrays, not an object per sample.
			if m, b := ms1.Mallocs-ms0.Mallocs, ms1.TotalAlloc-ms0.TotalAlloc; m > 100 || b > 128*bigSamples {
				t.Errorf("Open made %d allocations of %d bytes in all for %d samples", m, b, bigSamples)
			}
			if f.NumSamples() != bigSamples || f.NumPages() < bigSamples/80 || f.NumPages() > bigSamples/70 {
				t.Errorf("%d samples in %d pages", f.NumSamples(), f.NumPages())
			}
			for i := 0; i < bigSamples; i += 997 {
				a := c.big.allocs[i]
				img, err := f.Image(i, 0)
				if err != nil || img.Ptr != a.Ptr || img.Size != a.Size || img.Width != 300+i%200 || f.Int(i, 1) != int64(i%1000) {
					t.Fatalf("sample %d: %+v, %v; want %+v", i, img, err, a)
				}
				if p := f.SamplePage(i); p != f.PageOf(a.Ptr) || !slices.Contains(f.PageSamples(p), uint32(i)) {
					t.Fatalf("sample %d: page %d (listing %d samples), want page %d", i, p, len(f.PageSamples(p)), f.PageOf(a.Ptr))
				}
			}
		})
	}
}

func BenchmarkOpen(b *testing.B) {
	sorted, shuffled := imagenetFiles()
	for _, c := range []struct {
		name string
		big  *bigFile
	}{{"sorted", sorted}, {"shuffled", shuffled}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := beton.Open(&c.big.sf, c.big.sf.size, "imagenet.beton"); err != nil {
					b.Fatal(err)
				}
			}
			perOpen := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(perOpen/1e6, "ms/open")
			b.ReportMetric(perOpen/bigSamples, "ns/sample")
		})
	}
}

// BenchmarkLookup is what serving one sample costs once the file is open:
// its image's location, its page and its label.
func BenchmarkLookup(b *testing.B) {
	sorted, _ := imagenetFiles()
	f, err := beton.Open(&sorted.sf, sorted.sf.size, "imagenet.beton")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	var sum int64
	for b.Loop() {
		i = (i + 7919) % bigSamples // scattered, as a shuffled epoch reads
		img, err := f.Image(i, 0)
		if err != nil {
			b.Fatal(err)
		}
		sum += int64(img.Size) + f.SamplePage(i) + f.Int(i, 1)
	}
	if sum == 0 {
		b.Fatal("nothing looked up")
	}
}

// countingReaderAt counts what is read through it.
type countingReaderAt struct {
	r            io.ReaderAt
	calls, bytes int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.calls++
	c.bytes += int64(n)
	return n, err
}
