package order

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"

	"github.com/ffcvfs/ffcvfs/beton"
)

// PageMap is what an order needs to know about a dataset: which samples lie
// in which page. *beton.File satisfies it.
type PageMap interface {
	// NumSamples is the number of samples; ids run from 0 to NumSamples-1.
	NumSamples() int
	// NumPages is the number of data pages, numbered from FirstPage.
	NumPages() int
	FirstPage() int64
	// PageSamples returns the ids of the samples whose data lie in page p.
	// Generate does not modify the result.
	PageSamples(p int64) []uint32
	// SamplePage returns the page of sample i, or beton.NoPage for a
	// sample with no data.
	SamplePage(i int) int64
}

var _ PageMap = (*beton.File)(nil)

var (
	// ErrPageMap is returned for a PageMap whose pages and samples disagree:
	// a page names a sample id out of range or twice, or the pages and the
	// samples without a page do not add up to NumSamples.
	ErrPageMap = errors.New("inconsistent page map")

	// ErrTooFewPages is returned when a rank gets no page while others
	// do and padding (DropLast false) has nothing of its own to repeat.
	ErrTooFewPages = errors.New("too few pages for the number of ranks")
)

// unit is what an order moves as a whole: one data page, or one virtual page
// of samples with no data.
type unit struct {
	page    int64    // absolute page, or beton.NoPage for a virtual page
	samples []uint32 // not to be modified: may be the PageMap's own slice
}

func (u unit) String() string {
	if u.page == beton.NoPage {
		return "a virtual page (samples with no data)"
	}
	return fmt.Sprintf("page %d", u.page)
}

// shape is a PageMap broken into units.
type shape struct {
	units       []unit // data pages in file order, then virtual pages
	dataPages   int    // data pages with at least one sample
	dataSamples int    // samples in those pages
}

