// Package policy decides for a page cache which page to give up and which
// to fetch next. It is bookkeeping only: no goroutines, no locks, no I/O.
// The cache tells it what happens (a page starts loading, is loaded,
// pinned, unpinned, evicted; a sample is read; a consumer announces the
// order in which it will read) and asks it two questions: which page to
// evict for a demand load (Victim) and what to prefetch, in place of what
// (Prefetch). Callers serialize calls.
//
// # The rule
//
// Evict the page whose next use, across all plans, is farthest away
// (Belady's MIN); a page no plan needs is farthest of all, and among those
// the pages whose samples were all read this epoch go first, then the least
// recently used. Prefetch, in order of first use, the pages plans need that
// are not resident, into a free slot, or in place of a page that is needed
// later and that MIN would evict anyway when the prefetched page is needed
// (every other resident page is used again before the victim). Prefetching
// this way reads no page more often than demand loading with MIN would.
//
// # Granularity
//
// A miss is served by reading the sample's page or only the sample's bytes
// (a range). Reading the page pays when its other samples are read while
// it can stay cached; otherwise a range reads a fraction of the bytes.
//
// With a plan the choice is made per position when the plan is prepared:
// the plan is played through Belady's MIN over the cache's pages (the
// budget, in pages), and every load of a page is charged the bytes of the
// samples it serves before MIN evicts it. A load that serves at least
// PageShare of the page's bytes is worth a page; the positions of the
// other loads are read as ranges, and the page policy never sees them.
//
// Without a plan (reads no plan expects) a detector compares what the two
// ways would have cost over the last reads: a ghost LRU of the budget's
// pages says which reads would have missed with pages, each miss costing
// the page's bytes, while ranges cost each read sample's bytes; both add
// RequestCost per request. Ranges serve misses while they cost less than
// PageShare of what pages would, as with plans.
//
// # Costs
//
// With P pages and K plans, every event costs amortized O(K log P):
// each plan keeps, per page, a cursor to its next unread use, which only
// moves forward, and a heap of the evictable pages it needs, keyed by that
// next use; pages no plan needs sit in two heaps by last use. The search
// for the next page to prefetch resumes where it stopped. The check that a
// prefetch is harmless looks at the positions before the prefetched page's
// first use and at the busy (pinned or loading) pages, and a refusal is
// remembered until the resident set changes. With several plans the
// victim is found by a threshold search over their heaps, cut off after
// searchLimit pages.
//
// Written by hand: general caching libraries (LRU, ARC, TinyLFU) know
// nothing of announced futures, which is the point here.
package policy

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Never is the distance to the next use of a page no plan needs again.
const Never = math.MaxInt

// searchLimit bounds the pages a victim search looks at when there are
// several plans.
const searchLimit = 64

type pageState uint8

const (
	absent pageState = iota
	loading
	ready
)

// PlanStats is one plan's progress.
type PlanStats struct {
	ID    string `json:"id"`
	Len   int    `json:"len"`
	Pos   int    `json:"pos"`   // first position not yet read
	Read  int    `json:"read"`  // positions read
	Ahead int    `json:"ahead"` // highest position read, minus Pos
}

// Policy is the state of one cache's policy. Data pages are numbered from
// 0 (the beton's first data page).
type Policy struct {
	samplePage []int32 // data page of each sample, or -1
	pageN      []int32 // samples in each data page
	slots      int     // slots pages may use now
	total      int     // slots of the cache
	window     int

	// For the choice of granularity (SetSizes); nil: pages only.
	sampleBytes, pageBytes []uint32
	det                    *detector
	epochs                 int // epochs completed

	state   []pageState
	pinned  []bool
	lastUse []uint64
	need    []int32 // plans that still use each page
	tick    uint64
	// resident counts pages loading or ready.
	resident int
	// busy lists the resident pages that cannot be evicted (loading or
	// pinned), busyIdx their index in it or -1.
	busy    []int32
	busyIdx []int32
	// lru holds the loaded pages no plan needs, least recently used on
	// top: [0] those whose samples were all read this epoch, [1] the rest.
	// Pinned pages stay in these heaps and in the plans' (their keys do not
	// change when pinned): the searches skip them, and pinned pages are
	// few.
	lru [2]pageHeap

	plans []*Plan // in order of announcement

	epochRead []uint64 // bitmap over samples
	pageRead  []int32  // per data page: its samples read this epoch
	epochN    int      // samples read this epoch
	withPage  int      // samples that have a page

	// gen changes with the resident set; refused remembers the last
	// prefetch refused as harmful, which stays refused until it does.
	gen     uint64
	refused struct {
		w, v int32
		gen  uint64
	}
}

