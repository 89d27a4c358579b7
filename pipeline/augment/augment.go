// Package augment implements FFCV's augmentations of images (packed RGB,
// HWC, uint8) and labels, with FFCV 1.0's arithmetic: RandomTranslate,
// Cutout, RandomBrightness, RandomContrast, RandomSaturation, Poison and
// ReplaceLabel on one sample, ImageMixup and LabelMixup on a batch.
//
// Each transform is a function of its random draws (Translate, Cutout,
// Brightness, ...), checked pixel for pixel against FFCV's own output given
// the same draws (testdata/ffcv-transforms.json.gz, written by
// scripts/make_ffcv_goldens.py), and Options.Apply makes the draws from a
// source the caller seeds, so that a resumed stream repeats them. The draws
// follow FFCV's distributions; they are not FFCV's numbers, which come from
// NumPy's global generator.
//
// Written here rather than taken from an image library because the point
// is FFCV's exact rounding (float64 arithmetic truncated to uint8), which
// general-purpose libraries do not promise.
package augment

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// ErrArgument marks options that cannot be applied.
var ErrArgument = errors.New("bad augmentation")

// Jitter is one of FFCV's color jitters: applied with probability P, by a
// factor drawn uniformly from [max(0, 1-Magnitude), 1+Magnitude].
type Jitter struct{ Magnitude, P float64 }

func (j Jitter) on() bool { return j.P > 0 }

// draw returns whether to apply the jitter and its factor.
func (j Jitter) draw(rng *rand.Rand) (bool, float64) {
	if j.P < 1 && rng.Float64() >= j.P {
		return false, 0
	}
	lo := max(0, 1-j.Magnitude)
	return true, lo + rng.Float64()*(1+j.Magnitude-lo)
}

// Options are the per-sample augmentations after the crop and flip, applied
// in this order: translate, cutout, brightness, contrast, saturation.
type Options struct {
	// TranslatePad > 0 shifts the image by up to TranslatePad pixels in
	// each direction, filling with TranslateFill (RandomTranslate).
	TranslatePad  int
	TranslateFill [3]uint8
	// CutoutSize > 0 fills a square of that side at a uniform place
	// with CutoutFill (Cutout).
	CutoutSize int
	CutoutFill [3]uint8
	// Brightness, Contrast and Saturation are applied when their P > 0.
	Brightness, Contrast, Saturation Jitter
}

// MaxPad bounds TranslatePad and CutoutSize.
const MaxPad = 4096

// Validate checks the options for images of w×h pixels.
func (o Options) Validate(w, h int) error {
	switch {
	case o.TranslatePad < 0 || o.TranslatePad > MaxPad:
		return fmt.Errorf("translate: padding %d: want 0 to %d: %w", o.TranslatePad, MaxPad, ErrArgument)
	case o.CutoutSize < 0 || o.CutoutSize > min(w, h):
		return fmt.Errorf("cutout: side %d: want 0 to the images' shorter side, %d: %w", o.CutoutSize, min(w, h), ErrArgument)
	}
	for _, j := range []struct {
		name string
		j    Jitter
	}{{"brightness", o.Brightness}, {"contrast", o.Contrast}, {"saturation", o.Saturation}} {
		if !(j.j.P >= 0 && j.j.P <= 1) || !(j.j.Magnitude >= 0 && j.j.Magnitude <= 1e6) {
			return fmt.Errorf("%s: magnitude %v, probability %v: want a magnitude ≥ 0 and a probability 0 to 1: %w", j.name, j.j.Magnitude, j.j.P, ErrArgument)
		}
	}
	return nil
}

// Active reports whether any augmentation is asked for.
func (o Options) Active() bool {
	return o.TranslatePad > 0 || o.CutoutSize > 0 || o.Brightness.on() || o.Contrast.on() || o.Saturation.on()
}

// Apply augments img, w×h, in place, drawing from rng in a fixed order.
// scratch must hold w×h×3 bytes when TranslatePad > 0.
func (o *Options) Apply(rng *rand.Rand, img []byte, w, h int, scratch []byte) {
	if o.TranslatePad > 0 {
		n := 2*o.TranslatePad + 1
		dy, dx := rng.IntN(n), rng.IntN(n)
		Translate(img, w, h, o.TranslatePad, dy, dx, o.TranslateFill, scratch)
	}
	if o.CutoutSize > 0 {
		y, x := rng.IntN(h-o.CutoutSize+1), rng.IntN(w-o.CutoutSize+1)
		Cutout(img, w, h, o.CutoutSize, y, x, o.CutoutFill)
	}
	if o.Brightness.on() {
		if ok, f := o.Brightness.draw(rng); ok {
			Brightness(img[:w*h*3], f)
		}
	}
	if o.Contrast.on() {
		if ok, f := o.Contrast.draw(rng); ok {
			Contrast(img[:w*h*3], f)
		}
	}
	if o.Saturation.on() {
		if ok, f := o.Saturation.draw(rng); ok {
			Saturation(img[:w*h*3], f)
		}
	}
}

