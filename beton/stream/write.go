package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/imagefolder"
	"github.com/ffcvfs/ffcvfs/internal/ordered"
)

// Options configures Write.
type Options struct {
	// Workers prepare images in parallel; 0: all cores.
	Workers int
	// MaxFrame bounds one frame's size in bytes; 0: DefaultMaxFrame.
	MaxFrame int64
	// PageSize is the page size when the header gives none; 0:
	// beton.DefaultPageSize.
	PageSize int64
	// MaxHeld bounds the bytes of samples held between reading and
	// writing: their frames and their prepared images (estimated from
	// each image's size before it is decoded, see Memory in the package
	// doc); one sample larger than it is held alone. 0:
	// DefaultHeldPerWorker × Workers.
	MaxHeld int64
	// Progress, if set, is called from Write's goroutine with the samples
	// written so far and the header's count.
	Progress func(done, total int)
}

// DefaultHeldPerWorker is Options.MaxHeld's default, per worker: room for
// the sample a worker prepares and one prepared before it waiting to be
// written, even of large images (4000×4000 pixels take 48 MB).
const DefaultHeldPerWorker = 64 << 20

// Result describes a finished write.
type Result struct {
	Samples  int
	JPEG     int // images stored as JPEG
	Verbatim int // of which the file sent, byte for byte
	Restarts int // of which with restart markers (restart_interval)
	// NoRestarts counts the JPEGs stored without the markers asked for,
	// which could not be transcoded; FirstNoRestarts names the first and
	// why.
	NoRestarts      int
	FirstNoRestarts string
	Raw             int // images stored as pixels
	Pages           int
	PageSize        int64 // the header's, or Options.PageSize
	Bytes           int64
	Elapsed         time.Duration
	// MaxHeld is the most bytes of samples held at once between reading
	// and writing, as Options.MaxHeld counts them.
	MaxHeld int64
}

// Source is one stream and the name its errors give it.
type Source struct {
	Name string
	R    io.Reader
}