// New returns the policy for a cache of slots pages over a beton whose
// sample s lies in data page samplePage[s] (-1: no data), with numPages
// data pages. window is how far, in positions, a consumer may read ahead
// of the first position of its plan it has not read; further means it
// skipped what it left behind.
func New(samplePage []int32, numPages, slots, window int) *Policy {
	p := &Policy{
		samplePage: samplePage,
		pageN:      make([]int32, numPages),
		slots:      slots,
		total:      slots,
		window:     window,
		state:      make([]pageState, numPages),
		pinned:     make([]bool, numPages),
		lastUse:    make([]uint64, numPages),
		need:       make([]int32, numPages),
		busyIdx:    make([]int32, numPages),
		epochRead:  make([]uint64, (len(samplePage)+63)/64),
		pageRead:   make([]int32, numPages),
	}
	for _, dp := range samplePage {
		if dp >= 0 {
			p.pageN[dp]++
			p.withPage++
		}
	}
	for i := range p.busyIdx {
		p.busyIdx[i] = -1
	}
	p.lru[0] = newPageHeap(numPages)
	p.lru[1] = newPageHeap(numPages)
	p.refused.w = -1
	return p
}

// Epochs returns the number of epochs completed: every sample with data
// read since the last.
func (p *Policy) Epochs() int { return p.epochs }

// Resident returns the number of pages loading or loaded.
func (p *Policy) Resident() int { return p.resident }

func (p *Policy) evictable(dp int32) bool { return p.state[dp] == ready && !p.pinned[dp] }

func (p *Policy) fullyRead(dp int32) bool { return p.pageRead[dp] == p.pageN[dp] }

func (p *Policy) lruOf(dp int32) *pageHeap {
	if p.fullyRead(dp) {
		return &p.lru[0]
	}
	return &p.lru[1]
}

// place files a loaded page where victim searches find it.
func (p *Policy) place(dp int32) {
	if p.need[dp] == 0 {
		p.lruOf(dp).push(dp, int64(p.lastUse[dp]))
		return
	}
	for _, pl := range p.plans {
		if pl.needs(dp) {
			pl.heap.push(dp, pl.heapKey(dp))
		}
	}
}

// unplace takes a page out of the victim searches.
func (p *Policy) unplace(dp int32) {
	for i := range p.lru {
		if p.lru[i].has(dp) {
			p.lru[i].remove(dp)
		}
	}
	for _, pl := range p.plans {
		if pl.heap.has(dp) {
			pl.heap.remove(dp)
		}
	}
}

func (p *Policy) addBusy(dp int32) {
	p.busyIdx[dp] = int32(len(p.busy))
	p.busy = append(p.busy, dp)
}

func (p *Policy) dropBusy(dp int32) {
	i := p.busyIdx[dp]
	last := p.busy[len(p.busy)-1]
	p.busy[i], p.busyIdx[last] = last, i
	p.busy = p.busy[:len(p.busy)-1]
	p.busyIdx[dp] = -1
}

// Loading records that data page dp, not resident, is being loaded into a
// slot.
func (p *Policy) Loading(dp int32) {
	if p.state[dp] != absent {
		panic(fmt.Sprintf("policy: page %d loaded twice", dp))
	}
	p.state[dp] = loading
	p.resident++
	p.gen++
	p.addBusy(dp)
}

