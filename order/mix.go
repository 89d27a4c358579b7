package order

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ffcvfs/ffcvfs/beton"
)

// mixTag is the tag of a source's cycle stream in a mixture.
const mixTag = "ffcvfs/order/v1/mix\x00"

// ShareKind says how a source's Share is given.
type ShareKind int

const (
	// Proportion: the share is a part of the epoch (Value; the
	// proportions are taken relative to their sum).
	Proportion ShareKind = iota
	// Repeat: the share is Value times the source's samples.
	Repeat
	// Count: the share is Value samples.
	Count
)

// Share is one source's part of a mixture's epoch, as MosaicML
// Streaming's Streams give it: a proportion of the epoch, a repeat factor
// of the source, or a number of samples.
type Share struct {
	Kind  ShareKind
	Value float64
}

// MaxMixSources bounds a mixture's sources.
const MaxMixSources = 256

// MaxRepeat bounds a Repeat share: an epoch of a source read more often
// is better given as more epochs.
const MaxRepeat = 1000

// ParseShares reads a list of shares, comma-separated: "0.5" a proportion,
// "x2" (or "2x") a repeat factor, "n1000" a count. Proportions and the
// others do not mix: an epoch of proportions has a size of its own.
func ParseShares(s string) ([]Share, error) {
	var out []Share
	for i, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		sh := Share{Kind: Proportion}
		num := f
		switch {
		case strings.HasPrefix(f, "x"):
			sh.Kind, num = Repeat, f[1:]
		case strings.HasSuffix(f, "x"):
			sh.Kind, num = Repeat, f[:len(f)-1]
		case strings.HasPrefix(f, "n"):
			sh.Kind, num = Count, f[1:]
		}
		v, err := strconv.ParseFloat(num, 64)
		switch {
		case f == "":
			return nil, fmt.Errorf("weight %d is empty", i+1)
		case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
			return nil, fmt.Errorf("weight %d, %q, is not a number (give 0.5, x2 for a repeat factor, n1000 for a count)", i+1, f)
		case v <= 0:
			return nil, fmt.Errorf("weight %d, %q, is not above 0: leave the source out instead", i+1, f)
		case sh.Kind == Count && v != math.Trunc(v):
			return nil, fmt.Errorf("weight %d, %q, is a count of samples and must be whole", i+1, f)
		case sh.Kind == Repeat && v > MaxRepeat:
			return nil, fmt.Errorf("weight %d, %q, repeats the source more than %d times an epoch: give more epochs instead", i+1, f, MaxRepeat)
		}
		sh.Value = v
		out = append(out, sh)
	}
	return out, nil
}

// String writes a share as ParseShares reads it.
func (s Share) String() string {
	v := strconv.FormatFloat(s.Value, 'g', -1, 64)
	switch s.Kind {
	case Repeat:
		return "x" + v
	case Count:
		return "n" + v
	}
	return v
}

// A Mixture is several sources read as one dataset: each epoch takes each
// source's share of samples, and the epoch's samples are one PageMap
// (Epoch), ordered, dealt to ranks and resumed as one beton's are.
//
// Within its share a source's samples are drawn without replacement: the
// source's samples are laid out in cycles, each a shuffle of its pages
// (samples of a page together, in id order; samples without data alone)
// by the stream of (Seed, source, cycle), and epoch e takes the share's
// samples from position e·share on. So a share smaller than the source
// takes another part of it each epoch until every sample was seen, and a
// share larger than the source repeats it, each cycle shuffled anew.
// Everything depends on the seed, the sources' page maps and the shares,
// never on the world size.
type Mixture struct {
	sources []PageMap
	counts  []int
	seed    uint64
	// units are each source's units: pages (first sample's id, samples)
	// and samples without data, in id order of their first sample.
	units [][]mixUnit
	total int

	mu   sync.Mutex
	last []mixCycle // per source, the last cycle computed; guarded by mu
}

type mixUnit struct {
	page    int64    // beton.NoPage for a sample without data
	samples []uint32 // in id order
}