// Write reads the streams' headers and samples and writes the beton to
// dst, which it owns: committed when every sample is written, aborted on
// any error, a cancelled ctx included. Errors name the sample and field.
func Write(ctx context.Context, dst beton.Destination, srcs []Source, opts Options) (Result, error) {
	start := time.Now()
	res, err := write(ctx, dst, srcs, &opts)
	if err != nil {
		return res, beton.WithAbort(err, dst.Abort())
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func write(ctx context.Context, dst beton.Destination, srcs []Source, opts *Options) (Result, error) {
	if opts.Workers == 0 {
		opts.Workers = runtime.NumCPU()
	}
	if opts.MaxFrame == 0 {
		opts.MaxFrame = DefaultMaxFrame
	}
	if opts.MaxHeld == 0 {
		opts.MaxHeld = DefaultHeldPerWorker * int64(opts.Workers)
	}
	if opts.Workers < 0 || opts.MaxFrame < 16 || opts.MaxFrame > 1<<32-1 || opts.MaxHeld < 0 {
		return Result{}, fmt.Errorf("stream options: %d workers, frames of at most %d bytes, %d bytes held", opts.Workers, opts.MaxFrame, opts.MaxHeld)
	}
	if len(srcs) == 0 {
		return Result{}, errors.New("no stream to read")
	}
	readers := make([]*frameReader, len(srcs))
	var h *Header
	var raw []byte
	for i, s := range srcs {
		readers[i] = &frameReader{r: bufio.NewReaderSize(s.R, 1<<20), name: s.Name, maxFrame: opts.MaxFrame}
		hi, err := readers[i].readHeader()
		if err != nil {
			return Result{}, err
		}
		b, _ := json.Marshal(hi)
		if h == nil {
			h, raw = hi, b
		} else if string(b) != string(raw) {
			return Result{}, fmt.Errorf("%s: its header differs from %s's", s.Name, srcs[0].Name)
		}
	}
	wo := beton.WriterOptions{PageSize: h.PageSize}
	if wo.PageSize == 0 {
		wo.PageSize = opts.PageSize
	}
	if err := wo.Validate(); err != nil {
		return Result{}, fmt.Errorf("%s: %w", srcs[0].Name, err)
	}
	fields, err := h.check(wo.PageSize)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", srcs[0].Name, err)
	}
	// A sample that fits a page fits a frame, whatever MaxFrame says: a
	// producer such as DatasetWriter cannot raise it.
	for _, r := range readers {
		r.maxFrame = max(opts.MaxFrame, min(wo.PageSize+frameSlack, 1<<32-1))
	}
	bf := make([]beton.Field, len(fields))
	for i := range fields {
		bf[i] = fields[i].beton
	}
	w, err := beton.NewWriter(dst, bf, int(h.Samples), wo)
	if err != nil {
		return Result{}, err
	}
	res := Result{Samples: int(h.Samples), PageSize: w.PageSize()}
	if err := run(ctx, w, readers, fields, h, opts, &res); err != nil {
		w.Abort()
		return res, err
	}
	res.Pages = w.Pages()
	if err := w.Close(); err != nil {
		return res, err
	}
	res.Bytes = w.Size()
	return res, nil
}

// batch is what a stream's reader hands on at once: the samples it parsed
// from the bytes it had (at most batchSamples, or batchBytes of frames),
// or the error or end that stopped it.
type batch struct {
	samples []*sample
	err     error // errEnd at the stream's end
}

// Batching bounds: a reader hands on, and a worker prepares, this many
// samples or bytes of frames at once, so that the channels' cost is not
// paid per sample (a CIFAR image is 3 KB).
const (
	batchSamples = 64
	batchBytes   = 1 << 20
)

// readStream parses r's frames into batches on out until its end, an
// error, or ctx's end.
func readStream(ctx context.Context, r *frameReader, fields []field, out chan<- batch) {
	send := func(b batch) bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var cur []*sample
	bytes := 0
	for {
		kind, body, err := r.next()
		var s *sample
		switch {
		case err != nil:
		case kind == KindError:
			err = parseError(body, fields)
		case kind != KindSample:
			err = fmt.Errorf("%s: a frame of kind %q after the header (want 'S' or 'E')", r.name, kind)
		default:
			if s, err = parseSample(body, fields); err != nil {
				err = fmt.Errorf("%s: %w", r.name, err)
			}
		}
		if err != nil {
			if len(cur) > 0 && !send(batch{samples: cur}) {
				return
			}
			send(batch{err: err})
			return
		}
		cur = append(cur, s)
		bytes += len(body)
		// Hand on what is parsed when the batch is full, or when no more
		// bytes are at hand (the producer is slower than this).
		if len(cur) == batchSamples || bytes >= batchBytes || r.buffered() == 0 {
			if !send(batch{samples: cur}) {
				return
			}
			cur, bytes = nil, 0
		}
	}
}

// run merges the streams by id, prepares samples on opts.Workers
// goroutines and writes them in id order. At most 2×Workers jobs, and of
// them at most opts.MaxHeld bytes (or one job), are handed to the workers
// and not yet written: jobs are handed out in order, so the next one to
// write is always among them.
func run(ctx context.Context, w *beton.Writer, readers []*frameReader, fields []field, h *Header, opts *Options, res *Result) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := h.Samples
	window := int64(2 * opts.Workers)

	// One reader goroutine per stream, at most two batches ahead. A
	// reader blocked in a read that never ends stays so until its stream
	// is closed (Write's caller does that).
	ins := make([]chan batch, len(readers))
	for i, r := range readers {
		ins[i] = make(chan batch, 1)
		go readStream(ctx, r, fields, ins[i])
	}

	m := newMerge(ctx, readers, ins, n)
	// Runs of samples, prepared by the workers and written in id order;
	// a merge error comes after the samples before it are written (an
	// error of theirs, a bad image, is the first to tell).
	var samples int64
	var inflight, maxHeld atomic.Int64
	defer func() { res.MaxHeld = maxHeld.Load() }()
	scratch := make([]imagefolder.Scratch, opts.Workers)
	err := ordered.Map(ctx, ordered.Options{Workers: opts.Workers, Window: int(window), MaxCost: opts.MaxHeld},
		func(mctx context.Context) (*job, int64, bool, error) {
			if m.next >= n {
				return nil, 0, false, nil
			}
			m.ctx = mctx
			defer func() { m.ctx = ctx }()
			run, err := m.take()
			if err != nil {
				return nil, 0, false, err
			}
			j := &job{samples: run}
			for _, s := range run {
				j.cost += s.cost
			}
			return j, j.cost, true, nil
		},
		func(worker int, j *job) *job {
			// The cost handed to the workers and not yet written.
			held := inflight.Add(j.cost)
			for m := maxHeld.Load(); held > m && !maxHeld.CompareAndSwap(m, held); m = maxHeld.Load() {
			}
			for _, s := range j.samples {
				prepareSample(s, fields, h.Seed, w.PageSize(), &scratch[worker])
			}
			return j
		},
		func(j *job) error {
			for _, s := range j.samples {
				if err := writeSample(w, s, fields, res); err != nil {
					return err
				}
			}
			samples += int64(len(j.samples))
			inflight.Add(-j.cost)
			if opts.Progress != nil {
				opts.Progress(int(samples), int(n))
			}
			return nil
		})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Cause(ctx)) {
			return errors.Join(err, fmt.Errorf("stopped after %d of %d samples", samples, n))
		}
		return err
	}
	return m.finish()
}

