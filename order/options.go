package order

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind names an order kind.
type Kind string

// The order kinds. See the package documentation for what each one does.
const (
	Sequential  Kind = "sequential"
	Random      Kind = "random"
	QuasiRandom Kind = "quasi-random"
)

// Kinds returns every kind, in the order the documentation gives them.
func Kinds() []Kind { return []Kind{Sequential, Random, QuasiRandom} }

// DefaultBatchSize is the batch size assumed when Options.BatchSize is zero.
const DefaultBatchSize = 256

// MaxWorldSize and MaxBatchSize bound the world size and the batch size an
// order takes: they size allocations (a counter per rank), and they come
// from flags, file names and Python code.
const (
	MaxWorldSize = 1 << 20
	MaxBatchSize = 1 << 24
)

// MinWindow is the smallest default window: with one open page, a
// quasi-random order would be a sequence of shuffled pages.
const MinWindow = 2

// Known reports whether k is one of Kinds().
func (k Kind) Known() bool {
	switch k {
	case Sequential, Random, QuasiRandom:
		return true
	}
	return false
}

func (k Kind) String() string { return string(k) }

// ParseKind parses a kind name. It accepts the names of Kinds() in any case and
// with '_' for '-', so FFCV's QUASI_RANDOM reads as quasi-random.
func ParseKind(s string) (Kind, error) {
	k := Kind(strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "-"))
	if !k.Known() {
		return "", fmt.Errorf("unknown order kind %q; want one of %s", s, kindList())
	}
	return k, nil
}