// NewMixture makes the mixture of sources with shares (one each). An epoch
// of proportions holds epochSize samples (0: the sources' samples in all);
// an epoch of repeats and counts holds their sum, and epochSize must be 0
// or that sum. A proportion's count is rounded so that the counts sum to
// the epoch (largest remainders first, then the lower source).
func NewMixture(sources []PageMap, shares []Share, epochSize int, seed uint64) (*Mixture, error) {
	switch {
	case len(sources) == 0:
		return nil, errors.New("a mixture needs a source")
	case len(sources) > MaxMixSources:
		return nil, fmt.Errorf("%d sources: a mixture has at most %d", len(sources), MaxMixSources)
	case len(shares) != len(sources):
		return nil, fmt.Errorf("%d weights for %d sources: give one per source", len(shares), len(sources))
	case epochSize < 0 || epochSize > math.MaxUint32:
		return nil, fmt.Errorf("epoch size %d: want 1 to %d, or 0 for the sources' samples in all", epochSize, uint64(math.MaxUint32))
	}
	m := &Mixture{sources: sources, seed: seed, counts: make([]int, len(sources))}
	all := 0
	for i, s := range sources {
		if s.NumSamples() == 0 {
			return nil, fmt.Errorf("source %d has no samples", i+1)
		}
		all += s.NumSamples()
		units, err := mixUnits(s)
		if err != nil {
			return nil, fmt.Errorf("source %d: %w", i+1, err)
		}
		m.units = append(m.units, units)
	}
	props := 0
	for _, sh := range shares {
		if sh.Kind == Proportion {
			props++
		}
	}
	switch {
	case props == len(shares):
		if epochSize == 0 {
			epochSize = all
		}
		m.counts = apportion(shares, epochSize)
	case props > 0:
		return nil, errors.New("weights mix proportions with repeat factors or counts: give proportions (and an epoch size), or repeats and counts (the epoch is their sum)")
	default:
		sum := 0
		for i, sh := range shares {
			n := sh.Value
			if sh.Kind == Repeat {
				n = math.Round(sh.Value * float64(sources[i].NumSamples()))
			}
			if n < 1 || n > math.MaxUint32 || float64(sum)+n > math.MaxUint32 {
				return nil, fmt.Errorf("weight %d, %s, takes %.0f samples of source %d (of %d): want 1 to %d in all", i+1, sh, n, i+1, sources[i].NumSamples(), uint64(math.MaxUint32))
			}
			m.counts[i] = int(n)
			sum += int(n)
		}
		if epochSize != 0 && epochSize != sum {
			return nil, fmt.Errorf("an epoch size of %d with repeat factors and counts that take %d: leave the epoch size out", epochSize, sum)
		}
		epochSize = sum
	}
	for i, n := range m.counts {
		if n == 0 {
			return nil, fmt.Errorf("weight %d, %s, takes no sample of an epoch of %d: raise it, or the epoch size", i+1, shares[i], epochSize)
		}
	}
	m.total = epochSize
	return m, nil
}

// apportion splits n among proportions by largest remainders.
func apportion(shares []Share, n int) []int {
	sum := 0.0
	for _, sh := range shares {
		sum += sh.Value
	}
	counts := make([]int, len(shares))
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, len(shares))
	left := n
	for i, sh := range shares {
		exact := sh.Value / sum * float64(n)
		counts[i] = int(math.Floor(exact))
		left -= counts[i]
		rems[i] = rem{i, exact - math.Floor(exact)}
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.r > b.r:
			return -1
		case a.r < b.r:
			return 1
		}
		return 0
	})
	for k := 0; left > 0; k, left = k+1, left-1 {
		counts[rems[k%len(rems)].i]++
	}
	return counts
}

