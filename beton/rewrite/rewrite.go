// Package rewrite writes a beton anew from another, any writer's (FFCV's
// included), with every JPEG losslessly transcoded to carry restart
// markers (jpeg.AddRestarts), so that ffcvfeed entropy-decodes only the
// intervals a crop covers instead of every row above the crop's last.
// `ffcvfs write --from-beton` runs it.
//
// What stays: the fields and their descriptors, every sample's id and
// every value but the JPEGs' bytes (ints, floats, raw images, bytes, JSON,
// arrays, an image's mode and size), the names index of a beton written
// with --keep-names. What changes: the JPEGs' bytes (the same pixels for
// every decoder, about 1 % more bytes) and so where each sample lies. The
// samples are packed page after page in the order of the source's pages,
// so that samples that shared a page still do (FFCV's quasi-random order
// reads a page's samples together); the page size is the source's unless
// Options.PageSize says otherwise.
//
// A JPEG that cannot be transcoded (a progressive or arithmetic-coded
// one, a damaged scan) is kept as it was: counted and named in the
// Result, not a failure. One that has usable restart markers already is
// kept too. A sample whose JPEGs with markers no longer fit a page keeps
// its JPEGs as they were.
//
// # Reads and memory
//
// The source is read once, page by page in file order (one request a
// page, several in flight for a remote source), each page no further than
// its last allocation. What a rewrite holds is bounded by Options.MaxHeld:
// the source pages read and not yet written, and their transcoded images
// (as large as the page, give or take the markers), count twice a page;
// at least one page is held. Beside them: the output page being filled
// and, for out-of-order sources, the metadata table (Writer.WriteSampleAt).
//
// Workers transcode runs of at most 64 samples of a page; the runs are
// written in the order they were cut, so that the output is the same bytes
// for any number of workers.
package rewrite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/ordered"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

// DefaultRestartInterval is the MCUs between restart markers that a
// rewrite aims for (the nearest divisor of an image's MCU row is taken).
const DefaultRestartInterval = jpeg.DefaultRestartInterval

// DefaultHeldPerWorker is Options.MaxHeld's default, per worker.
const DefaultHeldPerWorker = 64 << 20

// MaxKeptNamed bounds Result.KeptSamples.
const MaxKeptNamed = 20

// chunkSamples is the most samples of a job.
const chunkSamples = 64

// ReaderAt reads a source with a context (a storage.Source does).
type ReaderAt interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
}

// Options configures Rewrite.
type Options struct {
	// RestartInterval is the MCUs between restart markers to aim for,
	// 1 to 65535; 0: DefaultRestartInterval.
	RestartInterval int
	// Workers transcode in parallel; 0: all cores.
	Workers int
	// PageSize of the output; 0: the source's.
	PageSize int64
	// MaxHeld bounds the bytes held between reading and writing (see
	// the package doc); 0: DefaultHeldPerWorker × Workers.
	MaxHeld int64
	// Reader, if set, reads the source's pages with Rewrite's context;
	// else the File's own ReaderAt does.
	Reader ReaderAt
	// Progress, if set, is called from Rewrite's goroutine with the
	// samples written so far and their total.
	Progress func(done, total int)
}

// Kept is a JPEG kept as it was, and why.
type Kept struct {
	Sample int
	Field  string
	Err    error
}

func (k Kept) String() string {
	return fmt.Sprintf("sample %d, field %q: %v", k.Sample, k.Field, k.Err)
}

// Result describes a finished rewrite.
type Result struct {
	Samples int
	// JPEG images read; of them Transcoded were given restart markers,
	// HadRestarts had usable ones already and Kept could not be given
	// them (KeptSamples names the first MaxKeptNamed).
	JPEG, Transcoded, HadRestarts, Kept int
	KeptSamples                         []Kept
	Raw                                 int // images stored as pixels
	// JPEGBytesIn and JPEGBytesOut are the JPEG images' bytes before and
	// after.
	JPEGBytesIn, JPEGBytesOut int64
	// RestartInterval is the MCUs between markers aimed for.
	RestartInterval int
	Pages           int
	PageSize        int64
	Bytes           int64 // the output's size
	// MaxHeld is the bound the rewrite held to, as Options.MaxHeld
	// counts: the source pages it let be held at once, each at twice the
	// largest page's extent.
	MaxHeld int64
	Elapsed time.Duration
}

