package policy

import (
	"fmt"
	"math"
	"time"
)

// Plan is an announced order of samples, turned into what the policy
// needs: the data page of every position, the positions of every page, the
// consumer's progress, the next use of every page, and the resident pages
// it needs, farthest next use on top.
type Plan struct {
	id    string
	order []uint32
	dpage []int32 // data page of each position, or -1 for a sample with no data

	// Positions of each data page, ascending: occ[occStart[p]:occStart[p+1]].
	occStart []int32
	occ      []int32
	// INVARIANT: per data page, the index in occ of its next use: the
	// first position at or after pos that is not read (occStart[p+1] when
	// there is none).
	cursor []int32

	// Positions of each sample. When no sample occurs twice (the usual
	// order), first[s] is sample s's position plus one (0: none) and spos
	// is nil; otherwise spos[sStart[s]:sStart[s+1]], ascending.
	first  []int32
	sStart []int32
	spos   []int32

	read  []uint64 // bitmap over positions
	nread int
	// INVARIANT: every position < pos is read or abandoned; hi is the
	// highest position read (-1 before the first).
	pos, hi int
	// ahead is where the search for the next page to prefetch resumes.
	// INVARIANT: pos <= ahead, and every position in [pos, ahead) is read,
	// has no page, or has its page resident.
	ahead int
	// heap holds the loaded pages with a next use in this plan, farthest
	// first (keyed by heapKey).
	heap pageHeap
	// rpos lists the positions read as ranges, ascending (their dpage is
	// -1: the page policy does not see them); rcur is where the range
	// prefetch search resumes.
	rpos []int32
	rcur int
	// live is set while the plan is installed.
	live bool
	// seen is when the plan was announced, or when WithdrawIdle first saw
	// seenRead positions read.
	seen     time.Time
	seenRead int
}

func newPlan(id string, order []uint32, samplePage []int32, numPages int, g *Policy) (*Plan, error) {
	n := len(order)
	if n >= math.MaxInt32 {
		return nil, fmt.Errorf("plan %q: %d samples is too long", id, n)
	}
	ns := len(samplePage)
	pl := &Plan{
		id: id, order: order, hi: -1,
		dpage:    make([]int32, n),
		occStart: make([]int32, numPages+1),
		cursor:   make([]int32, numPages),
		first:    make([]int32, ns),
		read:     make([]uint64, (n+63)/64),
	}
	repeats := false
	for i, s := range order {
		if int(s) >= ns {
			return nil, fmt.Errorf("plan %q: position %d names sample %d, the dataset has %d", id, i, s, ns)
		}
		dp := samplePage[s]
		if dp >= 0 {
			pl.occStart[dp+1]++
		}
		pl.dpage[i] = dp
		if pl.first[s] != 0 {
			repeats = true
		}
		pl.first[s] = int32(i) + 1
	}
	if g != nil && g.sampleBytes != nil && g.total < numPages {
		pl.chooseRanges(g.sampleBytes, g.pageBytes, g.total)
		for _, i := range pl.rpos {
			pl.occStart[samplePage[order[i]]+1]--
		}
	}
	for p := 0; p < numPages; p++ {
		pl.occStart[p+1] += pl.occStart[p]
	}
	pl.occ = make([]int32, pl.occStart[numPages])
	copy(pl.cursor, pl.occStart[:numPages]) // used as fill pointers, then reset
	for i, dp := range pl.dpage {
		if dp >= 0 {
			pl.occ[pl.cursor[dp]] = int32(i)
			pl.cursor[dp]++
		}
	}
	copy(pl.cursor, pl.occStart[:numPages])
	if repeats {
		pl.first = nil
		pl.sStart = make([]int32, ns+1)
		for _, s := range order {
			pl.sStart[s+1]++
		}
		for s := 0; s < ns; s++ {
			pl.sStart[s+1] += pl.sStart[s]
		}
		pl.spos = make([]int32, n)
		fill := make([]int32, ns)
		copy(fill, pl.sStart[:ns])
		for i, s := range order {
			pl.spos[fill[s]] = int32(i)
			fill[s]++
		}
	}
	pl.heap = newPageHeap(numPages)
	return pl, nil
}