// pageShape breaks l into units. Data pages with no sample are left out.
// The samples without a page are cut, in id order, into virtual pages of the
// mean data-page size rounded up, or into worldSize equal parts when there
// are no data pages.
func pageShape(l PageMap, worldSize int) (shape, error) {
	n := l.NumSamples()
	first := l.FirstPage()
	var sh shape
	sh.units = make([]unit, 0, l.NumPages()+1)
	for p := range int64(l.NumPages()) {
		s := l.PageSamples(first + p)
		if len(s) == 0 {
			continue
		}
		sh.units = append(sh.units, unit{page: first + p, samples: s})
		sh.dataPages++
		sh.dataSamples += len(s)
	}
	if sh.dataSamples > n {
		return shape{}, fmt.Errorf("pages hold %d samples, the dataset has %d: %w", sh.dataSamples, n, ErrPageMap)
	}
	if sh.dataSamples == n {
		return sh, nil
	}
	none := make([]uint32, 0, n-sh.dataSamples)
	for i := range n {
		if l.SamplePage(i) == beton.NoPage {
			none = append(none, uint32(i))
		}
	}
	if sh.dataSamples+len(none) != n {
		return shape{}, fmt.Errorf("pages hold %d samples and %d have no page, the dataset has %d: %w",
			sh.dataSamples, len(none), n, ErrPageMap)
	}
	size := ceilDiv(len(none), worldSize)
	if sh.dataPages > 0 {
		size = ceilDiv(sh.dataSamples, sh.dataPages)
	}
	for len(none) > 0 {
		k := min(size, len(none))
		sh.units = append(sh.units, unit{page: beton.NoPage, samples: none[:k:k]})
		none = none[k:]
	}
	return sh, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// assign deals units to ranks in the order given: each to the rank with the
// fewest samples so far, the lowest rank on ties. It returns the indices of
// rank's units, in that order, and the smallest and largest rank counts.
func assign(units []unit, worldSize, rank int) (mine []int, lo, hi int) {
	if worldSize == 1 {
		mine = make([]int, len(units))
		total := 0
		for i := range units {
			mine[i] = i
			total += len(units[i].samples)
		}
		return mine, total, total
	}
	// A min-heap of (count, rank). All zero with ranks ascending is
	// already a heap.
	h := make([]load, worldSize)
	for r := range h {
		h[r] = load{0, r}
	}
	mine = make([]int, 0, len(units)/worldSize+1)
	for i := range units {
		if h[0].rank == rank {
			mine = append(mine, i)
		}
		h[0].n += len(units[i].samples)
		siftDown(h)
	}
	lo, hi = h[0].n, h[0].n
	for _, x := range h {
		lo, hi = min(lo, x.n), max(hi, x.n)
	}
	return mine, lo, hi
}

// dealAll deals units to worldSize ranks as assign does, for every rank at
// once: it returns each rank's unit indices, in order, and the smallest
// and largest rank counts. Its work is O(units · log worldSize +
// worldSize), where a call of assign per rank took worldSize times that.
func dealAll(units []unit, worldSize int) (byRank [][]int, lo, hi int) {
	owner := make([]int32, len(units))
	h := make([]load, worldSize)
	for r := range h {
		h[r] = load{0, r}
	}
	count := make([]int32, worldSize)
	for i := range units {
		owner[i] = int32(h[0].rank)
		count[h[0].rank]++
		h[0].n += len(units[i].samples)
		siftDown(h)
	}
	lo, hi = h[0].n, h[0].n
	for _, x := range h {
		lo, hi = min(lo, x.n), max(hi, x.n)
	}
	// One backing array for all ranks' lists.
	all := make([]int, len(units))
	byRank = make([][]int, worldSize)
	at := 0
	for r := range byRank {
		byRank[r] = all[at : at : at+int(count[r])]
		at += int(count[r])
	}
	for i, r := range owner {
		byRank[r] = append(byRank[r], i)
	}
	return byRank, lo, hi
}

type load struct{ n, rank int }

func (a load) less(b load) bool { return a.n < b.n || a.n == b.n && a.rank < b.rank }

// siftDown restores the heap after h[0] grew.
func siftDown(h []load) {
	i := 0
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].less(h[c]) {
			c++
		}
		if !h[c].less(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// Generate returns the order of sample ids for one epoch of one rank, as the
// package documentation describes. The result is a new slice the caller owns.
func Generate(l PageMap, o Options) ([]uint32, error) {
	return GenerateContext(context.Background(), l, o)
}

// GenerateContext is Generate, giving up with ctx's error when ctx is done
// while it replays the parts of a resumed epoch.
func GenerateContext(ctx context.Context, l PageMap, o Options) ([]uint32, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	n := l.NumSamples()
	if o.Kind == Sequential && o.WorldSize == 1 && len(o.Resumed) == 0 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(i)
		}
		return out, nil
	}
	// The units are those of the epoch's first part, whatever the world
	// sizes after it: the epoch's samples stay put.
	shapeWorld := o.WorldSize
	if len(o.Resumed) > 0 {
		shapeWorld = o.Resumed[0].WorldSize
	}
	sh, err := pageShape(l, shapeWorld)
	if err != nil {
		return nil, err
	}
	if err := checkUnits(sh.units, n); err != nil {
		return nil, err
	}
	window := o.Window
	if window == 0 {
		window = defaultWindow(o.BatchSize, sh.dataPages, sh.dataSamples)
	}
	if o.Nodes > 1 {
		return nodeOrder(sh.units, n, o, window)
	}
	if o.Kind != Sequential {
		shuffle(pagesStream(o.Seed, o.Epoch), sh.units)
	}
	units := sh.units
	if len(o.Resumed) > 0 {
		if units, err = restOf(ctx, units, n, o, window); err != nil {
			return nil, err
		}
	}
	return rankOrder(units, n, o.Kind, o.WorldSize, o.Rank, o.DropLast, window, len(o.Resumed) > 0, streamOf(o, o.Rank, o.WorldSize, o.Resumed))
}

