// Package pipeline turns the samples of a beton into finished training
// batches: an order (package order), a read of each sample's page through
// the page cache, a region decode and crop (package decode) or, for an
// image the decoded-image tier holds (package decoded), a crop of its
// planes with no page read at all, conversion to
// the output dtype and layout, written in place into a batch slot that a
// Sink (a shared-memory ring) provides.
//
// # Concurrency
//
// Options.Workers goroutines process samples; each owns a decoder, a random
// source and a scratch buffer, so steady state allocates nothing per
// sample. Batches are filled concurrently, as many as the Sink has free
// slots, and published in batch order.
//
// What the workers share: per sample, their batch's atomic counter (to
// claim the next sample), the image counter, and the page cache's mutex
// (see package pagecache); per batch, a receive each from the jobs channel
// and a send to the done channel; nothing else. So a worker's cost does
// not grow with their number: ffcvfeed bench on a beton with restart
// intervals took 0.246 ms of CPU an image with 1 worker and 0.243 with 2,
// its goroutines waiting under a millisecond in all for mutexes in 5 s of
// CPU (FFCVFS_MUTEXPROFILE). A decoded-image tier (Options.Decoded, package
// decoded) adds an atomic load per sample, and in the first epoch its
// mutex once per image it takes.
//
// # What it must never do
//
// Let one bad sample stop an epoch when OnError is "skip": a sample that
// fails to decode is counted, logged by id, and replaced by another sample
// of its batch.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/fields"
	"github.com/ffcvfs/ffcvfs/internal/half"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline/augment"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
	"github.com/ffcvfs/ffcvfs/pipeline/decoded"
)

// ImageNet's per-channel mean and standard deviation, on the 0–1 scale.
var (
	ImageNetMean = [3]float64{0.485, 0.456, 0.406}
	ImageNetStd  = [3]float64{0.229, 0.224, 0.225}
)

// Options configures a Pipeline.
type Options struct {
	// Order says which samples an epoch reads, in which order (Epoch is set
	// per epoch).
	Order     order.Options
	BatchSize int
	// DropLast leaves out an epoch's last batch when it is incomplete, as
	// FFCV's Loader does with drop_last: every batch then holds BatchSize
	// samples.
	DropLast bool
	// Op is the crop, resize and flip of every image.
	Op decode.Op
	// Augment is what FFCV's RandomTranslate, Cutout and color jitters do
	// to every image after Op, Poison to the images of its samples (both
	// on uint8 pixels, before the conversion to DType).
	Augment augment.Options
	Poison  *augment.Poison
	// ReplaceLabel gives some samples another label (FFCV's ReplaceLabel),
	// wherever the label field is delivered and in the mixup field.
	ReplaceLabel *augment.ReplaceLabel
	// MixupAlpha > 0 mixes every batch's images as FFCV's ImageMixup does,
	// each with the one before it by a weight drawn from Beta(α, α) (one
	// for the batch when MixupSameLambda), and adds a field "mixup"
	// (float32, [B, 3]) of LabelMixup's (label, label before, weight).
	MixupAlpha      float64
	MixupSameLambda bool
	// Indices, when set, restricts every epoch to these samples (FFCV's
	// Loader's indices): in their order for a sequential order, else
	// ordered as the whole beton would be with the rest left out (a
	// sample named twice is read twice, as FFCV does).
	Indices []uint32
	// DType is the images' element type (default Uint8), DimOrder their
	// dimensions' order (default NHWC).
	DType    DType
	DimOrder DimOrder
	// Normalize maps pixels (on the 0–1 scale) to (x - Mean) / Std. Only for
	// float dtypes.
	Normalize bool
	Mean, Std [3]float64
	// Decoded, when set, is the decoded-image tier (package decoded) the
	// JPEG samples are held in and made from after their first decode
	// (decode.Decoder.ApplyPlanes: the pixels of Op.Exact wherever the
	// JPEG path decodes at 5/8 or more). The caller owns it, and may share
	// it between pipelines over the same beton.
	Decoded *decoded.Tier
	// Workers is the number of goroutines that decode (default: all cores).
	Workers int
	// OnError is Skip (replace a sample that cannot be decoded by another
	// of its batch; the default) or Fail (end the epoch with the error).
	OnError OnError
	// Fields are the beton fields each batch carries, in this order, under
	// their own names: the image field decoded as Op says, every other
	// field as stored (see Pipeline.Fields). Empty means the image field
	// and the label field, as "image" and "label".
	Fields []string
	// ImageField is the RGB image field to decode when Fields is empty
	// (default: the first); LabelField the int field of labels (default
	// "label").
	ImageField, LabelField string
	// SourceName names the beton in advice (AdviseRestarts) when the
	// file's own name is not what a user would convert: the source an
	// ffcvfs mount serves, for its .ffcvfs/dataset.beton.
	SourceName string
	Logger     *slog.Logger
}

