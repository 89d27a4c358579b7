package policy

import "slices"

// PageShare is the share of a page's bytes a load must serve to be read as
// a page rather than as ranges.
const PageShare = 0.75

// RequestCost is what a request costs beyond its bytes, in bytes: object
// stores bill a GET about as much as a few KiB of transfer.
const RequestCost = 8 << 10

// detectorSpan is the number of reads over which the detector's costs are
// averaged (exponentially).
const detectorSpan = 64

// Sizes tells the policy how many bytes each sample's data and each data
// page hold, which the choice of granularity needs. Without it every read
// is a page read.
func (p *Policy) SetSizes(sampleBytes, pageBytes []uint32) {
	p.sampleBytes, p.pageBytes = sampleBytes, pageBytes
	p.det = newDetector(len(pageBytes), p.total)
}

// SetSlots sets the number of slots pages may use now (the rest lend
// their bytes to ranges). It must not be below the pages resident.
func (p *Policy) SetSlots(n int) {
	if n < p.resident {
		panic("policy: fewer slots than resident pages")
	}
	p.slots = n
}

// Grow adds n slots to the cache's total, as when memory kept for
// something else becomes slots for good; plans made from then on count
// them. SetSlots then tells how many pages may use now.
func (p *Policy) Grow(n int) { p.total += n }

// Slots returns the number of slots pages may use now.
func (p *Policy) Slots() int { return p.slots }

// chooseRanges marks the positions of pl that are read as ranges, given a
// cache of slots pages, and takes them out of its page positions.
func (pl *Plan) chooseRanges(sampleBytes, pageBytes []uint32, slots int) {
	n := len(pl.dpage)
	numPages := len(pageBytes)
	next := make([]int32, n)
	last := make([]int32, numPages)
	for i := range last {
		last[i] = int32(n)
	}
	for i := n - 1; i >= 0; i-- {
		if dp := pl.dpage[i]; dp >= 0 {
			next[i], last[dp] = last[dp], int32(i)
		}
	}
	// MIN over slots pages. cur[dp] is the load holding page dp (-1: not
	// resident), key[dp] its next use; the heap holds (next use, page)
	// pairs, farthest on top, stale ones dropped when they surface.
	cur := last // reused: every entry is overwritten
	for i := range cur {
		cur[i] = -1
	}
	key := make([]int32, numPages)
	loadOf := make([]int32, n)
	var served []int64
	var h maxHeap
	resident := 0
	for i, dp := range pl.dpage {
		if dp < 0 {
			continue
		}
		if cur[dp] < 0 {
			if resident == slots {
				for {
					k, v := h.pop()
					if cur[v] >= 0 && key[v] == k {
						cur[v] = -1
						resident--
						break
					}
				}
			}
			cur[dp] = int32(len(served))
			served = append(served, 0)
			resident++
		}
		loadOf[i] = cur[dp]
		served[cur[dp]] += int64(sampleBytes[pl.order[i]])
		key[dp] = next[i]
		h.push(next[i], dp)
	}
	for i, dp := range pl.dpage {
		if dp >= 0 && float64(served[loadOf[i]]) < PageShare*float64(pageBytes[dp]) {
			pl.dpage[i] = -1
			pl.rpos = append(pl.rpos, int32(i))
		}
	}
}

// maxHeap is a binary heap of (key, value) pairs, largest key on top.
type maxHeap []uint64

func (h *maxHeap) push(k, v int32) {
	*h = append(*h, uint64(k)<<32|uint64(uint32(v)))
	a := *h
	for j := len(a) - 1; j > 0; {
		i := (j - 1) / 2
		if a[i] >= a[j] {
			break
		}
		a[i], a[j] = a[j], a[i]
		j = i
	}
}

func (h *maxHeap) pop() (k, v int32) {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		if r := l + 1; r < n && a[r] > a[l] {
			l = r
		}
		if a[i] >= a[l] {
			break
		}
		a[i], a[l] = a[l], a[i]
		i = l
	}
	*h = a
	return int32(top >> 32), int32(uint32(top))
}

// RangeRead reports whether a miss on sample s is served by a range: as
// the plan that reads s next says, or, if no plan does, as the detector
// says.
func (p *Policy) RangeRead(s int) bool {
	if p.sampleBytes == nil || p.total >= len(p.pageN) || p.samplePage[s] < 0 {
		return false // pages only, or the cache holds every page
	}
	if pl, i := p.NextUse(s); pl != nil {
		return pl.dpage[i] < 0
	}
	return p.det.ranges
}

// NextUse returns the plan that reads sample s soonest and that position,
// or nil.
func (p *Policy) NextUse(s int) (*Plan, int) {
	var best *Plan
	bestPos, bestDist := -1, Never
	for _, pl := range p.plans {
		if i := pl.unreadPos(s); i >= 0 && i-pl.pos < bestDist {
			best, bestPos, bestDist = pl, i, i-pl.pos
		}
	}
	return best, bestPos
}

