package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"unsafe"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/fields"
	"github.com/ffcvfs/ffcvfs/internal/half"
	"github.com/ffcvfs/ffcvfs/pipeline/augment"
)

// outKind says how a batch field is filled from a sample.
type outKind int

const (
	outImage  outKind = iota // the decoded (cropped, resized, converted) image
	outMeta                  // an int or float field: 8 bytes of the metadata record
	outArray                 // an ndarray or torch tensor field: its bytes, fixed size
	outVar                   // a bytes or JSON field: its bytes, variable size
	outEnds                  // where each sample of the outVar field before it ends
	outMixup                 // LabelMixup's (label, label before, weight) of a batch
	outSource                // the sample's source among several (SourceField)
)

// output is one field of a batch: its spec, how it is filled, from which
// beton field, and the bytes one sample takes in it (for outVar, the most).
type output struct {
	spec  fields.Spec
	kind  outKind
	field int
	per   int
}

// MaxSampleBytes bounds what one sample of a bytes or JSON field may hold
// for ffcvfeed to deliver the field: batch buffers are sized by the largest.
const MaxSampleBytes = 1 << 28

// outputs lists the batch fields the options ask of the first source: the
// beton fields of Options.Fields in order, or else the image and the label
// field as "image" and "label". p.image is the image field New chose.
func (p *Pipeline) outputs() ([]output, error) {
	o, f := p.opts, p.parts[0].f
	B := o.BatchSize
	names := o.Fields
	rename := map[string]string{}
	if len(names) == 0 {
		if p.image < 0 {
			return nil, fmt.Errorf("%s: no RGB image field %q", f.Name(), o.ImageField)
		}
		img, lab := f.Fields()[p.image].Name, o.LabelField
		if i := f.FieldIndex(lab); i < 0 || f.Fields()[i].Type != beton.TypeInt {
			return nil, fmt.Errorf("%s: no int field %q for labels", f.Name(), lab)
		}
		names = []string{img, lab}
		rename[img], rename[lab] = "image", "label"
	}
	var outs []output
	images := 0
	for _, name := range names {
		i := f.FieldIndex(name)
		if i < 0 {
			return nil, fmt.Errorf("%s: no field %q (it has %s)", f.Name(), name, f.FieldNames())
		}
		fd := f.Fields()[i]
		out := output{field: i, spec: fields.Spec{Name: name}}
		if r, ok := rename[name]; ok {
			out.spec.Name = r
		}
		switch fd.Type {
		case beton.TypeRGBImage:
			if images++; images > 1 {
				return nil, fmt.Errorf("%s: fields %v name two image fields; a stream decodes one", f.Name(), names)
			}
			out.kind, out.per = outImage, p.sampleBytes()
			out.spec.DType = string(o.DType)
			out.spec.Shape = []int{B, o.Op.OutH, o.Op.OutW, 3}
			if o.DimOrder == NCHW {
				out.spec.Shape = []int{B, 3, o.Op.OutH, o.Op.OutW}
			}
		case beton.TypeInt:
			out.kind, out.per, out.spec.DType, out.spec.Shape = outMeta, 8, "int64", []int{B}
		case beton.TypeFloat:
			out.kind, out.per, out.spec.DType, out.spec.Shape = outMeta, 8, "float64", []int{B}
		case beton.TypeNDArray, beton.TypeTorchTensor:
			dt, err := fields.FromNumPy(fd.DType)
			if err != nil {
				return nil, fmt.Errorf("%s: field %q: %w", f.Name(), name, err)
			}
			n, err := fd.DataSize()
			if err != nil || n > MaxSampleBytes {
				return nil, fmt.Errorf("%s: field %q: shape %v of %s: too large to deliver (at most %d bytes per sample)", f.Name(), name, fd.Shape, fd.DType, MaxSampleBytes)
			}
			out.kind, out.per, out.spec.DType = outArray, int(n), dt
			out.spec.Shape = []int{B}
			for _, d := range fd.Shape {
				out.spec.Shape = append(out.spec.Shape, int(d))
			}
		case beton.TypeBytes, beton.TypeJSON:
			most := largest(f, i)
			if most > MaxSampleBytes {
				return nil, fmt.Errorf("%s: field %q: a sample holds %d bytes; ffcvfeed delivers at most %d per sample", f.Name(), name, most, MaxSampleBytes)
			}
			out.kind, out.per, out.spec.DType = outVar, max(1, int(most)), "uint8"
			out.spec.Shape = []int{B, out.per}
			out.spec.Ends = out.spec.Name + fields.EndsSuffix
		default:
			return nil, fmt.Errorf("%s: field %q is a %s field, which ffcvfeed cannot deliver", f.Name(), name, fd.Type)
		}
		if int64(B) > MaxBatchBytes/int64(max(1, out.per)) {
			return nil, fmt.Errorf("%s: field %q: a batch of %d samples would take more than %d bytes", f.Name(), name, B, int64(MaxBatchBytes))
		}
		outs = append(outs, out)
		if out.kind == outVar {
			outs = append(outs, output{kind: outEnds, field: i, per: 8,
				spec: fields.Spec{Name: out.spec.Ends, DType: "int64", Shape: []int{B}}})
		}
	}
	return outs, nil
}

