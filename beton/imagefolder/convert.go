package imagefolder

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
)

// ConvertOptions configures Convert.
type ConvertOptions struct {
	Image    Options
	PageSize int64 // 0: beton.DefaultPageSize
	Workers  int   // images prepared in parallel; 0: all cores
	Seed     int64 // seeds proportion mode, per sample, so output does not depend on Workers

	// Progress, if set, is called from Convert's goroutine with the samples
	// written so far.
	Progress func(done, total int)
}

// Validate fills defaults and checks the options.
func (o *ConvertOptions) Validate() error {
	if err := o.Image.Validate(); err != nil {
		return err
	}
	wo := beton.WriterOptions{PageSize: o.PageSize}
	if err := wo.Validate(); err != nil {
		return err
	}
	o.PageSize = wo.PageSize
	if o.Workers == 0 {
		o.Workers = runtime.NumCPU()
	}
	if o.Workers < 0 {
		return fmt.Errorf("workers must be at least 1, got %d", o.Workers)
	}
	return nil
}

// Result describes a finished conversion.
type Result struct {
	Classes  []string
	Samples  int
	JPEG     int // images stored as JPEG
	Verbatim int // of which stored byte-for-byte from the source
	Raw      int // images stored as raw pixels
	Pages    int
	Bytes    int64 // size of the written file
	Elapsed  time.Duration
}

// Fields returns the fields Convert writes: an RGB image and an int label.
func Fields() []beton.Field {
	return []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
}

type prepared struct {
	i   int
	p   Prepared
	err error
}

// Convert writes the ImageFolder tree at root to the .beton out. Images are
// prepared by opts.Workers goroutines and written in sample order, so the
// output is the same for any number of workers. On error or cancellation
// nothing is left at out.
func Convert(ctx context.Context, root, out string, opts ConvertOptions) (Result, error) {
	start := time.Now()
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	tree, err := Scan(root)
	if err != nil {
		return Result{}, err
	}
	res := Result{Classes: tree.Classes, Samples: len(tree.Samples)}
	w, err := beton.Create(out, Fields(), len(tree.Samples), beton.WriterOptions{PageSize: opts.PageSize})
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// At most window samples are in flight, so memory stays bounded however
	// slow one image is.
	window := 4 * opts.Workers
	jobs := make(chan int)
	results := make(chan prepared, window)
	done := make(chan struct{})
	for range opts.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			var scratch Scratch
			for i := range jobs {
				s := tree.Samples[i]
				r := prepared{i: i}
				src, err := os.ReadFile(s.Path)
				if err != nil {
					r.err = err
				} else {
					rnd := rand.New(rand.NewPCG(uint64(opts.Seed), uint64(i)))
					r.p, r.err = Prepare(s.Path, src, opts.Image, rnd, &scratch)
				}
				select {
				case results <- r:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	err = convertLoop(ctx, w, tree, jobs, results, window, opts.Progress, &res)
	close(jobs)
	cancel()
	for range opts.Workers {
		<-done
	}
	if err != nil {
		w.Abort()
		return res, err
	}
	res.Pages = w.Pages()
	if err := w.Close(); err != nil {
		return res, err
	}
	if st, err := os.Stat(out); err == nil {
		res.Bytes = st.Size()
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

func convertLoop(ctx context.Context, w *beton.Writer, tree *Tree, jobs chan<- int, results <-chan prepared, window int, progress func(int, int), res *Result) error {
	n := len(tree.Samples)
	pending := make(map[int]prepared, window)
	vals := make([]beton.Value, 2)
	next, sent := 0, 0
	for next < n {
		var jobCh chan<- int
		if sent < n && sent < next+window {
			jobCh = jobs
		}
		select {
		case jobCh <- sent:
			sent++
		case r := <-results:
			pending[r.i] = r
			for {
				r, ok := pending[next]
				if !ok {
					break
				}
				delete(pending, next)
				s := tree.Samples[next]
				if r.err != nil {
					return fmt.Errorf("sample %d (%s): %w", next, s.Path, r.err)
				}
				mode := r.p.Mode()
				if r.p.JPEG {
					res.JPEG++
					if r.p.Verbatim {
						res.Verbatim++
					}
				} else {
					res.Raw++
				}
				vals[0] = beton.Value{Mode: mode, Width: r.p.Width, Height: r.p.Height, Data: r.p.Data}
				vals[1] = beton.Value{Int: int64(s.Label)}
				if err := w.WriteSample(vals); err != nil {
					return fmt.Errorf("%s: %w", s.Path, err)
				}
				next++
				if progress != nil {
					progress(next, n)
				}
			}
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("stopped after %d of %d samples", next, n))
		}
	}
	return nil
}
