package order

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
)

// synth is a Layout built in memory.
type synth struct {
	n     int
	first int64
	pages [][]uint32 // samples of page first+i, in increasing order
	page  []int64    // page of each sample, or beton.NoPage
}

var _ PageMap = (*synth)(nil)

func (s *synth) NumSamples() int  { return s.n }
func (s *synth) NumPages() int    { return len(s.pages) }
func (s *synth) FirstPage() int64 { return s.first }
func (s *synth) SamplePage(i int) int64 {
	return s.page[i]
}
func (s *synth) PageSamples(p int64) []uint32 {
	if p < s.first || p >= s.first+int64(len(s.pages)) {
		return nil
	}
	return s.pages[p-s.first]
}

// synthSpec describes a synthetic layout: n samples in pages of mean±mean/2
// samples; every noDataEvery-th sample has no page; every emptyEvery-th
// page holds nothing; interleave deals ids to pages in a shuffled order, as
// a writer with several workers may.
type synthSpec struct {
	n, mean                 int
	noDataEvery, emptyEvery int
	interleave              bool
}

func newSynth(sp synthSpec) *synth {
	rng := rand.New(rand.NewPCG(uint64(sp.n), uint64(sp.mean)))
	s := &synth{n: sp.n, first: 3, page: make([]int64, sp.n)}
	var ids []uint32
	for i := range sp.n {
		if sp.noDataEvery > 0 && i%sp.noDataEvery == sp.noDataEvery-1 {
			s.page[i] = beton.NoPage
			continue
		}
		ids = append(ids, uint32(i))
	}
	if sp.interleave {
		// Swap neighbours within small blocks: pages stay roughly in id
		// order but are not sorted runs.
		for i := 0; i+8 <= len(ids); i += 8 {
			rng.Shuffle(8, func(a, b int) { ids[i+a], ids[i+b] = ids[i+b], ids[i+a] })
		}
	}
	for len(ids) > 0 {
		if sp.emptyEvery > 0 && len(s.pages)%sp.emptyEvery == sp.emptyEvery-1 {
			s.pages = append(s.pages, nil)
			continue
		}
		k := min(len(ids), max(1, sp.mean/2+rng.IntN(sp.mean+1)))
		pg := slices.Clone(ids[:k])
		slices.Sort(pg)
		for _, id := range pg {
			s.page[id] = s.first + int64(len(s.pages))
		}
		s.pages = append(s.pages, pg)
		ids = ids[k:]
	}
	return s
}

type namedLayout struct {
	name string
	l    PageMap
}

func testLayouts(t testing.TB) []namedLayout {
	return []namedLayout{
		{"empty", newSynth(synthSpec{n: 0, mean: 10})},
		{"one-sample", newSynth(synthSpec{n: 1, mean: 10})},
		{"one-page", newSynth(synthSpec{n: 9, mean: 20})},
		{"pages", newSynth(synthSpec{n: 5000, mean: 37})},
		{"mixed", newSynth(synthSpec{n: 5000, mean: 37, noDataEvery: 7, emptyEvery: 5, interleave: true})},
		{"no-data", newSynth(synthSpec{n: 300, mean: 10, noDataEvery: 1})},
		{"beton", betonLayout(t)},
	}
}