// largest returns the most bytes a sample holds in field i of f.
func largest(f *beton.File, i int) uint64 {
	most := uint64(0)
	for s := range f.NumSamples() {
		_, size := f.Pointer(s, i)
		most = max(most, size)
	}
	return most
}

// labelField returns f's int field name, or -1.
func labelField(f *beton.File, name string) int {
	i := f.FieldIndex(name)
	if i < 0 || f.Fields()[i].Type != beton.TypeInt {
		return -1
	}
	return i
}

// fill writes sample s of pt's non-image fields into row j of the batch's
// buffers. data is the sample's pinned page data starting at file offset
// off (nil when no field needs it).
func (p *Pipeline) fill(b *batch, j int, pt *part, s int, data []byte, off int64) error {
	f := pt.f
	for k, out := range p.outs {
		buf := b.bufs[k]
		field := pt.fields[k]
		switch out.kind {
		case outMeta:
			if field == pt.label && p.opts.ReplaceLabel != nil {
				binary.LittleEndian.PutUint64(buf[j*8:], uint64(p.opts.ReplaceLabel.Label(int64(pt.first)+int64(s), f.Int(s, field))))
				continue
			}
			copy(buf[j*8:j*8+8], f.Record(s)[f.RecordLayout().Offsets[field]:][:8])
		case outSource:
			binary.LittleEndian.PutUint64(buf[j*8:], uint64(pt.index))
		case outArray, outVar:
			a, err := f.Data(s, field)
			if err != nil {
				return err
			}
			lo := int64(a.Ptr) - off
			if a.Size > 0 && (lo < 0 || lo+int64(a.Size) > int64(len(data))) {
				return fmt.Errorf("%s: sample %d, field %q: data at %d lies outside the sample's page: %w", pt.name, s, out.spec.Name, a.Ptr, beton.ErrCorrupt)
			}
			if a.Size > uint64(out.per) { // cannot be: per is the largest
				return fmt.Errorf("%s: sample %d, field %q: %d bytes, more than the %d the batch has room for: %w", pt.name, s, out.spec.Name, a.Size, out.per, beton.ErrCorrupt)
			}
			if a.Size > 0 {
				copy(buf[j*out.per:], data[lo:lo+int64(a.Size)])
			}
			if out.kind == outVar {
				// The length, until finish packs the batch.
				binary.LittleEndian.PutUint64(b.bufs[k+1][8*j:], a.Size)
			}
		}
	}
	return nil
}

// needsData reports whether a sample's page must be read for fields other
// than the image.
func needsData(outs []output) bool {
	return slices.ContainsFunc(outs, func(o output) bool { return o.kind == outArray || o.kind == outVar })
}

// replace copies row good of every field over row bad (a sample that
// failed), before the batch is packed.
func (p *Pipeline) replace(b *batch, bad, good int) {
	for k, out := range p.outs {
		buf := b.bufs[k]
		copy(buf[bad*out.per:(bad+1)*out.per], buf[good*out.per:(good+1)*out.per])
	}
}