// Loaded records that data page dp's load succeeded; pinned reports
// whether its loader holds it pinned.
func (p *Policy) Loaded(dp int32, pinned bool) {
	p.state[dp] = ready
	p.pinned[dp] = pinned
	p.tick++
	p.lastUse[dp] = p.tick
	if !pinned {
		p.dropBusy(dp)
	}
	p.place(dp)
}

// Failed records that data page dp's load failed: it is not resident.
func (p *Policy) Failed(dp int32) {
	p.dropBusy(dp)
	p.state[dp], p.pinned[dp] = absent, false
	p.gone(dp)
}

// Evict records that the evictable data page dp left the cache.
func (p *Policy) Evict(dp int32) {
	if !p.evictable(dp) {
		panic(fmt.Sprintf("policy: evicting page %d, which is not evictable", dp))
	}
	p.unplace(dp)
	p.state[dp] = absent
	p.gone(dp)
}

// gone updates the plans' prefetch searches for a page that left.
func (p *Policy) gone(dp int32) {
	p.resident--
	p.gen++
	for _, pl := range p.plans {
		if q := pl.next(dp); q >= 0 && q < pl.ahead {
			pl.ahead = q
		}
	}
}

// Pin records that the ready data page dp went from no pins to one.
func (p *Policy) Pin(dp int32) {
	if p.pinned[dp] {
		return
	}
	p.pinned[dp] = true
	p.addBusy(dp)
}

// Unpin records that the ready data page dp's last pin was released.
func (p *Policy) Unpin(dp int32) {
	p.pinned[dp] = false
	p.dropBusy(dp)
	p.tick++
	p.lastUse[dp] = p.tick
	if h := p.lruOf(dp); h.has(dp) {
		h.update(dp, int64(p.tick))
	}
}

// Read records that sample s was read: the epoch's bookkeeping and the
// progress of the plan in which the read is nearest.
func (p *Policy) Read(s int) {
	dp := p.samplePage[s]
	if dp >= 0 && p.epochRead[s>>6]&(1<<(s&63)) == 0 {
		p.epochRead[s>>6] |= 1 << (s & 63)
		p.pageRead[dp]++
		p.epochN++
		if p.fullyRead(dp) && p.lru[1].has(dp) {
			p.lru[1].remove(dp)
			p.lru[0].push(dp, int64(p.lastUse[dp]))
		}
		if p.epochN == p.withPage {
			p.newEpoch()
		}
	}
	var best *Plan
	bestPos, bestDist := -1, Never
	for _, pl := range p.plans {
		if i := pl.unreadPos(s); i >= 0 && i-pl.pos < bestDist {
			best, bestPos, bestDist = pl, i, i-pl.pos
		}
	}
	if best == nil {
		if p.det != nil && dp >= 0 {
			p.det.observe(s, dp, p.sampleBytes[s], p.pageBytes[dp])
		}
		return
	}
	from, to := best.markRead(bestPos, p.window)
	if dp >= 0 {
		p.moved(best, dp)
	}
	for i := from; i < to; i++ {
		if q := best.dpage[i]; q >= 0 {
			p.moved(best, q)
		}
	}
	if best.done() {
		p.withdraw(best)
	}
}

// moved brings data page dp's next use in plan pl up to date after
// positions were read or abandoned.
func (p *Policy) moved(pl *Plan, dp int32) {
	if !pl.advance(dp) {
		return
	}
	inHeap := pl.heap.has(dp)
	if pl.needs(dp) {
		if inHeap {
			pl.heap.update(dp, pl.heapKey(dp))
		}
		return
	}
	if inHeap {
		pl.heap.remove(dp)
	}
	p.need[dp]--
	if p.need[dp] == 0 && p.state[dp] == ready {
		p.lruOf(dp).push(dp, int64(p.lastUse[dp]))
	}
}

