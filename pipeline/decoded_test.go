package pipeline

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
	"github.com/ffcvfs/ffcvfs/pipeline/decoded"
)

// tierOpts are the options of the decoded-image tier's tests: random-
// resized crops of the fixture's real photos, flipped, two workers.
func tierOpts(kind order.Kind, exact bool) Options {
	return Options{BatchSize: 16, Workers: 2, Order: order.Options{Kind: kind, Seed: 3},
		Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 64, OutH: 64, FlipProb: 0.5, Exact: exact}}
}

// newTier returns a tier over the cache's beton, closed when the test ends.
func newTier(t *testing.T, c *pagecache.Cache, o decoded.Options) *decoded.Tier {
	t.Helper()
	o.Samples = c.File().NumSamples()
	tier, err := decoded.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tier.Close() })
	return tier
}

// planesBytes returns the planes' bytes of every JPEG of the cache's beton.
func planesBytes(t *testing.T, c *pagecache.Cache) []int {
	t.Helper()
	f := c.File()
	var sizes []int
	for s := range f.NumSamples() {
		b, err := f.ReadData(s, f.ImageField(""), nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := jpeg.NewDecoder()
		if err != nil {
			t.Fatal(err)
		}
		p, err := d.PlanesOf(b, jpeg.Size{})
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, p.Bytes())
	}
	return sizes
}

// sameBatches fails unless two runs published the same batches.
func sameBatches(t *testing.T, what string, a, b []published) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d and %d batches", what, len(a), len(b))
	}
	for i := range a {
		if a[i].epoch != b[i].epoch || a[i].batch != b[i].batch || !bytes.Equal(a[i].images, b[i].images) || !slices.Equal(a[i].labels, b[i].labels) {
			t.Fatalf("%s: epoch %d batch %d differs", what, a[i].epoch, a[i].batch)
		}
	}
}