// MaxWorkers bounds Options.Workers: each worker owns a decoder and its
// buffers.
const MaxWorkers = 1024

// MaxBatchBytes bounds the bytes of one batch's images, which the batch
// buffers (and a ring's slots) are sized by.
const MaxBatchBytes = 1 << 36

// Validate fills defaults and checks the options.
func (o *Options) Validate() error {
	if o.BatchSize == 0 {
		o.BatchSize = 256
	}
	if o.Workers == 0 {
		o.Workers = runtime.NumCPU()
	}
	if o.DType == "" {
		o.DType = Uint8
	}
	if o.DimOrder == "" {
		o.DimOrder = NHWC
	}
	if o.OnError == "" {
		o.OnError = Skip
	}
	if o.LabelField == "" {
		o.LabelField = "label"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Order.Kind == "" {
		o.Order.Kind = order.QuasiRandom
	}
	if o.Order.BatchSize == 0 {
		o.Order.BatchSize = o.BatchSize
	}
	switch {
	case o.BatchSize < 1 || o.BatchSize > order.MaxBatchSize:
		return fmt.Errorf("batch size %d is out of range; want 1 to %d", o.BatchSize, order.MaxBatchSize)
	case o.Workers < 1 || o.Workers > MaxWorkers:
		return fmt.Errorf("workers must be 1 to %d, got %d", MaxWorkers, o.Workers)
	}
	if _, err := ParseDType(string(o.DType)); err != nil {
		return err
	}
	if _, err := ParseDimOrder(string(o.DimOrder)); err != nil {
		return err
	}
	if _, err := ParseOnError(string(o.OnError)); err != nil {
		return err
	}
	switch {
	case o.Normalize && o.DType == Uint8:
		return errors.New("normalizing needs a float dtype (float16 or float32)")
	}
	if o.Normalize {
		for c := range o.Std {
			if s, m := o.Std[c], o.Mean[c]; !(s > 0 && s <= math.MaxFloat64) || math.IsNaN(m) || math.IsInf(m, 0) {
				return fmt.Errorf("normalize: channel %d has mean %v and standard deviation %v; want a finite mean and a positive, finite deviation", c, m, s)
			}
		}
	}
	if !(o.MixupAlpha >= 0 && o.MixupAlpha <= 1e6) {
		return fmt.Errorf("mixup: alpha %v: want a positive number (0: no mixup)", o.MixupAlpha)
	}
	if len(o.Indices) > 0 && (len(o.Order.Resumed) > 0 || o.Order.Nodes > 1) {
		return errors.New("a subset of samples (indices) cannot be combined with a resume at another world size or a node-affine order")
	}
	if o.Op.Kind == decode.Whole && o.Op.OutW == 0 && o.Op.OutH == 0 {
		// New takes the size from the beton's images.
		return o.Order.Validate()
	}
	if err := o.Op.Validate(); err != nil {
		return err
	}
	// The sides are bounded (Op.Validate), so one image's bytes cannot
	// overflow; the batch's are compared by division.
	if per := int64(o.Op.OutW) * int64(o.Op.OutH) * 3 * 4; int64(o.BatchSize) > MaxBatchBytes/per {
		return fmt.Errorf("a batch of %d images of %dx%d would take more than %d bytes", o.BatchSize, o.Op.OutW, o.Op.OutH, int64(MaxBatchBytes))
	}
	return o.Order.Validate()
}

// Sink takes finished batches: a slot to fill, its buffers, and the
// publication of a filled slot.
type Sink interface {
	Acquire(ctx context.Context) (slot int, err error)
	// Buffers returns the slot's buffer of each field, in the order of
	// Pipeline.Fields.
	Buffers(slot int) [][]byte
	Publish(slot, epoch, batch, size int) error
}

// Pipeline produces batches from one beton, or from several mixed
// (NewSources).
type Pipeline struct {
	parts    []*part // the sources (sources.go)
	opts     Options
	image    int               // the first source's field decoded, or -1
	outs     []output          // the fields of a batch
	imageOut int               // the index in outs of the image
	label    int               // the first source's label field, or -1
	subset   []uint32          // how often Options.Indices names each sample
	augment  bool              // whether Options.Augment does anything
	data     bool              // whether fields other than the image need the page
	idle     chan *workerState // workers' states between epochs

	// A mixture of several sources (sources.go): its definition and
	// fingerprint, and the last epoch's samples.
	mix         *order.Mixture
	fingerprint string
	mixMu       sync.Mutex
	mixed       *order.MixedMap // guarded by mixMu
	mixedEpoch  uint64          // guarded by mixMu

	lut16 [3][256]uint16 // float16 bits
	lut32 [3][256]uint32 // float32 bits

	// Counters. JPEGs counts the JPEG images decoded, Restarts those of
	// them with restart markers a crop is decoded from (jpeg.
	// HasCropRestarts).
	Images, Errors, JPEGs, Restarts atomic.Uint64
	advised                         sync.Once // AdviseRestarts
}

// restartProbe is how many JPEGs a pipeline decodes before it says, once,
// whether the beton's JPEGs lack restart markers (AdviseRestarts); fewer
// when an epoch ends before.
const restartProbe = 64

// AdviseRestarts logs, once, a warning for each source most of whose
// JPEGs decoded so far lack restart markers: such a beton (FFCV's writer
// makes them) is slower to crop than it needs to be, and ffcvfs write
// --from-beton gives it the markers. A pipeline calls it itself after
// restartProbe JPEGs, or at the end of its first epoch.
func (p *Pipeline) AdviseRestarts() {
	if p.JPEGs.Load() == 0 {
		return
	}
	p.advised.Do(func() {
		for _, pt := range p.parts {
			j, r := pt.jpegs.Load(), pt.restarts.Load()
			if j == 0 || 2*r >= j {
				continue
			}
			p.opts.Logger.Warn(fmt.Sprintf("%d of the first %d JPEGs of %s have no restart markers: "+
				"'ffcvfs write --from-beton %s OUT.beton' adds them losslessly (the same pixels for every decoder), "+
				"and random-resized crops then decode about %s faster", j-r, j, pt.name, pt.name, RestartSpeedup))
		}
	})
}

// RestartSpeedup is what restart markers gained random-resized crops in
// ffcvfeed in the measurements (docs/measurements.md), for AdviseRestarts.
const RestartSpeedup = "1.1-1.3×"

// New returns a pipeline over the cache's beton. announce, if set, is told
// each epoch's order before it is read (the cache is told in any case).
func New(c *pagecache.Cache, opts Options, announce func([]uint32) error) (*Pipeline, error) {
	return newPipeline([]Source{{Cache: c, Announce: announce, Name: opts.SourceName}}, opts)
}

// newPipeline returns a pipeline over srcs, the first of which has the
// fields the others must match; several are a mixture (NewSources sets
// it).
func newPipeline(srcs []Source, opts Options) (*Pipeline, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	parts, err := newParts(srcs)
	if err != nil {
		return nil, err
	}
	f := parts[0].f
	p := &Pipeline{parts: parts, opts: opts, image: -1, label: -1, idle: make(chan *workerState, opts.Workers)}
	if opts.Decoded != nil && opts.Decoded.Samples() < p.samples() {
		return nil, fmt.Errorf("%s: the decoded-image cache indexes %d samples; the data has %d", p.names(), opts.Decoded.Samples(), p.samples())
	}
	// The image field decoded: the one Options.Fields names (outputs
	// refuses two), or else Options.ImageField's.
	names := opts.Fields
	if len(names) == 0 {
		names = []string{opts.ImageField}
	}
	for _, name := range names {
		if i := f.ImageField(name); i >= 0 && f.Fields()[i].Type == beton.TypeRGBImage {
			p.image = i
		}
	}
	parts[0].image = p.image
	if opts.Op.Kind == decode.Whole && p.image >= 0 {
		if err := p.wholeSize(parts[0]); err != nil {
			return nil, err
		}
	}
	if p.outs, err = p.outputs(); err != nil {
		return nil, err
	}
	p.imageOut = slices.IndexFunc(p.outs, func(o output) bool { return o.kind == outImage })
	p.data = needsData(p.outs)
	p.label = labelField(f, opts.LabelField)
	if err := p.matchFields(); err != nil {
		return nil, err
	}
	if opts.Op.Kind == decode.Whole && p.image >= 0 {
		for _, pt := range parts[1:] {
			if err := p.wholeSize(pt); err != nil {
				return nil, err
			}
		}
	}
	if err := p.checkAugment(); err != nil {
		return nil, err
	}
	if len(parts) > 1 {
		so, err := p.sourceOutput()
		if err != nil {
			return nil, err
		}
		p.outs = append(p.outs, so)
	}
	for _, pt := range parts {
		for len(pt.fields) < len(p.outs) {
			pt.fields = append(pt.fields, -1) // mixup, source
		}
	}
	if len(opts.Indices) > 0 {
		p.subset = make([]uint32, f.NumSamples())
		for _, s := range opts.Indices {
			if int(s) >= f.NumSamples() {
				return nil, fmt.Errorf("%s: index %d: the beton has samples 0 to %d", f.Name(), s, f.NumSamples()-1)
			}
			p.subset[s]++
		}
	}
	p.buildLUTs()
	return p, nil
}

// buildLUTs fills the output stage's tables: each channel's value of every
// byte, normalized if asked, as float32 and float16 bits.
func (p *Pipeline) buildLUTs() {
	o := p.opts
	for c := 0; c < 3; c++ {
		for v := 0; v < 256; v++ {
			x := float64(v)
			if o.Normalize {
				x = (x/255 - o.Mean[c]) / o.Std[c]
			}
			p.lut32[c][v] = math.Float32bits(float32(x))
			p.lut16[c][v] = half.Bits(float32(x))
		}
	}
}

// Fields returns the fields of a batch, in order: by default "image" (the
// decoded images, [B, H, W, 3] or [B, 3, H, W] of the output dtype) and
// "label" (int64, [B]); with Options.Fields, each field named there under
// its name: the image so, int fields as int64 [B], float fields as float64
// [B], ndarray and torch tensor fields as [B, shape...] of their dtype, and
// bytes and JSON fields variable-size (fields.Spec.Ends), each sample's
// bytes as stored, followed by their ends field.
func (p *Pipeline) Fields() []fields.Spec {
	specs := make([]fields.Spec, len(p.outs))
	for i, o := range p.outs {
		specs[i] = o.spec
	}
	return specs
}

// wholeSize sets the output size of a Whole op (FFCV's
// SimpleRGBImageDecoder) to the size every image has, or fails naming a
// sample whose size differs.
func (p *Pipeline) wholeSize(pt *part) error {
	f := pt.f
	w, h := 0, 0
	for s := range f.NumSamples() {
		img, err := f.Image(s, pt.image)
		if err != nil {
			return err
		}
		switch {
		case s == 0:
			w, h = img.Width, img.Height
		case img.Width != w || img.Height != h:
			return fmt.Errorf("%s: sample %d is %dx%d, sample 0 %dx%d: decoding whole images needs images of one size (crop them instead)", f.Name(), s, img.Width, img.Height, w, h)
		}
	}
	if o := &p.opts.Op; o.OutW == 0 && o.OutH == 0 {
		o.OutW, o.OutH = w, h
	} else if o.OutW != w || o.OutH != h {
		return fmt.Errorf("%s: images are %dx%d; decoding whole images cannot make %dx%d", f.Name(), w, h, o.OutW, o.OutH)
	}
	if err := p.opts.Op.Validate(); err != nil {
		return fmt.Errorf("%s: %w", f.Name(), err)
	}
	if per := int64(w) * int64(h) * 3 * 4; int64(p.opts.BatchSize) > MaxBatchBytes/per {
		return fmt.Errorf("a batch of %d images of %dx%d would take more than %d bytes", p.opts.BatchSize, w, h, int64(MaxBatchBytes))
	}
	return nil
}

// sampleBytes returns the bytes of one sample's image in the output dtype.
func (p *Pipeline) sampleBytes() int {
	n := p.opts.Op.OutW * p.opts.Op.OutH * 3
	switch p.opts.DType {
	case Float16:
		return 2 * n
	case Float32:
		return 4 * n
	}
	return n
}

// BatchesPerEpoch returns the number of batches an epoch yields.
func (p *Pipeline) BatchesPerEpoch() (int, error) {
	ids, err := p.generate(p.orderOf(0))
	if err != nil {
		return 0, err
	}
	nb := p.batches(len(ids))
	if nb == 0 && p.opts.DropLast && len(ids) > 0 {
		return 0, fmt.Errorf("an epoch of %d samples holds no whole batch of %d: drop-last would deliver nothing", len(ids), p.opts.BatchSize)
	}
	return nb, nil
}

// batches is the number of batches n samples make: whole ones only with
// DropLast.
func (p *Pipeline) batches(n int) int {
	if p.opts.DropLast {
		return n / p.opts.BatchSize
	}
	return (n + p.opts.BatchSize - 1) / p.opts.BatchSize
}

// generate is order.Generate over the beton, or over an epoch of the
// mixture of sources (global ids), or over the subset of Options.Indices:
// a sequential order takes them as given, any other the whole beton's
// order with the rest left out, both dealt to the ranks in equal
// contiguous shares (padded with the share's start, or cut with
// DropLast).
func (p *Pipeline) generate(o order.Options) ([]uint32, error) {
	if p.subset == nil {
		l, mm := p.epochMap(o.Epoch)
		ids, err := order.Generate(l, o)
		if err == nil && mm != nil {
			p.global(mm, ids)
		}
		return ids, err
	}
	world, rank := max(1, o.WorldSize), o.Rank
	var ids []uint32
	if o.Kind == order.Sequential {
		ids = p.opts.Indices
	} else {
		whole := o
		whole.Rank, whole.WorldSize = 0, 1
		all, err := order.Generate(p.parts[0].f, whole)
		if err != nil {
			return nil, err
		}
		ids = make([]uint32, 0, len(p.opts.Indices))
		for _, s := range all {
			for range p.subset[s] { // a sample named twice is read twice
				ids = append(ids, s)
			}
		}
	}
	per := (len(ids) + world - 1) / world
	if o.DropLast {
		per = len(ids) / world
	}
	lo := min(len(ids), rank*per)
	share := append([]uint32(nil), ids[lo:min(len(ids), lo+per)]...)
	for len(share) < per { // padded with the samples after the share, cyclically
		share = append(share, ids[(lo+len(share))%len(ids)])
	}
	return share, nil
}

func (p *Pipeline) orderOf(epoch int) order.Options {
	o := p.opts.Order
	o.Epoch = uint64(epoch)
	return o
}

// batch is one batch being filled: its samples, claimed one at a time by
// the workers (next), and counted down as they finish (remaining).
type batch struct {
	epoch             int
	slot, index, size int
	ids               []uint32
	bufs              [][]byte // per field (Pipeline.outs)
	next, remaining   atomic.Int32
	failed            []bool
	err               error
	errOnce           sync.Once
}

// RunEpoch reads one epoch and publishes its batches to sink in order. It
// returns the number of samples delivered.
func (p *Pipeline) RunEpoch(ctx context.Context, epoch int, sink Sink) (int, error) {
	return p.RunEpochFrom(ctx, epoch, 0, sink)
}

// RunEpochFrom is RunEpoch from batch start on: it resumes an epoch
// stopped after start batches, reading and announcing only the rest of
// its order. The batches are those RunEpoch makes (the same samples, the
// same augmentations, the same indices).
func (p *Pipeline) RunEpochFrom(ctx context.Context, epoch, start int, sink Sink) (int, error) {
	all, err := p.generate(p.orderOf(epoch))
	if err != nil {
		return 0, err
	}
	nb := p.batches(len(all))
	if start < 0 || start >= nb {
		return 0, fmt.Errorf("epoch %d has batches 0 to %d; cannot start at batch %d", epoch, nb-1, start)
	}
	return p.run(ctx, epoch, all[:min(len(all), nb*p.opts.BatchSize)], start, sink)
}

// Rest is this rank's share of the rest of an epoch after parts read
// before at any world sizes (order.Options.Resumed), placed as the last
// Batches batches of the epoch, from batch Start on; RunRest delivers it.
type Rest struct {
	Epoch          int
	Start, Batches int
	ids            []uint32
}

// Rest makes the rest of epoch after the segments resumed. It fails when
// the rest needs more batches than a whole epoch has (a rank's share of the
// rest may exceed its share of a whole epoch by a page's worth at most).
// A rest of no batch has Start equal to BatchesPerEpoch().
func (p *Pipeline) Rest(epoch int, resumed []order.Segment) (*Rest, error) {
	o := p.orderOf(epoch)
	o.Resumed = resumed
	ids, err := p.generate(o)
	if err != nil {
		return nil, err
	}
	nb, err := p.BatchesPerEpoch()
	if err != nil {
		return nil, err
	}
	r := p.batches(len(ids))
	if r > nb {
		return nil, fmt.Errorf("epoch %d: this rank's share of the rest after %s is %d batches, more than a whole epoch's %d; resume at a batch size or world size whose whole epoch is longer",
			epoch, order.FormatSegments(resumed, ","), r, nb)
	}
	return &Rest{Epoch: epoch, Start: nb - r, Batches: r, ids: ids[:min(len(ids), r*p.opts.BatchSize)]}, nil
}

// RunRest reads a rest (Pipeline.Rest), announcing only it, and publishes
// it as the last batches of its epoch. Augmentations are those of the
// epoch and the sample, as in RunEpoch.
func (p *Pipeline) RunRest(ctx context.Context, r *Rest, sink Sink) (int, error) {
	if r.Batches == 0 {
		return 0, nil
	}
	// The rest stands where the last batches of the epoch would: the ids
	// before it are never read.
	all := make([]uint32, r.Start*p.opts.BatchSize, r.Start*p.opts.BatchSize+len(r.ids))
	return p.run(ctx, r.Epoch, append(all, r.ids...), r.Start, sink)
}

// run delivers the batches of all from batch start on, announcing them.
func (p *Pipeline) run(ctx context.Context, epoch int, all []uint32, start int, sink Sink) (int, error) {
	B := p.opts.BatchSize
	nb := (len(all) + B - 1) / B
	ids := all[start*B:]
	// The mount first: once its own cache has the plan, prefetches read
	// through the mount at once, and reads the mount's plan does not yet
	// know would not advance it.
	if err := p.announceParts(p.pageReads(ids)); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each batch is handed to every worker, and the workers claim its
	// samples one at a time: a worker moves to the next batch when the one
	// it holds has no samples left. The feeder wakes once per batch, not
	// once per sample; a goroutine woken per sample would need a P that
	// the workers hold through their long cgo calls, and the scheduler's
	// hand-offs cost more than the work.
	workers := p.opts.Workers
	jobs := make(chan *batch, 2*workers)
	done := make(chan *batch, nb)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.worker(ctx, epoch, jobs, done)
		}()
	}
	// The feeder acquires a slot per batch (waiting while the sink is full)
	// and hands it out.
	feedErr := make(chan error, 1)
	go func() {
		defer close(jobs)
		for bi := start; bi < nb; bi++ {
			slot, err := sink.Acquire(ctx)
			if err != nil {
				feedErr <- err
				return
			}
			lo, hi := bi*B, min(len(all), (bi+1)*B)
			bufs := sink.Buffers(slot)
			if err := p.checkBuffers(slot, bufs); err != nil {
				feedErr <- err
				return
			}
			b := &batch{epoch: epoch, slot: slot, index: bi, size: hi - lo, ids: all[lo:hi], bufs: bufs, failed: make([]bool, hi-lo)}
			b.remaining.Store(int32(hi - lo))
			for range workers {
				select {
				case jobs <- b:
				case <-ctx.Done():
					feedErr <- ctx.Err()
					return
				}
			}
		}
		feedErr <- nil
	}()
	// Publish in batch order.
	pending := map[int]*batch{}
	next, delivered := start, 0
	var runErr error
	for next < nb && runErr == nil {
		select {
		case b := <-done:
			pending[b.index] = b
			for {
				b, ok := pending[next]
				if !ok {
					break
				}
				delete(pending, next)
				if err := p.finish(b); err != nil {
					runErr = err
					break
				}
				if err := sink.Publish(b.slot, epoch, b.index, b.size); err != nil {
					runErr = err
					break
				}
				delivered += b.size
				next++
			}
		case err := <-feedErr:
			if err != nil {
				runErr = err
			}
		case <-ctx.Done():
			runErr = ctx.Err()
		}
	}
	cancel()
	wg.Wait()
	if runErr == nil {
		p.AdviseRestarts()
	}
	return delivered, runErr
}