// newEpoch starts a new epoch: no page is fully read any more.
func (p *Policy) newEpoch() {
	p.epochs++
	clear(p.epochRead)
	clear(p.pageRead)
	p.epochN = 0
	for _, e := range p.lru[0].e {
		p.lru[0].idx[e.page] = -1
		p.lru[1].push(e.page, e.key)
	}
	p.lru[0].e = p.lru[0].e[:0]
}

// Prepare turns the order in which consumer id will read samples into a
// plan for Install. It costs O(len(order)) and only reads what New was
// given: unlike the other methods, it may run alongside them.
func (p *Policy) Prepare(id string, order []uint32) (*Plan, error) {
	return newPlan(id, order, p.samplePage, len(p.pageN), p)
}

// Announce prepares and installs a plan; an empty order withdraws id's.
func (p *Policy) Announce(id string, order []uint32, now time.Time) error {
	if len(order) == 0 {
		p.Withdraw(id)
		return nil
	}
	pl, err := p.Prepare(id, order)
	if err != nil {
		return err
	}
	p.Install(pl, now)
	return nil
}

// Install makes a prepared plan its consumer's, replacing the one before.
// It costs O(pages).
func (p *Policy) Install(pl *Plan, now time.Time) {
	p.Withdraw(pl.id)
	pl.seen = now
	if len(pl.order) == 0 {
		return
	}
	pl.live = true
	p.plans = append(p.plans, pl)
	for dp := range int32(len(p.pageN)) {
		if !pl.needs(dp) {
			continue
		}
		p.need[dp]++
		if p.state[dp] != ready {
			continue
		}
		if p.need[dp] == 1 {
			p.lruOf(dp).remove(dp)
		}
		pl.heap.push(dp, pl.heapKey(dp))
	}
	p.gen++
}

// Withdraw removes consumer id's plan and reports whether there was one.
func (p *Policy) Withdraw(id string) bool {
	for _, pl := range p.plans {
		if pl.id == id {
			p.withdraw(pl)
			return true
		}
	}
	return false
}

func (p *Policy) withdraw(pl *Plan) {
	pl.live = false
	p.plans = slices.DeleteFunc(p.plans, func(q *Plan) bool { return q == pl })
	for dp := range int32(len(p.pageN)) {
		if !pl.needs(dp) {
			continue
		}
		p.need[dp]--
		if pl.heap.has(dp) {
			pl.heap.remove(dp)
			if p.need[dp] == 0 {
				p.lruOf(dp).push(dp, int64(p.lastUse[dp]))
			}
		}
	}
	p.gen++
}

// WithdrawIdle removes the plans that had no position read for idle, and
// returns their ids. It is called now and then (the read path keeps no
// clock): a plan is idle from the first call that sees no reads since the
// one before, or from its announcement.
func (p *Policy) WithdrawIdle(now time.Time, idle time.Duration) []string {
	var ids []string
	for _, pl := range slices.Clone(p.plans) {
		switch {
		case pl.nread != pl.seenRead:
			pl.seen, pl.seenRead = now, pl.nread
		case now.Sub(pl.seen) >= idle:
			p.withdraw(pl)
			ids = append(ids, pl.id)
		}
	}
	return ids
}

// Plans returns the plans' progress, in order of announcement.
func (p *Policy) Plans() []PlanStats {
	var out []PlanStats
	for _, pl := range p.plans {
		out = append(out, PlanStats{ID: pl.id, Len: len(pl.order), Pos: pl.pos, Read: pl.nread, Ahead: max(0, pl.hi-pl.pos)})
	}
	return out
}

// Distance returns the distance, in positions of its plan, to data page
// dp's next use in any plan, or Never.
func (p *Policy) Distance(dp int32) int { return p.dist(dp) }

// dist returns the distance to data page dp's next use in any plan.
func (p *Policy) dist(dp int32) int {
	d := Never
	for _, pl := range p.plans {
		d = min(d, pl.dist(dp))
	}
	return d
}

