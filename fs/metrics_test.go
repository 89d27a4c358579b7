package fs

import (
	"testing"
)

// BenchmarkRequestCount is what every FUSE request costs without
// --metrics-addr: an atomic add.
func BenchmarkRequestCount(b *testing.B) {
	v := &View{}
	for b.Loop() {
		v.observe(opRead, v.begin(opRead))
	}
}

// BenchmarkRequestTimed is what it costs with --metrics-addr: the add, two
// clock reads and a histogram observation.
func BenchmarkRequestTimed(b *testing.B) {
	v := &View{}
	v.latencyVec, v.latency = newLatency()
	for b.Loop() {
		v.observe(opRead, v.begin(opRead))
	}
}

// TestRequestTimes: with Options.RequestTimes each request is counted once
// and timed once; without, only counted.
func TestRequestTimes(t *testing.T) {
	v := &View{}
	v.observe(opRead, v.begin(opRead))
	if v.requests[opRead].Load() != 1 || v.latency != nil {
		t.Fatalf("untimed: %d reads counted", v.requests[opRead].Load())
	}
	v.latencyVec, v.latency = newLatency()
	for range 3 {
		v.observe(opLookup, v.begin(opLookup))
	}
	if got := v.requests[opLookup].Load(); got != 3 {
		t.Errorf("%d lookups counted, want 3", got)
	}
	cs := v.Collectors()
	if len(cs) != 2 {
		t.Fatalf("%d collectors, want the counters' and the histograms'", len(cs))
	}
}