// betonLayout writes a real .beton with 2 MiB pages: blobs of 0 to 96 KiB
// (some empty, which land in no page) and a label.
func betonLayout(t testing.TB) *beton.File {
	t.Helper()
	fields := []beton.Field{{Type: beton.TypeBytes, Name: "blob"}, {Type: beton.TypeInt, Name: "label"}}
	const n = 700
	path := filepath.Join(t.TempDir(), "order.beton")
	w, err := beton.Create(path, fields, n, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	blob := make([]byte, 96<<10)
	for i := range n {
		size := rng.IntN(len(blob))
		if i%11 == 5 {
			size = 0
		}
		if err := w.WriteSample([]beton.Value{{Data: blob[:size]}, {Int: int64(i)}}); err != nil {
			w.Abort()
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if f.NumPages() < 10 {
		t.Fatalf("test file has %d pages, want at least 10", f.NumPages())
	}
	return f
}

func generate(t testing.TB, l PageMap, o Options) []uint32 {
	t.Helper()
	out, err := Generate(l, o)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", o, err)
	}
	return out
}

func firstIDs(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

func TestPermutation(t *testing.T) {
	for _, nl := range testLayouts(t) {
		for _, k := range Kinds() {
			t.Run(nl.name+"/"+string(k), func(t *testing.T) {
				out := generate(t, nl.l, Options{Kind: k, Seed: 1, Epoch: 2})
				want := firstIDs(nl.l.NumSamples())
				if k == Sequential && !slices.Equal(out, want) {
					t.Fatalf("sequential order is not 0..%d", len(want)-1)
				}
				got := slices.Clone(out)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%d ids, not a permutation of %d samples", len(out), len(want))
				}
			})
		}
	}
}

func TestDeterministic(t *testing.T) {
	for _, nl := range testLayouts(t) {
		if nl.l.NumSamples() < 100 {
			continue
		}
		for _, k := range Kinds() {
			for _, ws := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/%s/ws%d", nl.name, k, ws), func(t *testing.T) {
					o := Options{Kind: k, Seed: 42, Epoch: 5, Rank: ws - 1, WorldSize: ws}
					a, b := generate(t, nl.l, o), generate(t, nl.l, o)
					if !slices.Equal(a, b) {
						t.Fatal("same options gave different orders")
					}
					o2 := o
					o2.Epoch++
					c := generate(t, nl.l, o2)
					o3 := o
					o3.Seed++
					d := generate(t, nl.l, o3)
					if k == Sequential {
						if !slices.Equal(a, c) || !slices.Equal(a, d) {
							t.Fatal("sequential order depends on the epoch or seed")
						}
						return
					}
					if slices.Equal(a, c) {
						t.Fatal("next epoch gave the same order")
					}
					if slices.Equal(a, d) {
						t.Fatal("another seed gave the same order")
					}
				})
			}
		}
	}
}

// TestGolden pins orders, so that a change of the definition (or of PCG)
// cannot pass unnoticed.
func TestGolden(t *testing.T) {
	// Built by hand, not by newSynth, whose random sizes come from the
	// standard library.
	l := &synth{n: 40, first: 5, page: make([]int64, 40)}
	sizes := []int{6, 3, 7, 5, 1, 6, 4, 4}
	id := uint32(0)
	for i, size := range sizes {
		var pg []uint32
		for ; len(pg) < size; id++ {
			if id%9 == 8 {
				l.page[id] = beton.NoPage
				continue
			}
			pg = append(pg, id)
			l.page[id] = l.first + int64(i)
		}
		l.pages = append(l.pages, pg)
	}
	for ; id < 40; id++ {
		l.page[id] = beton.NoPage
	}
	cases := []struct {
		o    Options
		want string
	}{
		{Options{Kind: Sequential, Rank: 1, WorldSize: 2}, goldenSeq},
		{Options{Kind: Random, Seed: 1, Epoch: 0}, goldenRandom},
		{Options{Kind: QuasiRandom, Seed: 1, Epoch: 0, Window: 2}, goldenQuasi},
		{Options{Kind: QuasiRandom, Seed: 9, Epoch: 3, Window: 3, Rank: 2, WorldSize: 3}, goldenQuasiRank},
		{Options{Kind: QuasiRandom, Seed: 9, Epoch: 3, Window: 2, Rank: 1, WorldSize: 2, Resumed: []Segment{{3, 4}}}, goldenResumed},
		{Options{Kind: Random, Seed: 4, Epoch: 2, Rank: 3, WorldSize: 4, Nodes: 2, MoveFraction: 0.5}, goldenNodes},
	}
	for _, c := range cases {
		if got := fmt.Sprint(generate(t, l, c.o)); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.o, got, c.want)
		}
	}
}

// The golden orders, also computed by an independent implementation of the
// package documentation's description.
const (
	goldenSeq       = "[6 7 9 10 11 12 13 14 15 16 23 31 32 33 34 36 37 38 39 6 7]"
	goldenRandom    = "[15 33 11 27 8 14 22 25 35 34 3 16 36 18 32 4 2 31 38 19 39 5 6 30 26 20 17 9 37 0 13 21 10 29 12 1 7 28 23 24]"
	goldenQuasi     = "[24 30 23 29 12 14 25 27 28 8 35 17 13 26 39 16 36 10 15 11 0 3 5 1 2 37 4 19 38 20 33 21 18 22 6 32 9 7 31 34]"
	goldenQuasiRank = "[23 27 19 18 30 20 6 7 22 21 29 9 25 28 24]"
	goldenResumed   = "[31 4 2 29 28 24 5 1 0 38 36 39 37 31 4]"
	goldenNodes     = "[5 34 21 1 18 20 3 31 22 2 33 32 4 19 0]"
)

