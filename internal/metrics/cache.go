package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// Cache returns a collector of c's metrics and of its storage's, named
// NS_cache_* and NS_storage_*, and with a peer tier, NS_peer_*. src is the
// storage c reads from (its failed attempts are counted when it is a
// storage.RequestCounter).
func Cache(ns string, c *pagecache.Cache, src storage.Source) prometheus.Collector {
	pageSize := float64(c.File().PageSize())
	return Func(ns, func(e *Emitter) {
		st := c.Stats()
		EmitCache(e, st, pageSize)
		var rs storage.RequestStats
		if rc, ok := src.(storage.RequestCounter); ok {
			rs = rc.RequestStats()
		}
		EmitStorage(e, st, rs)
		if st.Peers != nil {
			EmitPeers(e, *st.Peers)
		}
	})
}

// EmitPeers sends the peer tier's metrics: what the cache read through it
// and what the tier did.
func EmitPeers(e *Emitter, st peerstats.Stats) {
	cs := st
	e.Counter("peer_read_bytes_total", "Bytes the cache read through the peer tier (from peers, this node's share of the cluster's pages, or storage).", float64(cs.BytesRead))
	e.Counter("peer_storage_read_bytes_total", "Bytes this node read from storage for the peer tier: the pages it owns, and what peers could not serve.", float64(cs.StorageBytes))
	for _, why := range slices.Sorted(maps.Keys(cs.StorageReasons)) {
		e.Counter("peer_storage_reads_total", "Reads this node sent to storage for the peer tier, by reason: owned (its share of the cluster's pages), owner_timeout, owner_gone, owner_error, corrupt_value (what its owner could not serve).", float64(cs.StorageReasons[why]), "reason", why)
	}
	e.Counter("peer_held_reads_total", "Values (pages and ranges) this node served to peers from the pages its cache holds (slots, compressed RAM, disk, --peer-cache-size) without reading storage.", float64(cs.HeldReads))
	e.Counter("peer_loads_total", "Values (pages and ranges) peers served to this node.", float64(st.PeerLoads))
	e.Counter("peer_errors_total", "Requests to peers that failed (down, slow, refused); read from storage instead.", float64(st.PeerErrors))
	e.Counter("peer_corrupt_total", "Values from peers that failed their check (tag, length); read from storage instead.", float64(st.Corrupt))
	e.Counter("peer_served_requests_total", "Requests other nodes sent this node.", float64(st.ServerRequests))
	e.Gauge("peer_cache_bytes", "Bytes of pages this node keeps for the cluster in the peer tier's memory (--peer-cache-size), beside what its cache's tiers keep.", float64(cs.CacheBytes))
}

