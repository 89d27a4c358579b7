package order

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestMixtureShares: three sources weighted 0.5/0.3/0.2 over 10 epochs:
// each epoch holds each source's share exactly (well within ±1 %), no
// sample twice within a share, every sample of the smaller shares seen
// over the epochs, and the epoch a consistent PageMap whose orders at 1, 2
// and 4 ranks hold the same samples.
func TestMixtureShares(t *testing.T) {
	srcs := []PageMap{
		newSynth(synthSpec{n: 3000, mean: 40, interleave: true}),
		newSynth(synthSpec{n: 1200, mean: 30, noDataEvery: 97}),
		newSynth(synthSpec{n: 700, mean: 25}),
	}
	shares, err := ParseShares("0.5,0.3,0.2")
	if err != nil {
		t.Fatal(err)
	}
	const size = 4000
	m, err := NewMixture(srcs, shares, size, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Counts(); !slices.Equal(got, []int{2000, 1200, 800}) {
		t.Fatalf("counts %v, want 2000 1200 800", got)
	}
	seen := make([]map[uint32]bool, 3)
	for i := range seen {
		seen[i] = map[uint32]bool{}
	}
	for e := range uint64(10) {
		mm := m.Epoch(e)
		if mm.NumSamples() != size {
			t.Fatalf("epoch %d: %d samples, want %d", e, mm.NumSamples(), size)
		}
		count := make([]int, 3)
		within := make([]map[uint32]int, 3)
		for i := range within {
			within[i] = map[uint32]int{}
		}
		for id := range uint32(size) {
			s, smp := mm.Source(id)
			count[s]++
			within[s][smp]++
			seen[s][smp] = true
		}
		for s, want := range []float64{0.5, 0.3, 0.2} {
			if frac := float64(count[s]) / size; math.Abs(frac-want) > 0.01*want {
				t.Errorf("epoch %d: source %d has %.4f of the epoch, want %.2f ±1 %%", e, s, frac, want)
			}
		}
		// Source 1's share is its size: once each; source 2's share is
		// larger than it: each sample once or twice (one cycle and part
		// of the next); source 0's smaller: once.
		for s, most := range []int{1, 1, 2} {
			for smp, n := range within[s] {
				if n > most {
					t.Fatalf("epoch %d: source %d sample %d taken %d times, at most %d", e, s, smp, n, most)
				}
			}
		}
		var orders [][]uint32
		for _, world := range []int{1, 2, 4} {
			var all []uint32
			for r := range world {
				ids, err := Generate(mm, Options{Kind: QuasiRandom, Seed: 7, Epoch: e, Rank: r, WorldSize: world, DropLast: true})
				if err != nil {
					t.Fatalf("epoch %d, rank %d of %d: %v", e, r, world, err)
				}
				all = append(all, ids...)
			}
			slices.Sort(all)
			if len(slices.Compact(slices.Clone(all))) != len(all) {
				t.Fatalf("epoch %d at %d ranks: a sample twice", e, world)
			}
			orders = append(orders, all)
		}
		if len(orders[0]) != size {
			t.Errorf("epoch %d at 1 rank: %d samples, want %d", e, len(orders[0]), size)
		}
	}
	for s, src := range srcs {
		if len(seen[s]) != src.NumSamples() {
			t.Errorf("source %d: %d of its %d samples seen in 10 epochs", s, len(seen[s]), src.NumSamples())
		}
	}
	// The same seed gives the same epochs; another seed others.
	m2, _ := NewMixture(srcs, shares, size, 7)
	m3, _ := NewMixture(srcs, shares, size, 8)
	a, b, c := m.Epoch(3), m2.Epoch(3), m3.Epoch(3)
	if !slices.Equal(a.sample, b.sample) || !slices.Equal(a.src, b.src) || slices.Equal(a.sample, c.sample) {
		t.Error("a mixture's epoch is not a function of its seed")
	}
	if m.Fingerprint("a") == m3.Fingerprint("a") || m.Fingerprint("a") != m2.Fingerprint("a") || m.Fingerprint("a") == m.Fingerprint("b") {
		t.Error("fingerprints do not tell mixtures apart")
	}
}

// TestMixtureRepeatsAndCounts: repeat factors and counts make the epoch
// their sum; a repeat of 2 takes each sample twice.
func TestMixtureRepeatsAndCounts(t *testing.T) {
	srcs := []PageMap{newSynth(synthSpec{n: 500, mean: 20}), newSynth(synthSpec{n: 800, mean: 20})}
	shares, err := ParseShares("x2,n300")
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMixture(srcs, shares, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Size() != 1300 || !slices.Equal(m.Counts(), []int{1000, 300}) {
		t.Fatalf("size %d counts %v, want 1300: 1000 and 300", m.Size(), m.Counts())
	}
	mm := m.Epoch(0)
	times := map[uint32]int{}
	for id := range uint32(mm.NumSamples()) {
		if s, smp := mm.Source(id); s == 0 {
			times[smp]++
		}
	}
	for smp := range uint32(500) {
		if times[smp] != 2 {
			t.Fatalf("sample %d of the repeated source taken %d times, want 2", smp, times[smp])
		}
	}
}

// TestMixtureRefuses: weights that are 0, negative, NaN or not numbers,
// proportions mixed with counts, too few or too many weights, an empty
// source and a share that rounds to nothing are each refused with a
// sentence naming the weight.
func TestMixtureRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"0.5,0":     "weight 2, \"0\", is not above 0",
		"-1,1":      "weight 1, \"-1\", is not above 0",
		"NaN,1":     "is not a number",
		"1,abc":     "weight 2, \"abc\", is not a number",
		"1,,1":      "weight 2 is empty",
		"n1.5":      "must be whole",
		"x5000":     "more than 1000 times",
		"1,Inf":     "is not a number",
		"0.5,n100":  "", // parses; NewMixture refuses the mix
		"1e400,0.2": "is not a number",
	} {
		_, err := ParseShares(in)
		if want == "" {
			if err != nil {
				t.Errorf("ParseShares(%q): %v", in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseShares(%q) = %v, want %q", in, err, want)
		}
	}
	a, b := newSynth(synthSpec{n: 100, mean: 10}), newSynth(synthSpec{n: 50, mean: 10})
	empty := &synth{first: 0}
	for _, c := range []struct {
		srcs   []PageMap
		shares string
		size   int
		want   string
	}{
		{[]PageMap{a, b}, "0.5,n100", 0, "mix proportions with repeat factors or counts"},
		{[]PageMap{a, b}, "1", 0, "1 weights for 2 sources"},
		{[]PageMap{a, empty}, "1,1", 0, "source 2 has no samples"},
		{[]PageMap{a, b}, "1000,1", 100, "weight 2, 1, takes no sample"},
		{[]PageMap{a, b}, "x1,n10", 50, "leave the epoch size out"},
		{[]PageMap{a, b}, "1,1", -1, "epoch size -1"},
	} {
		shares, err := ParseShares(c.shares)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewMixture(c.srcs, shares, c.size, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d sources, %s, size %d: %v, want %q", len(c.srcs), c.shares, c.size, err, c.want)
		}
	}
	many := make([]PageMap, MaxMixSources+1)
	for i := range many {
		many[i] = a
	}
	if _, err := NewMixture(many, make([]Share, len(many)), 0, 0); err == nil || !strings.Contains(err.Error(), fmt.Sprint(MaxMixSources)) {
		t.Errorf("%d sources: %v", len(many), err)
	}
}

// TestMixtureResume: an epoch of a mixture read in part by 4 ranks, then
// the rest by 3, and in part by 1 rank, then the rest by 2, delivers every
// sample of the epoch's mixture exactly once but for padding, as a beton's
// epoch does (checkResume).
func TestMixtureResume(t *testing.T) {
	srcs := []PageMap{newSynth(synthSpec{n: 2000, mean: 30}), newSynth(synthSpec{n: 900, mean: 30, noDataEvery: 11}), newSynth(synthSpec{n: 600, mean: 20})}
	shares, _ := ParseShares("0.5,0.3,0.2")
	m, err := NewMixture(srcs, shares, 3000, 11)
	if err != nil {
		t.Fatal(err)
	}
	mm := m.Epoch(3)
	for _, kind := range Kinds() {
		for _, chain := range [][]int{{4, 3}, {1, 2}} {
			for _, f := range []float64{0.01, 0.37, 0.9} {
				t.Run(fmt.Sprintf("%s/%v/at-%g", kind, chain, f), func(t *testing.T) {
					checkResume(t, mm, kind, resumeCase{chain: chain, stops: []float64{f}})
				})
			}
		}
	}
}