// pageOf returns, for every sample, the index of its unit (data page or
// virtual page) in pageShape's file order, and the unit sizes.
func pageOf(t testing.TB, l PageMap, worldSize int) (unitOf []int, sizes []int) {
	t.Helper()
	sh, err := pageShape(l, worldSize)
	if err != nil {
		t.Fatal(err)
	}
	unitOf = make([]int, l.NumSamples())
	for u, un := range sh.units {
		sizes = append(sizes, len(un.samples))
		for _, s := range un.samples {
			unitOf[s] = u
		}
	}
	return unitOf, sizes
}

// unpadded returns the prefix of a padded order before its first repeat, and
// checks that the rest repeats that prefix from its start.
func unpadded(t testing.TB, out []uint32) []uint32 {
	t.Helper()
	seen := make(map[uint32]bool, len(out))
	n := len(out)
	for i, s := range out {
		if seen[s] {
			n = i
			break
		}
		seen[s] = true
	}
	for i := n; i < len(out); i++ {
		if out[i] != out[(i-n)%n] {
			t.Fatalf("padding at %d is sample %d, want %d (from the start of the rank's own order)", i, out[i], out[(i-n)%n])
		}
	}
	return out[:n]
}

func TestShards(t *testing.T) {
	for _, nl := range testLayouts(t) {
		for _, k := range Kinds() {
			for _, ws := range []int{2, 3, 7} {
				for _, drop := range []bool{false, true} {
					name := fmt.Sprintf("%s/%s/ws%d/drop=%v", nl.name, k, ws, drop)
					t.Run(name, func(t *testing.T) { checkShards(t, nl.l, k, ws, drop) })
				}
			}
		}
	}
}

func checkShards(t *testing.T, l PageMap, k Kind, ws int, drop bool) {
	unitOf, sizes := pageOf(t, l, ws)
	n := l.NumSamples()
	orders := make([][]uint32, ws)
	for r := range ws {
		out, err := Generate(l, Options{Kind: k, Seed: 3, Epoch: 1, Rank: r, WorldSize: ws, DropLast: drop})
		if errors.Is(err, ErrTooFewPages) && !drop && len(sizes) < ws {
			return // documented: too few pages to pad every rank
		}
		if err != nil {
			t.Fatal(err)
		}
		orders[r] = out
	}
	owner := make([]int, len(sizes)) // rank+1 that reads each unit
	count := make([]int, n)
	lo, hi := n, 0
	for r, out := range orders {
		if len(out) != len(orders[0]) {
			t.Fatalf("rank %d has %d samples, rank 0 has %d", r, len(out), len(orders[0]))
		}
		own := out
		if !drop {
			own = unpadded(t, out)
		}
		lo, hi = min(lo, len(own)), max(hi, len(own))
		for i, s := range own {
			count[s]++
			u := unitOf[s]
			if owner[u] != 0 && owner[u] != r+1 {
				t.Fatalf("page of sample %d read by ranks %d and %d", s, owner[u]-1, r)
			}
			owner[u] = r + 1
			if k == Sequential && i > 0 && own[i-1] >= s {
				t.Fatalf("rank %d: sequential order not increasing at %d", r, i)
			}
		}
	}
	for s, c := range count {
		if c > 1 || (!drop && c != 1) {
			t.Fatalf("sample %d read %d times across ranks", s, c)
		}
	}
	if drop {
		return
	}
	if biggest := slices.Max(append(sizes, 0)); hi-lo > biggest {
		t.Fatalf("rank counts from %d to %d, more apart than the biggest page (%d)", lo, hi, biggest)
	}
}

// openPages returns the most pages started and not finished at any prefix
// of out.
func openPages(out []uint32, unitOf, sizes []int) int {
	left := slices.Clone(sizes)
	started := make([]bool, len(sizes))
	open, most := 0, 0
	for _, s := range out {
		u := unitOf[s]
		if !started[u] {
			started[u] = true
			open++
		}
		left[u]--
		if left[u] == 0 {
			open--
		}
		most = max(most, open)
	}
	return most
}

func TestQuasiRandomLocality(t *testing.T) {
	for _, nl := range testLayouts(t) {
		for _, ws := range []int{1, 3} {
			unitOf, sizes := pageOf(t, nl.l, ws)
			for _, window := range []int{0, 1, 2, 5, 64} {
				t.Run(fmt.Sprintf("%s/ws%d/window%d", nl.name, ws, window), func(t *testing.T) {
					want := window
					if want == 0 {
						want = DefaultWindow(nl.l, 0)
					}
					for r := range ws {
						for epoch := range uint64(3) {
							out, err := Generate(nl.l, Options{Kind: QuasiRandom, Seed: 11, Epoch: epoch, Rank: r, WorldSize: ws, Window: window, DropLast: true})
							if err != nil {
								t.Fatal(err)
							}
							if got := openPages(out, unitOf, sizes); got > want {
								t.Fatalf("rank %d epoch %d: %d pages open at once, window %d", r, epoch, got, want)
							}
						}
					}
				})
			}
		}
	}
}