// Decoded returns the decoded-image tier the pipeline was given, or nil.
func (p *Pipeline) Decoded() *decoded.Tier { return p.opts.Decoded }

// pageReads returns the samples of ids whose pages an epoch reads: all of
// them, but those whose image the decoded-image tier holds when no other
// field needs their page (held images stay held).
func (p *Pipeline) pageReads(ids []uint32) []uint32 {
	t := p.opts.Decoded
	if t == nil || p.image < 0 || p.data {
		return ids
	}
	reads := make([]uint32, 0, len(ids))
	for _, s := range ids {
		if !t.Held(int(s)) {
			reads = append(reads, s)
		}
	}
	return reads
}

// checkBuffers checks that a slot's buffers are those of a batch's fields.
func (p *Pipeline) checkBuffers(slot int, bufs [][]byte) error {
	if len(bufs) != len(p.outs) {
		return fmt.Errorf("slot %d has %d fields; a batch has %d", slot, len(bufs), len(p.outs))
	}
	for k, o := range p.outs {
		if want := p.opts.BatchSize * o.per; len(bufs[k]) != want {
			return fmt.Errorf("slot %d holds %d bytes of field %q; a batch needs %d", slot, len(bufs[k]), o.spec.Name, want)
		}
	}
	return nil
}

// finish replaces the failed samples of a finished batch, or fails it, and
// packs its variable-size fields.
func (p *Pipeline) finish(b *batch) error {
	if b.err != nil {
		return b.err
	}
	good := -1
	for j, f := range b.failed {
		if !f {
			good = j
			break
		}
	}
	for j, f := range b.failed {
		if !f {
			continue
		}
		if good < 0 {
			return fmt.Errorf("%s: batch %d: no sample of the batch could be decoded", p.names(), b.index)
		}
		p.replace(b, j, good)
	}
	if p.opts.MixupAlpha > 0 {
		p.mixup(b, good)
	}
	p.pack(b)
	return nil
}

