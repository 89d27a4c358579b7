package pipeline

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pipeline/augment"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
)

func cifarLike() Options {
	return Options{BatchSize: 16, Workers: 2, Op: decode.Op{Kind: decode.Whole, FlipProb: 0.5},
		Fields: []string{"thumb", "label"},
		Augment: augment.Options{TranslatePad: 2, TranslateFill: [3]uint8{125, 123, 114}, CutoutSize: 4,
			CutoutFill: [3]uint8{125, 123, 114}, Brightness: augment.Jitter{Magnitude: 0.2, P: 0.5}},
		Order: order.Options{Kind: order.Random, Seed: 7}}
}

func runFields(t *testing.T, opts Options, epoch, start int) []fieldBatch {
	t.Helper()
	c := openCache(t, testenv.Fixture(t, "beton", "label-first-two-images.beton"))
	p, err := New(c, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := newFieldSink(p, 2)
	if _, err := p.RunEpochFrom(t.Context(), epoch, start, sink); err != nil {
		t.Fatal(err)
	}
	return sink.got
}

// TestAugmentResumable: with every augmentation on, a stream resumed at a
// batch repeats the batches of the whole epoch byte for byte, and another
// epoch differs.
func TestAugmentResumable(t *testing.T) {
	opts := cifarLike()
	opts.Augment.Contrast = augment.Jitter{Magnitude: 0.3, P: 0.5}
	opts.Augment.Saturation = augment.Jitter{Magnitude: 0.3, P: 1}
	opts.MixupAlpha = 0.2
	opts.BatchSize = 8
	whole := runFields(t, opts, 1, 0)
	resumed := runFields(t, opts, 1, 5)
	if len(resumed) != len(whole)-5 {
		t.Fatalf("%d batches resumed at 5 of %d", len(resumed), len(whole))
	}
	for i, b := range resumed {
		for k := range b.bufs {
			if !bytes.Equal(b.bufs[k], whole[i+5].bufs[k]) {
				t.Fatalf("batch %d field %d differs when resumed", i+5, k)
			}
		}
	}
	other := runFields(t, opts, 2, 0)
	if bytes.Equal(other[0].bufs[0], whole[0].bufs[0]) {
		t.Error("epochs 1 and 2 start with the same images")
	}
}

// TestMixupField: mixup mixes each image with the one before it by the
// weight the "mixup" field reports, with the labels of both.
func TestMixupField(t *testing.T) {
	opts := cifarLike()
	opts.Augment = augment.Options{}
	opts.Op.FlipProb = 0
	plain := runFields(t, opts, 0, 0)
	opts.MixupAlpha = 0.4
	mixed := runFields(t, opts, 0, 0)
	const per = 40 * 30 * 3
	for bi, b := range mixed {
		n := b.size
		lam := make([]float64, n)
		for i := range n {
			got := func(k int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b.bufs[2][4*(3*i+k):])) }
			label := int64(binary.LittleEndian.Uint64(b.bufs[1][8*i:]))
			prev := int64(binary.LittleEndian.Uint64(b.bufs[1][8*((i+n-1)%n):]))
			if got(0) != float32(label) || got(1) != float32(prev) || got(2) < 0 || got(2) > 1 {
				t.Fatalf("batch %d sample %d: mixup (%v, %v, %v); labels %d and %d", bi, i, got(0), got(1), got(2), label, prev)
			}
			lam[i] = float64(got(2))
		}
		want := bytes.Clone(plain[bi].bufs[0][:n*per])
		augment.MixImages(want, n, per, lam, make([]byte, per))
		// The field holds λ as float32: a value may land one below.
		for k := range want {
			if d := int(want[k]) - int(b.bufs[0][k]); d < -1 || d > 1 {
				t.Fatalf("batch %d: byte %d is %d, the mix of the unmixed images %d", bi, k, b.bufs[0][k], want[k])
			}
		}
	}
}

// TestIndicesAndDropLast: a subset is read as FFCV's Loader reads it: in
// the given order when sequential, duplicates and all; otherwise each epoch
// holds the subset's samples, as often as named; drop-last leaves out the
// incomplete batch.
func TestIndicesAndDropLast(t *testing.T) {
	ids := []uint32{40, 3, 3, 17, 59, 0, 58, 21, 8, 37, 44}
	labels := func(got []fieldBatch) (out []int64) {
		for _, b := range got {
			for j := range b.size {
				out = append(out, int64(binary.LittleEndian.Uint64(b.bufs[1][8*j:])))
			}
		}
		return out
	}
	c := openCache(t, testenv.Fixture(t, "beton", "label-first-two-images.beton"))
	f := c.File()
	want := make([]int64, len(ids))
	for i, s := range ids {
		want[i] = f.Int(int(s), 0)
	}
	opts := cifarLike()
	opts.Augment, opts.BatchSize, opts.Indices = augment.Options{}, 4, ids
	opts.Order = order.Options{Kind: order.Sequential}
	if got := labels(runFields(t, opts, 0, 0)); !slices.Equal(got, want) {
		t.Errorf("sequential subset: labels %v, want %v", got, want)
	}
	for _, kind := range []order.Kind{order.Random, order.QuasiRandom} {
		opts.Order = order.Options{Kind: kind, Seed: 3}
		opts.DropLast = false
		got := labels(runFields(t, opts, 1, 0))
		slices.Sort(got)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s subset: labels %v, want %v in some order", kind, got, w)
		}
		opts.DropLast = true
		if b := runFields(t, opts, 1, 0); len(b) != len(ids)/4 || b[len(b)-1].size != 4 {
			t.Errorf("%s subset with drop-last: %d batches, want %d whole ones", kind, len(b), len(ids)/4)
		}
	}
	opts.Indices = []uint32{uint32(f.NumSamples())}
	if _, err := New(c, opts, nil); err == nil {
		t.Error("an index past the last sample accepted")
	}
}

// TestReplaceLabel: the samples named get the new label, the others keep
// theirs.
func TestReplaceLabel(t *testing.T) {
	opts := cifarLike()
	opts.Augment = augment.Options{}
	opts.Order = order.Options{Kind: order.Sequential}
	opts.ReplaceLabel = augment.NewReplaceLabel([]uint32{1, 5}, 77)
	s := 0
	c := openCache(t, testenv.Fixture(t, "beton", "label-first-two-images.beton"))
	for _, b := range runFields(t, opts, 0, 0) {
		for j := range b.size {
			want := c.File().Int(s, 0)
			if s == 1 || s == 5 {
				want = 77
			}
			if got := int64(binary.LittleEndian.Uint64(b.bufs[1][8*j:])); got != want {
				t.Errorf("sample %d: label %d, want %d", s, got, want)
			}
			s++
		}
	}
}