func TestRandomIsNotQuasiRandom(t *testing.T) {
	for _, nl := range testLayouts(t) {
		if nl.l.NumPages() < 10 {
			continue
		}
		t.Run(nl.name, func(t *testing.T) {
			o := Options{Kind: Random, Seed: 5, Epoch: 2, Window: 3}
			r := generate(t, nl.l, o)
			o.Kind = QuasiRandom
			q := generate(t, nl.l, o)
			if slices.Equal(r, q) {
				t.Fatal("random and quasi-random orders are equal")
			}
			unitOf, sizes := pageOf(t, nl.l, 1)
			if got := openPages(r, unitOf, sizes); got <= 3 {
				t.Fatalf("random order keeps only %d pages open at once", got)
			}
		})
	}
}

// TestUniform checks that random permutes uniformly and that quasi-random
// gives every sample the same chance to come first.
func TestUniform(t *testing.T) {
	// Two pages of two: equal pages, so that every sample has the same
	// chance to come first in a quasi-random order too.
	l := &synth{n: 4, pages: [][]uint32{{0, 1}, {2, 3}}, page: []int64{0, 0, 1, 1}}
	const trials = 4800
	perms := map[string]int{}
	first := make([]int, 4)
	for seed := range uint64(trials) {
		perms[fmt.Sprint(generate(t, l, Options{Kind: Random, Seed: seed}))]++
		first[generate(t, l, Options{Kind: QuasiRandom, Seed: seed, Window: 8})[0]]++
	}
	if len(perms) != 24 {
		t.Fatalf("%d distinct permutations of 4, want 24", len(perms))
	}
	// 200 expected each; 5 standard deviations is about 70.
	for p, c := range perms {
		if c < 130 || c > 270 {
			t.Errorf("permutation %s drawn %d times of %d", p, c, trials)
		}
	}
	for s, c := range first {
		if c < 1050 || c > 1350 {
			t.Errorf("quasi-random: sample %d first %d times of %d", s, c, trials)
		}
	}
}

