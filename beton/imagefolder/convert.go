package imagefolder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/ordered"
)

// ConvertOptions configures Convert.
type ConvertOptions struct {
	Image    Options
	PageSize int64 // 0: beton.DefaultPageSize
	Workers  int   // images prepared in parallel; 0: all cores
	Seed     int64 // seeds proportion mode, per sample, so output does not depend on Workers
	// KeepNames adds a bytes field beton.PathField holding each image's
	// path relative to the root, with a names index, so that a mount can
	// serve the files under their own names.
	KeepNames bool

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
	Restarts int // of which with restart markers (Options.RestartInterval)
	// NoRestarts counts the JPEGs stored without the markers asked for,
	// which could not be transcoded; FirstNoRestarts names the first and
	// why.
	NoRestarts      int
	FirstNoRestarts string
	Raw             int // images stored as raw pixels
	Pages           int
	Bytes           int64 // size of the written file
	Elapsed         time.Duration
}

// Fields returns the fields Convert writes: an RGB image and an int label,
// and with names the bytes field beton.PathField.
func Fields(names bool) []beton.Field {
	f := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	if names {
		f = append(f, beton.Field{Type: beton.TypeBytes, Name: beton.PathField})
	}
	return f
}

// relNames returns each sample's path relative to the tree's root, with
// forward slashes.
func relNames(tree *Tree) ([]string, error) {
	names := make([]string, len(tree.Samples))
	for i, s := range tree.Samples {
		rel, err := filepath.Rel(tree.Root, s.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Path, err)
		}
		names[i] = filepath.ToSlash(rel)
	}
	return names, nil
}

type prepared struct {
	i   int
	p   Prepared
	err error
}

// Convert writes the ImageFolder tree at root to the .beton file out. Images are
// prepared by opts.Workers goroutines and written in sample order, so the
// output is the same for any number of workers. On error or cancellation
// nothing is left at out.
func Convert(ctx context.Context, root, out string, opts ConvertOptions) (Result, error) {
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	dst, err := beton.NewFileDestination(out)
	if err != nil {
		return Result{}, err
	}
	return ConvertTo(ctx, root, dst, opts)
}

// ConvertTo is Convert to any destination (an S3 upload), which it owns:
// committed at the end, aborted on error or cancellation.
func ConvertTo(ctx context.Context, root string, dst beton.Destination, opts ConvertOptions) (Result, error) {
	res, err := convertTo(ctx, root, dst, opts)
	if err != nil {
		err = beton.WithAbort(err, dst.Abort())
	}
	return res, err
}

func convertTo(ctx context.Context, root string, dst beton.Destination, opts ConvertOptions) (Result, error) {
	start := time.Now()
	if err := opts.Validate(); err != nil {
		return Result{}, err
	}
	tree, err := Scan(root)
	if err != nil {
		return Result{}, err
	}
	res := Result{Classes: tree.Classes, Samples: len(tree.Samples)}
	var names []string
	if opts.KeepNames {
		if names, err = relNames(tree); err != nil {
			return res, err
		}
	}
	w, err := beton.NewWriter(dst, Fields(opts.KeepNames), len(tree.Samples), beton.WriterOptions{PageSize: opts.PageSize})
	if err != nil {
		return res, err
	}
	if names != nil {
		if err := w.SetNames(2, names); err != nil {
			w.Abort()
			return res, err
		}
	}
	// At most 4 samples a worker are in flight, so memory stays bounded
	// however slow one image is; they are written in sample order.
	n, taken, written := len(tree.Samples), 0, 0
	scratch := make([]Scratch, opts.Workers)
	vals := make([]beton.Value, 2, 3)
	if names != nil {
		vals = vals[:3]
	}
	err = ordered.Map(ctx, ordered.Options{Workers: opts.Workers, Window: 4 * opts.Workers},
		func(context.Context) (int, int64, bool, error) {
			if taken == n {
				return 0, 0, false, nil
			}
			taken++
			return taken - 1, 0, true, nil
		},
		func(worker, i int) prepared {
			s := tree.Samples[i]
			r := prepared{i: i}
			src, err := readImageFile(s.Path)
			if err != nil {
				r.err = err
			} else {
				rnd := rand.New(rand.NewPCG(uint64(opts.Seed), uint64(i)))
				r.p, r.err = Prepare(s.Path, src, opts.Image, rnd, &scratch[worker])
			}
			return r
		},
		func(r prepared) error {
			if err := writePrepared(w, tree, names, r, vals, &res); err != nil {
				return err
			}
			if written++; opts.Progress != nil {
				opts.Progress(written, n)
			}
			return nil
		})
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("stopped after %d of %d samples", written, n))
	}
	if err != nil {
		w.Abort()
		return res, err
	}
	res.Pages = w.Pages()
	if err := w.Close(); err != nil {
		return res, err
	}
	res.Bytes = w.Size()
	res.Elapsed = time.Since(start)
	return res, nil
}

