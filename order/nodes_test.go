package order

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// nodePages runs every rank of a node-affine epoch and returns the data
// pages each node read, checking on the way that the epoch delivers every
// sample, each by one rank, with equal counts.
func nodePages(t *testing.T, l PageMap, o Options) []map[int64]bool {
	t.Helper()
	per := o.WorldSize / o.Nodes
	pages := make([]map[int64]bool, o.Nodes)
	owner := map[uint32]int{}
	length := -1
	for r := range o.WorldSize {
		o := o
		o.Rank = r
		ord := generate(t, l, o)
		if length >= 0 && len(ord) != length {
			t.Fatalf("epoch %d: rank %d has %d samples, rank 0 %d", o.Epoch, r, len(ord), length)
		}
		length = len(ord)
		node := r / per
		if pages[node] == nil {
			pages[node] = map[int64]bool{}
		}
		for _, s := range ord {
			if q, ok := owner[s]; ok && q != r {
				t.Fatalf("epoch %d: sample %d is read by ranks %d and %d", o.Epoch, s, q, r)
			}
			owner[s] = r
			if p := l.SamplePage(int(s)); p != beton.NoPage {
				pages[node][p] = true
			}
		}
	}
	if len(owner) != l.NumSamples() {
		t.Fatalf("epoch %d: %d of %d samples read", o.Epoch, len(owner), l.NumSamples())
	}
	for k := range pages {
		for j := range k {
			for p := range pages[k] {
				if pages[j][p] {
					t.Fatalf("epoch %d: page %d is read by nodes %d and %d", o.Epoch, p, j, k)
				}
			}
		}
	}
	return pages
}

// TestNodeAffine: with move fraction 0 every node reads the same pages
// every epoch; with fraction f, from one epoch to the next each node gives
// up f of its pages (±1) and takes as many; every epoch delivers every
// sample once, pages not split between nodes or ranks.
func TestNodeAffine(t *testing.T) {
	l := newSynth(synthSpec{n: 20000, mean: 37})
	for _, kind := range []Kind{QuasiRandom, Random} {
		for _, nodes := range []int{2, 4, 8} {
			for _, f := range []float64{0, 0.1, 0.25} {
				t.Run(fmt.Sprintf("%s/nodes-%d/move-%g", kind, nodes, f), func(t *testing.T) {
					o := Options{Kind: kind, Seed: 5, WorldSize: 2 * nodes, Nodes: nodes, MoveFraction: f, BatchSize: 64}
					var prev []map[int64]bool
					for e := range 4 {
						o.Epoch = uint64(e)
						cur := nodePages(t, l, o)
						if prev != nil {
							for k := range cur {
								moved := 0
								for p := range prev[k] {
									if !cur[k][p] {
										moved++
									}
								}
								want := f * float64(len(prev[k]))
								if math.Abs(float64(moved)-want) > 1.5 {
									t.Errorf("epoch %d, node %d: %d of its %d pages moved, want %.1f (±1)", e, k, moved, len(prev[k]), want)
								}
							}
						}
						prev = cur
					}
				})
			}
		}
	}
}

func TestNodeAffineOptions(t *testing.T) {
	l := newSynth(synthSpec{n: 500, mean: 37})
	for _, o := range []Options{
		{Kind: QuasiRandom, WorldSize: 6, Nodes: 4},
		{Kind: QuasiRandom, WorldSize: 4, Nodes: 8},
		{Kind: Sequential, WorldSize: 4, Nodes: 2},
		{Kind: Random, WorldSize: 4, Nodes: 2, MoveFraction: 1.5},
		{Kind: Random, WorldSize: 4, Nodes: 2, MoveFraction: math.NaN()},
		{Kind: Random, WorldSize: 4, Nodes: 2, Resumed: []Segment{{4, 3}}},
	} {
		if _, err := Generate(l, o); err == nil {
			t.Errorf("Generate(%+v) gave no error", o)
		}
	}
	// Fewer pages than nodes: a node would get no page, and its ranks
	// fewer samples than the others'.
	few := newSynth(synthSpec{n: 60, mean: 30})
	if _, err := Generate(few, Options{Kind: Random, WorldSize: 8, Rank: 0, Nodes: 8}); !errors.Is(err, ErrTooFewPages) {
		t.Errorf("a node with no page: %v, want ErrTooFewPages", err)
	}
	// One node is the global order.
	a := generate(t, l, Options{Kind: QuasiRandom, Seed: 1, WorldSize: 2, Rank: 1})
	b := generate(t, l, Options{Kind: QuasiRandom, Seed: 1, WorldSize: 2, Rank: 1, Nodes: 1})
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("Nodes 1 changed the order")
	}
}

// TestPages: Pages gives the set of data pages of the rank's order, for
// global and node-affine orders.
func TestPages(t *testing.T) {
	l := newSynth(synthSpec{n: 5000, mean: 37, noDataEvery: 9})
	for _, o := range []Options{
		{Kind: QuasiRandom, Seed: 2, Epoch: 1, WorldSize: 4, Rank: 3},
		{Kind: Random, Seed: 2, Epoch: 1, WorldSize: 1},
		{Kind: Sequential, WorldSize: 3, Rank: 1},
		{Kind: QuasiRandom, Seed: 2, Epoch: 2, WorldSize: 8, Rank: 5, Nodes: 4, MoveFraction: 0.3},
	} {
		want := map[int64]bool{}
		for _, s := range generate(t, l, o) {
			if p := l.SamplePage(int(s)); p != beton.NoPage {
				want[p] = true
			}
		}
		pages, err := Pages(l, o)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int64]bool{}
		for _, p := range pages {
			if got[p] {
				t.Errorf("%+v: Pages lists page %d twice", o, p)
			}
			got[p] = true
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%+v: Pages gives %d pages, the order reads %d", o, len(got), len(want))
		}
	}
}
