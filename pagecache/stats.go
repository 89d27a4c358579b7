package pagecache

import (
	"time"

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

	PagesRead  uint64 `json:"pages_read"` // pages read from the source
	BytesRead  uint64 `json:"bytes_read"`
	ReadErrors uint64 `json:"read_errors"`
	Evictions  uint64 `json:"evictions"`

	Slots       int   `json:"slots"`
	BudgetBytes int64 `json:"budget_bytes"`
	Resident    int   `json:"resident"` // slots holding a loaded page
	Loading     int   `json:"loading"`
	Pinned      int   `json:"pinned"` // pins held now

	Plans []PlanStats `json:"plans"`
}

// PlanStats is one plan's progress.
type PlanStats = policy.PlanStats

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.stats
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
	st.Plans = c.pol.Plans()
	return st
}
