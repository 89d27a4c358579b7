package pagecache

import (
	"fmt"
	"math/bits"
	"slices"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/pagecache/policy"
)

// coalesceLook is how many of a plan's range positions after a prefetched
// one are looked at for neighbours to read in the same request.
const coalesceLook = 256

// coalesceSlack is how many positions past the budget's horizon a
// neighbour may be read with a prefetched range (see coalesce).
const coalesceSlack = 8

// coalesceGap is the most bytes between neighbours read in one request
// (the bytes between are read and dropped).
const coalesceGap = 4 << 10

// maxCoalesced bounds the bytes of one coalesced request.
const maxCoalesced = 1 << 20

// rangeEntry is one sample's bytes.
//
// INVARIANT: in rangeSet.m under its sample. Loading: op != nil, !ready,
// in no list. Ready: filed in ahead (plan != nil, hidx >= 0) or in the
// idle list (plan == nil).
type rangeEntry struct {
	s          int32
	pg         Page
	buf        []byte // its mapping; pg.Data is its start
	ready      bool
	prefetched bool // loaded by prefetch and not used since
	pins       int32
	op         *call
	// The next use known: position pos of plan; nil if none.
	plan       *policy.Plan
	pos        int
	hidx       int
	prev, next *rangeEntry // the idle list
	filed      bool
}

// rangeSet holds the ranges.
//
// A miss is served by a page or by a range: the bytes of one sample (its
// extent: from its first allocation to the end of its last), as the policy
// chooses (policy.RangeRead). Ranges share the budget with pages: slots
// whose bytes ranges use are lent to them (and their memory given back to
// the system), and ranges take at most the bytes of the slots lent. A range
// lives in its own mapping, a whole number of OS pages (mappedSize), outside
// the Go heap for the reason the arena is (see newArena). The mapping of a
// range gone is pooled by size and taken by a range to come (mapping), and
// eviction for a miss prefers a range whose mapping fits it
// (idleVictimFor): an mmap and an munmap per range cost more CPU than the
// rest of its read; the pool's bytes count against the slots lent, and
// are unmapped when the slots go back to pages.
//
// Eviction follows the pages' rule: ranges no plan needs go first, least
// recently used first; then the range whose next use is farthest, unless a
// page is needed later. Ranges are prefetched along plans (policy.
// NextRange) as far ahead as that rule lets the budget go, neighbours in a
// page needed soon (within coalesceLook positions, and within the
// positions whose samples the budget holds or coalesceSlack of the first;
// no more than coalesceGap apart) in one request, which waits for the
// room of all of them. A slot goes back from ranges to pages
// when a page load finds none free and the ranges can spare one.
type rangeSet struct {
	m    map[int32]*rangeEntry
	used int64   // bytes of the entries' mappings
	lent []int32 // slots lent to ranges
	// pool keeps the mappings of ranges gone, by size, for ranges to come:
	// mapping and unmapping per range cost more than the rest of a read
	// (munmap most, for its TLB shootdowns). pooled counts their bytes,
	// which with used stay within the slots lent.
	pool   map[int64][][]byte
	pooled int64
	// ahead is a heap of the ready ranges a plan needs, farthest position
	// on top.
	ahead []*rangeEntry
	// The idle list: ready ranges no plan needs, most recently used first.
	head, tail *rangeEntry
}

func (r *rangeSet) less(i, j int) bool { return r.ahead[i].pos > r.ahead[j].pos }

func (r *rangeSet) swap(i, j int) {
	r.ahead[i], r.ahead[j] = r.ahead[j], r.ahead[i]
	r.ahead[i].hidx, r.ahead[j].hidx = i, j
}

func (r *rangeSet) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !r.less(j, i) {
			break
		}
		r.swap(i, j)
		j = i
	}
}

func (r *rangeSet) down(i int) {
	n := len(r.ahead)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		if rr := l + 1; rr < n && r.less(rr, l) {
			l = rr
		}
		if !r.less(l, i) {
			return
		}
		r.swap(i, l)
		i = l
	}
}

func (r *rangeSet) file(e *rangeEntry) {
	e.filed = true
	if e.plan != nil {
		e.hidx = len(r.ahead)
		r.ahead = append(r.ahead, e)
		r.up(e.hidx)
		return
	}
	e.prev, e.next = nil, r.head
	if r.head != nil {
		r.head.prev = e
	} else {
		r.tail = e
	}
	r.head = e
}

