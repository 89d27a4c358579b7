package pipeline

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
)

// threeSources are two fixture betons and a copy of the first, weighted
// 0.5, 0.3 and 0.2.
func threeSources(t *testing.T) []Source {
	jpg := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	paths := []string{jpg, testenv.Fixture(t, "beton", "imagefolder-mixed.beton"), testenv.CopyFile(t, jpg, filepath.Join(t.TempDir(), "copy.beton"))}
	var srcs []Source
	for i, p := range paths {
		srcs = append(srcs, Source{Cache: openCache(t, p), Share: order.Share{Kind: order.Proportion, Value: []float64{0.5, 0.3, 0.2}[i]}})
	}
	return srcs
}

// TestSourcesMix: three betons weighted 0.5/0.3/0.2 give each epoch the
// mixture's samples, each batch sample with its source's label and its
// source in the source field, the same batches for the same seed.
func TestSourcesMix(t *testing.T) {
	srcs := threeSources(t)
	opts := Options{BatchSize: 16, Workers: 2, Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 32, OutH: 32},
		Order: order.Options{Kind: order.QuasiRandom, Seed: 5}}
	p, err := NewSources(srcs, opts, MixOptions{EpochSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Fields(); len(got) != 3 || got[2].Name != SourceField || got[2].DType != "int64" {
		t.Fatalf("fields %v, want image, label and %s", got, SourceField)
	}
	counts := p.Counts()
	if counts[0] != 150 || counts[1] != 90 || counts[2] != 60 {
		t.Fatalf("counts %v, want 150 90 60", counts)
	}
	runEpochs := func() []fieldBatch {
		sink := newFieldSink(p, 3)
		for e := range 3 {
			if _, err := p.RunEpoch(context.Background(), e, sink); err != nil {
				t.Fatal(err)
			}
		}
		return sink.got
	}
	got := runEpochs()
	for e := range 3 {
		type key struct{ src, label int64 }
		want, seen := map[key]int{}, map[key]int{}
		mm := p.mix.Epoch(uint64(e))
		for id := range uint32(mm.NumSamples()) {
			s, smp := mm.Source(id)
			f := p.parts[s].f
			want[key{int64(s), f.Int(int(smp), f.FieldIndex("label"))}]++
		}
		n := 0
		for _, b := range got {
			if b.epoch != e {
				continue
			}
			for j := range b.size {
				seen[key{int64(binary.LittleEndian.Uint64(b.bufs[2][8*j:])), int64(binary.LittleEndian.Uint64(b.bufs[1][8*j:]))}]++
				n++
			}
		}
		if n != 300 {
			t.Errorf("epoch %d: %d samples, want 300", e, n)
		}
		for k, w := range want {
			if seen[k] != w {
				t.Errorf("epoch %d: source %d label %d seen %d times, want %d", e, k.src, k.label, seen[k], w)
			}
		}
	}
	again := runEpochs()
	for i := range got {
		if string(got[i].bufs[0]) != string(again[i].bufs[0]) {
			t.Fatalf("batch %d differs between two runs with one seed", i)
		}
	}
	if p.Fingerprint() == "" {
		t.Error("a mixture without a fingerprint")
	}
}

// floatLabels writes a beton of 8 raw images whose "label" is a float
// field.
func floatLabels(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "float-labels.beton")
	w, err := beton.Create(path, []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeFloat, Name: "label"}}, 8, beton.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeRaw, Width: 8, Height: 8, Data: make([]byte, 8*8*3)}, {Float: float64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSourcesRefused: a source without a field the first has, one whose
// field is of another kind, the same beton twice, and indices with
// several sources are each refused with a sentence naming them.
func TestSourcesRefused(t *testing.T) {
	jpg := openCache(t, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	all := openCache(t, testenv.Fixture(t, "beton", "all-fields.beton"))
	floats := openCache(t, floatLabels(t))
	half := order.Share{Kind: order.Proportion, Value: 0.5}
	opts := Options{BatchSize: 8, Workers: 1, Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 16, OutH: 16}, Order: order.Options{Kind: order.Random}}
	for _, c := range []struct {
		srcs []Source
		opts func(*Options)
		want string
	}{
		{[]Source{{Cache: all, Share: half}, {Cache: jpg, Share: half}}, func(o *Options) { o.Fields = []string{"image", "label", "weight"} },
			`imagefolder-jpg.beton has no field "weight", which ` + all.File().Name() + " has"},
		{[]Source{{Cache: jpg, Share: half}, {Cache: floats, Share: half}}, nil, `field "label" is an int field in ` + jpg.File().Name() + " and a float field in " + floats.File().Name()},
		{[]Source{{Cache: jpg, Share: half}, {Cache: jpg, Share: half}}, nil, "source 2 is source 1 again"},
		{[]Source{{Cache: jpg, Share: half}, {Cache: all, Share: half}}, func(o *Options) { o.Indices = []uint32{1} }, "indices"},
	} {
		o := opts
		if c.opts != nil {
			c.opts(&o)
		}
		if _, err := NewSources(c.srcs, o, MixOptions{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v\nwant an error saying %q", err, c.want)
		}
	}
}

// TestSourcesResume: an epoch of a mixture read in part by 4 ranks and
// resumed by 3, and in part by 1 and resumed by 2, reads every sample of
// the epoch's mixture, and none but them.
func TestSourcesResume(t *testing.T) {
	srcs := threeSources(t)
	for _, c := range []struct{ before, pos, after int }{{4, 30, 3}, {1, 111, 2}} {
		opts := Options{BatchSize: 16, Workers: 1, Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 16, OutH: 16},
			Order: order.Options{Kind: order.QuasiRandom, Seed: 9, Epoch: 1}}
		p, err := NewSources(srcs, opts, MixOptions{EpochSize: 300})
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint32]bool{}
		mm := p.mix.Epoch(1)
		for id := range uint32(mm.NumSamples()) {
			s, smp := mm.Source(id)
			want[p.parts[s].first+smp] = true
		}
		got := map[uint32]bool{}
		for r := range c.before {
			o := opts.Order
			o.Rank, o.WorldSize = r, c.before
			ids, err := p.generate(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range ids[:c.pos] {
				got[g] = true
			}
		}
		for r := range c.after {
			o := opts.Order
			o.Rank, o.WorldSize, o.Resumed = r, c.after, []order.Segment{{WorldSize: c.before, Position: c.pos}}
			ids, err := p.generate(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range ids {
				got[g] = true
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d ranks, then %d: %d samples read, the epoch holds %d", c.before, c.after, len(got), len(want))
		}
		for g := range got {
			if !want[g] {
				t.Fatalf("%d ranks, then %d: sample %d read, not in the epoch", c.before, c.after, g)
			}
		}
	}
}