func (pl *Plan) isRead(i int) bool { return pl.read[i>>6]&(1<<(i&63)) != 0 }

// done reports whether the consumer has read (or passed) every position.
func (pl *Plan) done() bool { return pl.pos >= len(pl.order) }

// needs reports whether data page dp has a use left in the plan.
func (pl *Plan) needs(dp int32) bool { return pl.cursor[dp] < pl.occStart[dp+1] }

// next returns the position of data page dp's next use, or -1.
func (pl *Plan) next(dp int32) int {
	if !pl.needs(dp) {
		return -1
	}
	return int(pl.occ[pl.cursor[dp]])
}

// heapKey is data page dp's key in the plan's heap: the farthest next use
// on top.
func (pl *Plan) heapKey(dp int32) int64 { return -int64(pl.occ[pl.cursor[dp]]) }

// dist returns the distance from pos to data page dp's next use, or Never.
func (pl *Plan) dist(dp int32) int {
	if !pl.needs(dp) {
		return Never
	}
	return int(pl.occ[pl.cursor[dp]]) - pl.pos
}

// advance moves data page dp's cursor past the positions read or left
// behind, and reports whether it moved. Each position is passed once: the
// cost is amortized O(1) per position.
func (pl *Plan) advance(dp int32) bool {
	c, end := pl.cursor[dp], pl.occStart[dp+1]
	start := c
	for ; c < end; c++ {
		p := int(pl.occ[c])
		if p >= pl.pos && !pl.isRead(p) {
			break
		}
	}
	pl.cursor[dp] = c
	return c != start
}

// unreadPos returns the first unread position of sample s at or after pos,
// or -1.
func (pl *Plan) unreadPos(s int) int {
	if pl.spos == nil {
		if i := int(pl.first[s]) - 1; i >= pl.pos && !pl.isRead(i) {
			return i
		}
		return -1
	}
	for _, p := range pl.spos[pl.sStart[s]:pl.sStart[s+1]] {
		if int(p) >= pl.pos && !pl.isRead(int(p)) {
			return int(p)
		}
	}
	return -1
}

// markRead records that position i was read and advances pos. Reads more
// than window positions ahead of the first unread one abandon the positions
// left behind: the consumer skipped them. It returns the positions
// abandoned, [from, to), whose pages' next uses have moved.
func (pl *Plan) markRead(i, window int) (from, to int) {
	pl.read[i>>6] |= 1 << (i & 63)
	pl.nread++
	if i > pl.hi {
		pl.hi = i
	}
	for pl.pos < len(pl.order) && pl.isRead(pl.pos) {
		pl.pos++
	}
	from, to = pl.pos, pl.pos
	if pl.hi-pl.pos > window {
		to = pl.hi - window
		pl.pos = to
		for pl.pos < len(pl.order) && pl.isRead(pl.pos) {
			pl.pos++
		}
	}
	pl.ahead = max(pl.ahead, pl.pos)
	return from, to
}

// useAfter returns the distance, in positions from pos, to the first unread
// use of data page dp at least t positions ahead, or Never.
func (pl *Plan) useAfter(dp int32, t int) int {
	occ := pl.occ[pl.cursor[dp]:pl.occStart[dp+1]]
	target := pl.pos + t
	lo, hi := 0, len(occ)
	for lo < hi {
		m := (lo + hi) / 2
		if int(occ[m]) < target {
			lo = m + 1
		} else {
			hi = m
		}
	}
	for ; lo < len(occ); lo++ {
		if !pl.isRead(int(occ[lo])) {
			return int(occ[lo]) - pl.pos
		}
	}
	return Never
}