// nodeUnits splits units among nodes for epoch: the units are shuffled by
// the seed alone into a ring, node k holds the k-th of nodes equal arcs of
// it, and from one epoch to the next every arc turns by moveFraction of its
// length (rounded down; so after e epochs by floor(e·moveFraction·P/nodes)
// units, P units in all, moveFraction taken to millionths). It returns, for
// each node, the indices of its units in the ring's order.
func nodeUnits(count, nodes int, seed, epoch uint64, moveFraction float64) [][]int {
	ring := make([]int, count)
	for i := range ring {
		ring[i] = i
	}
	shuffle(nodesStream(seed), ring)
	shift := 0
	if count > 0 {
		// floor(e·f·P/nodes) mod P in integers, with f in millionths, so
		// that no float rounding or conversion can differ by platform.
		micro := int64(math.Round(moveFraction * 1e6))
		x := new(big.Int).SetUint64(epoch)
		x.Mul(x, big.NewInt(micro*int64(count)))
		x.Quo(x, big.NewInt(int64(nodes)*1e6))
		shift = int(x.Mod(x, big.NewInt(int64(count))).Int64())
	}
	out := make([][]int, nodes)
	for k := range nodes {
		lo, hi := k*count/nodes, (k+1)*count/nodes
		arc := make([]int, 0, hi-lo)
		for i := lo; i < hi; i++ {
			arc = append(arc, ring[(i+shift)%count])
		}
		out[k] = arc
	}
	return out
}

// nodeOrder is Generate for a node-affine order: the units of the rank's
// node (nodeUnits), shuffled for the epoch and dealt to the node's ranks;
// every rank of every node is then brought to the same count.
func nodeOrder(units []unit, n int, o Options, window int) ([]uint32, error) {
	per := o.WorldSize / o.Nodes
	node, local := o.Rank/per, o.Rank%per
	mineUnits, lo, hi := nodeShare(units, o)
	out, err := rankOrder(mineUnits, n, o.Kind, per, local, o.DropLast, window, false, rankStream(o.Seed, o.Epoch, o.Rank, o.WorldSize))
	if err != nil {
		return nil, fmt.Errorf("node %d of %d: %w", node, o.Nodes, err)
	}
	// rankOrder equalized the node's ranks; now every rank of the job.
	if o.DropLast {
		return out[:min(len(out), lo)], nil
	}
	if len(out) == 0 && hi > 0 {
		return nil, fmt.Errorf("node %d of %d gets no page: %d pages for %d nodes; use fewer nodes: %w",
			node, o.Nodes, len(units), o.Nodes, ErrTooFewPages)
	}
	return padTo(out, hi), nil
}

// padTo brings a non-empty order up to n samples by repeating it from its
// start, as torch's DistributedSampler pads.
func padTo(out []uint32, n int) []uint32 {
	for len(out) > 0 && len(out) < n {
		out = append(out, out[:min(len(out), n-len(out))]...)
	}
	return out
}

// nodeShare returns the units of the rank's node for the epoch of a
// node-affine order, shuffled for the epoch, and the smallest and largest
// counts the ranks of all nodes get.
func nodeShare(units []unit, o Options) (mine []unit, lo, hi int) {
	per := o.WorldSize / o.Nodes
	node := o.Rank / per
	lo = -1
	for k, arc := range nodeUnits(len(units), o.Nodes, o.Seed, o.Epoch, o.MoveFraction) {
		nu := make([]unit, len(arc))
		for i, u := range arc {
			nu[i] = units[u]
		}
		shuffle(pagesStream(o.Seed, o.Epoch), nu)
		_, l, h := assign(nu, per, 0)
		if lo < 0 || l < lo {
			lo = l
		}
		hi = max(hi, h)
		if k == node {
			mine = nu
		}
	}
	return mine, max(lo, 0), hi
}