// writePrepared writes sample r.i, prepared, to w and counts it in res.
func writePrepared(w *beton.Writer, tree *Tree, names []string, r prepared, vals []beton.Value, res *Result) error {
	s := tree.Samples[r.i]
	if r.err != nil {
		return fmt.Errorf("sample %d (%s): %w", r.i, s.Path, r.err)
	}
	need := int64(len(r.p.Data))
	if names != nil {
		need += int64(len(names[r.i]))
	}
	if need > w.PageSize() {
		// It may fit as it was: kept so, not refused.
		r.p.Unmark(fmt.Errorf("with restart markers the sample takes %d bytes, more than a page of %d", need, w.PageSize()))
	}
	mode := r.p.Mode()
	if r.p.JPEG {
		res.JPEG++
		if r.p.Verbatim {
			res.Verbatim++
		}
		if r.p.Restarts {
			res.Restarts++
		}
		if r.p.NoRestarts != nil {
			if res.NoRestarts++; res.FirstNoRestarts == "" {
				res.FirstNoRestarts = fmt.Sprintf("%s: %v", s.Path, r.p.NoRestarts)
			}
		}
	} else {
		res.Raw++
	}
	vals[0] = beton.Value{Mode: mode, Width: r.p.Width, Height: r.p.Height, Data: r.p.Data}
	vals[1] = beton.Value{Int: int64(s.Label)}
	if names != nil {
		vals[2] = beton.Value{Data: []byte(names[r.i])}
	}
	if err := w.WriteSample(vals); err != nil {
		return fmt.Errorf("%s: %w", s.Path, err)
	}
	return nil
}

// MaxImageFileBytes bounds the size of one image file that Convert reads.
const MaxImageFileBytes = 1 << 30

// readImageFile reads the regular file at path (a symbolic link to one
// counts), never more bytes than its size said when it was opened. A FIFO,
// a device or a socket is an error naming what it is: reading one could
// block forever (a FIFO nobody writes) or never end (/dev/zero). The open
// does not block on a FIFO (O_NONBLOCK), so the type is checked first.
func readImageFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file but %s; an image must be a file", path, fileKind(st.Mode()))
	}
	size := st.Size()
	if size > MaxImageFileBytes {
		return nil, fmt.Errorf("%s: %d bytes; an image file may have at most %d", path, size, int64(MaxImageFileBytes))
	}
	// Back to blocking reads, which a regular file always does anyway.
	if err := syscall.SetNonblock(fd, false); err != nil {
		return nil, err
	}
	b := make([]byte, size)
	n, err := io.ReadFull(f, b)
	if err != nil {
		return nil, fmt.Errorf("%s: read %d of the %d bytes its size says: %w", path, n, size, err)
	}
	return b, nil
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a folder"
	}
	return "not a file (" + m.Type().String() + ")"
}
