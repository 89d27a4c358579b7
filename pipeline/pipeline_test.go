package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/rewrite"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
	"github.com/ffcvfs/ffcvfs/storage"
)

// collectSink keeps the images and labels of every published batch of a
// pipeline's default fields.
type collectSink struct {
	*fieldSink
	got []published
}

type published struct {
	epoch, batch int
	images       []byte
	labels       []int64
}

func newCollectSink(p *Pipeline, slots int) *collectSink {
	return &collectSink{fieldSink: newFieldSink(p, slots)}
}

func (s *collectSink) Publish(slot, epoch, batch, size int) error {
	bufs := s.slots[slot]
	p := published{epoch: epoch, batch: batch, images: append([]byte(nil), bufs[0]...)}
	for j := 0; j < size; j++ {
		p.labels = append(p.labels, int64(binary.LittleEndian.Uint64(bufs[1][8*j:])))
	}
	s.got = append(s.got, p)
	s.free <- slot
	return nil
}

func openCache(t *testing.T, path string) *pagecache.Cache {
	t.Helper()
	src, f, err := pagecache.OpenBeton(t.Context(), path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	c, err := pagecache.New(src, f, pagecache.Options{Budget: 2 * f.PageSize()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, c *pagecache.Cache, opts Options, epochs int) *collectSink {
	t.Helper()
	p, err := New(c, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := newCollectSink(p, 3)
	for e := 0; e < epochs; e++ {
		if _, err := p.RunEpoch(context.Background(), e, sink); err != nil {
			t.Fatal(err)
		}
	}
	return sink
}

func TestEverySampleOncePerEpochWithItsLabel(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-mixed.beton") // JPEG and raw images
	c := openCache(t, path)
	f := c.File()
	opts := Options{BatchSize: 16, Workers: 2, Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 32, OutH: 32, FlipProb: 0.5}, Order: order.Options{Kind: order.QuasiRandom, Seed: 3}}
	sink := run(t, c, opts, 2)
	want := map[int64]int{}
	for s := 0; s < f.NumSamples(); s++ {
		want[f.Int(s, 1)]++
	}
	for e := 0; e < 2; e++ {
		got := map[int64]int{}
		batch := 0
		for _, p := range sink.got {
			if p.epoch != e {
				continue
			}
			if p.batch != batch {
				t.Fatalf("epoch %d: batch %d published after %d", e, p.batch, batch-1)
			}
			batch++
			for _, l := range p.labels {
				got[l]++
			}
		}
		for l, n := range want {
			if got[l] != n {
				t.Errorf("epoch %d: label %d seen %d times, want %d", e, l, got[l], n)
			}
		}
	}
	// The same seed gives the same batches.
	again := run(t, c, opts, 2)
	for i := range sink.got {
		if !bytes.Equal(sink.got[i].images, again.got[i].images) {
			t.Fatalf("batch %d differs between two runs with one seed", i)
		}
	}
}

// Float output equals the uint8 output converted by hand.
func TestFloatLayoutsAndNormalize(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	c := openCache(t, path)
	base := Options{BatchSize: 8, Workers: 1, Op: decode.Op{Kind: decode.CenterCrop, OutW: 16, OutH: 16}, Order: order.Options{Kind: order.Sequential}}
	u8 := run(t, c, base, 1)
	f32 := base
	f32.DType, f32.DimOrder, f32.Normalize, f32.Mean, f32.Std = "float32", "nchw", true, ImageNetMean, ImageNetStd
	got := run(t, c, f32, 1)
	f16 := f32
	f16.DType = "float16"
	half := run(t, c, f16, 1)
	const hw = 16 * 16
	for b := range u8.got {
		for j := range u8.got[b].labels {
			for i := 0; i < hw; i++ {
				for ch := 0; ch < 3; ch++ {
					v := float64(u8.got[b].images[j*hw*3+i*3+ch])
					want := (v/255 - ImageNetMean[ch]) / ImageNetStd[ch]
					k := j*hw*3 + ch*hw + i
					x := math.Float32frombits(binary.LittleEndian.Uint32(got.got[b].images[4*k:]))
					if math.Abs(float64(x)-want) > 1e-5 {
						t.Fatalf("float32 nchw: %v, want %v", x, want)
					}
					h := float16ToFloat(binary.LittleEndian.Uint16(half.got[b].images[2*k:]))
					if math.Abs(h-want) > 2e-3 {
						t.Fatalf("float16: %v, want %v", h, want)
					}
				}
			}
		}
	}
}

func float16ToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	mant := float64(h & 0x3ff)
	if exp == 0 {
		return sign * mant / 1024 * math.Pow(2, -14)
	}
	return sign * (1 + mant/1024) * math.Pow(2, float64(exp-15))
}

// A corrupt JPEG is replaced by another sample of its batch with skip, and
// ends the epoch with fail.
func TestCorruptSample(t *testing.T) {
	orig := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	f, err := beton.Open(bytes.NewReader(data), int64(len(data)), orig)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := f.Image(3, 0)
	for i := img.Ptr + 2; i < img.Ptr+img.Size; i++ {
		data[i] = 0xAA // keep the SOI marker, destroy the rest
	}
	path := filepath.Join(t.TempDir(), "corrupt.beton")
	os.WriteFile(path, data, 0o644)
	c := openCache(t, path)
	opts := Options{BatchSize: 8, Workers: 2, Op: decode.Op{Kind: decode.CenterCrop, OutW: 16, OutH: 16}, Order: order.Options{Kind: order.Sequential}}
	p, err := New(c, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := newCollectSink(p, 2)
	n, err := p.RunEpoch(context.Background(), 0, sink)
	if err != nil || n != f.NumSamples() || p.Errors.Load() != 1 {
		t.Fatalf("skip: %d samples, %v, %d errors", n, err, p.Errors.Load())
	}
	opts.OnError = "fail"
	p, _ = New(c, opts, nil)
	if _, err := p.RunEpoch(context.Background(), 0, newCollectSink(p, 2)); err == nil {
		t.Fatal("fail mode ignored a corrupt sample")
	}
}

func TestDiscardSinkRunsEpochs(t *testing.T) {
	c := openCache(t, testenv.Fixture(t, "beton", "imagefolder-mixed.beton"))
	p, err := New(c, Options{BatchSize: 32, Workers: 2, DType: "float32", DimOrder: "nchw", Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 24, OutH: 24}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewDiscardSink(p, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	for e := 0; e < 2; e++ {
		if n, err := p.RunEpoch(context.Background(), e, sink); err != nil || n != c.File().NumSamples() {
			t.Fatalf("epoch %d: %d samples, %v", e, n, err)
		}
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []Options{
		{DType: "int8", Op: decode.Op{OutW: 8, OutH: 8}},
		{DimOrder: "chw", Op: decode.Op{OutW: 8, OutH: 8}},
		{Normalize: true, Std: [3]float64{1, 1, 1}, Op: decode.Op{OutW: 8, OutH: 8}},
		{OnError: "ignore", Op: decode.Op{OutW: 8, OutH: 8}},
		{DType: "float32", Normalize: true, Std: [3]float64{1, 0, 1}, Op: decode.Op{OutW: 8, OutH: 8}},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// An allocation-table entry of size 0
// made ffcvfeed dereference a nil page. The sample is an error of its own,
// counted, and the epoch goes on.
func TestEmptyImageAllocation(t *testing.T) {
	orig := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	at := binary.LittleEndian.Uint64(data[16:])
	binary.LittleEndian.PutUint64(data[at+16:], 0) // the first entry's size
	path := filepath.Join(t.TempDir(), "empty.beton")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, path)
	opts := Options{BatchSize: 8, Workers: 2, Op: decode.Op{Kind: decode.CenterCrop, OutW: 16, OutH: 16}, Order: order.Options{Kind: order.Sequential}}
	p, err := New(c, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.RunEpoch(context.Background(), 0, newCollectSink(p, 2))
	if err != nil || n != c.File().NumSamples() || p.Errors.Load() != 1 {
		t.Fatalf("%d samples, %v, %d errors; want all, nil, 1", n, err, p.Errors.Load())
	}
}

func TestParseEnums(t *testing.T) {
	if d, err := ParseDType("float16"); err != nil || d != Float16 {
		t.Errorf("ParseDType(float16) = %q, %v", d, err)
	}
	if l, err := ParseDimOrder("nchw"); err != nil || l != NCHW {
		t.Errorf("ParseLayout(nchw) = %q, %v", l, err)
	}
	if e, err := ParseOnError("fail"); err != nil || e != Fail {
		t.Errorf("ParseOnError(fail) = %q, %v", e, err)
	}
	for _, err := range []error{
		func() error { _, err := ParseDType("int8"); return err }(),
		func() error { _, err := ParseDimOrder("chw"); return err }(),
		func() error { _, err := ParseOnError("ignore"); return err }(),
	} {
		if err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("a bad name: %v, want an error naming the choices", err)
		}
	}
}

// TestDropLast: with DropLast an epoch of 200 samples in batches of 16 is 12
// whole batches, every one full, and no sample twice.
func TestDropLast(t *testing.T) {
	c := openCache(t, testenv.Fixture(t, "beton", "imagefolder-mixed.beton"))
	n := c.File().NumSamples()
	opts := Options{BatchSize: 16, DropLast: true, Workers: 2, Op: decode.Op{Kind: decode.CenterCrop, OutW: 16, OutH: 16}, Order: order.Options{Kind: order.Random, Seed: 1}}
	sink := run(t, c, opts, 1)
	if len(sink.got) != n/16 {
		t.Fatalf("%d samples in batches of 16 with DropLast: %d batches, want %d", n, len(sink.got), n/16)
	}
	for _, b := range sink.got {
		if len(b.labels) != 16 {
			t.Errorf("batch %d holds %d samples, want 16", b.batch, len(b.labels))
		}
	}
	p, err := New(c, Options{BatchSize: n + 1, DropLast: true, Order: order.Options{Kind: order.Random}, Op: opts.Op}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.BatchesPerEpoch(); err == nil {
		t.Errorf("an epoch with no whole batch: no error")
	}
}

// lyingBeton writes a copy of the imagefolder-jpg fixture whose samples
// 1 to 3 lie: sample 1's metadata says a larger size than its JPEG's frame
// header, sample 2's a smaller one, and sample 3's frame header and
// metadata both say 30000×30000. It returns its path and the fixture.
func lyingBeton(t *testing.T) (string, *beton.File) {
	orig := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	f, err := beton.Open(bytes.NewReader(data), int64(len(data)), orig)
	if err != nil {
		t.Fatal(err)
	}
	// The image field's metadata (FFCV's RGB record, packed: mode u1, width
	// u2 at 1, height u2 at 3, pointer u8 at 5) of sample s, in the
	// metadata table of 24-byte records.
	meta := beton.HeaderSize + beton.DescriptorSize*len(f.Fields())
	rec := func(s int) int { return meta + s*24 }
	put16 := func(at, v int) { binary.LittleEndian.PutUint16(data[at:], uint16(v)) }
	img1, _ := f.Image(1, 0)
	put16(rec(1)+1, img1.Width+64) // larger than the frame
	img2, _ := f.Image(2, 0)
	put16(rec(2)+1, img2.Width/2) // smaller
	put16(rec(2)+3, img2.Height/2)
	img3, _ := f.Image(3, 0)
	sof := bytes.Index(data[img3.Ptr:img3.Ptr+img3.Size], []byte{0xFF, 0xC0})
	if sof < 0 {
		t.Fatal("sample 3 has no baseline frame header")
	}
	at := int(img3.Ptr) + sof + 5 // FF C0, length, precision: height, width
	binary.BigEndian.PutUint16(data[at:], 30000)
	binary.BigEndian.PutUint16(data[at+2:], 30000)
	put16(rec(3)+1, 30000)
	put16(rec(3)+3, 30000)
	path := filepath.Join(t.TempDir(), "lying.beton")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, f
}

// lyingOps are the crops the lying beton is decoded with.
var lyingOps = []decode.Op{
	{Kind: decode.CenterCrop, OutW: 16, OutH: 16},
	{Kind: decode.CenterCrop, OutW: 16, OutH: 16, Exact: true},
	{Kind: decode.RandomResizedCrop, OutW: 24, OutH: 24},
	{Kind: decode.RandomResizedCrop, OutW: 24, OutH: 24, Exact: true},
}

// runLying runs an epoch of the lying beton with op, skipping errors, and
// returns the samples delivered, its errors, its log and the run's error.
func runLying(t *testing.T, c *pagecache.Cache, op decode.Op) (int, uint64, string, error) {
	var logs bytes.Buffer
	opts := Options{BatchSize: 8, Workers: 2, Op: op, Order: order.Options{Kind: order.Sequential},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	p, err := New(c, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.RunEpoch(context.Background(), 0, newCollectSink(p, 2))
	return n, p.Errors.Load(), logs.String(), err
}

// TestFrameHeaderIsTheTruth: a sample whose metadata says
// another size than its JPEG's frame header, larger or smaller, is a
// corrupt sample, named and skipped with --on-error skip, in every crop and
// with Exact; it used to end the run (metadata larger) or decode a wrong
// region silently (smaller).
func TestFrameHeaderIsTheTruth(t *testing.T) {
	path, f := lyingBeton(t)
	c := openCache(t, path)
	img1, _ := f.Image(1, 0)
	img2, _ := f.Image(2, 0)
	for _, op := range lyingOps {
		n, errs, logs, err := runLying(t, c, op)
		if err != nil || n != f.NumSamples() || errs < 2 {
			t.Errorf("%+v, skip: %d samples, %v, %d errors; want all, nil, and samples 1 and 2 failed\n%s", op, n, err, errs, logs)
		}
		for _, want := range []string{
			fmt.Sprintf(`sample=1 err=".*the JPEG's frame header says %dx%d, the sample's metadata %dx%d`, img1.Width, img1.Height, img1.Width+64, img1.Height),
			fmt.Sprintf(`sample=2 err=".*the JPEG's frame header says %dx%d, the sample's metadata %dx%d`, img2.Width, img2.Height, img2.Width/2, img2.Height/2),
		} {
			if !regexp.MustCompile(want).MatchString(logs) {
				t.Errorf("%+v: the log lacks %s:\n%s", op, want, logs)
			}
		}
	}
	// One worker, so that sample 1 fails first: with two, sample 2's
	// error may come first.
	opts := Options{BatchSize: 8, Workers: 1, Op: lyingOps[0], Order: order.Options{Kind: order.Sequential}, OnError: Fail}
	p, _ := New(c, opts, nil)
	if _, err := p.RunEpoch(context.Background(), 0, newCollectSink(p, 2)); err == nil || !strings.Contains(err.Error(), "sample 1: ") {
		t.Errorf("fail: %v; want the error of sample 1", err)
	}
}

// TestHugeFrameIsCorrupt: a JPEG whose frame header says
// 30000×30000 took gigabytes per worker with Exact or a center crop; an
// image of more than decode.MaxPixels (PIL's bound, which ffcvfs write
// applies too) is a corrupt sample, refused before libjpeg allocates.
func TestHugeFrameIsCorrupt(t *testing.T) {
	path, f := lyingBeton(t)
	c := openCache(t, path)
	for _, op := range lyingOps {
		n, _, logs, err := runLying(t, c, op)
		if err != nil || n != f.NumSamples() {
			t.Errorf("%+v: %d samples, %v", op, n, err)
		}
		if want := `sample=3 err=".*the image is 30000x30000, more than 178956970 pixels`; !regexp.MustCompile(want).MatchString(logs) {
			t.Errorf("%+v: the log lacks %s:\n%s", op, want, logs)
		}
	}
}

// TestEveryLayoutDeterministic: two runs of the same stream over JPEGs in
// every sampling layout libjpeg accepts (jpeg/testdata/layouts: 4:1:0,
// 4:1:1, 1x4, 2x4, 3x2, 2x2 against 1x2) give identical batches, at every
// DCT scale a random-resized crop picks, the second run's buffers filled
// with garbage first. libjpeg-turbo's cropped scanlines read memory they
// never wrote for 4:1:0 and Y 2x4, so batches differed between runs.
func TestEveryLayoutDeterministic(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("..", "jpeg", "testdata", "layouts", "*.jpg"))
	if len(paths) < 6 {
		t.Fatalf("found %d layout JPEGs", len(paths))
	}
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	const copies = 4 // each JPEG several times: many crops of each
	path := filepath.Join(t.TempDir(), "layouts.beton")
	w, err := beton.Create(path, fields, copies*len(paths), beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	for i := range copies * len(paths) {
		b, err := os.ReadFile(paths[i%len(paths)])
		if err != nil {
			t.Fatal(err)
		}
		iw, ih, err := jpeg.Header(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeJPEG, Width: iw, Height: ih, Data: b}, {Int: int64(i % len(paths))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, path)
	opts := Options{BatchSize: 8, Workers: 2, Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 40, OutH: 40, FlipProb: 0.5},
		Order: order.Options{Kind: order.Random, Seed: 7}}
	runs := make([][]published, 2)
	for r := range runs {
		p, err := New(c, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		sink := newCollectSink(p, 2)
		if r == 1 {
			for _, bufs := range sink.slots {
				for _, b := range bufs {
					for i := range b {
						b[i] = byte(0xA5 ^ i)
					}
				}
			}
		}
		for e := range 3 {
			if n, err := p.RunEpoch(context.Background(), e, sink); err != nil || n != copies*len(paths) || p.Errors.Load() != 0 {
				t.Fatalf("run %d epoch %d: %d samples, %v, %d errors", r, e, n, err, p.Errors.Load())
			}
		}
		runs[r] = sink.got
	}
	if len(runs[0]) != len(runs[1]) {
		t.Fatalf("%d and %d batches", len(runs[0]), len(runs[1]))
	}
	for i := range runs[0] {
		a, b := runs[0][i], runs[1][i]
		if a.epoch != b.epoch || a.batch != b.batch || !bytes.Equal(a.images, b.images) {
			t.Errorf("epoch %d batch %d: the two runs' images differ", a.epoch, a.batch)
		}
	}
}

// TestRestartCounts: a pipeline counts the JPEGs it decodes and those
// with restart markers, and over a beton whose JPEGs lack them (FFCV's
// writer made the fixture) says once, over two epochs, what adds them;
// over the same beton rewritten with them it says nothing.
func TestRestartCounts(t *testing.T) {
	path := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	rewritten := filepath.Join(t.TempDir(), "restarts.beton")
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := beton.NewFileDestination(rewritten)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rewrite.Rewrite(t.Context(), f, dst, rewrite.Options{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		path     string
		restarts bool
	}{{path, false}, {rewritten, true}} {
		var log bytes.Buffer
		cache := openCache(t, c.path)
		n := uint64(cache.File().NumSamples())
		opts := Options{BatchSize: 16, Workers: 2, Op: decode.Op{Kind: decode.RandomResizedCrop, OutW: 32, OutH: 32},
			Order: order.Options{Kind: order.Random, Seed: 1}, Logger: slog.New(slog.NewTextHandler(&log, nil))}
		p, err := New(cache, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		sink := newCollectSink(p, 3)
		for e := range 2 {
			if _, err := p.RunEpoch(t.Context(), e, sink); err != nil {
				t.Fatal(err)
			}
		}
		want := uint64(0)
		if c.restarts {
			want = 2 * n
		}
		if p.JPEGs.Load() != 2*n || p.Restarts.Load() != want {
			t.Errorf("%s: %d JPEGs, %d with restarts; want %d and %d", c.path, p.JPEGs.Load(), p.Restarts.Load(), 2*n, want)
		}
		warned := strings.Count(log.String(), "ffcvfs write --from-beton "+c.path)
		if c.restarts && warned != 0 || !c.restarts && warned != 1 {
			t.Errorf("%s: the advice logged %d times:\n%s", c.path, warned, log.String())
		}
	}
}