// Pages returns the data pages of one rank's order for an epoch, in the
// order it starts them (a quasi-random order opens them in this order, a
// window at a time), without making the order: O(pages) where Generate is
// O(samples). For simulations of caches at a large scale. Resumed orders
// are not supported.
func Pages(l PageMap, o Options) ([]int64, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(o.Resumed) > 0 {
		return nil, fmt.Errorf("Pages of a resumed order: not supported")
	}
	sh, err := pageShape(l, o.WorldSize)
	if err != nil {
		return nil, err
	}
	units, worldSize, rank := sh.units, o.WorldSize, o.Rank
	if o.Nodes > 1 {
		units, _, _ = nodeShare(units, o)
		worldSize, rank = o.WorldSize/o.Nodes, o.Rank%(o.WorldSize/o.Nodes)
	} else if o.Kind != Sequential {
		shuffle(pagesStream(o.Seed, o.Epoch), units)
	}
	mine, _, _ := assign(units, worldSize, rank)
	pages := make([]int64, 0, len(mine))
	for _, u := range mine {
		if units[u].page != beton.NoPage {
			pages = append(pages, units[u].page)
		}
	}
	return pages, nil
}

// streamOf is the stream of rank's order among worldSize ranks, after the
// segments before (none: the epoch's first part).
func streamOf(o Options, rank, worldSize int, before []Segment) stream {
	if len(before) == 0 {
		return rankStream(o.Seed, o.Epoch, rank, worldSize)
	}
	return resumeStream(o.Seed, o.Epoch, rank, worldSize, before)
}

// checkUnits checks that every sample of the units is in range and in one
// unit only.
func checkUnits(units []unit, n int) error {
	seen := make([]uint64, ceilDiv(n, 64))
	for _, u := range units {
		for _, s := range u.samples {
			if int(s) >= n {
				return fmt.Errorf("%s names sample %d, the dataset has %d: %w", u, s, n, ErrPageMap)
			}
			if seen[s/64]&(1<<(s%64)) != 0 {
				return fmt.Errorf("sample %d is in %s and in another page: %w", s, u, ErrPageMap)
			}
			seen[s/64] |= 1 << (s % 64)
		}
	}
	return nil
}

// restOf replays the segments of o.Resumed, each over the rest of the one
// before, and returns the units of what is left: the samples no segment
// took, unit by unit in the epoch's order. Each segment's units are split
// and dealt once for all its ranks; the work is O(units · log W + W ·
// log W + samples) per segment of W ranks, and ctx is checked between
// ranks.
func restOf(ctx context.Context, units []unit, n int, o Options, window int) ([]unit, error) {
	taken := make([]uint64, ceilDiv(n, 64))
	for k, seg := range o.Resumed {
		before := o.Resumed[:k]
		dealt := units
		if k > 0 && len(dealt) < seg.WorldSize {
			dealt = splitUnits(dealt, seg.WorldSize)
		}
		byRank, lo, hi := dealAll(dealt, seg.WorldSize)
		for r := range seg.WorldSize {
			if r%1024 == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			ord, err := orderOf(dealt, byRank[r], lo, hi, n, o.Kind, seg.WorldSize, r, o.DropLast, window, k > 0, streamOf(o, r, seg.WorldSize, before))
			if err != nil {
				return nil, fmt.Errorf("resumed segment %d (%s), rank %d: %w", k, seg, r, err)
			}
			cut, ok := cutAt(ord, seg.Position, o.Served)
			if !ok {
				return nil, fmt.Errorf("resumed segment %d (%s): position %d is past the end of rank %d's order",
					k, seg, seg.Position, r)
			}
			for _, s := range ord[:cut] {
				taken[s/64] |= 1 << (s % 64)
			}
		}
		units = untaken(units, taken)
	}
	return units, nil
}