// mixUnits returns a source's pages with their samples, and its samples
// without data one by one, in order of their first sample.
func mixUnits(l PageMap) ([]mixUnit, error) {
	n := l.NumSamples()
	var units []mixUnit
	seen := 0
	for p := l.FirstPage(); p < l.FirstPage()+int64(l.NumPages()); p++ {
		ids := l.PageSamples(p)
		if len(ids) == 0 {
			continue
		}
		for _, id := range ids {
			if int(id) >= n || l.SamplePage(int(id)) != p {
				return nil, ErrPageMap
			}
		}
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		units = append(units, mixUnit{page: p, samples: sorted})
		seen += len(ids)
	}
	for i := range n {
		if l.SamplePage(i) == beton.NoPage {
			units = append(units, mixUnit{page: beton.NoPage, samples: []uint32{uint32(i)}})
			seen++
		}
	}
	if seen != n {
		return nil, ErrPageMap
	}
	slices.SortStableFunc(units, func(a, b mixUnit) int { return int(a.samples[0]) - int(b.samples[0]) })
	return units, nil
}

// Counts returns the samples each source gives an epoch.
func (m *Mixture) Counts() []int { return slices.Clone(m.counts) }

// Size returns the samples of an epoch.
func (m *Mixture) Size() int { return m.total }

// Sources returns the number of sources.
func (m *Mixture) Sources() int { return len(m.sources) }

// Fingerprint names the mixture: its sources' page maps (their samples
// and pages) and names (what the caller gives: their locations and
// versions), shares as counts, and seed. A resume under another
// fingerprint is another mixture's.
func (m *Mixture) Fingerprint(names ...string) string {
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	var b []byte
	b = binary.LittleEndian.AppendUint64(b, m.seed)
	for i, s := range m.sources {
		b = binary.LittleEndian.AppendUint64(b, uint64(s.NumSamples()))
		b = binary.LittleEndian.AppendUint64(b, uint64(len(m.units[i])))
		b = binary.LittleEndian.AppendUint64(b, uint64(m.counts[i]))
	}
	h.Write(b)
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

// Epoch returns epoch e's samples as a PageMap: each source's share, its
// ids numbered from 0 in source order, a page of it for each run of a
// source page's samples (samples without data have no page).
func (m *Mixture) Epoch(e uint64) *MixedMap {
	mm := &MixedMap{firstOf: make([]uint32, len(m.sources)+1)}
	mm.src = make([]uint16, 0, m.total)
	mm.sample = make([]uint32, 0, m.total)
	mm.pageOf = make([]int32, 0, m.total)
	for i := range m.sources {
		mm.firstOf[i] = uint32(len(mm.sample))
		m.take(mm, i, e)
	}
	mm.firstOf[len(m.sources)] = uint32(len(mm.sample))
	mm.seq = make([]uint32, len(mm.sample))
	for i := range mm.seq {
		mm.seq[i] = uint32(i)
	}
	mm.starts = append(mm.starts, uint32(len(mm.sample)))
	return mm
}

// take appends source i's share of epoch e to mm: positions e·count to
// (e+1)·count of its cycles.
func (m *Mixture) take(mm *MixedMap, i int, e uint64) {
	n := uint64(m.sources[i].NumSamples())
	count := uint64(m.counts[i])
	// Epochs beyond 2^32 wrap: positions stay within uint64.
	start := (e % (1 << 32)) * count
	cycle, at := start/n, start%n
	lastPage := int64(beton.NoPage - 1) // no page
	for left := count; left > 0; cycle, at = cycle+1, 0 {
		lay := m.cycle(i, cycle)
		for _, s := range lay[at:min(uint64(len(lay)), at+left)] {
			p := m.sources[i].SamplePage(int(s))
			if p != beton.NoPage && p != lastPage {
				mm.starts = append(mm.starts, uint32(len(mm.sample)))
			}
			// A sample without data ends a page's run: a page's ids
			// are one run.
			lastPage = p
			mm.src = append(mm.src, uint16(i))
			mm.sample = append(mm.sample, s)
			if p == beton.NoPage {
				mm.pageOf = append(mm.pageOf, -1)
			} else {
				mm.pageOf = append(mm.pageOf, int32(len(mm.starts)-1))
			}
		}
		left -= min(left, uint64(len(lay))-at)
		lastPage = int64(beton.NoPage - 1) // a new cycle starts new pages
	}
}

// cycle returns source i's samples in cycle c: its units shuffled by the
// stream of (Seed, i, c), each unit's samples in id order, but for those
// the epoch that ends in cycle c took from the end of cycle c-1, which
// come last, so that an epoch that spans two cycles takes no sample
// twice (when its share is at most the source). Each cycle depends on the
// one before: the last one computed is kept per source.
func (m *Mixture) cycle(i int, c uint64) []uint32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.last = make([]mixCycle, len(m.sources))
	}
	from := m.last[i]
	if from.lay == nil || from.c > c {
		from = mixCycle{0, m.plain(i, 0)}
	}
	n := uint64(m.sources[i].NumSamples())
	count := uint64(m.counts[i])
	for from.c < c {
		next := m.plain(i, from.c+1)
		if count <= n {
			// The last epoch start before the end of cycle from.c.
			end := (from.c + 1) * n
			if s := (end - 1) / count * count; s >= from.c*n {
				next = lastFirst(next, from.lay[s-from.c*n:], n)
			}
		}
		from = mixCycle{from.c + 1, next}
	}
	m.last[i] = from
	return from.lay
}

