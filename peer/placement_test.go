package peer

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// nodeURLs returns n sorted node URLs.
func nodeURLs(n int) []string {
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("http://10.0.%d.%d:7480", i/250, i%250)
	}
	slices.Sort(nodes)
	return nodes
}

// TestPlacementBounded: every page has one owner among the members, no
// node owns more than ⌈1.1·P/N⌉ pages, and every node
// computes the same owners; fewer pages than nodes, one node, and 4,096
// nodes place without a panic.
func TestPlacementBounded(t *testing.T) {
	for _, c := range []struct{ nodes, pages int }{
		{1, 1}, {1, 65}, {2, 5}, {3, 1}, {3, 6}, {3, 34}, {3, 65}, {8, 65}, {8, 7}, {64, 17000}, {64, 65}, {4096, 10}, {300, 5000},
	} {
		nodes := nodeURLs(c.nodes)
		pl := place(newRing(nodes), "abc", int64(c.pages))
		bound := int64(math.Ceil(loadFactor * float64(c.pages) / float64(c.nodes)))
		if pl.limit > bound || len(pl.owner) != c.pages {
			t.Errorf("%d pages on %d nodes: limit %d, %d owners; want at most %d, %d", c.pages, c.nodes, pl.limit, len(pl.owner), bound, c.pages)
		}
		counts := map[string]int64{}
		for p := range int64(c.pages) {
			counts[pl.ownerOf(p)]++
		}
		for n, k := range counts {
			if k > pl.limit || !slices.Contains(nodes, n) {
				t.Errorf("%d pages on %d nodes: %s owns %d, limit %d", c.pages, c.nodes, n, k, pl.limit)
			}
		}
		again := place(newRing(slices.Clone(nodes)), "abc", int64(c.pages))
		if !slices.Equal(pl.owner, again.owner) {
			t.Errorf("%d pages on %d nodes: two placements differ", c.pages, c.nodes)
		}
	}
}

// TestPlacementMoves: a node that joins or leaves moves few pages besides
// its share: bounded loads move some pages on (a full node's overflow
// goes further along the ring), and those are counted as pages_moved.
func TestPlacementMoves(t *testing.T) {
	for _, c := range []struct{ nodes, pages int }{{3, 65}, {8, 650}, {64, 17000}} {
		nodes := nodeURLs(c.nodes + 1)
		before := place(newRing(nodes[:c.nodes]), "abc", int64(c.pages))
		after := place(newRing(nodes), "abc", int64(c.pages))
		moved := movedPages(before, after)
		share := float64(c.pages) / float64(c.nodes+1)
		t.Logf("%d pages, %d nodes and one more: %d pages moved, %.2f× the new node's share", c.pages, c.nodes, moved, float64(moved)/share)
		if float64(moved) > 2.5*share {
			t.Errorf("%d pages, %d nodes and one more: %d pages moved, more than 2.5× the new node's share %.1f", c.pages, c.nodes, moved, share)
		}
	}
}

func BenchmarkPlace(b *testing.B) {
	r := newRing(nodeURLs(4096))
	for b.Loop() {
		place(r, "abc", 17000)
	}
}