// NextRange returns the position read as a range that prefetching should
// consider next, the nearest of those not yet considered across plans,
// with its plan and sample; ok is false when there is none. The caller
// calls SkipRange once it has dealt with it.
func (p *Policy) NextRange() (pl *Plan, i int, s int, ok bool) {
	d := Never
	for _, q := range p.plans {
		for q.rcur < len(q.rpos) {
			j := int(q.rpos[q.rcur])
			if j >= q.pos && !q.isRead(j) {
				break
			}
			q.rcur++
		}
		if q.rcur < len(q.rpos) {
			if j := int(q.rpos[q.rcur]); j-q.pos < d {
				pl, i, d = q, j, j-q.pos
			}
		}
	}
	if pl == nil {
		return nil, -1, -1, false
	}
	return pl, i, int(pl.order[i]), true
}

// SkipRange moves pl's range prefetch search past its current position.
func (p *Policy) SkipRange(pl *Plan) {
	if pl.rcur < len(pl.rpos) {
		pl.rcur++
	}
}

// RangesAfter calls fn with the range positions of pl after i, nearest
// first, until fn returns false or limit positions were passed.
func (pl *Plan) RangesAfter(i, limit int, fn func(pos, sample int) bool) {
	k, _ := slices.BinarySearch(pl.rpos, int32(i+1))
	for end := min(len(pl.rpos), k+limit); k < end; k++ {
		j := int(pl.rpos[k])
		if pl.isRead(j) {
			continue
		}
		if !fn(j, int(pl.order[j])) {
			return
		}
	}
}

// RangeGone tells the policy that the range prefetched for position i of
// pl left the cache before it was read: the search considers it again.
func (p *Policy) RangeGone(pl *Plan, i int) {
	if !pl.live || i < pl.pos || pl.isRead(i) {
		return
	}
	if k, found := slices.BinarySearch(pl.rpos, int32(i)); found && k < pl.rcur {
		pl.rcur = k
	}
}

// Pos returns the plan's first position not yet read.
func (pl *Plan) Pos() int { return pl.pos }

// Live reports whether the plan is installed.
func (pl *Plan) Live() bool { return pl.live }

// Ranges returns how many of the plan's positions are read as ranges.
func (pl *Plan) Ranges() int { return len(pl.rpos) }

// RangeMode reports what the detector chose for reads no plan expects.
func (p *Policy) RangeMode() bool { return p.det != nil && p.det.ranges }

// detector chooses the granularity of reads no plan expects (see the
// package documentation).
type detector struct {
	// A ghost LRU of pages: a list through prev and next, most recent
	// at head.
	prev, next []int32
	in         []bool
	head, tail int32
	n, cap     int
	// The last samples read, so that several reads of one sample count
	// once.
	recent [4]int32
	// Decayed costs of reading by pages and by ranges.
	page, rng float64
	ranges    bool
}

func newDetector(numPages, slots int) *detector {
	d := &detector{prev: make([]int32, numPages), next: make([]int32, numPages), in: make([]bool, numPages), head: -1, tail: -1, cap: max(1, slots)}
	d.recent = [4]int32{-1, -1, -1, -1}
	d.ranges = true // nothing seen: a page is not worth its bytes yet
	return d
}

// observe records a read of sample s, in data page dp, that no plan
// expected.
func (d *detector) observe(s int, dp int32, sampleBytes, pageBytes uint32) {
	if slices.Contains(d.recent[:], int32(s)) {
		return
	}
	copy(d.recent[1:], d.recent[:3])
	d.recent[0] = int32(s)
	pageCost := 0.0
	if d.in[dp] {
		d.unlink(dp)
	} else {
		pageCost = float64(pageBytes) + RequestCost
		if d.n == d.cap {
			d.unlink(d.tail)
		}
	}
	d.pushFront(dp)
	const decay = 1 - 1.0/detectorSpan
	d.page = d.page*decay + pageCost
	d.rng = d.rng*decay + float64(sampleBytes) + RequestCost
	// The rule of plans (PageShare), with some hysteresis so that one odd
	// read does not flip it.
	if d.ranges && d.rng > min(1, PageShare+0.1)*d.page {
		d.ranges = false
	} else if !d.ranges && d.rng < PageShare*d.page {
		d.ranges = true
	}
}

func (d *detector) unlink(dp int32) {
	p, n := d.prev[dp], d.next[dp]
	if p >= 0 {
		d.next[p] = n
	} else {
		d.head = n
	}
	if n >= 0 {
		d.prev[n] = p
	} else {
		d.tail = p
	}
	d.in[dp] = false
	d.n--
}

func (d *detector) pushFront(dp int32) {
	d.prev[dp], d.next[dp] = -1, d.head
	if d.head >= 0 {
		d.prev[d.head] = dp
	} else {
		d.tail = dp
	}
	d.head = dp
	d.in[dp] = true
	d.n++
}