func (r *rangeSet) unfile(e *rangeEntry) {
	if !e.filed {
		return
	}
	e.filed = false
	if e.plan != nil {
		i, last := e.hidx, len(r.ahead)-1
		if i != last {
			r.swap(i, last)
		}
		r.ahead = r.ahead[:last]
		if i != last {
			r.down(i)
			r.up(i)
		}
		e.hidx = -1
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		r.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		r.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// mapping returns a mapping of at least mappedSize(n) bytes, and at most
// limit, for a range: one the pool holds, or a new one, trimming the pool
// first so that the ranges' mappings stay within the slots lent (makeRoom
// made room for used + mappedSize(n) ≤ limit + used).
func (c *Cache) mapping(n uint32, limit int64) ([]byte, error) {
	size := mappedSize(n)
	r := &c.rng
	// The smallest pooled mapping that holds the range, if it is at most
	// twice its size (a larger one would hold budget the range does not use).
	best := int64(0)
	for sz, l := range r.pool {
		if len(l) > 0 && sz >= size && sz <= min(2*size, limit) && (best == 0 || sz < best) {
			best = sz
		}
	}
	if best == 0 {
		// An idle range whose mapping fits: no plan needs it, and its
		// mapping changes hands instead of the pool being trimmed for a
		// new one.
		if e := c.idleFit(size, min(2*size, limit)); e != nil {
			best = int64(len(e.buf))
			c.evictRange(e)
		}
	}
	if best > 0 {
		l := r.pool[best]
		buf := l[len(l)-1]
		r.pool[best] = l[:len(l)-1]
		r.pooled -= best
		return buf, nil
	}
	c.trimPool(c.rangeRoom() - size)
	c.stats.RangeMappings++
	return syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_POPULATE)
}

// rangeRoom is the bytes the ranges may still map: those of the slots
// lent that their mappings do not use.
func (c *Cache) rangeRoom() int64 { return int64(len(c.rng.lent))*c.pageSize - c.rng.used }

// trimPool unmaps pooled mappings until the pool holds at most keep bytes.
func (c *Cache) trimPool(keep int64) {
	r := &c.rng
	for size, l := range r.pool {
		for r.pooled > max(keep, 0) && len(l) > 0 {
			if err := syscall.Munmap(l[len(l)-1]); err != nil {
				panic(fmt.Sprintf("pagecache: unmapping a range: %v", err))
			}
			l = l[:len(l)-1]
			r.pooled -= size
		}
		r.pool[size] = l
		if r.pooled <= max(keep, 0) {
			return
		}
	}
}

// mappedSize is what the mapping of a range of n bytes takes: whole OS
// pages, and above 8 of them a size among 8 per doubling, so that the
// mapping of a range gone fits many ranges to come (at most 1/8 more than
// their pages).
func mappedSize(n uint32) int64 {
	ps := int64(syscall.Getpagesize())
	p := (int64(n) + ps - 1) / ps
	if p > 8 {
		step := int64(1) << (bits.Len64(uint64(p)) - 4)
		p = (p + step - 1) / step * step
	}
	return max(p, 1) * ps
}

// extent returns sample s's bytes in the file: [lo, lo+n).
func (c *Cache) extent(s int) (lo int64, n int) {
	dp := c.samplePage[s]
	return c.f.PageOffset(int64(dp)+c.firstPage) + int64(c.extOff[s]), int(c.extLen[s])
}

// rekey files ready range e by its next use.
func (c *Cache) rekey(e *rangeEntry) {
	c.rng.unfile(e)
	e.plan, e.pos = c.pol.NextUse(int(e.s))
	c.rng.file(e)
}

// rekeyAll refiles every ready range after the plans changed.
func (c *Cache) rekeyAll() {
	for _, e := range c.rng.m {
		if e.ready {
			c.rekey(e)
		}
	}
}

// unmapRange forgets range e, filed nowhere, and pools its mapping.
func (c *Cache) unmapRange(e *rangeEntry) {
	delete(c.rng.m, e.s)
	size := int64(len(e.buf))
	c.rng.used -= size
	if c.rng.pool == nil {
		c.rng.pool = map[int64][][]byte{}
	}
	c.rng.pool[size] = append(c.rng.pool[size], e.buf)
	c.rng.pooled += size
}

// evictRange drops ready, unpinned range e.
func (c *Cache) evictRange(e *rangeEntry) {
	c.rng.unfile(e)
	if e.plan != nil {
		c.pol.RangeGone(e.plan, e.pos)
	}
	c.stats.RangeEvictions++
	if c.onEvict != nil {
		c.onEvict(int64(c.samplePage[e.s])+c.firstPage, int(e.s))
	}
	c.unmapRange(e)
}

// lendSlot lends the free slot on top to ranges, if there is one.
func (c *Cache) lendSlot() bool {
	n := len(c.free)
	if n == 0 {
		return false
	}
	si := c.free[n-1]
	c.free = c.free[:n-1]
	// The slot's memory goes back to the system; the ranges use the
	// bytes.
	syscall.Madvise(c.slots[si].buf, syscall.MADV_DONTNEED)
	c.rng.lent = append(c.rng.lent, si)
	c.pol.SetSlots(c.pageSlots() - len(c.rng.lent))
	return true
}

// spareSlots gives back to pages the slots ranges do not use, evicting
// ranges no plan needs to make one spare if need be; it reports whether a
// slot is free.
func (c *Cache) spareSlots() bool {
	for len(c.rng.lent) > 0 {
		c.trimPool(int64(len(c.rng.lent)-1)*c.pageSize - c.rng.used)
		if c.rng.used+c.rng.pooled > int64(len(c.rng.lent)-1)*c.pageSize {
			e := c.idleVictim()
			if e == nil {
				break
			}
			c.evictRange(e)
			continue
		}
		n := len(c.rng.lent)
		c.free = append(c.free, c.rng.lent[n-1])
		c.rng.lent = c.rng.lent[:n-1]
		c.pol.SetSlots(c.pageSlots() - len(c.rng.lent))
	}
	return len(c.free) > 0
}

// idleVictim returns the least recently used idle range not pinned, or nil.
func (c *Cache) idleVictim() *rangeEntry {
	for e := c.rng.tail; e != nil; e = e.prev {
		if e.pins == 0 {
			return e
		}
	}
	return nil
}

// idleFit returns one of the least recently used idle ranges whose
// mapping has lo to hi bytes, or nil.
func (c *Cache) idleFit(lo, hi int64) *rangeEntry {
	i := 0
	for e := c.rng.tail; e != nil && i < 32; e = e.prev {
		if e.pins > 0 {
			continue
		}
		if sz := int64(len(e.buf)); sz >= lo && sz <= hi {
			return e
		}
		i++
	}
	return nil
}

// idleVictimFor is idleVictim, but among the least recently used idle
// ranges it prefers one whose mapping a range of need bytes can reuse
// (mapping): its memory then changes hands with no system call.
func (c *Cache) idleVictimFor(need int64) *rangeEntry {
	if e := c.idleFit(need, 2*need); e != nil {
		return e
	}
	return c.idleVictim()
}

// aheadVictim returns the range needed farthest away and its distance, or
// nil. A range whose plan is gone, or whose position was passed, is needed
// never.
func (c *Cache) aheadVictim() (*rangeEntry, int) {
	if len(c.rng.ahead) == 0 {
		return nil, 0
	}
	e := c.rng.ahead[0]
	if e.pins > 0 {
		return nil, 0
	}
	if !e.plan.Live() || e.pos < e.plan.Pos() {
		return e, policy.Never
	}
	return e, e.pos - e.plan.Pos()
}

// evictPage drops the evictable page dp and frees its slot.
func (c *Cache) evictPage(dp int32) {
	si := c.pageSlot[dp]
	s := &c.slots[si]
	c.pol.Evict(dp)
	c.pageSlot[dp] = -1
	c.stats.Evictions++
	if c.onEvict != nil {
		c.onEvict(int64(dp)+c.firstPage, -1)
	}
	s.page, s.ready, s.prefetched = -1, false, false
	c.free = append(c.free, si)
}

// makeRoom makes room for need bytes of ranges whose first use is dist
// positions away (demand: -1), evicting only what is needed later, and
// reports whether it could.
func (c *Cache) makeRoom(need int64, dist int) bool {
	demand := dist < 0
	for c.rng.used+need > int64(len(c.rng.lent))*c.pageSize {
		if e := c.idleVictimFor(need); e != nil {
			c.evictRange(e)
			continue
		}
		e, ed := c.aheadVictim()
		if e != nil && ed == policy.Never {
			c.evictRange(e)
			continue
		}
		if c.lendSlot() {
			continue
		}
		v, vd := c.pol.Victim()
		if v >= 0 && (vd == policy.Never || vd > dist) && (e == nil || vd >= ed) {
			c.evictPage(v)
			continue
		}
		if e != nil && (demand || ed > dist) {
			c.evictRange(e)
			continue
		}
		if demand && v >= 0 {
			c.evictPage(v)
			continue
		}
		return false
	}
	return true
}

// newRange makes the entry of sample s, loading under op, with its mapping
// of at most limit bytes counted against the ranges' bytes (makeRoom made
// room).
func (c *Cache) newRange(s int, op *call, limit int64) (*rangeEntry, error) {
	lo, n := c.extent(s)
	buf, err := c.mapping(uint32(n), limit)
	if err != nil {
		return nil, fmt.Errorf("%s: memory for sample %d's %d bytes: %w", c.src.Name(), s, n, err)
	}
	e := &rangeEntry{s: int32(s), buf: buf, op: op, hidx: -1}
	e.pg = Page{c: c, slot: -1, r: e, Num: int64(c.samplePage[s]) + c.firstPage, Off: lo, Data: buf[:n:n]}
	c.rng.m[int32(s)] = e
	c.rng.used += int64(len(buf))
	return e, nil
}

// prefetchRange starts the prefetch of the next range the plans need, if
// the budget allows; it reports whether it started one.
func (c *Cache) prefetchRange() bool {
	for {
		pl, i, s, ok := c.pol.NextRange()
		if !ok {
			return false
		}
		if c.pageSlot[c.samplePage[s]] >= 0 || c.rng.m[int32(s)] != nil {
			c.pol.SkipRange(pl)
			continue
		}
		group, lo, hi := c.coalesce(pl, i, s)
		need := int64(0)
		for _, g := range group {
			need += mappedSize(c.extLen[g])
		}
		d := i - pl.Pos()
		if !c.makeRoom(need, d) {
			// A group waits for its room, as a single range does, unless
			// it needs more than half the budget: taken apart whenever
			// the budget is full, as it is along a plan, neighbours would
			// be read one by one.
			if len(group) == 1 || need <= c.stats.BudgetBytes/2 {
				return false
			}
			var n int
			lo, n = c.extent(s)
			group, hi = []int{s}, lo+int64(n)
			if !c.makeRoom(mappedSize(c.extLen[s]), d) {
				return false
			}
		}
		op := newCall()
		es := make([]*rangeEntry, 0, len(group))
		left := int64(0) // what the group's members take at least
		for _, g := range group {
			left += mappedSize(c.extLen[g])
		}
		for _, g := range group {
			// A member may take a larger mapping from the pool if that
			// leaves the rest of the group its room.
			left -= mappedSize(c.extLen[g])
			e, err := c.newRange(g, op, c.rangeRoom()-left)
			if err != nil {
				c.opts.Logger.Warn("range prefetch failed", "err", err)
				for _, e := range es {
					c.unmapRange(e)
				}
				return false
			}
			e.prefetched = true
			es = append(es, e)
		}
		c.pol.SkipRange(pl)
		c.inflight++
		c.inflightBytes += hi - lo
		c.jobs <- job{dp: c.samplePage[s], op: op, ranges: es, lo: lo, hi: hi}
		return true
	}
}

// coalesce returns sample s, at position i of pl, with the neighbours in
// its page that pl reads as ranges soon and that are not resident, in file
// order, and the bytes [lo, hi) that cover them.
func (c *Cache) coalesce(pl *policy.Plan, i, s int) (group []int, lo, hi int64) {
	lo, n := c.extent(s)
	hi = lo + int64(n)
	dp := c.samplePage[s]
	// Only neighbours the budget can hold until they are read: those
	// within the positions whose samples fit in it, or within
	// coalesceSlack positions of s. Prefetch runs at the horizon's edge
	// while the budget is full, so without the slack a neighbour read
	// right after s would be left to a request of its own; a later
	// prefetch evicts only what is read after its own position, never it.
	horizon := max(pl.Pos()+int(c.stats.BudgetBytes/c.meanExtent), i+1+coalesceSlack)
	var near []int
	pl.RangesAfter(i, coalesceLook, func(j, t int) bool {
		if j >= horizon {
			return false
		}
		if c.samplePage[t] == dp && t != s && c.rng.m[int32(t)] == nil {
			near = append(near, t)
		}
		return true
	})
	group = append(group, s)
	if len(near) == 0 {
		return group, lo, hi
	}
	slices.SortFunc(near, func(a, b int) int { return int(c.extOff[a]) - int(c.extOff[b]) })
	near = slices.Compact(near)
	for grew := true; grew; {
		grew = false
		for _, t := range near {
			tlo, tn := c.extent(t)
			thi := tlo + int64(tn)
			if slices.Contains(group, t) || max(hi, thi)-min(lo, tlo) > maxCoalesced {
				continue
			}
			if (tlo >= hi && tlo-hi <= coalesceGap) || (thi <= lo && lo-thi <= coalesceGap) {
				group = append(group, t)
				lo, hi = min(lo, tlo), max(hi, thi)
				grew = true
			}
		}
	}
	return group, lo, hi
}

// countRequest counts a request to the source, by epoch.
func (c *Cache) countRequest() {
	c.stats.Requests++
	c.newEpoch()
	c.stats.RequestsThisEpoch++
}

// countTier counts a load of n bytes that a tier served, by epoch.
func (c *Cache) countTier(n int) {
	c.newEpoch()
	c.stats.TierThisEpoch.Loads++
	c.stats.TierThisEpoch.Bytes += uint64(n)
}

// countTierWait counts a read that waited d for a load a tier served.
func (c *Cache) countTierWait(d time.Duration) {
	c.newEpoch()
	c.stats.TierWaits++
	c.stats.TierWaitTime += d
	c.stats.TierThisEpoch.Waits++
	c.stats.TierThisEpoch.WaitTime += d
}

// newEpoch starts the counters of a new epoch when the policy has seen
// one complete, keeping those of the last maxEpochsKept.
func (c *Cache) newEpoch() {
	e := c.pol.Epochs()
	if e == c.epochSeen {
		return
	}
	c.stats.EpochRequests = append(c.stats.EpochRequests, c.stats.RequestsThisEpoch)
	c.stats.TierEpochs = append(c.stats.TierEpochs, c.stats.TierThisEpoch)
	if len(c.stats.EpochRequests) > maxEpochsKept {
		c.stats.EpochRequests = c.stats.EpochRequests[1:]
		c.stats.TierEpochs = c.stats.TierEpochs[1:]
	}
	c.stats.RequestsThisEpoch = 0
	c.stats.TierThisEpoch = TierEpoch{}
	c.epochSeen = e
}

// maxEpochsKept is how many completed epochs' request counts Stats keeps.
const maxEpochsKept = 16

// checkRanges verifies the ranges' invariants (Options.Debug).
func (c *Cache) checkRanges() {
	var used int64
	ahead, idle := 0, 0
	ready := 0
	for s, e := range c.rng.m {
		used += int64(len(e.buf))
		if e.ready {
			ready++
		}
		if e.s != s || e.pins < 0 || e.ready == (e.op != nil) || e.ready != e.filed {
			panic(fmt.Sprintf("pagecache: range of sample %d: %+v", s, e))
		}
		if e.ready && e.plan != nil {
			ahead++
			if c.rng.ahead[e.hidx] != e {
				panic(fmt.Sprintf("pagecache: range of sample %d not at its heap index %d", s, e.hidx))
			}
		}
	}
	for e := c.rng.head; e != nil; e = e.next {
		if !e.ready || e.plan != nil || c.rng.m[e.s] != e {
			panic(fmt.Sprintf("pagecache: idle range of sample %d: ready %v, planned %v", e.s, e.ready, e.plan != nil))
		}
		idle++
	}
	for i := 1; i < len(c.rng.ahead); i++ {
		if c.rng.less(i, (i-1)/2) {
			panic("pagecache: range heap out of order")
		}
	}
	pooled := int64(0)
	for size, l := range c.rng.pool {
		pooled += size * int64(len(l))
	}
	if used != c.rng.used || pooled != c.rng.pooled || used+pooled > int64(len(c.rng.lent))*c.pageSize || ahead != len(c.rng.ahead) || ahead+idle != ready {
		panic(fmt.Sprintf("pagecache: ranges use %d bytes (counted %d) of %d slots lent; %d ahead (heap %d), %d idle, %d ready", used, c.rng.used, len(c.rng.lent), ahead, len(c.rng.ahead), idle, ready))
	}
	if c.pol.Slots() != c.pageSlots()-len(c.rng.lent) {
		panic(fmt.Sprintf("pagecache: the policy has %d slots, %d lent of %d", c.pol.Slots(), len(c.rng.lent), c.pageSlots()))
	}
}
