package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/fields"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
)

// Source is one beton of a pipeline's data: its cache, the announce of
// the mount it is read through (nil: none), and its share of a mixture of
// several (order.Share; ignored for one source).
type Source struct {
	Cache    *pagecache.Cache
	Announce func(order []uint32) error
	Share    order.Share
	// Name names it in messages and advice (default: the file's name).
	Name string
}

// MixOptions describe a mixture of several sources (NewSources).
type MixOptions struct {
	// EpochSize is the samples of an epoch of proportions (0: the
	// sources' samples in all); see order.NewMixture.
	EpochSize int
	// Names, when set, are what tells the sources apart in the mixture's
	// fingerprint (their locations and versions); default their names.
	Names []string
}

// SourceField is the field a batch of several sources carries: each
// sample's source, its index among them (int64, [B]).
const SourceField = "source"

// part is one source as the pipeline reads it: its cache and file, the
// global id of its first sample (the sources' samples are numbered one
// after another), and where its fields are.
type part struct {
	c        *pagecache.Cache
	f        *beton.File
	announce func([]uint32) error
	name     string
	index    int // among the sources
	first    uint32
	// image and label are its fields decoded and of labels (-1: none);
	// fields its field of each batch output (Pipeline.outs; -1 for those
	// of no beton field).
	image, label int
	fields       []int
	// The JPEGs decoded, and those with restart markers (AdviseRestarts).
	jpegs, restarts atomic.Uint64
}

// NewSources returns a pipeline over several betons mixed by their
// shares (order.Mixture): each epoch takes each source's share, ordered,
// dealt to ranks and resumed as one beton's samples are, and each
// source's cache (and mount) is told its own order. Fields are matched by
// name: every source must have each field a batch carries, of the same
// kind and shape. A batch carries SourceField besides. One source is New.
func NewSources(srcs []Source, opts Options, mo MixOptions) (*Pipeline, error) {
	if len(srcs) == 1 {
		return New(srcs[0].Cache, opts, srcs[0].Announce)
	}
	if len(srcs) == 0 {
		return nil, errors.New("a pipeline needs a source")
	}
	if len(opts.Indices) > 0 {
		return nil, errors.New("a subset of samples (indices) names samples of one beton; with several sources, give each its share instead")
	}
	maps := make([]order.PageMap, len(srcs))
	shares := make([]order.Share, len(srcs))
	names := mo.Names
	for i, s := range srcs {
		maps[i], shares[i] = s.Cache.File(), s.Share
		if mo.Names == nil {
			names = append(names, s.Cache.File().Name())
		}
	}
	mix, err := order.NewMixture(maps, shares, mo.EpochSize, opts.Order.Seed)
	if err != nil {
		return nil, err
	}
	p, err := newPipeline(srcs, opts)
	if err != nil {
		return nil, err
	}
	p.mix, p.fingerprint = mix, mix.Fingerprint(names...)
	return p, nil
}

// newParts makes the parts of srcs, numbering their samples one after
// another.
func newParts(srcs []Source) ([]*part, error) {
	var parts []*part
	first := uint64(0)
	for i, s := range srcs {
		f := s.Cache.File()
		if first+uint64(f.NumSamples()) > 1<<32-1 {
			return nil, fmt.Errorf("the sources hold more than %d samples in all", uint64(1<<32-1))
		}
		for _, o := range srcs[:i] {
			if o.Cache.File() == f || o.Cache == s.Cache {
				return nil, fmt.Errorf("source %d is source %d again: give each beton once, with its weight", i+1, slices.IndexFunc(srcs, func(x Source) bool { return x.Cache == o.Cache })+1)
			}
		}
		name := s.Name
		if name == "" {
			name = f.Name()
		}
		parts = append(parts, &part{c: s.Cache, f: f, announce: s.Announce, name: name, index: i, first: uint32(first), image: -1, label: -1})
		first += uint64(f.NumSamples())
	}
	return parts, nil
}

// partOf returns the part of global id g and its sample there.
func (p *Pipeline) partOf(g uint32) (*part, int) {
	if len(p.parts) == 1 {
		return p.parts[0], int(g)
	}
	i, found := slices.BinarySearchFunc(p.parts, g, func(pt *part, g uint32) int {
		switch {
		case pt.first < g:
			return -1
		case pt.first > g:
			return 1
		}
		return 0
	})
	if !found {
		i--
	}
	return p.parts[i], int(g - p.parts[i].first)
}

// samples returns the samples of every source.
func (p *Pipeline) samples() int {
	last := p.parts[len(p.parts)-1]
	return int(last.first) + last.f.NumSamples()
}

// names names the pipeline's data: its source, or its sources.
func (p *Pipeline) names() string {
	if len(p.parts) == 1 {
		return p.parts[0].name
	}
	var ns []string
	for _, pt := range p.parts {
		ns = append(ns, pt.name)
	}
	return strings.Join(ns, ", ")
}

