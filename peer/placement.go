// Who owns each page: consistent hashing with bounded loads.

package peer

import (
	"math"
	"slices"
)

// loadFactor bounds a node's share: no node owns more than
// ⌈loadFactor·P/N⌉ of an object's P pages over N nodes. Without a bound,
// the ring's shares differ by the page count's noise (√((N−1)/P)) and the
// ring's: up to 1.5/N with 34 pages over 3 nodes, and at 64 nodes some
// node above 1.1/N in most clusters, so that a budget of a little more
// than 1/N overflowed now and then, and that node read its excess from
// storage every epoch.
const loadFactor = 1.1

// placement is the owner of every page of one object under one set of
// members. It is immutable once built; every node computes the same from
// the same members.
type placement struct {
	nodes []string // sorted, as members has them
	owner []int32  // per page, an index into nodes
	loads []int64  // per node, the pages it owns
	limit int64    // the most pages a node may own
}

// place assigns each of the pages of the object keyed by prefix to a node
// of r: consistent hashing with bounded loads (Mirrokni, Thorup and
// Zadimoghaddam, 2018, as Google's and Vimeo's load balancers use it).
// Pages are placed in order, each at the first node on its ring path
// (from its key's point on, as ring.owner walks) whose load is under the
// bound, so that no node owns more than its share and a little, and a
// change of the members moves few pages besides those of the nodes that
// came or went (pages_moved counts them).
//
// It is written here, on the members' ring, because the library that
// offers it (github.com/buraksezer/consistent) sorts its whole ring once
// per member added: placing 17,000 pages on 4,096 members (--peers' most)
// took 49 s of CPU, where this takes a few milliseconds beside the
// ring's build; and the owner it walks to is then on the same ring path
// as the node that fills a page while its owner is down (ring.successor).
func place(r *ring, prefix string, pages int64) *placement {
	pl := &placement{nodes: r.nodes, owner: make([]int32, pages)}
	if len(r.nodes) == 0 {
		return pl
	}
	pl.limit = int64(math.Ceil(loadFactor * float64(pages) / float64(len(r.nodes))))
	load := make([]int64, len(r.nodes))
	pl.loads = load
	for p := range pages {
		i := r.first(pageKey(prefix, p))
		// The bounds sum to more than the pages, and every node has
		// points on the ring: a node with room is found within one turn.
		for k := 0; k < len(r.hashes) && load[r.owners[i]] >= pl.limit; k++ {
			if i++; i == len(r.hashes) {
				i = 0
			}
		}
		pl.owner[p] = r.owners[i]
		load[r.owners[i]]++
	}
	return pl
}

// ownerOf returns the node that owns page p.
func (pl *placement) ownerOf(p int64) string { return pl.nodes[pl.owner[p]] }

// count returns how many pages node owns.
func (pl *placement) count(node string) int64 {
	if i, ok := slices.BinarySearch(pl.nodes, node); ok {
		return pl.loads[i]
	}
	return 0
}

// movedPages returns how many pages have another owner in b than in a (of
// the same object).
func movedPages(a, b *placement) int64 {
	var n int64
	for p := range min(len(a.owner), len(b.owner)) {
		if a.ownerOf(int64(p)) != b.ownerOf(int64(p)) {
			n++
		}
	}
	return n
}

// Shares places the pages of an object (by its identity, as Open does) on
// nodes as every node of the tier does, and returns how many pages each
// node owns, in the order of nodes sorted, and the most a node may own;
// with bounded false, as a plain hash ring would (the limit is then the
// pages). For tools that size clusters (tools/clustersim -shares).
func Shares(nodes []string, identity string, pages int64, bounded bool) (counts []int64, limit int64) {
	r := newRing(slices.Sorted(slices.Values(nodes)))
	prefix := prefixOf(identity)
	if !bounded {
		counts = make([]int64, len(nodes))
		for p := range pages {
			counts[r.owners[r.first(pageKey(prefix, p))]]++
		}
		return counts, pages
	}
	pl := place(r, prefix, pages)
	return pl.loads, pl.limit
}