// Victim returns the evictable page to give up for a demand load and the
// distance to its next use (Never if no plan needs it), or -1 if no page is
// evictable.
func (p *Policy) Victim() (dp int32, dist int) {
	pinned := func(dp int32) bool { return p.pinned[dp] }
	for i := range p.lru {
		if dp := p.lru[i].best(pinned); dp >= 0 {
			return dp, Never
		}
	}
	switch len(p.plans) {
	case 0:
		return -1, 0
	case 1:
		pl := p.plans[0]
		if dp := pl.heap.best(pinned); dp >= 0 {
			return dp, pl.dist(dp)
		}
		return -1, 0
	}
	return p.search()
}

// search finds the victim among several plans: the page with the largest
// distance to its nearest next use. It walks the plans' heaps best first
// (a page's distance is at most its distance in any plan that needs it),
// and stops when no heap can hold a farther page, or after searchLimit
// pages.
func (p *Policy) search() (int32, int) {
	type front struct {
		pl  *Plan
		idx []int // heap indices to visit
	}
	fronts := make([]front, 0, len(p.plans))
	for _, pl := range p.plans {
		if pl.heap.len() > 0 {
			fronts = append(fronts, front{pl: pl, idx: []int{0}})
		}
	}
	best, bestDist := int32(-1), -1
	for range searchLimit {
		// The frontier entry with the largest distance in its plan.
		fi, ii, far := -1, -1, -1
		for f := range fronts {
			for k, i := range fronts[f].idx {
				if d := fronts[f].pl.dist(fronts[f].pl.heap.e[i].page); d > far {
					fi, ii, far = f, k, d
				}
			}
		}
		if fi < 0 || far <= bestDist {
			break
		}
		fr := &fronts[fi]
		i := fr.idx[ii]
		fr.idx = slices.Delete(fr.idx, ii, ii+1)
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < fr.pl.heap.len() {
				fr.idx = append(fr.idx, c)
			}
		}
		dp := fr.pl.heap.e[i].page
		if p.pinned[dp] {
			continue
		}
		if d := p.dist(dp); d > bestDist {
			best, bestDist = dp, d
		}
	}
	return best, bestDist
}

// wanted returns the page not resident that the plans need soonest, and
// the distance to that use, or -1.
func (p *Policy) wanted() (int32, int) {
	w, wd := int32(-1), Never
	for _, pl := range p.plans {
		for pl.ahead < len(pl.order) {
			dp := pl.dpage[pl.ahead]
			if dp >= 0 && p.state[dp] == absent && !pl.isRead(pl.ahead) {
				break
			}
			pl.ahead++
		}
		if pl.ahead < len(pl.order) && pl.ahead-pl.pos < wd {
			w, wd = pl.dpage[pl.ahead], pl.ahead-pl.pos
		}
	}
	return w, wd
}

// Prefetch returns the page to prefetch next and the page to evict for it
// (-1: a free slot), or ok false if nothing should be prefetched now. The
// caller starts the load with Evict and Loading.
func (p *Policy) Prefetch() (load, evict int32, ok bool) {
	if len(p.plans) == 0 {
		return -1, -1, false
	}
	w, dw := p.wanted()
	if w < 0 {
		return -1, -1, false
	}
	if p.resident < p.slots {
		return w, -1, true
	}
	v, dv := p.Victim()
	switch {
	case v < 0:
		return -1, -1, false
	case dv == Never:
		return w, v, true
	case dv <= dw:
		// Loading w now could cost a read that waiting would not.
		return -1, -1, false
	case p.refused.w == w && p.refused.v == v && p.refused.gen == p.gen:
		return -1, -1, false
	case !p.harmless(v, dw, dv):
		p.refused.w, p.refused.v, p.refused.gen = w, v, p.gen
		return -1, -1, false
	}
	return w, v, true
}