// pack moves the samples of each variable-size field together, in order,
// and turns their lengths into ends.
func (p *Pipeline) pack(b *batch) {
	for k, out := range p.outs {
		if out.kind != outVar {
			continue
		}
		data, ends := b.bufs[k], b.bufs[k+1]
		pos := 0
		for j := range b.size {
			n := int(binary.LittleEndian.Uint64(ends[8*j:]))
			copy(data[pos:], data[j*out.per:j*out.per+n]) // pos ≤ j×per: moves down
			pos += n
			binary.LittleEndian.PutUint64(ends[8*j:], uint64(pos))
		}
	}
}

// checkAugment checks the augmentations against the images and fields,
// and adds the mixup field.
func (p *Pipeline) checkAugment() error {
	o := &p.opts
	w, h := o.Op.OutW, o.Op.OutH
	p.augment = o.Augment.Active()
	if (p.augment || o.Poison != nil || o.MixupAlpha > 0) && p.image < 0 {
		return errors.New("augmentations (translate, cutout, jitters, poison, mixup) need an image field among the fields delivered")
	}
	if p.augment {
		if err := o.Augment.Validate(w, h); err != nil {
			return err
		}
	}
	if po := o.Poison; po != nil {
		if len(po.Mask) != w*h*3 || len(po.Alpha) != w*h {
			return fmt.Errorf("poison: the mask has %d values and alpha %d; images of %dx%d need %d and %d", len(po.Mask), len(po.Alpha), w, h, w*h*3, w*h)
		}
	}
	if (o.ReplaceLabel != nil || o.MixupAlpha > 0) && p.label < 0 {
		return fmt.Errorf("%s: replacing labels and mixup need the int label field %q", p.names(), o.LabelField)
	}
	if o.MixupAlpha > 0 {
		if slices.ContainsFunc(p.outs, func(out output) bool { return out.spec.Name == "mixup" }) {
			return errors.New(`mixup adds a field "mixup"; the beton has one of that name among the fields delivered`)
		}
		p.outs = append(p.outs, output{kind: outMixup, field: p.label, per: 12,
			spec: fields.Spec{Name: "mixup", DType: "float32", Shape: []int{o.BatchSize, 3}}})
	}
	return nil
}

// mixup mixes a finished batch's images (ImageMixup) and writes its mixup
// field (LabelMixup). Failed rows hold sample good's data by now.
func (p *Pipeline) mixup(b *batch, good int) {
	o := p.opts
	n := b.size
	lam := make([]float64, n)
	// The weights depend only on (seed, epoch, batch): a resumed stream
	// repeats them.
	rng := rand.New(rand.NewPCG(o.Order.Seed^uint64(b.epoch)*0x9E3779B97F4A7C15, 1<<63|uint64(b.index)))
	augment.Lambdas(rng, o.MixupAlpha, o.MixupSameLambda, lam)
	img := p.outs[p.imageOut]
	buf := b.bufs[p.imageOut][:n*img.per]
	switch o.DType {
	case Uint8:
		augment.MixImages(buf, n, img.per, lam, make([]byte, img.per))
	case Float32:
		v := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)/4)
		augment.MixFloat32(v, n, img.per/4, lam, make([]float32, img.per/4))
	case Float16:
		v := make([]float32, len(buf)/2)
		for i := range v {
			v[i] = half.Value(binary.LittleEndian.Uint16(buf[2*i:]))
		}
		augment.MixFloat32(v, n, img.per/2, lam, make([]float32, img.per/2))
		for i, x := range v {
			binary.LittleEndian.PutUint16(buf[2*i:], half.Bits(x))
		}
	}
	labels := make([]int64, n)
	for j := range n {
		s := b.ids[j]
		if b.failed[j] && good >= 0 {
			s = b.ids[good]
		}
		pt, smp := p.partOf(s)
		labels[j] = o.ReplaceLabel.Label(int64(s), pt.f.Int(smp, pt.label))
	}
	out := make([]float32, 3*n)
	augment.MixLabels(labels, lam, out)
	k := slices.IndexFunc(p.outs, func(out output) bool { return out.kind == outMixup })
	for i, x := range out {
		binary.LittleEndian.PutUint32(b.bufs[k][4*i:], math.Float32bits(x))
	}
}