// writeSample writes a prepared sample and counts it in res.
func writeSample(w *beton.Writer, s *sample, fields []field, res *Result) error {
	if s.err != nil {
		return s.err
	}
	if err := w.WriteSample(s.values); err != nil {
		return err
	}
	for i := range fields {
		if fields[i].beton.Type == beton.TypeRGBImage {
			if s.values[i].Mode == beton.ModeRaw {
				res.Raw++
			} else {
				res.JPEG++
			}
		}
	}
	if s.verbatim {
		res.Verbatim++
	}
	res.Restarts += s.restarts
	if s.noRestartN > 0 {
		if res.NoRestarts += s.noRestartN; res.FirstNoRestarts == "" {
			res.FirstNoRestarts = s.noRestarts
		}
	}
	return nil
}

// job is a run of consecutive samples to prepare, and the bytes they hold
// (their samples' cost).
type job struct {
	samples []*sample
	cost    int64
}

// merge merges the streams' samples by id: each stream's queue of parsed
// samples, in increasing id order; the next id is at the head of one of
// them.
type merge struct {
	// ctx bounds fill's waits: the map's while it takes.
	ctx     context.Context
	readers []*frameReader
	ins     []chan batch
	queues  [][]*sample
	ended   []bool
	last    []int64
	n, next int64
}

func newMerge(ctx context.Context, readers []*frameReader, ins []chan batch, n int64) *merge {
	m := &merge{ctx: ctx, readers: readers, ins: ins, queues: make([][]*sample, len(readers)),
		ended: make([]bool, len(readers)), last: make([]int64, len(readers)), n: n}
	for i := range m.last {
		m.last[i] = -1
	}
	return m
}

// fill receives stream i's next batch into its queue.
func (m *merge) fill(i int) error {
	var b batch
	select {
	case b = <-m.ins[i]:
	case <-m.ctx.Done():
		return errors.Join(m.ctx.Err(), errors.New("stopped"))
	}
	if b.err == errEnd {
		m.ended[i] = true
		return nil
	}
	if b.err != nil {
		return b.err
	}
	for _, s := range b.samples {
		switch {
		case s.id >= m.n:
			return fmt.Errorf("%s: sample %d; the header says %d samples", m.readers[i].name, s.id, m.n)
		case s.id <= m.last[i]:
			return fmt.Errorf("%s: sample %d after sample %d: a stream's samples come in increasing order", m.readers[i].name, s.id, m.last[i])
		}
		m.last[i] = s.id
	}
	m.queues[i] = append(m.queues[i], b.samples...)
	return nil
}

// take returns the next run of consecutive samples from next on, at most
// batchSamples or batchBytes of them (by cost), filling queues as needed.
func (m *merge) take() ([]*sample, error) {
	for {
		for i, q := range m.queues {
			if len(q) > 0 && q[0].id < m.next {
				return nil, fmt.Errorf("%s: sample %d came twice", m.readers[i].name, q[0].id)
			}
			if len(q) == 0 || q[0].id != m.next {
				continue
			}
			k, cost := 0, int64(0)
			for k < len(q) && k < batchSamples && q[k].id == m.next+int64(k) && (k == 0 || cost+q[k].cost <= batchBytes) {
				cost += q[k].cost
				k++
			}
			// A copy, and the queue's slots cleared: the queue's array
			// outlives the samples, which must go once written.
			run := slices.Clone(q[:k])
			clear(q[:k])
			m.queues[i] = q[k:]
			m.next += int64(k)
			return run, nil
		}
		waiting := false
		for i, q := range m.queues {
			if len(q) == 0 && !m.ended[i] {
				waiting = true
				if err := m.fill(i); err != nil {
					return nil, err
				}
			}
		}
		if !waiting {
			return nil, missing(m.next, m.n, m.readers, m.queues, m.ended)
		}
	}
}

// finish checks that every stream ends here: nothing may follow the
// samples.
func (m *merge) finish() error {
	for i, q := range m.queues {
		for len(q) == 0 && !m.ended[i] {
			if err := m.fill(i); err != nil {
				return err
			}
			q = m.queues[i]
		}
		if len(q) > 0 {
			return fmt.Errorf("%s: sample %d came twice", m.readers[i].name, q[0].id)
		}
	}
	return nil
}