// TestDecodedTierExact: with every image held, epochs after the first make
// every image from the tier, read no page of the beton, and, with exact
// crops, deliver the batches a pipeline without the tier delivers, byte
// for byte, under the random and quasi-random orders.
func TestDecodedTierExact(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	for _, kind := range []order.Kind{order.Random, order.QuasiRandom} {
		t.Run(string(kind), func(t *testing.T) {
			opts := tierOpts(kind, true)
			want := run(t, openCache(t, path), opts, 3).got
			c := openCache(t, path)
			n := c.File().NumSamples()
			tier := newTier(t, c, decoded.Options{RAM: 1 << 30})
			opts.Decoded = tier
			p, err := New(c, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			sink := newCollectSink(p, 3)
			var read uint64
			for e := range 3 {
				if _, err := p.RunEpoch(context.Background(), e, sink); err != nil {
					t.Fatal(err)
				}
				st := tier.Stats()
				if e == 0 {
					read = c.Stats().BytesRead
					if st.Filled != uint64(n) || st.Misses != uint64(n) || st.Hits != 0 || st.RAMImages != int64(n) {
						t.Fatalf("after the first epoch: %+v, want %d images held", st, n)
					}
					continue
				}
				if st.Hits != uint64(e*n) || st.Misses != uint64(n) {
					t.Errorf("epoch %d: %+v, want every image a hit", e, st)
				}
				if r := c.Stats().BytesRead; r != read {
					t.Errorf("epoch %d read %d bytes of the beton; every image was held", e, r-read)
				}
			}
			sameBatches(t, "with the tier against without", sink.got, want)
			if sum := planesBytes(t, c); tier.Stats().RAMBytes != int64(sumInts(sum)) {
				t.Errorf("the tier holds %d bytes; the planes are %d", tier.Stats().RAMBytes, sumInts(sum))
			}
		})
	}
}

func sumInts(a []int) int {
	s := 0
	for _, v := range a {
		s += v
	}
	return s
}

// TestDecodedTierTooSmall: a tier too small for one image holds none and
// changes nothing: the batches are those without it, every JPEG counted as
// not held.
func TestDecodedTierTooSmall(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	opts := tierOpts(order.QuasiRandom, false)
	want := run(t, openCache(t, path), opts, 2).got
	c := openCache(t, path)
	tier := newTier(t, c, decoded.Options{RAM: 1000})
	opts.Decoded = tier
	got := run(t, c, opts, 2).got
	sameBatches(t, "a tier of 1000 bytes against none", got, want)
	n := uint64(c.File().NumSamples())
	if st := tier.Stats(); st.Filled != 0 || st.RAMBytes != 0 || st.NotHeld != 2*n || st.Hits != 0 {
		t.Errorf("%+v: want nothing held, %d not held", st, 2*n)
	}
}

// TestDecodedTierHalf: a tier of half the planes' bytes holds about half
// the images and never more than its size; each later epoch makes exactly
// those from it; exact batches are those without the tier; a resume in
// the middle of an epoch with the tier warm delivers that epoch's batches.
func TestDecodedTierHalf(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	opts := tierOpts(order.Random, true)
	want := run(t, openCache(t, path), opts, 3).got
	c := openCache(t, path)
	n := c.File().NumSamples()
	size := int64(sumInts(planesBytes(t, c)) / 2)
	tier := newTier(t, c, decoded.Options{RAM: size})
	opts.Decoded = tier
	p, err := New(c, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := newCollectSink(p, 3)
	for e := range 2 {
		if _, err := p.RunEpoch(context.Background(), e, sink); err != nil {
			t.Fatal(err)
		}
	}
	st := tier.Stats()
	if st.RAMBytes > size || st.RAMImages < int64(n)/3 || st.RAMImages > int64(n)*2/3 {
		t.Fatalf("%+v: want about half of %d images, at most %d bytes", st, n, size)
	}
	if st.Hits != uint64(st.RAMImages) {
		t.Errorf("the second epoch made %d images from the tier, which holds %d", st.Hits, st.RAMImages)
	}
	// Epoch 2 from its third batch on.
	if _, err := p.RunEpochFrom(context.Background(), 2, 2, sink); err != nil {
		t.Fatal(err)
	}
	var wantRest []published
	for _, b := range want {
		if b.epoch < 2 || b.batch >= 2 {
			wantRest = append(wantRest, b)
		}
	}
	sameBatches(t, "half the images held, and a resume", sink.got, wantRest)
}

// TestDecodedTierDisk: images past the RAM size go to the disk, in a file
// no one else can open (unlinked at once), never past its size, and give
// the same exact batches.
func TestDecodedTierDisk(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	opts := tierOpts(order.QuasiRandom, true)
	want := run(t, openCache(t, path), opts, 2).got
	c := openCache(t, path)
	sizes := planesBytes(t, c)
	dir := t.TempDir()
	ram, disk := int64(sumInts(sizes[:10])), int64(sumInts(sizes)/2)
	tier := newTier(t, c, decoded.Options{RAM: ram, Disk: disk, Dir: dir})
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the disk tier's folder holds %d entries; its file is unlinked", len(ents))
	}
	opts.Decoded = tier
	got := run(t, c, opts, 2).got
	sameBatches(t, "with a disk tier against none", got, want)
	st := tier.Stats()
	if st.DiskImages == 0 || st.DiskBytes > disk || st.RAMBytes > ram || st.Corrupt != 0 {
		t.Errorf("%+v: want images on disk, at most %d bytes there and %d in RAM", st, disk, ram)
	}
	if st.Hits != uint64(st.RAMImages+st.DiskImages) {
		t.Errorf("the second epoch made %d images from the tier, which holds %d", st.Hits, st.RAMImages+st.DiskImages)
	}
}

// TestDecodedTierRanks: one tier per process serves a rank all its images
// in later epochs when the order gives the rank the same samples every
// epoch (node-affine, each rank its own node: --nodes equal to
// --world-size); under the default order a rank's share changes every
// epoch, and its tier serves only the part of it that it decoded before.
func TestDecodedTierRanks(t *testing.T) {
	photos := testenv.Photos(t, 0)
	// 200 samples (the photos again where -short gives fewer): pages
	// enough for a node each.
	const samples = 200
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	path := filepath.Join(t.TempDir(), "ranks.beton")
	w, err := beton.Create(path, fields, samples, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	for i := range samples {
		p := photos[i%len(photos)]
		iw, ih, err := jpeg.Header(p.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeJPEG, Width: iw, Height: ih, Data: p.Data}, {Int: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	const world = 2
	for _, nodes := range []int{world, 0} {
		var hits, read uint64
		for rank := range world {
			c := openCache(t, path)
			opts := tierOpts(order.Random, false)
			opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			opts.BatchSize = 4
			opts.Order.WorldSize, opts.Order.Rank, opts.Order.Nodes = world, rank, nodes
			tier := newTier(t, c, decoded.Options{RAM: 1 << 30})
			opts.Decoded = tier
			p, err := New(c, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			sink := newCollectSink(p, 3)
			if _, err = p.RunEpoch(context.Background(), 0, sink); err != nil {
				t.Fatal(err)
			}
			before := tier.Stats().Hits // a share padded repeats samples
			n, err := p.RunEpoch(context.Background(), 1, sink)
			if err != nil {
				t.Fatal(err)
			}
			hits += tier.Stats().Hits - before
			read += uint64(n)
		}
		t.Logf("--nodes %d: the second epoch made %d of its %d images from the ranks' tiers", nodes, hits, read)
		if nodes == world && hits != read {
			t.Errorf("node-affine order, each rank its own node: %d of %d images from the tiers, want all", hits, read)
		}
		if nodes == 0 && hits >= read {
			t.Errorf("the default order: %d of %d images from the tiers; a rank's share should change", hits, read)
		}
	}
}
