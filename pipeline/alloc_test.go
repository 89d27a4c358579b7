package pipeline

import (
	"context"
	"runtime"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
)

// TestSteadyStateAllocations checks that an epoch after the first allocates
// little per sample: batches are written in place, decoders and their
// scratch are reused, and the garbage an epoch leaves is what the order and
// the plan take, not something per image.
func TestSteadyStateAllocations(t *testing.T) {
	c := openCache(t, testenv.Fixture(t, "beton", "imagefolder-mixed.beton"))
	p, err := New(c, Options{BatchSize: 16, Workers: 2, Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 64, OutH: 64, FlipProb: 0.5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewDiscardSink(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ctx := context.Background()
	if _, err := p.RunEpoch(ctx, 0, sink); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const epochs = 3
	n := 0
	for e := 1; e <= epochs; e++ {
		k, err := p.RunEpoch(ctx, e, sink)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
	runtime.ReadMemStats(&after)
	allocs := float64(after.Mallocs-before.Mallocs) / float64(n)
	bytes := float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
	t.Logf("%d samples: %.2f allocations and %.0f bytes per sample", n, allocs, bytes)
	if allocs > 4 || bytes > 1024 {
		t.Errorf("%.2f allocations and %.0f bytes per sample in steady state, want at most 4 and 1024 (an output image is 12288)", allocs, bytes)
	}
}