// missing says which sample no stream has, of the n the header gave.
func missing(next, n int64, readers []*frameReader, queues [][]*sample, ended []bool) error {
	var at []string
	for i, q := range queues {
		if len(q) > 0 {
			at = append(at, fmt.Sprintf("%s is at sample %d", readers[i].name, q[0].id))
		} else if ended[i] {
			at = append(at, readers[i].name+" has ended")
		}
	}
	slices.Sort(at)
	return fmt.Errorf("no stream has sample %d of the %d the header says (%s): a producer stopped early or skipped it, or the header's count is wrong", next, n, strings.Join(at, "; "))
}

// prepareSample checks s's values and prepares its images, for pages of
// pageSize bytes: images given restart markers that no longer let the
// sample fit a page are stored as they were.
func prepareSample(s *sample, fields []field, seed, pageSize int64, scratch *imagefolder.Scratch) {
	var preps []imagefolder.Prepared // by field, for images
	for i := range fields {
		f := &fields[i]
		v := &s.values[i]
		name := func() string { return fmt.Sprintf("sample %d, field %q", s.id, f.spec.Name) }
		switch f.beton.Type {
		case beton.TypeRGBImage:
			var p imagefolder.Prepared
			var err error
			rnd := rand.New(rand.NewPCG(uint64(seed), uint64(s.id)<<8|uint64(i)))
			if s.forms[i] == FormPixels {
				if v.Width <= 0 || v.Height <= 0 || v.Width > beton.MaxImageSide || v.Height > beton.MaxImageSide {
					s.err = fmt.Errorf("%s: %dx%d RGB pixels: a side has 1 to %d pixels in a beton", name(), v.Width, v.Height, beton.MaxImageSide)
					return
				}
				if need := int64(v.Width) * int64(v.Height) * 3; int64(len(v.Data)) != need {
					s.err = fmt.Errorf("%s: %dx%d RGB pixels need %d bytes, the frame has %d", name(), v.Width, v.Height, need, len(v.Data))
					return
				}
				p, err = imagefolder.PreparePixels(v.Data, v.Width, v.Height, f.image, rnd, scratch)
			} else {
				p, err = imagefolder.Prepare(name(), v.Data, f.image, rnd, scratch)
			}
			if err != nil {
				s.err = fmt.Errorf("%s: %w", name(), trimPrefix(err, name()))
				return
			}
			*v = beton.Value{Mode: p.Mode(), Width: p.Width, Height: p.Height, Data: p.Data}
			if preps == nil {
				preps = make([]imagefolder.Prepared, len(fields))
			}
			preps[i] = p
		case beton.TypeJSON:
			if !validJSON(v.Data) || slices.Contains(v.Data, 0) {
				s.err = fmt.Errorf("%s: %d bytes that are not JSON text", name(), len(v.Data))
				return
			}
		case beton.TypeNDArray, beton.TypeTorchTensor:
			if uint64(len(v.Data)) != f.size {
				s.err = fmt.Errorf("%s: %d bytes; shape %v of %s takes %d", name(), len(v.Data), f.spec.Shape, f.spec.DType, f.size)
				return
			}
		}
	}
	if preps == nil {
		return
	}
	var need int64
	for i := range fields {
		need += int64(len(s.values[i].Data))
		if fields[i].beton.Type == beton.TypeJSON {
			need++
		}
	}
	for i := range preps {
		p := &preps[i]
		if need > pageSize && p.Unmark(fmt.Errorf("with restart markers the sample takes %d bytes, more than a page of %d", need, pageSize)) {
			s.values[i].Data = p.Data
		}
		if fields[i].beton.Type != beton.TypeRGBImage {
			continue
		}
		s.verbatim = s.verbatim || p.Verbatim
		if p.Restarts {
			s.restarts++
		}
		if p.NoRestarts != nil {
			if s.noRestartN++; s.noRestarts == "" {
				s.noRestarts = fmt.Sprintf("sample %d, field %q: %v", s.id, fields[i].spec.Name, p.NoRestarts)
			}
		}
	}
}

// trimPrefix drops the "imagefolder: NAME: " that Prepare's errors start
// with, which the caller says again.
func trimPrefix(err error, name string) error {
	msg := err.Error()
	for _, p := range []string{"imagefolder: " + name + ": ", "imagefolder: "} {
		if len(msg) > len(p) && msg[:len(p)] == p {
			return errors.New(msg[len(p):])
		}
	}
	return err
}