// Rewrite writes src anew to dst, which it owns: committed when every
// sample is written, aborted on any error, a cancelled ctx included.
func Rewrite(ctx context.Context, src *beton.File, dst beton.Destination, opts Options) (Result, error) {
	start := time.Now()
	res, err := rewrite(ctx, src, dst, &opts)
	if err != nil {
		return res, beton.WithAbort(err, dst.Abort())
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func (o *Options) validate(src *beton.File) error {
	if o.RestartInterval == 0 {
		o.RestartInterval = DefaultRestartInterval
	}
	if o.Workers == 0 {
		o.Workers = runtime.NumCPU()
	}
	if o.PageSize == 0 {
		o.PageSize = src.PageSize()
	}
	if o.MaxHeld == 0 {
		o.MaxHeld = DefaultHeldPerWorker * int64(o.Workers)
	}
	switch {
	case o.RestartInterval < 1 || o.RestartInterval > 1<<16-1:
		return fmt.Errorf("restart interval %d: want 1 to 65535 MCUs", o.RestartInterval)
	case o.Workers < 1 || o.Workers > 4096:
		return fmt.Errorf("%d workers: want 1 to 4096", o.Workers)
	case o.MaxHeld < 0:
		return fmt.Errorf("max held %d is negative", o.MaxHeld)
	}
	wo := beton.WriterOptions{PageSize: o.PageSize}
	return wo.Validate()
}

// job is a run of samples of one source page (page nil: samples with no
// data in any page), seq-th of the rewrite, and, once done, their values.
type job struct {
	page   *page
	ids    []uint32
	last   bool // the page's last job: its hold ends when written
	values [][]beton.Value
	st     stats
	err    error
}

// page is a source page's bytes from its start to its last allocation's
// end, at file offset base.
type page struct {
	p    int64
	base int64
	buf  []byte
	err  error
	done chan struct{}
}

// stats are a job's counts, added to the Result as it is written.
type stats struct {
	jpeg, transcoded, had, kept, raw int
	in, out                          int64
	named                            []Kept
}

func rewrite(ctx context.Context, src *beton.File, dst beton.Destination, opts *Options) (Result, error) {
	if err := opts.validate(src); err != nil {
		return Result{}, err
	}
	fields := slices.Clone(src.Fields())
	n := src.NumSamples()
	w, err := beton.NewWriter(dst, fields, n, beton.WriterOptions{PageSize: opts.PageSize})
	if err != nil {
		return Result{}, err
	}
	res := Result{Samples: n, PageSize: w.PageSize(), RestartInterval: opts.RestartInterval}
	if src.HasNames() {
		names, err := src.Names()
		if err == nil {
			err = w.SetNames(src.NamesField(), names)
		}
		if err != nil {
			w.Abort()
			return res, err
		}
	}
	if err := run(ctx, src, w, opts, &res); err != nil {
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

// run reads src's pages, has the workers transcode their samples and
// writes them to w in the order the jobs were cut.
func run(ctx context.Context, src *beton.File, w *beton.Writer, opts *Options, res *Result) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := src.NumSamples()

	pages, largest := dataPages(src)
	// Pages held: each counts twice (its bytes, and its images
	// transcoded), at least one.
	window := int(min(max(opts.MaxHeld/max(2*largest, 1), 1), int64(4*opts.Workers+4)))
	res.MaxHeld = int64(window) * 2 * largest
	holds := make(chan struct{}, window)
	readAt := pageReader(ctx, src, opts)
	reads := readPages(ctx, src, pages, holds, readAt)

	// The jobs, cut in order (each page's samples in runs, then the
	// samples without data in a page), transcoded by the workers and
	// written in that order; a page's hold is given back with its last
	// job. A page that could not be read ends the cutting: the jobs before
	// it are written, then its error is returned.
	cut := &cutter{src: src, reads: reads}
	done := 0
	err := ordered.Map(ctx, ordered.Options{Workers: opts.Workers, Window: window}, cut.next,
		func(_ int, j *job) *job {
			transcode(ctx, src, j, opts, readAt)
			return j
		},
		func(j *job) error {
			if j.err != nil {
				return j.err
			}
			for i, id := range j.ids {
				if err := w.WriteSampleAt(int(id), j.values[i]); err != nil {
					return err
				}
			}
			res.add(&j.st)
			done += len(j.ids)
			if j.last {
				<-holds
			}
			if opts.Progress != nil {
				opts.Progress(done, n)
			}
			return nil
		})
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Cause(ctx)) {
		return errors.Join(err, fmt.Errorf("stopped after %d of %d samples", done, n))
	}
	return err
}

// extent is a data page and the bytes from its start to its last
// allocation's end.
type extent struct {
	p      int64
	lo, hi int64
}

// dataPages returns the pages that hold data, in file order, with their
// extents, and the largest extent.
func dataPages(src *beton.File) (pages []extent, largest int64) {
	for dp := range src.NumPages() {
		p := src.FirstPage() + int64(dp)
		if len(src.PageSamples(p)) == 0 {
			continue
		}
		lo, hi := pageExtent(src, p)
		pages = append(pages, extent{p, lo, hi})
		largest = max(largest, hi-lo)
	}
	return pages, largest
}

// pageReader reads bytes of src, through opts.Reader where given; a short
// read is an error.
func pageReader(ctx context.Context, src *beton.File, opts *Options) func(p []byte, off int64) error {
	return func(p []byte, off int64) error {
		if opts.Reader != nil {
			_, err := opts.Reader.ReadAt(ctx, p, off)
			if errors.Is(err, io.EOF) && len(p) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		k, err := src.ReaderAt().ReadAt(p, off)
		if k == len(p) {
			return nil
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
}

// readPages reads the pages, each once a hold is free, several at a time,
// and hands them on in file order, until ctx ends.
func readPages(ctx context.Context, src *beton.File, pages []extent, holds chan struct{}, readAt func([]byte, int64) error) <-chan *page {
	reads := make(chan *page, cap(holds))
	go func() {
		defer close(reads)
		for _, e := range pages {
			select {
			case holds <- struct{}{}:
			case <-ctx.Done():
				return
			}
			pg := &page{p: e.p, base: e.lo, done: make(chan struct{})}
			go func() {
				defer close(pg.done)
				pg.buf = make([]byte, e.hi-e.lo)
				if err := readAt(pg.buf, e.lo); err != nil {
					pg.err = fmt.Errorf("%s: reading page %d (%d bytes at %d): %w", src.Name(), e.p, e.hi-e.lo, e.lo, err)
				}
			}()
			reads <- pg
		}
	}()
	return reads
}

// cutter cuts the jobs in order: each page's samples in runs of at most
// chunkSamples, then the samples without data in a page.
type cutter struct {
	src       *beton.File
	reads     <-chan *page
	cur       *page
	ids       []uint32 // of cur, not yet cut
	readsDone bool
	loose     int // the next sample to look at for the loose ones
}

// next is the next job (for ordered.Map). A page that could not be read
// ends the cutting with its error.
func (c *cutter) next(ctx context.Context) (*job, int64, bool, error) {
	for {
		if len(c.ids) > 0 {
			k := min(len(c.ids), chunkSamples)
			j := &job{page: c.cur, ids: c.ids[:k], last: k == len(c.ids)}
			c.ids = c.ids[k:]
			return j, 0, true, nil
		}
		if c.readsDone {
			break
		}
		select {
		case pg, ok := <-c.reads:
			if !ok {
				c.readsDone = true
				continue
			}
			select {
			case <-pg.done:
			case <-ctx.Done():
				return nil, 0, false, context.Cause(ctx)
			}
			if pg.err != nil {
				return nil, 0, false, pg.err
			}
			c.cur, c.ids = pg, c.src.PageSamples(pg.p)
		case <-ctx.Done():
			return nil, 0, false, context.Cause(ctx)
		}
	}
	var run []uint32
	for n := c.src.NumSamples(); c.loose < n && len(run) < chunkSamples; c.loose++ {
		if c.src.SamplePage(c.loose) == beton.NoPage {
			run = append(run, uint32(c.loose))
		}
	}
	if len(run) == 0 {
		return nil, 0, false, nil
	}
	return &job{ids: run}, 0, true, nil
}

func (r *Result) add(s *stats) {
	r.JPEG += s.jpeg
	r.Transcoded += s.transcoded
	r.HadRestarts += s.had
	r.Kept += s.kept
	r.Raw += s.raw
	r.JPEGBytesIn += s.in
	r.JPEGBytesOut += s.out
	for _, k := range s.named {
		if len(r.KeptSamples) < MaxKeptNamed {
			r.KeptSamples = append(r.KeptSamples, k)
		}
	}
}

// pageExtent returns the file offsets of absolute page p's start and of
// the end of its last allocation.
func pageExtent(src *beton.File, p int64) (lo, hi int64) {
	lo = src.PageOffset(p)
	end := lo + src.PageSize()
	allocs := src.Allocs()
	i, _ := slices.BinarySearchFunc(allocs, uint64(lo), func(a beton.Alloc, t uint64) int { return cmp.Compare(a.Ptr, t) })
	hi = lo
	for ; i < len(allocs) && int64(allocs[i].Ptr) < end; i++ {
		hi = max(hi, int64(allocs[i].Ptr+allocs[i].Size))
	}
	return lo, min(hi, end)
}

// transcode fills j's values: every field's as it was, JPEGs given
// restart markers.
func transcode(ctx context.Context, src *beton.File, j *job, opts *Options, readAt func([]byte, int64) error) {
	fields := src.Fields()
	j.values = make([][]beton.Value, len(j.ids))
	for i, id32 := range j.ids {
		if ctx.Err() != nil {
			j.err = ctx.Err()
			return
		}
		id := int(id32)
		vals := make([]beton.Value, len(fields))
		type original struct {
			field int
			data  []byte
		}
		var origs []original // the JPEGs transcoded, as they were
		for fi := range fields {
			fd := &fields[fi]
			v := &vals[fi]
			switch fd.Type {
			case beton.TypeInt:
				v.Int = src.Int(id, fi)
				continue
			case beton.TypeFloat:
				v.Float = src.Float(id, fi)
				continue
			}
			a, err := src.Data(id, fi)
			if err != nil {
				j.err = err
				return
			}
			data, err := dataOf(j.page, a, readAt)
			if err != nil {
				j.err = fmt.Errorf("%s: sample %d, field %q: %w", src.Name(), id, fd.Name, err)
				return
			}
			v.Data = data
			switch fd.Type {
			case beton.TypeJSON:
				if len(data) == 0 || data[len(data)-1] != 0 {
					j.err = fmt.Errorf("%s: sample %d, field %q: a JSON value does not end with NUL: %w", src.Name(), id, fd.Name, beton.ErrCorrupt)
					return
				}
				v.Data = data[:len(data)-1]
			case beton.TypeRGBImage:
				img, _ := src.Image(id, fi) // Data checked it
				v.Mode, v.Width, v.Height = img.Mode, img.Width, img.Height
				if img.Mode != beton.ModeJPEG {
					j.st.raw++
					break
				}
				j.st.jpeg++
				j.st.in += int64(len(data))
				if jpeg.HasCropRestarts(data) {
					j.st.had++
				} else if out, _, err := jpeg.AddRestarts(data, opts.RestartInterval); err != nil {
					j.st.keep(id, fd.Name, err)
				} else {
					origs = append(origs, original{fi, data})
					v.Data = out
					j.st.transcoded++
				}
				j.st.out += int64(len(v.Data))
			}
		}
		// The sample fit a page as it was; with markers it may not.
		if size := beton.SampleBytes(vals, fields); size > opts.PageSize {
			for _, o := range origs {
				j.st.out += int64(len(o.data)) - int64(len(vals[o.field].Data))
				vals[o.field].Data = o.data
				j.st.transcoded--
				j.st.keep(id, fields[o.field].Name, fmt.Errorf("with restart markers the sample takes %d bytes, more than a page of %d", size, opts.PageSize))
			}
		}
		j.values[i] = vals
	}
}

// keep counts a JPEG kept as it was, and names it while few are.
func (s *stats) keep(id int, field string, err error) {
	s.kept++
	if len(s.named) < MaxKeptNamed {
		s.named = append(s.named, Kept{Sample: id, Field: field, Err: err})
	}
}

// dataOf returns allocation a's bytes: from pg, where it lies (always,
// but for a beton whose samples break the one-page rule), else read.
func dataOf(pg *page, a beton.Alloc, readAt func([]byte, int64) error) ([]byte, error) {
	if a.Size == 0 {
		return nil, nil
	}
	if pg != nil && int64(a.Ptr) >= pg.base && int64(a.Ptr+a.Size) <= pg.base+int64(len(pg.buf)) {
		off := int64(a.Ptr) - pg.base
		return pg.buf[off : off+int64(a.Size) : off+int64(a.Size)], nil
	}
	b := make([]byte, a.Size)
	if err := readAt(b, int64(a.Ptr)); err != nil {
		return nil, fmt.Errorf("reading %d bytes at %d: %w", a.Size, a.Ptr, err)
	}
	return b, nil
}