// Translate is RandomTranslate given its draws dy, dx in [0, 2·pad]: the
// image placed at (pad, pad) on a canvas of fill, and the w×h window at
// (dy, dx) of the canvas taken.
func Translate(img []byte, w, h, pad, dy, dx int, fill [3]uint8, scratch []byte) {
	row := w * 3
	copy(scratch[:h*row], img)
	ox := dx - pad // source column of output column 0
	for r := range h {
		out := img[r*row : (r+1)*row]
		sr := r + dy - pad
		lo, hi := max(0, -ox), min(w, w-ox) // output columns with a source
		if sr < 0 || sr >= h || lo >= hi {
			lo, hi = 0, 0
		}
		for c := 0; c < lo; c++ {
			out[3*c], out[3*c+1], out[3*c+2] = fill[0], fill[1], fill[2]
		}
		if lo < hi {
			copy(out[3*lo:3*hi], scratch[sr*row+3*(lo+ox):])
		}
		for c := max(hi, lo); c < w; c++ {
			out[3*c], out[3*c+1], out[3*c+2] = fill[0], fill[1], fill[2]
		}
	}
}

// Cutout is Cutout given its draws: the size×size square at row y, column
// x filled with fill.
func Cutout(img []byte, w, h, size, y, x int, fill [3]uint8) {
	row := w * 3
	for r := y; r < y+size; r++ {
		px := img[r*row+3*x : r*row+3*(x+size)]
		for c := 0; c < len(px); c += 3 {
			px[c], px[c+1], px[c+2] = fill[0], fill[1], fill[2]
		}
	}
}

// clip255 is NumPy's clip(0, 255) then astype(uint8) of a float64.
func clip255(v float64) byte {
	if v <= 0 || v != v {
		return 0
	}
	if v >= 255 {
		return 255
	}
	return byte(v) // truncation, as the cast
}

// blendZero is FFCV's blend(img, 0, f): f·x + (1−f)·0.
func blendZero(x byte, f float64) byte { return clip255(f*float64(x) + 0) }

// Brightness is RandomBrightness given its factor f.
func Brightness(img []byte, f float64) {
	for i, x := range img {
		img[i] = blendZero(x, f)
	}
}

// gray is FFCV's luminance of a pixel: 0.2989 r + 0.587 g + 0.114 b,
// truncated to uint8.
func gray(r, g, b byte) byte {
	return byte(float64(float64(0.2989*float64(r))+float64(0.587*float64(g))) + float64(0.114*float64(b)))
}

// blend is FFCV's blend(x, y, f): f·x + (1−f)·y, clipped and truncated.
func blend(x byte, y, f float64) byte {
	return clip255(float64(f*float64(x)) + float64((1-f)*y))
}

// Contrast is RandomContrast given its factor f: each value blended with
// the mean luminance.
func Contrast(img []byte, f float64) {
	var sum uint64
	for i := 0; i+2 < len(img); i += 3 {
		sum += uint64(gray(img[i], img[i+1], img[i+2]))
	}
	mean := float64(sum) / float64(len(img)/3)
	for i, x := range img {
		img[i] = blend(x, mean, f)
	}
}

// Saturation is RandomSaturation given its factor f: each pixel blended
// with its luminance.
func Saturation(img []byte, f float64) {
	for i := 0; i+2 < len(img); i += 3 {
		l := float64(gray(img[i], img[i+1], img[i+2]))
		img[i], img[i+1], img[i+2] = blend(img[i], l, f), blend(img[i+1], l, f), blend(img[i+2], l, f)
	}
}

// Poison is FFCV's Poison on one image: each value becomes x·(1−α) + m·α
// (α per pixel, m the mask's value), computed as FFCV does in float32
// steps, clipped to Clamp and truncated.
type Poison struct {
	Mask    []byte    // h×w×3
	Alpha   []float64 // h×w
	Clamp   [2]float64
	Samples SampleSet // the samples poisoned
}

// Has reports whether sample s is poisoned.
func (p *Poison) Has(s int64) bool { return p != nil && p.Samples.Has(s) }