// workerState is what a worker keeps between samples and between epochs:
// its decoder, with the decoder's scratch, and its conversion buffer.
type workerState struct {
	dec     *decode.Decoder
	scratch []byte
	aug     []byte // the translate's copy of the image
	planes  []byte // a JPEG's planes, decoded or read from the tier's disk
}

// getWorkerState returns a worker state left by an earlier epoch, or a new
// one.
func (p *Pipeline) getWorkerState() (*workerState, error) {
	select {
	case ws := <-p.idle:
		return ws, nil
	default:
	}
	dec, err := decode.NewDecoder()
	if err != nil {
		return nil, err
	}
	ws := &workerState{dec: dec}
	if p.opts.Augment.TranslatePad > 0 {
		ws.aug = make([]byte, p.opts.Op.OutW*p.opts.Op.OutH*3)
	}
	if o := p.opts; o.DType != Uint8 || o.DimOrder != NHWC {
		ws.scratch = make([]byte, o.Op.OutW*o.Op.OutH*3)
	}
	return ws, nil
}

func (p *Pipeline) putWorkerState(ws *workerState) {
	select {
	case p.idle <- ws:
	default:
		ws.dec.Close()
	}
}

func (p *Pipeline) worker(ctx context.Context, epoch int, jobs <-chan *batch, done chan<- *batch) {
	ws, err := p.getWorkerState()
	if err != nil {
		p.opts.Logger.Error("creating a JPEG decoder", "err", err)
		return
	}
	defer p.putWorkerState(ws)
	dec := ws.dec
	o := p.opts
	pcg := rand.NewPCG(0, 0)
	rng := rand.New(pcg)
	for b := range jobs {
		for {
			j := int(b.next.Add(1)) - 1
			if j >= b.size {
				break
			}
			s := b.ids[j]
			// Each sample's augmentation depends only on (seed, epoch, sample).
			pcg.Seed(o.Order.Seed^uint64(epoch)*0x9E3779B97F4A7C15, uint64(s))
			err := p.sample(ctx, dec, rng, b, j, s, ws)
			if err != nil {
				p.Errors.Add(1)
				if ctx.Err() == nil {
					p.opts.Logger.Error("sample failed", "sample", s, "err", err)
				}
				if o.OnError == Fail || ctx.Err() != nil || !errors.Is(err, decode.ErrCorrupt) && !errors.Is(err, beton.ErrCorrupt) {
					b.errOnce.Do(func() { b.err = fmt.Errorf("sample %d: %w", s, err) })
				}
				b.failed[j] = true
			} else {
				p.Images.Add(1)
			}
			if b.remaining.Add(-1) == 0 {
				done <- b
			}
		}
	}
}

