package order

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/ffcvfs/ffcvfs/beton"
)

// Layout is what an order needs to know about a dataset: which samples lie
// in which page. *beton.File satisfies it.
type Layout interface {
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

var _ Layout = (*beton.File)(nil)

var (
	// ErrLayout is returned for a Layout whose pages and samples disagree:
	// a page names a sample id out of range or twice, or the pages and the
	// samples without a page do not add up to NumSamples.
	ErrLayout = errors.New("inconsistent layout")

	// ErrTooFewPages is returned when a rank gets no page while others
	// do and padding (DropLast false) has nothing of its own to repeat.
	ErrTooFewPages = errors.New("too few pages for the number of ranks")
)

// unit is what an order moves as a whole: one data page, or one virtual page
// of samples with no data.
type unit struct {
	page    int64    // absolute page, or beton.NoPage for a virtual page
	samples []uint32 // not to be modified: may be the Layout's own slice
}

func (u unit) String() string {
	if u.page == beton.NoPage {
		return "a virtual page (samples with no data)"
	}
	return fmt.Sprintf("page %d", u.page)
}

// shape is a Layout broken into units.
type shape struct {
	units       []unit // data pages in file order, then virtual pages
	dataPages   int    // data pages with at least one sample
	dataSamples int    // samples in those pages
}

// layoutShape breaks l into units. Data pages with no sample are left out.
// The samples without a page are cut, in id order, into virtual pages of the
// mean data-page size rounded up, or into worldSize equal parts when there
// are no data pages.
func layoutShape(l Layout, worldSize int) (shape, error) {
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
		return shape{}, fmt.Errorf("pages hold %d samples, layout has %d: %w", sh.dataSamples, n, ErrLayout)
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
		return shape{}, fmt.Errorf("pages hold %d samples and %d have no page, layout has %d: %w",
			sh.dataSamples, len(none), n, ErrLayout)
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
func Generate(l Layout, o Options) ([]uint32, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	n := l.NumSamples()
	if o.Kind == Sequential && o.WorldSize == 1 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = uint32(i)
		}
		return out, nil
	}
	sh, err := layoutShape(l, o.WorldSize)
	if err != nil {
		return nil, err
	}
	if o.Kind != Sequential {
		shuffle(pagesStream(o.Seed, o.Epoch), sh.units)
	}
	mine, lo, hi := assign(sh.units, o.WorldSize, o.Rank)

	// The rank's samples, unit by unit in assignment order, with room
	// for padding.
	own := 0
	for _, u := range mine {
		own += len(sh.units[u].samples)
	}
	if !o.DropLast && own == 0 && hi > 0 {
		return nil, fmt.Errorf("rank %d of %d gets no page: %d pages (%d of them virtual) for %d ranks; use fewer ranks or DropLast: %w",
			o.Rank, o.WorldSize, len(sh.units), len(sh.units)-sh.dataPages, o.WorldSize, ErrTooFewPages)
	}
	total := own
	if !o.DropLast {
		total = hi
	}
	buf := make([]uint32, 0, total)
	seen := make([]uint64, ceilDiv(n, 64))
	for _, u := range mine {
		for _, s := range sh.units[u].samples {
			if int(s) >= n {
				return nil, fmt.Errorf("%s names sample %d, layout has %d: %w", sh.units[u], s, n, ErrLayout)
			}
			if seen[s/64]&(1<<(s%64)) != 0 {
				return nil, fmt.Errorf("sample %d is in %s and in another page: %w", s, sh.units[u], ErrLayout)
			}
			seen[s/64] |= 1 << (s % 64)
		}
		buf = append(buf, sh.units[u].samples...)
	}

	var out []uint32
	switch o.Kind {
	case Sequential:
		out = idsOf(buf[:0], seen)
	case Random:
		shuffle(rankStream(o.Seed, o.Epoch, o.Rank, o.WorldSize), buf)
		out = buf
	case QuasiRandom:
		window := o.Window
		if window == 0 {
			window = defaultWindow(o.BatchSize, sh.dataPages, sh.dataSamples)
		}
		sizes := make([]int, len(mine))
		for i, u := range mine {
			sizes[i] = len(sh.units[u].samples)
		}
		out = make([]uint32, 0, total)
		out = quasiRandom(out, buf, sizes, window, rankStream(o.Seed, o.Epoch, o.Rank, o.WorldSize))
	}

	if o.DropLast {
		return out[:lo], nil
	}
	for len(out) < hi {
		out = append(out, out[:min(own, hi-len(out))]...)
	}
	return out, nil
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
