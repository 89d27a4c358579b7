package peer

import (
	"cmp"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
)

// ring is the hash ring of one set of members: replicas points a node,
// placed as groupcache's consistenthash places them (TestRingAgrees). Where two
// points collide, the node added later (the greater, as members are
// sorted) owns the point, as in consistenthash; the other's point follows
// it. It is immutable once built.
type ring struct {
	nodes  []string
	hashes []uint32 // sorted
	owners []int32  // the node of each point, an index into nodes
}

// ringHash hashes a key for the ring: a range's key (PAGE@OFF+LEN) as its
// page's, so that its owner has the page.
func ringHash(b []byte) uint32 {
	if i := strings.IndexByte(string(b), '@'); i >= 0 {
		b = b[:i]
	}
	return crc32.ChecksumIEEE(b)
}

func newRing(nodes []string) *ring {
	type point struct {
		hash uint32
		node int32
	}
	pts := make([]point, 0, len(nodes)*replicas)
	var buf []byte
	for i, n := range nodes {
		for j := range replicas {
			buf = append(strconv.AppendInt(buf[:0], int64(j), 10), n...)
			pts = append(pts, point{ringHash(buf), int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(b.node, a.node))
	})
	r := &ring{nodes: nodes, hashes: make([]uint32, len(pts)), owners: make([]int32, len(pts))}
	for i, p := range pts {
		r.hashes[i], r.owners[i] = p.hash, p.node
	}
	return r
}

// first returns the index of key's point: the first at or after its hash.
func (r *ring) first(key string) int {
	h := ringHash([]byte(key))
	i, _ := slices.BinarySearch(r.hashes, h)
	if i == len(r.hashes) {
		i = 0
	}
	return i
}

// owner returns the node that owns key, or "" on an empty ring.
func (r *ring) owner(key string) string {
	if len(r.hashes) == 0 {
		return ""
	}
	return r.nodes[r.owners[r.first(key)]]
}

// successor returns the node that owns key among the nodes that are not
// down: the first such node on the ring from key's point on, as a ring
// of those nodes alone would say; "" when every node is down. Its cost is
// the points it passes, not the members': a walk, not a new ring, each time
// the nodes down change.
func (r *ring) successor(key string, down func(node string) bool) string {
	if len(r.hashes) == 0 {
		return ""
	}
	seen := make(map[int32]bool) // nodes found down
	for i, k := r.first(key), 0; k < len(r.hashes); i, k = i+1, k+1 {
		if i == len(r.hashes) {
			i = 0
		}
		n := r.owners[i]
		if seen[n] {
			continue
		}
		if !down(r.nodes[n]) {
			return r.nodes[n]
		}
		seen[n] = true
		if len(seen) == len(r.nodes) {
			break
		}
	}
	return ""
}