func (p *Pipeline) sample(ctx context.Context, dec *decode.Decoder, rng *rand.Rand, b *batch, j int, id uint32, ws *workerState) error {
	o := p.opts
	pt, s := p.partOf(id)
	var img beton.Image
	if p.image >= 0 {
		var err error
		if img, err = pt.f.Image(s, pt.image); err != nil {
			return err
		}
		if img.Size == 0 || img.Width == 0 || img.Height == 0 {
			return fmt.Errorf("%s: sample %d: empty image (%dx%d, %d bytes): %w", pt.name, s, img.Width, img.Height, img.Size, beton.ErrCorrupt)
		}
	}
	// A JPEG the decoded-image tier holds needs no page (unless other
	// fields do).
	tier := o.Decoded
	if p.image < 0 || img.Mode != beton.ModeJPEG {
		tier = nil
	}
	var planes jpeg.Planes
	var held []byte
	if tier != nil {
		var ok bool
		if planes, held, ok = tier.Get(int(id), &ws.planes); !ok {
			held = nil
		}
	}
	var pg *pagecache.Page
	if p.image >= 0 && held == nil || p.data {
		var err error
		if pg, err = pt.c.AcquireSample(ctx, s); err != nil {
			return err
		}
		if pg == nil && p.image >= 0 { // no page: cannot be, with a non-empty image
			return fmt.Errorf("%s: sample %d: no data page: %w", pt.name, s, beton.ErrCorrupt)
		}
		if pg != nil {
			defer pg.Release()
		}
	}
	var data []byte
	var off int64
	if pg != nil {
		data, off = pg.Data, pg.Off
	}
	if p.image >= 0 {
		pix := o.Op.OutW * o.Op.OutH * 3
		per := p.sampleBytes()
		out := b.bufs[p.imageOut][j*per : (j+1)*per]
		dst := ws.scratch
		if dst == nil {
			dst = out[:pix]
		}
		if err := p.image1(dec, rng, ws, pt, s, int(id), img, tier, planes, held, data, off, dst); err != nil {
			return err
		}
		if p.augment {
			o.Augment.Apply(rng, dst, o.Op.OutW, o.Op.OutH, ws.aug)
		}
		if o.Poison.Has(int64(id)) {
			o.Poison.Apply(dst)
		}
		if ws.scratch != nil {
			p.convert(out, ws.scratch)
		}
	}
	return p.fill(b, j, pt, s, data, off)
}