// EmitCache sends the cache's metrics of st.
func EmitCache(e *Emitter, st pagecache.Stats, pageSize float64) {
	const (
		hits   = "Reads of samples served from the cache's tier without waiting, by tier (ram: the page slots; compressed-ram, disk) and kind (page or range)."
		misses = "Reads of samples that missed the tier, so that it loaded them from the tier below or storage, by tier and kind."
		evict  = "Pages and ranges dropped from the tier to make room, by tier and kind."
		budget = "The most bytes the tier may hold, by tier."
		res    = "Bytes the tier holds now, by tier."
	)
	e.Counter("cache_hits_total", hits, float64(st.Hits-st.RangeHits), "tier", "ram", "kind", "page")
	e.Counter("cache_hits_total", hits, float64(st.RangeHits), "tier", "ram", "kind", "range")
	e.Counter("cache_misses_total", misses, float64(st.Misses-st.RangeMisses), "tier", "ram", "kind", "page")
	e.Counter("cache_misses_total", misses, float64(st.RangeMisses), "tier", "ram", "kind", "range")
	e.Counter("cache_evictions_total", evict, float64(st.Evictions), "tier", "ram", "kind", "page")
	e.Counter("cache_evictions_total", evict, float64(st.RangeEvictions), "tier", "ram", "kind", "range")
	e.Gauge("cache_budget_bytes", budget, float64(st.BudgetBytes), "tier", "ram")
	e.Gauge("cache_resident_bytes", res, float64(st.Resident)*pageSize+float64(st.RangeBytes), "tier", "ram")
	e.Counter("cache_waits_total", "Reads that waited for a load under way or for a free slot.", float64(st.Waits))
	e.Counter("cache_wait_seconds_total", "Time reads spent waiting for loads and slots.", st.WaitTime.Seconds())
	e.Counter("cache_prefetch_hits_total", "First reads of pages and ranges that prefetching loaded.", float64(st.PrefetchHits))
	e.Counter("cache_loads_total", "Loads into the RAM cache from the tiers below or storage, by kind (page, or range request).", float64(st.PagesRead), "kind", "page")
	e.Counter("cache_loads_total", "Loads into the RAM cache from the tiers below or storage, by kind (page, or range request).", float64(st.RangeRequests), "kind", "range")
	e.Gauge("cache_slots", "Page slots of the RAM cache.", float64(st.Slots))
	e.Gauge("cache_resident_pages", "Page slots holding a loaded page.", float64(st.Resident))
	e.Gauge("cache_ranges", "Ranges (single samples' bytes) held.", float64(st.Ranges))
	e.Gauge("cache_pinned", "Pages and ranges pinned by readers now.", float64(st.Pinned))
	e.Gauge("cache_in_flight_requests", "Loads of pages and ranges under way.", float64(st.InFlight))
	e.Gauge("cache_prefetch_depth_requests", "Prefetch loads under way along announced orders.", float64(st.Prefetching))
	e.Gauge("cache_prefetch_depth_bytes", "Bytes of the prefetch loads under way.", float64(st.PrefetchingBytes))
	e.Gauge("cache_plans", "Announced orders the cache is reading along.", float64(len(st.Plans)))
	if st.Tiers == nil {
		return
	}
	e.Counter("cache_tier_waits_total", "Reads that waited for a load the compressed RAM or disk tier served: the page was not in RAM ahead of them.", float64(st.TierWaits))
	e.Counter("cache_tier_wait_seconds_total", "Time reads spent waiting for loads the compressed RAM or disk tier served.", st.TierWaitTime.Seconds())
	for _, t := range st.Tiers.Tiers {
		name := t.Kind
		if name == "ram" {
			name = "compressed-ram"
		}
		e.Counter("cache_hits_total", hits, float64(t.Hits), "tier", name, "kind", "page")
		e.Counter("cache_misses_total", misses, float64(t.Misses), "tier", name, "kind", "page")
		e.Counter("cache_evictions_total", evict, float64(t.Evictions), "tier", name, "kind", "page")
		e.Gauge("cache_budget_bytes", budget, float64(t.BudgetBytes), "tier", name)
		e.Gauge("cache_resident_bytes", res, float64(t.Bytes), "tier", name)
		e.Counter("cache_hit_bytes_total", "Bytes of pages served by the tier, by tier.", float64(t.HitBytes), "tier", name)
		e.Gauge("cache_raw_bytes", "Bytes of the pages the tier holds, before compression, by tier.", float64(t.RawBytes), "tier", name)
		e.Counter("cache_decode_seconds_total", "Time the tier's hits spent reading and decoding entries, by tier.", t.DecodeTime.Seconds(), "tier", name)
		e.Counter("cache_stored_total", "Pages written to the tier, by tier.", float64(t.Stored), "tier", name)
		e.Counter("cache_checksum_failures_total", "Entries of the tier found corrupt (dropped, read from storage instead), by tier.", float64(t.ChecksumFailures), "tier", name)
		e.Counter("cache_tier_errors_total", "I/O errors of the tier, by tier.", float64(t.Errors), "tier", name)
		on := 0.0
		if t.State == "on" || t.State == "shared" {
			on = 1
		}
		e.Gauge("cache_tier_up", "1 while the tier works, 0 once it turned itself off (see stats.json for why), by tier.", on, "tier", name)
	}
}

// EmitStorage sends the storage's metrics: st's requests and bytes, rs's
// failed attempts.
func EmitStorage(e *Emitter, st pagecache.Stats, rs storage.RequestStats) {
	reqs, bytes := st.Storage()
	e.Counter("storage_requests_total", "Requests to storage (not counting their retries).", float64(reqs))
	e.Counter("storage_read_bytes_total", "Bytes read from storage.", float64(bytes))
	e.Counter("storage_read_errors_total", "Loads that failed after their retries (the reads waiting on them got EIO).", float64(st.ReadErrors))
	const (
		retries  = "Failed attempts of storage requests that were retried, by cause."
		failures = "Failed attempts of storage requests that were not retried (no retries left, not worth retrying, deadline), by cause."
	)
	for _, c := range storageCauses {
		e.Counter("storage_retries_total", retries, float64(rs.Retries[c]), "cause", c)
		e.Counter("storage_failures_total", failures, float64(rs.Failures[c]), "cause", c)
	}
}

// storageCauses are the causes storage.ErrorClass gives, all exported from
// the start so that rate() sees the first failure of each.
var storageCauses = []string{"changed", "client_error", "closed", "connection", "deadline", "server_error", "stalled", "throttled", "tls"}
