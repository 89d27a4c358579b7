package order

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// resumeCase is an epoch read by the world sizes of chain, each part
// stopped at a fraction of its ranks' orders, then finished by the last.
type resumeCase struct {
	chain []int     // world sizes, the last one finishing the epoch
	stops []float64 // where each earlier part stopped, as a fraction of its orders
}

// TestElasticResume: an epoch stopped at several points and resumed at
// another world size (8→6, 6→8, 4→1, 1→3, and twice: 8→6→3) delivers,
// over all its parts, every sample exactly once, but for padding: the
// rest holds exactly the samples the earlier parts did not take; each
// rank of the rest gets the same count, made of its own samples (padded
// from its own, as a whole epoch is); pages are not split between ranks
// of a page-local rest (sequential, quasi-random); and the same state
// gives the same orders.
func TestElasticResume(t *testing.T) {
	cases := []resumeCase{
		{[]int{8, 6}, nil}, {[]int{6, 8}, nil}, {[]int{4, 1}, nil}, {[]int{1, 3}, nil}, {[]int{8, 6, 3}, nil},
	}
	fractions := []float64{0, 0.01, 0.37, 0.9, 1}
	layouts := []namedLayout{
		{"pages", newSynth(synthSpec{n: 5000, mean: 37})},
		{"mixed", newSynth(synthSpec{n: 5000, mean: 37, noDataEvery: 7, emptyEvery: 5, interleave: true})},
		{"beton", betonLayout(t)},
	}
	for _, nl := range layouts {
		for _, kind := range Kinds() {
			for _, c := range cases {
				for _, f := range fractions {
					c.stops = make([]float64, len(c.chain)-1)
					for i := range c.stops {
						c.stops[i] = f
					}
					name := fmt.Sprintf("%s/%s/%v/at-%g", nl.name, kind, c.chain, f)
					t.Run(name, func(t *testing.T) { checkResume(t, nl.l, kind, c) })
				}
			}
		}
	}
}

func checkResume(t *testing.T, l PageMap, kind Kind, c resumeCase) {
	n := l.NumSamples()
	base := Options{Kind: kind, Seed: 11, Epoch: 3, BatchSize: 64}
	taken := make([]int, n) // times each sample was delivered before the last part
	var segs []Segment
	for i, w := range c.chain[:len(c.chain)-1] {
		var pos int
		for r := range w {
			o := base
			o.Rank, o.WorldSize, o.Resumed = r, w, segs
			ord := generate(t, l, o)
			if r == 0 {
				pos = int(c.stops[i] * float64(len(ord)))
			}
			for _, s := range ord[:pos] {
				taken[s]++
			}
		}
		segs = append(segs, Segment{WorldSize: w, Position: pos})
	}
	wLast := c.chain[len(c.chain)-1]
	rest := map[uint32]bool{}
	for s := range n {
		if taken[s] == 0 {
			rest[uint32(s)] = true
		}
	}
	got := map[uint32]int{}
	pageRank := map[int64]int{}
	length := -1
	for r := range wLast {
		o := base
		o.Rank, o.WorldSize, o.Resumed = r, wLast, segs
		ord := generate(t, l, o)
		if again := generate(t, l, o); !slices.Equal(ord, again) {
			t.Fatalf("rank %d: the same state gave two orders", r)
		}
		if length >= 0 && len(ord) != length {
			t.Errorf("rank %d has %d samples, rank 0 %d: counts differ", r, len(ord), length)
		}
		length = len(ord)
		own := map[uint32]bool{}
		for _, s := range ord {
			if !rest[s] {
				t.Fatalf("rank %d delivers sample %d, which an earlier part took", r, s)
			}
			if !own[s] {
				own[s] = true
				got[s]++
			}
		}
		if kind == Random {
			continue
		}
		for s := range own {
			p := l.SamplePage(int(s))
			if p == beton.NoPage {
				continue
			}
			if q, ok := pageRank[p]; ok && q != r && len(rest) >= 4*wLast*64 {
				t.Errorf("page %d is split between ranks %d and %d of the rest", p, q, r)
			}
			pageRank[p] = r
		}
	}
	// Every sample of the rest exactly once (a sample a rank repeats as
	// padding is counted once for it; two ranks never share one unless
	// the rest is too small to give each rank a page).
	for s := range rest {
		if got[s] == 0 {
			t.Fatalf("sample %d is delivered by no part of the epoch", s)
		}
		if got[s] > 1 && len(rest) >= wLast {
			t.Errorf("sample %d is delivered by %d ranks of the rest", s, got[s])
		}
	}
	if len(rest) == 0 && length != 0 {
		t.Errorf("nothing is left of the epoch, but ranks get %d samples", length)
	}
}