// Apply poisons img, whose size must be the mask's.
func (p *Poison) Apply(img []byte) {
	for i, x := range img[:len(p.Mask)] {
		a := p.Alpha[i/3]
		t := float32(float64(float32(x)) * (1 - a))
		t = float32(float64(t) + float64(p.Mask[i])*a)
		t = min(max(t, float32(p.Clamp[0])), float32(p.Clamp[1]))
		img[i] = clip255(float64(t))
	}
}

// MixImages is ImageMixup on a batch of n images of per bytes each (uint8
// values, any layout), given each image's λ: image i becomes
// λᵢ·imageᵢ + (1−λᵢ)·image₍ᵢ₋₁₎, truncated, the first mixed with the last.
// last must hold per bytes.
func MixImages(imgs []byte, n, per int, lam []float64, last []byte) {
	mix(imgs, n, per, lam, last, func(l float64, x, prev byte) byte {
		return clip255(float64(l*float64(x)) + float64((1-l)*float64(prev)))
	})
}

// MixFloat32 is MixImages for float32 values (normalized pixels): no
// rounding. The mix of normalized values is the normalized mix.
func MixFloat32(vals []float32, n, per int, lam []float64, last []float32) {
	mix(vals, n, per, lam, last, func(l float64, x, prev float32) float32 {
		return float32(l)*x + (1-float32(l))*prev
	})
}

// mix replaces each of n images of per values by f(λᵢ, its value, the
// value of the image before it), the first taking the last as the one
// before it (saved in last), as ImageMixup does.
func mix[T byte | float32](vals []T, n, per int, lam []float64, last []T, f func(l float64, x, prev T) T) {
	copy(last, vals[(n-1)*per:n*per])
	for i := n - 1; i >= 0; i-- {
		prev := last
		if i > 0 {
			prev = vals[(i-1)*per : i*per]
		}
		cur := vals[i*per : (i+1)*per]
		for k, x := range cur {
			cur[k] = f(lam[i], x, prev[k])
		}
	}
}

// MixLabels is LabelMixup: for each sample i, (labelᵢ, label₍ᵢ₋₁₎, λᵢ) as
// float32, the first paired with the last.
func MixLabels(labels []int64, lam []float64, out []float32) {
	n := len(labels)
	for i := range n {
		out[3*i] = float32(labels[i])
		out[3*i+1] = float32(labels[(i+n-1)%n])
		out[3*i+2] = float32(lam[i])
	}
}

// Lambdas draws a batch's mixup weights from Beta(alpha, alpha): one for
// every sample when same, else one per sample.
func Lambdas(rng *rand.Rand, alpha float64, same bool, lam []float64) {
	for i := range lam {
		if i > 0 && same {
			lam[i] = lam[0]
			continue
		}
		lam[i] = Beta(rng, alpha, alpha)
	}
}

// Beta draws from the Beta(a, b) distribution, as X/(X+Y) of two Gamma
// draws.
func Beta(rng *rand.Rand, a, b float64) float64 {
	x, y := gamma(rng, a), gamma(rng, b)
	if x+y == 0 {
		// Both underflowed (tiny shapes): the mass lies at 0 and 1.
		if rng.Float64()*(a+b) < a {
			return 1
		}
		return 0
	}
	return x / (x + y)
}

// gamma draws from Gamma(shape, 1) by Marsaglia and Tsang's method, with
// the boost U^(1/shape) for shapes below 1.
func gamma(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		return gamma(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// ReplaceLabel is FFCV's ReplaceLabel: the samples of a set get one label.
type ReplaceLabel struct {
	samples SampleSet
	label   int64
}

// NewReplaceLabel returns a ReplaceLabel of samples to label.
func NewReplaceLabel(samples []uint32, label int64) *ReplaceLabel {
	return &ReplaceLabel{samples: NewSampleSet(samples), label: label}
}

// Label returns the label of sample s, whose stored label is l.
func (r *ReplaceLabel) Label(s, l int64) int64 {
	if r != nil && r.samples.Has(s) {
		return r.label
	}
	return l
}

// SampleSet is a set of sample ids, 4 bytes each: sorted, without
// repeats. A map would take ten times that for the tens of millions of
// ids a list may hold.
type SampleSet []uint32

// NewSampleSet returns the set of ids, which it sorts in place.
func NewSampleSet(ids []uint32) SampleSet {
	slices.Sort(ids)
	return SampleSet(slices.Compact(ids))
}

// Has reports whether s is in the set.
func (set SampleSet) Has(s int64) bool {
	if s < 0 || s > math.MaxUint32 {
		return false
	}
	_, ok := slices.BinarySearch(set, uint32(s))
	return ok
}
