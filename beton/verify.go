package beton

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ffcvfs/ffcvfs/jpeg"
)

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// All keeps going after the first problem and reports every one.
	All bool
	// Progress, if set, is called after each page with the pages done.
	Progress func(done, total int)
}

// Verify checks every sample of f against the rules of the format: each
// variable-size value has its allocation, inside one page, of the size its
// metadata implies; each JPEG has a frame header that matches the stored
// width and height; each JSON value is valid JSON ended by a NUL. It reads
// each data page once. It returns the problems found, at most one unless
// opts.All is set; an I/O error ends the check.
func Verify(f *File, opts VerifyOptions) []error {
	v := verifier{f: f, all: opts.All}
	var page []byte // allocated only if there are pages: a file without any may declare a huge page size
	if f.NumPages() > 0 {
		page = make([]byte, f.PageSize())
	}
	checked := make([]bool, f.NumSamples())
	for dp := 0; dp < f.NumPages() && v.more(); dp++ {
		p := f.FirstPage() + int64(dp)
		if err := readAt(f.r, page, f.PageOffset(p)); err != nil {
			v.add(fmt.Errorf("%s: reading page %d: %w", f.name, p, err))
			return v.errs
		}
		for _, s := range f.PageSamples(p) {
			v.sample(int(s), page, f.PageOffset(p))
			checked[s] = true
			if !v.more() {
				break
			}
		}
		if opts.Progress != nil {
			opts.Progress(dp+1, f.NumPages())
		}
	}
	// Samples with no data in any page still have metadata to check.
	for s := range checked {
		if !checked[s] && v.more() {
			v.sample(s, nil, 0)
		}
	}
	return v.errs
}

type verifier struct {
	f    *File
	all  bool
	errs []error
}

func (v *verifier) more() bool { return v.all || len(v.errs) == 0 }

func (v *verifier) add(err error) { v.errs = append(v.errs, err) }

// sample checks sample s, whose page (at file offset base) is in page.
func (v *verifier) sample(s int, page []byte, base int64) {
	f := v.f
	for fi := range f.fields {
		fd := &f.fields[fi]
		if !fd.Type.Variable() {
			continue
		}
		a, err := f.Data(s, fi)
		if err != nil {
			v.add(err)
			continue
		}
		if a.Size == 0 {
			if fd.Type == TypeJSON || fd.Type == TypeRGBImage {
				v.add(fmt.Errorf("%s: sample %d, field %q: empty value: %w", f.name, s, fd.Name, ErrCorrupt))
			}
			continue
		}
		if page == nil || int64(a.Ptr) < base || int64(a.Ptr+a.Size) > base+int64(len(page)) {
			v.add(fmt.Errorf("%s: sample %d, field %q: data at %d is not in the sample's page: %w", f.name, s, fd.Name, a.Ptr, ErrCorrupt))
			continue
		}
		data := page[int64(a.Ptr)-base : int64(a.Ptr+a.Size)-base]
		switch fd.Type {
		case TypeRGBImage:
			img, _ := f.Image(s, fi)
			if img.Mode != ModeJPEG {
				continue
			}
			h, err := jpeg.ParseFrame(data)
			if err != nil {
				v.add(fmt.Errorf("%s: sample %d, field %q: %v: %w", f.name, s, fd.Name, err, ErrCorrupt))
			} else if h.Width != img.Width || h.Height != img.Height {
				v.add(fmt.Errorf("%s: sample %d, field %q: JPEG is %dx%d, metadata says %dx%d: %w", f.name, s, fd.Name, h.Width, h.Height, img.Width, img.Height, ErrCorrupt))
			}
		case TypeJSON:
			if data[len(data)-1] != 0 {
				v.add(fmt.Errorf("%s: sample %d, field %q: JSON value does not end with NUL: %w", f.name, s, fd.Name, ErrCorrupt))
			} else if text := bytes.TrimRight(data, "\x00"); !json.Valid(text) {
				v.add(fmt.Errorf("%s: sample %d, field %q: value is not valid JSON: %w", f.name, s, fd.Name, ErrCorrupt))
			}
		}
	}
}