// image1 makes sample s of pt's image into dst: from the planes the tier
// holds (held), or from the stored image in the sample's page (data, at
// offset off of the beton), putting a JPEG's planes in the tier, under
// the sample's global id, while it has room.
func (p *Pipeline) image1(dec *decode.Decoder, rng *rand.Rand, ws *workerState, pt *part, s, id int, img beton.Image,
	tier *decoded.Tier, planes jpeg.Planes, held, data []byte, off int64, dst []byte) error {
	o := p.opts
	if held != nil {
		return dec.ApplyPlanes(planes, held, o.Op, rng, dst)
	}
	mode := decode.JPEG
	if img.Mode == beton.ModeRaw {
		mode = decode.Raw
	}
	src := data[int64(img.Ptr)-off:][:img.Size]
	if mode == decode.JPEG {
		n := p.JPEGs.Add(1)
		pt.jpegs.Add(1)
		if jpeg.HasCropRestarts(src) {
			p.Restarts.Add(1)
			pt.restarts.Add(1)
		}
		if n == restartProbe {
			p.AdviseRestarts()
		}
	}
	if tier == nil {
		return dec.Apply(src, mode, img.Width, img.Height, o.Op, rng, dst)
	}
	// A full tier is known from the image's pixels (its planes' least
	// bytes), without reading the JPEG's header.
	if tier.Full(img.Width * img.Height) {
		tier.NotHeld()
		return dec.Apply(src, mode, img.Width, img.Height, o.Op, rng, dst)
	}
	j := dec.JPEG()
	pl, err := j.PlanesOf(src, jpeg.Size{W: img.Width, H: img.Height})
	if err != nil || !tier.Room(pl.Bytes()) {
		// A layout the planes do not convert, no room, or a damaged
		// JPEG (which Apply reports as it would without the tier).
		tier.NotHeld()
		return dec.Apply(src, mode, img.Width, img.Height, o.Op, rng, dst)
	}
	if n := pl.Bytes(); cap(ws.planes) < n {
		ws.planes = make([]byte, n)
	}
	if o.Op.LibjpegEntropy != j.LibjpegEntropy() {
		j.UseLibjpegEntropy(o.Op.LibjpegEntropy)
	}
	if err := j.DecodePlanes(src, pl, ws.planes); err != nil {
		return fmt.Errorf("%s: sample %d: %w", pt.name, s, err)
	}
	tier.Put(id, pl, ws.planes)
	return dec.ApplyPlanes(pl, ws.planes, o.Op, rng, dst)
}