// harmless reports whether evicting page v, next used at distance dv, to
// load a page first used at dw < dv is what MIN would do when that page is
// needed: every other resident page is used again in [dw, dv), so at dw
// the victim is still the page used farthest away. A resident page not
// used before dw has its next use in that range already (v is the farthest
// evictable page), so only the pages used before dw and the busy ones need
// a look.
func (p *Policy) harmless(v int32, dw, dv int) bool {
	usedAgain := func(u int32) bool {
		d := Never
		for _, pl := range p.plans {
			d = min(d, pl.useAfter(u, dw))
		}
		return d < dv
	}
	for _, u := range p.busy {
		if u != v && !usedAgain(u) {
			return false
		}
	}
	for _, pl := range p.plans {
		end := min(len(pl.order), pl.pos+dw)
		for i := pl.pos; i < end; i++ {
			u := pl.dpage[i]
			if u < 0 || u == v || p.state[u] == absent || pl.isRead(i) {
				continue
			}
			if !usedAgain(u) {
				return false
			}
		}
	}
	return true
}

// Check verifies the policy's invariants, for tests.
func (p *Policy) Check() error {
	resident, busy := 0, 0
	for dp := range int32(len(p.pageN)) {
		need := int32(0)
		for _, pl := range p.plans {
			if pl.needs(dp) {
				need++
				if q := int(pl.occ[pl.cursor[dp]]); q < pl.pos || pl.isRead(q) {
					return fmt.Errorf("plan %q: page %d's next use %d is read or behind %d", pl.id, dp, q, pl.pos)
				}
			}
			if pl.heap.has(dp) != (p.state[dp] == ready && pl.needs(dp)) || (pl.heap.has(dp) && pl.heap.key(dp) != pl.heapKey(dp)) {
				return fmt.Errorf("plan %q: page %d in heap %v, state %d, needed %v", pl.id, dp, pl.heap.has(dp), p.state[dp], pl.needs(dp))
			}
		}
		if need != p.need[dp] {
			return fmt.Errorf("page %d needed by %d plans, counted %d", dp, need, p.need[dp])
		}
		inLRU := p.lru[0].has(dp) || p.lru[1].has(dp)
		if inLRU != (p.state[dp] == ready && need == 0) || (inLRU && (!p.lruOf(dp).has(dp) || p.lruOf(dp).key(dp) != int64(p.lastUse[dp]))) {
			return fmt.Errorf("page %d: in LRU %v, state %d, needed by %d, fully read %v", dp, inLRU, p.state[dp], need, p.fullyRead(dp))
		}
		if p.state[dp] != absent {
			resident++
		}
		isBusy := p.state[dp] == loading || (p.state[dp] == ready && p.pinned[dp])
		if isBusy != (p.busyIdx[dp] >= 0) || (isBusy && p.busy[p.busyIdx[dp]] != dp) {
			return fmt.Errorf("page %d: busy %v, listed at %d", dp, isBusy, p.busyIdx[dp])
		}
		if isBusy {
			busy++
		}
	}
	if resident != p.resident || busy != len(p.busy) || resident > p.slots {
		return fmt.Errorf("%d pages resident (counted %d, %d slots), %d busy (listed %d)", resident, p.resident, p.slots, busy, len(p.busy))
	}
	for _, pl := range p.plans {
		if !pl.heap.valid() {
			return fmt.Errorf("plan %q: heap out of order", pl.id)
		}
		if pl.ahead < pl.pos {
			return fmt.Errorf("plan %q: prefetch search at %d, behind %d", pl.id, pl.ahead, pl.pos)
		}
		for i := pl.pos; i < pl.ahead; i++ {
			if dp := pl.dpage[i]; dp >= 0 && !pl.isRead(i) && p.state[dp] == absent {
				return fmt.Errorf("plan %q: prefetch search at %d passed page %d at %d, which is not resident", pl.id, pl.ahead, dp, i)
			}
		}
	}
	for i := range p.lru {
		if !p.lru[i].valid() {
			return fmt.Errorf("LRU heap %d out of order", i)
		}
	}
	return nil
}