// cutAt returns the length of the start of ord that holds pos samples the
// reader sees (every sample when served is nil), and false when ord holds
// fewer.
func cutAt(ord []uint32, pos int, served func(uint32) bool) (int, bool) {
	if served == nil {
		return pos, pos <= len(ord)
	}
	if pos == 0 {
		return 0, true
	}
	seen := 0
	for i, s := range ord {
		if served(s) {
			if seen++; seen == pos {
				return i + 1, true
			}
		}
	}
	return 0, false
}

// untaken returns the units with the taken samples removed, and the units
// left empty dropped. Units that lose nothing are kept as they are.
func untaken(units []unit, taken []uint64) []unit {
	out := make([]unit, 0, len(units))
	for _, u := range units {
		left := 0
		for _, s := range u.samples {
			if taken[s/64]&(1<<(s%64)) == 0 {
				left++
			}
		}
		switch left {
		case 0:
			continue
		case len(u.samples):
			out = append(out, u)
			continue
		}
		rest := make([]uint32, 0, left)
		for _, s := range u.samples {
			if taken[s/64]&(1<<(s%64)) == 0 {
				rest = append(rest, s)
			}
		}
		out = append(out, unit{page: u.page, samples: rest})
	}
	return out
}

// rankOrder deals the units to worldSize ranks and makes rank's order from
// its own. The rest of a resumed epoch (rest) may hold fewer units than
// ranks: its units are then split (splitUnits) so that every rank gets
// samples of its own, and only when the rest holds fewer samples than
// ranks is a rank left without any padded from the whole rest, so that a
// resume near an epoch's end works.
func rankOrder(units []unit, n int, kind Kind, worldSize, rank int, dropLast bool, window int, rest bool, rs stream) ([]uint32, error) {
	if rest && len(units) < worldSize {
		units = splitUnits(units, worldSize)
	}
	mine, lo, hi := assign(units, worldSize, rank)
	return orderOf(units, mine, lo, hi, n, kind, worldSize, rank, dropLast, window, rest, rs)
}

// orderOf makes rank's order from its units (mine, indices into units), as
// rankOrder does once they are dealt; lo and hi are the smallest and
// largest rank counts of the deal.
func orderOf(units []unit, mine []int, lo, hi, n int, kind Kind, worldSize, rank int, dropLast bool, window int, rest bool, rs stream) ([]uint32, error) {
	own := 0
	for _, u := range mine {
		own += len(units[u].samples)
	}
	if !dropLast && own == 0 && hi > 0 && !rest {
		dataUnits := 0
		for _, u := range units {
			if u.page != beton.NoPage {
				dataUnits++
			}
		}
		return nil, fmt.Errorf("rank %d of %d gets no page: %d pages (%d of them virtual) for %d ranks; use fewer ranks or DropLast: %w",
			rank, worldSize, len(units), len(units)-dataUnits, worldSize, ErrTooFewPages)
	}
	total := own
	if !dropLast {
		total = hi
	}
	buf := make([]uint32, 0, total)
	for _, u := range mine {
		buf = append(buf, units[u].samples...)
	}

	var out []uint32
	switch kind {
	case Sequential:
		// Ascending ids: by a bitmap of every sample when the rank holds
		// a good share of them, else by sorting its own (a rank of many
		// must not cost O(NumSamples)).
		if len(buf) >= n/64 {
			seen := make([]uint64, ceilDiv(n, 64))
			for _, s := range buf {
				seen[s/64] |= 1 << (s % 64)
			}
			out = idsOf(buf[:0], seen)
		} else {
			slices.Sort(buf)
			out = buf
		}
	case Random:
		shuffle(rs, buf)
		out = buf
	case QuasiRandom:
		sizes := make([]int, len(mine))
		for i, u := range mine {
			sizes[i] = len(units[u].samples)
		}
		out = make([]uint32, 0, total)
		out = quasiRandom(out, buf, sizes, window, rs)
	}

	if dropLast {
		return out[:lo], nil
	}
	if own == 0 && hi > 0 {
		// A rank of a resumed rest with no unit: padded from the rest's
		// first samples.
		for _, u := range units {
			out = append(out, u.samples[:min(len(u.samples), hi-len(out))]...)
			if len(out) == hi {
				break
			}
		}
	}
	return padTo(out, hi), nil
}

