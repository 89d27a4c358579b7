package order_test

import (
	"fmt"
	"log"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/order"
)

// pages is a dataset of 16 samples in 4 pages of 4, as a PageMap: which
// samples lie in which page. A *beton.File is one too.
type pages struct{}

func (pages) NumSamples() int  { return 16 }
func (pages) NumPages() int    { return 4 }
func (pages) FirstPage() int64 { return 1 }
func (pages) PageSamples(p int64) []uint32 {
	first := uint32(4 * (p - 1))
	return []uint32{first, first + 1, first + 2, first + 3}
}
func (pages) SamplePage(i int) int64 { return int64(i/4) + 1 }

var _ order.PageMap = (*beton.File)(nil)

// The order of an epoch for each of two ranks: each rank reads whole pages
// of its own (rank 0 samples 4 to 11, pages 2 and 3; rank 1 pages 1 and 4), in an order that the kind, the seed, the epoch, the rank and
// the world size fix on every run and machine.
func ExampleGenerate() {
	for rank := range 2 {
		ids, err := order.Generate(pages{}, order.Options{
			Kind: order.QuasiRandom, Seed: 7, Epoch: 0,
			Rank: rank, WorldSize: 2, BatchSize: 2,
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("rank", rank, ids)
	}
	// Output:
	// rank 0 [11 8 10 7 6 5 9 4]
	// rank 1 [1 12 2 3 14 0 13 15]
}