// matchFields finds, in every source, the field of each batch output (the
// first source's are those outputs found), refusing a source that lacks
// one or has it of another kind or shape, naming both. The outputs of no
// beton field (mixup, source) come after.
func (p *Pipeline) matchFields() error {
	first := p.parts[0]
	for _, pt := range p.parts {
		pt.fields = make([]int, len(p.outs))
		for k, out := range p.outs {
			fi := out.field
			name := first.f.Fields()[fi].Name
			i := pt.f.FieldIndex(name)
			if i < 0 {
				return fmt.Errorf("%s has no field %q, which %s has (it has %s): the sources' fields are matched by name", pt.name, name, first.name, pt.f.FieldNames())
			}
			a, b := first.f.Fields()[fi], pt.f.Fields()[i]
			if a.Type != b.Type || a.DType != b.DType || !slices.Equal(a.Shape, b.Shape) {
				return fmt.Errorf("field %q is %s in %s and %s in %s: the sources' fields must be of one kind and shape", name, describe(a), first.name, describe(b), pt.name)
			}
			if out.kind == outVar {
				if most := largest(pt.f, i); most > uint64(out.per) {
					return fmt.Errorf("field %q of %s holds up to %d bytes a sample, more than the %d of %s: put the source with the largest first", name, pt.name, most, out.per, first.name)
				}
			}
			pt.fields[k] = i
		}
		if p.image >= 0 {
			pt.image = pt.fields[p.imageOut]
		}
		pt.label = labelField(pt.f, p.opts.LabelField)
		if p.label >= 0 && pt.label < 0 {
			return fmt.Errorf("%s has no int field %q for labels, which %s has", pt.name, p.opts.LabelField, first.name)
		}
	}
	return nil
}

// describe says a field's kind and shape.
func describe(f beton.Field) string {
	t := f.Type.String()
	article := "a "
	if strings.ContainsAny(t[:1], "aeiou") {
		article = "an "
	}
	switch f.Type {
	case beton.TypeNDArray, beton.TypeTorchTensor:
		return fmt.Sprintf("%s%s of %s %v", article, t, f.DType, f.Shape)
	}
	return article + t + " field"
}

// sourceOutput is the SourceField output of a batch of several sources.
func (p *Pipeline) sourceOutput() (output, error) {
	if slices.ContainsFunc(p.outs, func(o output) bool { return o.spec.Name == SourceField }) {
		return output{}, fmt.Errorf("a batch of several sources carries a field %q, and a field of that name is among the fields delivered", SourceField)
	}
	return output{kind: outSource, field: -1, per: 8, spec: fields.Spec{Name: SourceField, DType: "int64", Shape: []int{p.opts.BatchSize}}}, nil
}

// Fingerprint names the mixture a multi-source pipeline reads (its
// sources, shares and seed: order.Mixture.Fingerprint); "" for one source.
// A resume of another fingerprint reads another mixture.
func (p *Pipeline) Fingerprint() string { return p.fingerprint }

// Counts returns each source's samples in an epoch of a mixture; nil for
// one source.
func (p *Pipeline) Counts() []int {
	if p.mix == nil {
		return nil
	}
	return p.mix.Counts()
}

// epochMap returns the page map an epoch's order is made over, and
// whether its ids are a mixture's (to be made global by global).
func (p *Pipeline) epochMap(epoch uint64) (order.PageMap, *order.MixedMap) {
	if p.mix == nil {
		return p.parts[0].f, nil
	}
	p.mixMu.Lock()
	defer p.mixMu.Unlock()
	if p.mixed == nil || p.mixedEpoch != epoch {
		p.mixed, p.mixedEpoch = p.mix.Epoch(epoch), epoch
	}
	return p.mixed, p.mixed
}

// global turns ids of an epoch's mixed map into global ids, in place.
func (p *Pipeline) global(mm *order.MixedMap, ids []uint32) {
	for i, id := range ids {
		s, smp := mm.Source(id)
		ids[i] = p.parts[s].first + smp
	}
}

// announceParts tells each source's cache, and the mount it is read
// through, the order of its samples among reads (global ids).
func (p *Pipeline) announceParts(reads []uint32) error {
	per := make([][]uint32, len(p.parts))
	if len(p.parts) == 1 {
		per[0] = reads
	} else {
		for _, g := range reads {
			pt, s := p.partOf(g)
			per[pt.index] = append(per[pt.index], uint32(s))
		}
	}
	// The mounts first: once a mount's own cache has the plan, prefetches
	// read through it at once, and reads the mount's plan does not yet
	// know would not advance it.
	for i, pt := range p.parts {
		if pt.announce != nil {
			if err := pt.announce(per[i]); err != nil {
				return fmt.Errorf("%s: %w", pt.name, err)
			}
		}
	}
	for i, pt := range p.parts {
		if err := pt.c.Announce("ffcvfeed", per[i]); err != nil {
			return err
		}
	}
	return nil
}