// mixCycle is a cycle's layout of a source's samples.
type mixCycle struct {
	c   uint64
	lay []uint32
}

// plain returns source i's units, shuffled by the stream of cycle c, as
// their samples.
func (m *Mixture) plain(i int, c uint64) []uint32 {
	units := m.units[i]
	order := make([]int, len(units))
	for k := range order {
		order[k] = k
	}
	shuffle(newStream(mixTag, m.seed, uint64(i), c), order)
	lay := make([]uint32, 0, m.sources[i].NumSamples())
	for _, k := range order {
		lay = append(lay, units[k].samples...)
	}
	return lay
}

// lastFirst returns lay with the samples of tail moved to its end, each
// group keeping its order.
func lastFirst(lay, tail []uint32, n uint64) []uint32 {
	in := make([]bool, n)
	for _, s := range tail {
		in[s] = true
	}
	out := make([]uint32, 0, len(lay))
	for _, s := range lay {
		if !in[s] {
			out = append(out, s)
		}
	}
	for _, s := range lay {
		if in[s] {
			out = append(out, s)
		}
	}
	return out
}

// MixedMap is one epoch of a Mixture: a PageMap of its samples, each a
// sample of a source.
type MixedMap struct {
	src     []uint16
	sample  []uint32
	pageOf  []int32  // the id's page, -1: none
	starts  []uint32 // each page's first id, and the end
	seq     []uint32 // 0, 1, ...: the ids a page returns
	firstOf []uint32 // each source's first id, and the end
}

var _ PageMap = (*MixedMap)(nil)

func (mm *MixedMap) NumSamples() int { return len(mm.sample) }
func (mm *MixedMap) NumPages() int   { return len(mm.starts) - 1 }
func (mm *MixedMap) FirstPage() int64 {
	return 0
}

func (mm *MixedMap) PageSamples(p int64) []uint32 {
	if p < 0 || p >= int64(mm.NumPages()) {
		return nil
	}
	ids := mm.seq[mm.starts[p]:mm.starts[p+1]]
	// Samples without data after a page's run belong to no page.
	for len(ids) > 0 && mm.pageOf[ids[len(ids)-1]] != int32(p) {
		ids = ids[:len(ids)-1]
	}
	return ids
}

func (mm *MixedMap) SamplePage(i int) int64 {
	if p := mm.pageOf[i]; p >= 0 {
		return int64(p)
	}
	return beton.NoPage
}

// Source returns the source and the sample of id.
func (mm *MixedMap) Source(id uint32) (source int, sample uint32) {
	return int(mm.src[id]), mm.sample[id]
}
