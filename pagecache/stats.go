package pagecache

import (
	"slices"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
	"github.com/ffcvfs/ffcvfs/pagecache/policy"
)

// Stats are the cache's counters since New.
type Stats struct {
	// Acquisitions: served at once (Hits), by a load of their own (Misses),
	// or after waiting for a load under way or a free slot (Waits).
	Hits   uint64 `json:"hits"`
	Misses uint64 `json:"misses"`
	Waits  uint64 `json:"waits"`
	// WaitTime is the total time acquisitions spent waiting.
	WaitTime time.Duration `json:"wait_ns"`
	// PrefetchHits counts first uses of pages that prefetching loaded.
	PrefetchHits uint64 `json:"prefetch_hits"`

	// RangeHits and RangeMisses are the Hits and Misses of samples
	// served by a range (the others are of pages).
	RangeHits   uint64 `json:"range_hits"`
	RangeMisses uint64 `json:"range_misses"`

	PagesRead uint64 `json:"pages_read"` // pages read from the source
	// RangesRead counts samples read from the source as ranges, in
	// RangeRequests requests (neighbours share one).
	RangesRead    uint64 `json:"ranges_read"`
	RangeRequests uint64 `json:"range_requests"`
	BytesRead     uint64 `json:"bytes_read"` // pages and ranges
	// Requests counts the requests to the source (pages and ranges, not
	// their retries); EpochRequests, those of each epoch completed (every
	// sample with data read), the last 16, oldest first.
	Requests          uint64   `json:"requests"`
	RequestsThisEpoch uint64   `json:"requests_this_epoch"`
	EpochRequests     []uint64 `json:"epoch_requests"`
	// TierWaits counts the acquisitions that waited for a load the
	// compressed RAM or disk tier served (their own, or one under way:
	// the page was not read ahead of them), and TierWaitTime how long
	// (the loads and bytes the tiers served are their Hits and HitBytes).
	// TierThisEpoch and TierEpochs count both by epoch, as EpochRequests.
	TierWaits      uint64        `json:"tier_waits"`
	TierWaitTime   time.Duration `json:"tier_wait_ns"`
	TierThisEpoch  TierEpoch     `json:"tier_this_epoch"`
	TierEpochs     []TierEpoch   `json:"tier_epochs"`
	ReadErrors     uint64        `json:"read_errors"`
	Evictions      uint64        `json:"evictions"`
	RangeEvictions uint64        `json:"range_evictions"`
	// RangeMappings counts the mappings made for ranges; a range mostly
	// reuses the mapping of one gone (see rangeSet.pool).
	RangeMappings uint64 `json:"range_mappings"`

	Slots       int   `json:"slots"`
	BudgetBytes int64 `json:"budget_bytes"`
	Resident    int   `json:"resident"` // slots holding a loaded page
	Loading     int   `json:"loading"`
	// InFlight is the requests for pages and ranges under way now (the
	// page loads served by a tier included); Prefetching, those of them
	// that prefetch along a plan, and PrefetchingBytes their bytes.
	InFlight         int   `json:"in_flight"`
	Prefetching      int   `json:"prefetching"`
	PrefetchingBytes int64 `json:"prefetching_bytes"`
	Pinned           int   `json:"pinned"` // pins held now
	// Ranges now: how many, the bytes of their memory, and the slots
	// whose bytes they use.
	Ranges     int   `json:"ranges"`
	RangeBytes int64 `json:"range_bytes"`
	LentSlots  int   `json:"lent_slots"`
	// UnplannedReads is how misses no plan expects are served now: by
	// "pages" or by "ranges".
	UnplannedReads string `json:"unplanned_reads"`

	Plans []PlanStats `json:"plans"`

	// Tiers are the compressed RAM and disk tiers' counters; nil without
	// tiers.
	Tiers *TierStats `json:"tiers,omitempty"`
	// Peers is what the peer tier did, the cache's reads through it
	// included; nil without one (stats.json has it in its peers section).
	Peers *peerstats.Stats `json:"-"`
}

// TierEpoch is what the tiers served in one epoch: loads and bytes, and
// the acquisitions that waited for them and how long.
type TierEpoch struct {
	Loads    uint64        `json:"loads"`
	Bytes    uint64        `json:"bytes"`
	Waits    uint64        `json:"waits"`
	WaitTime time.Duration `json:"wait_ns"`
}

// PlanStats is one plan's progress.
type PlanStats = policy.PlanStats

// Storage returns the requests and bytes that reached storage: with tiers,
// those of the tiers' wrapper (their hits never do), else the cache's own.
func (s Stats) Storage() (requests, bytes uint64) {
	if s.Tiers != nil {
		return s.Tiers.StorageRequests, s.Tiers.StorageBytes
	}
	return s.Requests, s.BytesRead
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	// Outside the cache's lock: a tier takes it to rank pages.
	ts, ps := c.below.stats()
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
	st.Tiers, st.Peers = ts, ps
	for i := range c.slots {
		s := &c.slots[i]
		switch {
		case s.page >= 0 && s.ready:
			st.Resident++
		case s.page >= 0:
			st.Loading++
		}
		st.Pinned += int(s.pins)
	}
	ops := map[*call]bool{}
	for _, e := range c.rng.m {
		st.Ranges++
		st.Pinned += int(e.pins)
		if !e.ready && e.op != nil {
			ops[e.op] = true
		}
	}
	st.InFlight = st.Loading + len(ops)
	st.Prefetching, st.PrefetchingBytes = c.inflight, c.inflightBytes
	st.RangeBytes = c.rng.used
	st.LentSlots = len(c.rng.lent)
	st.UnplannedReads = "pages"
	if c.pol.RangeMode() && c.pageSlots() < len(c.pageSlot) {
		st.UnplannedReads = "ranges"
	}
	st.EpochRequests = slices.Clone(st.EpochRequests)
	st.TierEpochs = slices.Clone(st.TierEpochs)
	st.Plans = c.pol.Plans()
	return st
}