// convert writes the HWC uint8 pixels src into out in the output dtype and
// layout, through per-channel lookup tables (convert.c). Values are stored
// in the machine's byte order, little-endian on every platform ffcvfeed
// builds for.
func (p *Pipeline) convert(out, src []byte) {
	o := p.opts
	n := o.Op.OutW * o.Op.OutH
	planar := o.DimOrder == NCHW
	if len(src) < 3*n || len(out) < p.sampleBytes() {
		panic(fmt.Sprintf("pipeline: converting %d pixels from %d bytes into %d", n, len(src), len(out)))
	}
	switch o.DType {
	case Uint8:
		convertPixels(out, src, n, planar, nil, nil)
	case Float16:
		convertPixels(out, src, n, planar, &p.lut16, nil)
	case Float32:
		convertPixels(out, src, n, planar, nil, &p.lut32)
	}
}

// DiscardSink is a Sink whose batches are consumed as soon as they are
// published: for measuring the pipeline alone. Like the shared-memory ring
// of a server, its buffers lie outside the Go heap, so that the heap, and
// the resident size, are what they would be when serving.
type DiscardSink struct {
	free  chan int
	mem   []byte
	slots [][][]byte
}

// NewDiscardSink returns a DiscardSink of slots batch buffers sized for p.
// Close returns their memory.
func NewDiscardSink(p *Pipeline, slots int) (*DiscardSink, error) {
	per := 0
	for _, o := range p.outs {
		per += p.opts.BatchSize * o.per
	}
	mem, err := syscall.Mmap(-1, 0, max(1, slots*per), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("cannot reserve %d batch buffers of %d bytes: %w", slots, per, err)
	}
	d := &DiscardSink{free: make(chan int, slots), mem: mem}
	for i := 0; i < slots; i++ {
		b := mem[i*per:]
		var bufs [][]byte
		for _, o := range p.outs {
			n := p.opts.BatchSize * o.per
			bufs = append(bufs, b[:n:n])
			b = b[n:]
		}
		d.slots = append(d.slots, bufs)
		d.free <- i
	}
	return d, nil
}

// Close returns the buffers' memory. The sink must not be used afterwards.
func (d *DiscardSink) Close() error {
	if d.mem == nil {
		return nil
	}
	err := syscall.Munmap(d.mem)
	d.mem, d.slots = nil, nil
	return err
}

// Acquire implements Sink.
func (d *DiscardSink) Acquire(ctx context.Context) (int, error) {
	select {
	case s := <-d.free:
		return s, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Buffers implements Sink.
func (d *DiscardSink) Buffers(slot int) [][]byte { return d.slots[slot] }

// Publish implements Sink: the batch is dropped and its slot freed.
func (d *DiscardSink) Publish(slot, epoch, batch, size int) error {
	d.free <- slot
	return nil
}