func kindList() string {
	kinds := Kinds()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// Options says which order to generate. Everything that changes the order is
// here or in the PageMap: the same Options on the same PageMap give the same
// order, on every run and platform.
type Options struct {
	// Kind is the order kind. It has no default: a training job that forgot
	// it should not silently read in sequential order.
	Kind Kind

	// Seed and Epoch select the random streams. Seed is chosen once per
	// training run; Epoch counts from zero (or anything: it is only hashed).
	// Sequential orders ignore both.
	Seed  uint64
	Epoch uint64

	// Rank and WorldSize shard the dataset: the order is rank Rank's share
	// of WorldSize. Zero WorldSize means 1.
	Rank, WorldSize int

	// Window is the number of pages a quasi-random order keeps open. Zero
	// means DefaultWindow(l, BatchSize) for the PageMap l being ordered.
	Window int

	// BatchSize sets the default Window: about two batches' worth of
	// pages. Zero means DefaultBatchSize. Only quasi-random orders use it,
	// and only when Window is zero.
	BatchSize int

	// DropLast equalizes the ranks' counts by truncating every rank to the
	// smallest count; otherwise every rank is padded up to the largest by
	// repeating the start of its own order.
	DropLast bool

	// Resumed lists the parts of this epoch read before, oldest first: the
	// order is then the rest of the epoch, the samples no earlier part
	// took, shared among WorldSize ranks (which may differ from the
	// earlier parts' world sizes). Empty: the whole epoch.
	Resumed []Segment

	// Nodes, when above 1, makes the order node-affine: the WorldSize
	// ranks form Nodes nodes of WorldSize/Nodes consecutive ranks (as
	// torchrun numbers them: rank = node·ranks per node + local rank), and
	// the pages are split among the nodes by Seed alone, so that a node
	// reads the same pages every epoch, but for MoveFraction of them, and
	// its caches stay useful. Within a node the pages are shuffled and
	// dealt to its ranks every epoch as a whole epoch's pages are. 0 or 1:
	// the pages of each epoch are dealt over all ranks.
	Nodes int

	// MoveFraction is the share of each node's pages that moves to another
	// node from one epoch to the next (0 to 1, taken to millionths), so
	// that over many epochs every node sees every page. Only node-affine
	// orders use it.
	MoveFraction float64

	// Served, when set, says which samples the reader of the order sees
	// (a mount serves no file for some): the Positions of Resumed count
	// those only. Nil: every sample.
	Served func(id uint32) bool
}

// Segment is a part of an epoch that was read before a resume: each of
// WorldSize ranks took the first Position samples of its order, as ranks
// of synchronous data-parallel training do, which all take the same
// number of batches. The first segment's orders are the epoch's own; a
// later one's are the rest of the epoch after the segments before it.
type Segment struct {
	WorldSize, Position int
}

// MaxSegments bounds Options.Resumed: each segment costs an epoch's worth
// of order generation, dealt over its ranks.
const MaxSegments = 64

// MaxResumedRanks bounds the sum of the world sizes of Options.Resumed: a
// segment of W ranks costs a deal of its part of the epoch over W ranks
// (about a second for a million samples over 2^20 ranks), so four
// segments of the largest world size at most.
const MaxResumedRanks = 1 << 22

// MaxPosition bounds a segment's Position: no rank takes more samples than
// a beton holds.
const MaxPosition = math.MaxUint32

// String gives the segment as WORLDxPOSITION, the form ParseSegments reads.
func (s Segment) String() string { return fmt.Sprintf("%dx%d", s.WorldSize, s.Position) }

// ParseSegments reads segments written as WORLDxPOSITION, joined by sep
// (such as "8x1200-6x500" with sep "-").
func ParseSegments(s, sep string) ([]Segment, error) {
	parts := strings.Split(s, sep)
	if len(parts) > MaxSegments {
		return nil, fmt.Errorf("%d resumed segments; at most %d", len(parts), MaxSegments)
	}
	out := make([]Segment, 0, len(parts))
	for _, part := range parts {
		w, p, ok := strings.Cut(part, "x")
		world, err1 := strconv.Atoi(w)
		pos, err2 := strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil || strings.HasPrefix(w, "+") || strings.HasPrefix(p, "+") {
			return nil, fmt.Errorf("resumed segment %q: want WORLDxPOSITION, such as 8x1200", part)
		}
		out = append(out, Segment{WorldSize: world, Position: pos})
	}
	return out, nil
}

// FormatSegments writes segments as ParseSegments reads them.
func FormatSegments(segs []Segment, sep string) string {
	parts := make([]string, len(segs))
	for i, s := range segs {
		parts[i] = s.String()
	}
	return strings.Join(parts, sep)
}

// Validate fills defaults (WorldSize, BatchSize) and checks the options. The
// default Window depends on the PageMap, so Generate fills it.
func (o *Options) Validate() error {
	if !o.Kind.Known() {
		if o.Kind == "" {
			return fmt.Errorf("order kind is not set; want one of %s", kindList())
		}
		return fmt.Errorf("unknown order kind %q; want one of %s", string(o.Kind), kindList())
	}
	if o.WorldSize == 0 {
		o.WorldSize = 1
	}
	if o.WorldSize < 0 || o.WorldSize > MaxWorldSize {
		return fmt.Errorf("world size %d is out of range; want 1 to %d", o.WorldSize, MaxWorldSize)
	}
	if o.Rank < 0 || o.Rank >= o.WorldSize {
		return fmt.Errorf("rank %d is out of range for world size %d; want 0 to %d", o.Rank, o.WorldSize, o.WorldSize-1)
	}
	if o.Window < 0 {
		return fmt.Errorf("window of %d pages is negative; want at least 1, or 0 for the default", o.Window)
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchSize < 0 || o.BatchSize > MaxBatchSize {
		return fmt.Errorf("batch size %d is out of range; want 1 to %d, or 0 for %d", o.BatchSize, MaxBatchSize, DefaultBatchSize)
	}
	if o.Nodes < 0 || o.Nodes > o.WorldSize {
		return fmt.Errorf("%d nodes for world size %d; want 1 to the world size, or 0", o.Nodes, o.WorldSize)
	}
	if o.Nodes > 1 {
		if o.WorldSize%o.Nodes != 0 {
			return fmt.Errorf("world size %d is not a multiple of %d nodes: every node must have the same number of ranks", o.WorldSize, o.Nodes)
		}
		if o.Kind == Sequential {
			return fmt.Errorf("a node-affine order is random or quasi-random, not sequential")
		}
		if len(o.Resumed) > 0 {
			return fmt.Errorf("a node-affine epoch resumes at the same world size (from a position), not after segments")
		}
	}
	if !(o.MoveFraction >= 0 && o.MoveFraction <= 1) {
		return fmt.Errorf("move fraction %v is out of range; want 0 to 1", o.MoveFraction)
	}
	if len(o.Resumed) > MaxSegments {
		return fmt.Errorf("%d resumed segments; at most %d", len(o.Resumed), MaxSegments)
	}
	ranks := 0
	for i, s := range o.Resumed {
		if s.WorldSize < 1 || s.WorldSize > MaxWorldSize {
			return fmt.Errorf("resumed segment %d: world size %d is out of range; want 1 to %d", i, s.WorldSize, MaxWorldSize)
		}
		if s.Position < 0 || s.Position > MaxPosition {
			return fmt.Errorf("resumed segment %d: position %d is out of range; want 0 to %d", i, s.Position, MaxPosition)
		}
		if ranks += s.WorldSize; ranks > MaxResumedRanks {
			return fmt.Errorf("the resumed segments' world sizes add up to more than %d: each earlier part is dealt anew over its ranks to find the rest, and that many are more than any job had", MaxResumedRanks)
		}
	}
	return nil
}

// DefaultWindow returns the window of a quasi-random order of l when
// Options.Window is zero: ceil(2·batchSize / mean samples per data page),
// at least MinWindow. Pages holding no sample do not count toward the mean;
// a page map without data pages gets MinWindow.
func DefaultWindow(l PageMap, batchSize int) int {
	if batchSize <= 0 {
		batchSize = DefaultBatchSize
	}
	pages, samples := 0, 0
	first := l.FirstPage()
	for p := range int64(l.NumPages()) {
		if n := len(l.PageSamples(first + p)); n > 0 {
			pages++
			samples += n
		}
	}
	return defaultWindow(batchSize, pages, samples)
}

func defaultWindow(batchSize, pages, samples int) int {
	if pages == 0 || samples == 0 {
		return MinWindow
	}
	// ceil(2·batch / (samples/pages)) = ceil(2·batch·pages / samples)
	w := (2*int64(batchSize)*int64(pages) + int64(samples) - 1) / int64(samples)
	return int(max(w, MinWindow))
}