// TestResumeDropLast: with DropLast the rest's ranks take equal counts
// without repeating any sample.
func TestResumeDropLast(t *testing.T) {
	l := newSynth(synthSpec{n: 5000, mean: 37})
	o := Options{Kind: QuasiRandom, Seed: 1, Epoch: 0, WorldSize: 4, DropLast: true}
	first := generate(t, l, o)
	segs := []Segment{{WorldSize: 4, Position: len(first) / 2}}
	seen := map[uint32]bool{}
	for r := range 3 {
		o := Options{Kind: QuasiRandom, Seed: 1, Epoch: 0, Rank: r, WorldSize: 3, DropLast: true, Resumed: segs}
		for _, s := range generate(t, l, o) {
			if seen[s] {
				t.Fatalf("sample %d delivered twice with DropLast", s)
			}
			seen[s] = true
		}
	}
}

// TestResumeErrors: a position past the ranks' orders, and malformed
// segments, are errors that say so.
func TestResumeErrors(t *testing.T) {
	l := newSynth(synthSpec{n: 500, mean: 37})
	o := Options{Kind: Random, WorldSize: 2, Resumed: []Segment{{WorldSize: 4, Position: 501}}}
	if _, err := Generate(l, o); err == nil {
		t.Errorf("a position past the end of the orders gave no error")
	}
	o.Resumed = []Segment{{WorldSize: 0, Position: 1}}
	if _, err := Generate(l, o); err == nil {
		t.Errorf("a segment of world size 0 gave no error")
	}
	o.Resumed = make([]Segment, MaxSegments+1)
	if _, err := Generate(l, o); err == nil {
		t.Errorf("%d segments gave no error", MaxSegments+1)
	}
	for _, bad := range []string{"", "8", "8x", "x5", "8x-1x", "+8x5", "8x+5", "8y5"} {
		if segs, err := ParseSegments(bad, "-"); err == nil {
			t.Errorf("ParseSegments(%q) = %v, want an error", bad, segs)
		}
	}
	segs, err := ParseSegments("8x1200-6x500", "-")
	if err != nil || !slices.Equal(segs, []Segment{{8, 1200}, {6, 500}}) || FormatSegments(segs, "-") != "8x1200-6x500" {
		t.Errorf("ParseSegments(8x1200-6x500) = %v, %v", segs, err)
	}
}

// TestResumeCostBounded: the rest of an epoch after a part
// read at world size 2^20 (the mount's order name
// EPOCH.resume-1x0-1048576x0) took past 14 CPU-minutes, since each of the
// part's ranks split and dealt the epoch again; it takes about a second
// for a million samples, is cancellable, and segments whose world sizes
// add up past MaxResumedRanks are refused with a sentence before any work.
func TestResumeCostBounded(t *testing.T) {
	l := newSynth(synthSpec{n: 1 << 20, mean: 60})
	o := Options{Kind: Random, WorldSize: 1, Resumed: []Segment{{1, 0}, {MaxWorldSize, 0}}}
	done := make(chan error, 1)
	go func() {
		_, err := Generate(l, o)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the rest after a part at world size 2^20: %v", err)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("the rest after a part at world size 2^20 is still being worked out")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := GenerateContext(ctx, l, o); !errors.Is(err, context.Canceled) {
		t.Errorf("a canceled context: %v, want context.Canceled", err)
	}

	var segs []Segment
	for range MaxResumedRanks/MaxWorldSize + 1 {
		segs = append(segs, Segment{MaxWorldSize, 0})
	}
	o.Resumed = segs
	if _, err := Generate(l, o); err == nil || !strings.Contains(err.Error(), "world sizes add up to more than 4194304") {
		t.Errorf("segments of %d ranks in all: %v", len(segs)*MaxWorldSize, err)
	}
	o.Resumed = []Segment{{8, math.MaxUint32 + 1}}
	if _, err := Generate(l, o); err == nil || !strings.Contains(err.Error(), "position 4294967296 is out of range") {
		t.Errorf("a position past 2^32: %v", err)
	}
}