func TestDefaultWindow(t *testing.T) {
	cases := []struct {
		l     PageMap
		batch int
		want  int
	}{
		{newSynth(synthSpec{n: 76 * 200, mean: 76}), 256, 7}, // ImageNet-like: ceil(512/76)
		{newSynth(synthSpec{n: 76 * 200, mean: 76}), 0, 7},
		{newSynth(synthSpec{n: 76 * 200, mean: 76}), 1024, 27},
		{newSynth(synthSpec{n: 5000, mean: 2000}), 256, MinWindow},
		{newSynth(synthSpec{n: 300, mean: 10, noDataEvery: 1}), 256, MinWindow},
		{newSynth(synthSpec{n: 0, mean: 10}), 256, MinWindow},
	}
	for i, c := range cases {
		if got := DefaultWindow(c.l, c.batch); got != c.want {
			// Pages are mean±mean/2: allow for the sampled mean.
			if c.want == MinWindow || got < c.want-1 || got > c.want+1 {
				t.Errorf("case %d: DefaultWindow = %d, want %d", i, got, c.want)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		o    Options
		want string // substring of the error, "" for none
	}{
		{Options{Kind: Random}, ""},
		{Options{Kind: QuasiRandom, Rank: 3, WorldSize: 4, Window: 1}, ""},
		{Options{}, `order kind is not set; want one of sequential, random, quasi-random`},
		{Options{Kind: "shuffled"}, `unknown order kind "shuffled"; want one of sequential, random, quasi-random`},
		{Options{Kind: Random, Rank: 1}, "rank 1 is out of range for world size 1; want 0 to 0"},
		{Options{Kind: Random, Rank: 4, WorldSize: 4}, "rank 4 is out of range for world size 4; want 0 to 3"},
		{Options{Kind: Random, Rank: -1, WorldSize: 4}, "rank -1 is out of range"},
		{Options{Kind: Random, WorldSize: -2}, "world size -2 is out of range"},
		{Options{Kind: QuasiRandom, Window: -1}, "window of -1 pages is negative; want at least 1"},
		{Options{Kind: QuasiRandom, BatchSize: -5}, "batch size -5 is out of range"},
	}
	for _, c := range cases {
		o := c.o
		err := o.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.o, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want one containing %q", c.o, err, c.want)
		}
	}
	o := Options{Kind: Sequential}
	if err := o.Validate(); err != nil || o.WorldSize != 1 || o.BatchSize != DefaultBatchSize {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	if _, err := Generate(newSynth(synthSpec{n: 5, mean: 2}), Options{Kind: "x"}); err == nil {
		t.Error("Generate accepted an unknown kind")
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{
		"sequential": Sequential, "random": Random, "quasi-random": QuasiRandom,
		"QUASI_RANDOM": QuasiRandom, " Random ": Random,
	} {
		if got, err := ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "quasi", "shuffle"} {
		if _, err := ParseKind(in); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", in)) ||
			!strings.Contains(err.Error(), "sequential, random, quasi-random") {
			t.Errorf("ParseKind(%q): error %v", in, err)
		}
	}
}

func TestBadLayout(t *testing.T) {
	dup := newSynth(synthSpec{n: 100, mean: 10})
	dup.pages[2] = append(slices.Clone(dup.pages[2]), dup.pages[1][0])
	dup.n++ // keep the counts adding up so that the duplicate is what is found
	dup.page = append(dup.page, 0)
	big := newSynth(synthSpec{n: 100, mean: 10})
	big.pages[3] = append(slices.Clone(big.pages[3]), 500)
	big.n++
	big.page = append(big.page, 0)
	short := newSynth(synthSpec{n: 100, mean: 10})
	short.n = 90
	lost := newSynth(synthSpec{n: 100, mean: 10})
	lost.pages[0] = nil // those samples are in no page, yet SamplePage names one
	for name, l := range map[string]PageMap{"duplicate": dup, "out-of-range": big, "short": short, "lost": lost} {
		for _, k := range []Kind{Random, QuasiRandom} {
			if _, err := Generate(l, Options{Kind: k}); !errors.Is(err, ErrPageMap) {
				t.Errorf("%s/%s: %v, want ErrPageMap", name, k, err)
			}
		}
	}
}

func TestTooFewPages(t *testing.T) {
	l := newSynth(synthSpec{n: 20, mean: 10}) // 2 or 3 pages
	_, err := Generate(l, Options{Kind: Random, Rank: 7, WorldSize: 8})
	if !errors.Is(err, ErrTooFewPages) || !strings.Contains(err.Error(), "rank 7 of 8") {
		t.Fatalf("padding a rank without pages: %v", err)
	}
	out, err := Generate(l, Options{Kind: Random, Rank: 7, WorldSize: 8, DropLast: true})
	if err != nil || len(out) != 0 {
		t.Fatalf("DropLast with a rank without pages: %d samples, %v", len(out), err)
	}
}

// BenchmarkGenerate orders an ImageNet-sized layout: 1,281,167 samples in
// pages of about 76. The baseline copies the pages' sample lists into one
// slice: the floor for anything that reads the pages. On one core of the
// machines of docs/measurements.md: 4 ms for the copy, 36 ms for a
// quasi-random epoch of one rank, 8 ms for a rank's share of 8.
func BenchmarkGenerate(b *testing.B) {
	l := newSynth(synthSpec{n: 1281167, mean: 76})
	b.Logf("%d samples, %d pages", l.NumSamples(), l.NumPages())
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
	}
	b.Run("baseline-copy", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(4 * l.NumSamples()))
		start := time.Now()
		for range b.N {
			out := make([]uint32, 0, l.NumSamples())
			for p := range int64(l.NumPages()) {
				out = append(out, l.PageSamples(l.FirstPage()+p)...)
			}
			copySink = out
		}
		report(b, start)
	})
	for _, ws := range []int{1, 8} {
		for _, k := range Kinds() {
			b.Run(fmt.Sprintf("%s/ws%d", k, ws), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(4 * l.NumSamples() / ws))
				start := time.Now()
				for i := range b.N {
					if _, err := Generate(l, Options{Kind: k, Seed: 1, Epoch: uint64(i), WorldSize: ws}); err != nil {
						b.Fatal(err)
					}
				}
				report(b, start)
			})
		}
	}
}

// World sizes and batch sizes size
// allocations, so they are bounded before use.
func TestOptionsBounded(t *testing.T) {
	for _, o := range []Options{
		{Kind: Random, WorldSize: MaxWorldSize + 1},
		{Kind: Random, WorldSize: 99999999999},
		{Kind: QuasiRandom, BatchSize: MaxBatchSize + 1},
		{Kind: Random, WorldSize: -1},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v validated", o)
		}
	}
	if o := (Options{Kind: Random, WorldSize: MaxWorldSize, Rank: MaxWorldSize - 1}); o.Validate() != nil {
		t.Errorf("the largest world size refused")
	}
}

// copySink keeps the baseline's copies alive, so that the compiler cannot
// drop them.
var copySink []uint32
