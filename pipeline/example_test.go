package pipeline_test

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
	"github.com/ffcvfs/ffcvfs/storage"
)

// printSink is a Sink of the example's own: two slots in memory, each
// batch printed when the pipeline publishes it. ffcvfeed's Sink is a ring
// in shared memory that a training process reads (package cudafeed).
type printSink struct {
	free  chan int
	slots [2][][]byte
}

func newPrintSink(p *pipeline.Pipeline) *printSink {
	s := &printSink{free: make(chan int, 2)}
	for i := range s.slots {
		for _, f := range p.Fields() {
			n := 1
			for _, d := range f.Shape {
				n *= d
			}
			size := map[string]int{"uint8": 1, "int64": 8}[f.DType]
			s.slots[i] = append(s.slots[i], make([]byte, n*size))
		}
		s.free <- i
	}
	return s
}

func (s *printSink) Acquire(ctx context.Context) (int, error) {
	select {
	case i := <-s.free:
		return i, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *printSink) Buffers(slot int) [][]byte { return s.slots[slot] }

// Publish prints the batch (its first labels) and frees its slot.
func (s *printSink) Publish(slot, epoch, batch, size int) error {
	labels := s.slots[slot][1]
	first := make([]int64, 4)
	for i := range first {
		first[i] = int64(binary.LittleEndian.Uint64(labels[8*i:]))
	}
	fmt.Printf("epoch %d batch %d: %d images, labels %v...\n", epoch, batch, size, first)
	s.free <- slot
	return nil
}

// Batches from a beton: 64-pixel random-resized crops of its JPEGs and
// their labels, in sequential order, decoded by 2 workers into the slots
// a Sink lends and published in batch order.
func ExampleNew() {
	path, cleanup := fixture("imagefolder-jpg.beton")
	defer cleanup()
	ctx := context.Background()
	src, f, err := pagecache.OpenBeton(ctx, path, storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	c, err := pagecache.New(src, f, pagecache.Options{Budget: 2 * f.PageSize()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := pipeline.New(c, pipeline.Options{
		Order:     order.Options{Kind: order.Sequential},
		BatchSize: 64, Workers: 2,
		Op:     decode.Op{OutW: 64, OutH: 64},
		Logger: slog.New(slog.DiscardHandler), // its advice: this beton's JPEGs lack restart markers
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, fs := range p.Fields() {
		fmt.Println(fs.Name, fs.DType, fs.Shape)
	}
	n, err := p.RunEpoch(ctx, 0, newPrintSink(p))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "images")
	// Output:
	// image uint8 [64 64 64 3]
	// label int64 [64]
	// epoch 0 batch 0: 64 images, labels [0 0 0 0]...
	// epoch 0 batch 1: 64 images, labels [3 3 3 3]...
	// epoch 0 batch 2: 64 images, labels [6 6 6 6]...
	// epoch 0 batch 3: 8 images, labels [9 9 9 9]...
	// 200 images
}

// fixture unpacks testdata/beton/NAME.gz into a folder of its own.
func fixture(name string) (string, func()) {
	dir, err := os.MkdirTemp("", "pipeline-example")
	if err != nil {
		log.Fatal(err)
	}
	in, err := os.Open(filepath.Join("..", "testdata", "beton", name+".gz"))
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		log.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		log.Fatal(err)
	}
	if err := out.Close(); err != nil {
		log.Fatal(err)
	}
	return filepath.Join(dir, name), func() { os.RemoveAll(dir) }
}