// splitUnits halves the largest unit (the first of the largest, its first
// half staying in place) until there are at least worldSize units or every
// unit holds one sample: the rest of an epoch with fewer pages than ranks,
// whose pages are then shared by ranks, but each sample by one. The
// largest piece is found by a heap, ordered by size, then by where the
// piece lies (its unit, its offset in it): O(worldSize · log worldSize)
// for what a scan per split made O(worldSize²).
func splitUnits(units []unit, worldSize int) []unit {
	if len(units) == 0 || len(units) >= worldSize {
		return slices.Clone(units)
	}
	h := make(pieceHeap, len(units))
	for i, u := range units {
		h[i] = piece{unit: i, size: len(u.samples)}
	}
	h.init()
	for len(h) < worldSize && h[0].size >= 2 {
		p := h[0]
		half := p.size / 2
		h[0].size = half
		h.down(0)
		h.push(piece{unit: p.unit, off: p.off + half, size: p.size - half})
	}
	slices.SortFunc(h, func(a, b piece) int {
		if a.unit != b.unit {
			return a.unit - b.unit
		}
		return a.off - b.off
	})
	out := make([]unit, len(h))
	for i, p := range h {
		u := units[p.unit]
		out[i] = unit{page: u.page, samples: u.samples[p.off : p.off+p.size : p.off+p.size]}
	}
	return out
}

// piece is part of a unit being split: size samples from off.
type piece struct{ unit, off, size int }

// pieceHeap is a max-heap of pieces: the largest first, the first-lying of
// equal ones first.
type pieceHeap []piece

func (h pieceHeap) before(i, j int) bool {
	a, b := h[i], h[j]
	if a.size != b.size {
		return a.size > b.size
	}
	if a.unit != b.unit {
		return a.unit < b.unit
	}
	return a.off < b.off
}

func (h pieceHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h pieceHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h.before(c+1, c) {
			c++
		}
		if !h.before(c, i) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

func (h *pieceHeap) push(p piece) {
	*h = append(*h, p)
	i := len(*h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !h.before(i, parent) {
			return
		}
		(*h)[i], (*h)[parent] = (*h)[parent], (*h)[i]
		i = parent
	}
}

// idsOf appends to out the ids whose bits are set, in increasing order: a
// sort in O(NumSamples).
func idsOf(out []uint32, set []uint64) []uint32 {
	for w, word := range set {
		for word != 0 {
			out = append(out, uint32(w*64+bits.TrailingZeros64(word)))
			word &= word - 1
		}
	}
	return out
}

// quasiRandom appends to out the samples of buf, which holds consecutive
// units of the given sizes, drawn through a window of open units: pick an
// open unit uniformly, emit a uniform not-yet-emitted sample of it; a unit
// that runs out is replaced, in its slot, by the next unit. It reorders buf.
func quasiRandom(out, buf []uint32, sizes []int, window int, rs stream) []uint32 {
	type slot struct{ start, left int }
	open := make([]slot, 0, min(window, len(sizes)))
	next, start := 0, 0
	for ; next < len(sizes) && len(open) < window; next++ {
		open = append(open, slot{start, sizes[next]})
		start += sizes[next]
	}
	for len(open) > 0 {
		j := rs.below(len(open))
		sl := &open[j]
		k := sl.start + rs.below(sl.left)
		last := sl.start + sl.left - 1
		out = append(out, buf[k])
		buf[k] = buf[last]
		sl.left--
		if sl.left > 0 {
			continue
		}
		if next < len(sizes) {
			*sl = slot{start, sizes[next]}
			start += sizes[next]
			next++
			continue
		}
		open[j] = open[len(open)-1]
		open = open[:len(open)-1]
	}
	return out
}
