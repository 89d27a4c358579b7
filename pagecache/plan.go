package pagecache

import (
	"fmt"
	"math"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
)

// never is the next-use distance of a page no plan needs again.
const never = math.MaxInt

// plan is an announced order of samples, turned into what the cache needs:
// the data page of every position, the positions of every page, and the
// consumer's progress. It belongs to the Cache and is guarded by Cache.mu,
// except while being built.
type plan struct {
	id    string
	order []uint32
	dpage []int32 // data page of each position, or -1 for a sample with no data

	// Positions of each data page, ascending: occ[occStart[p]:occStart[p+1]].
	occStart []int32
	occ      []int32
	cursor   []int32 // per data page: index in occ of the next use at or after pos

	// Positions of each sample, ascending: spos[sStart[s]:sStart[s+1]].
	sStart []int32
	spos   []int32

	read  []uint64 // bitmap over positions
	nread int
	// INVARIANT: every position < pos is read or abandoned; hi is the
	// highest position read (-1 before the first).
	pos, hi int
	// last is when the plan was announced or last had a position read.
	last time.Time
}

func newPlan(id string, order []uint32, f *beton.File) (*plan, error) {
	n := len(order)
	if n >= math.MaxInt32 {
		return nil, fmt.Errorf("plan %q: %d samples is too long", id, n)
	}
	ns := f.NumSamples()
	np := f.NumPages()
	first := f.FirstPage()
	pl := &plan{
		id: id, order: order, hi: -1, last: time.Now(),
		dpage:    make([]int32, n),
		occStart: make([]int32, np+1),
		cursor:   make([]int32, np),
		sStart:   make([]int32, ns+1),
		read:     make([]uint64, (n+63)/64),
	}
	for i, s := range order {
		if int(s) >= ns {
			return nil, fmt.Errorf("plan %q: position %d names sample %d, the dataset has %d", id, i, s, ns)
		}
		dp := int32(-1)
		if p := f.SamplePage(int(s)); p != beton.NoPage {
			dp = int32(p - first)
			pl.occStart[dp+1]++
		}
		pl.dpage[i] = dp
		pl.sStart[s+1]++
	}
	for p := 0; p < np; p++ {
		pl.occStart[p+1] += pl.occStart[p]
	}
	for s := 0; s < ns; s++ {
		pl.sStart[s+1] += pl.sStart[s]
	}
	pl.occ = make([]int32, pl.occStart[np])
	pl.spos = make([]int32, n)
	copy(pl.cursor, pl.occStart[:np]) // used as fill pointers, then reset
	sfill := make([]int32, ns)
	copy(sfill, pl.sStart[:ns])
	for i, s := range order {
		if dp := pl.dpage[i]; dp >= 0 {
			pl.occ[pl.cursor[dp]] = int32(i)
			pl.cursor[dp]++
		}
		pl.spos[sfill[s]] = int32(i)
		sfill[s]++
	}
	copy(pl.cursor, pl.occStart[:np])
	return pl, nil
}

func (pl *plan) isRead(i int) bool { return pl.read[i>>6]&(1<<(i&63)) != 0 }

// done reports whether the consumer has read (or passed) every position.
func (pl *plan) done() bool { return pl.pos >= len(pl.order) }

// unreadPos returns the first unread position of sample s at or after pos,
// or -1.
func (pl *plan) unreadPos(s int) int {
	for _, p := range pl.spos[pl.sStart[s]:pl.sStart[s+1]] {
		if int(p) >= pl.pos && !pl.isRead(int(p)) {
			return int(p)
		}
	}
	return -1
}

// markRead records that position i was read and advances pos. Reads more
// than window positions ahead of the first unread one abandon the positions
// left behind: the consumer skipped them.
func (pl *plan) markRead(i, window int) {
	pl.read[i>>6] |= 1 << (i & 63)
	pl.nread++
	if i > pl.hi {
		pl.hi = i
	}
	for pl.pos < len(pl.order) && pl.isRead(pl.pos) {
		pl.pos++
	}
	if pl.hi-pl.pos > window {
		pl.pos = pl.hi - window
		for pl.pos < len(pl.order) && pl.isRead(pl.pos) {
			pl.pos++
		}
	}
}

// nextUse returns the distance, in positions from pos, to the next unread
// use of data page dp, or never.
func (pl *plan) nextUse(dp int32) int {
	c, end := pl.cursor[dp], pl.occStart[dp+1]
	for ; c < end; c++ {
		p := int(pl.occ[c])
		if p >= pl.pos && !pl.isRead(p) {
			break
		}
	}
	pl.cursor[dp] = c // positions passed over are read or behind pos for good
	if c == end {
		return never
	}
	return int(pl.occ[c]) - pl.pos
}

// useAfter returns the distance, in positions from pos, to the first unread
// use of data page dp at least t positions ahead, or never.
func (pl *plan) useAfter(dp int32, t int) int {
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
	return never
}
