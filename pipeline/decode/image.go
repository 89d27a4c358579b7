package decode

import (
	"fmt"
	"math/rand/v2"

	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/resize"
)

// Sentinel errors, package jpeg's: errors returned by this package wrap
// one of them.
var (
	// ErrCorrupt marks an image that cannot be decoded.
	ErrCorrupt = jpeg.ErrCorrupt
	// ErrArgument marks a bad op, size or destination buffer.
	ErrArgument = jpeg.ErrArgument
)

// Decoder applies Ops to stored images: a JPEG decoder (package jpeg) and
// the resizer, with their scratch buffers, reused across calls. It is not
// safe for concurrent use: give each goroutine its own.
type Decoder struct {
	j       *jpeg.Decoder
	region  []byte // the decoded region, grown as needed
	resizer resize.Resizer

	// scale picks Apply's DCT scale; nil means ChooseScale. Tests set it
	// to compare scale rules.
	scale func(cw, ch, outW, outH int) int
}

// NewDecoder allocates a Decoder.
func NewDecoder() (*Decoder, error) {
	j, err := jpeg.NewDecoder()
	if err != nil {
		return nil, err
	}
	return &Decoder{j: j}, nil
}

// Close frees the JPEG decoder's C state. The Decoder must not be used
// after.
func (d *Decoder) Close() { d.j.Close() }

// JPEG returns the decoder's JPEG decoder.
func (d *Decoder) JPEG() *jpeg.Decoder { return d.j }

// Kind selects the crop an Op takes.
type Kind int

const (
	// RandomResizedCrop is torchvision's training crop (RandomResizedCropParams).
	RandomResizedCrop Kind = iota
	// CenterCrop is FFCV's validation crop (CenterCropParams).
	CenterCrop
	// Whole takes the whole image, not resized: FFCV's
	// SimpleRGBImageDecoder. OutW×OutH must be the image's size.
	Whole
)

// Mode says how the bytes handed to Apply are encoded.
type Mode int

const (
	// JPEG: a JPEG file; only the crop region is decoded.
	JPEG Mode = iota
	// Raw: packed RGB pixels, w×h×3 bytes, row-major (HWC); cropped in place.
	Raw
)

// Op describes the image transform of one sample: a crop, a resize to
// OutW×OutH and a random horizontal flip.
type Op struct {
	Kind       Kind
	OutW, OutH int
	// Scale and Ratio bound RandomResizedCrop's area fraction and aspect
	// ratio; zero values mean DefaultScale and DefaultRatio.
	Scale, Ratio [2]float64
	// CenterRatio is CenterCrop's side over the image's shorter side; zero
	// means DefaultCenterRatio.
	CenterRatio float64
	// FlipProb is the probability of a horizontal flip.
	FlipProb float64
	// Exact decodes a JPEG crop at full resolution before resizing it, so
	// the pixels are those of a full decode resized; otherwise the crop is
	// decoded at the smallest DCT scale ChooseScale allows (see the
	// package doc for the trade).
	Exact bool
	// LibjpegEntropy entropy-decodes JPEGs with libjpeg-turbo's own
	// Huffman decoder rather than huff.c's: the same pixels, more CPU; for
	// comparisons.
	LibjpegEntropy bool
}

// MaxOutputSide bounds the output's sides: a beton's images have sides of
// at most 65535 pixels, and the output sizes every batch buffer.
const MaxOutputSide = 65535

// MinRatio and MaxRatio bound a random-resized crop's aspect ratios: a
// crop of a ratio farther from 1 is a line of pixels in any photo.
const (
	MinRatio = 1e-3
	MaxRatio = 1e3
)

// Validate reports whether op can be applied: every number in range, NaN
// and infinities refused.
func (op Op) Validate() error {
	switch {
	case op.Kind != RandomResizedCrop && op.Kind != CenterCrop && op.Kind != Whole:
		return fmt.Errorf("op: unknown kind %d: %w", op.Kind, ErrArgument)
	case op.OutW <= 0 || op.OutH <= 0 || op.OutW > MaxOutputSide || op.OutH > MaxOutputSide:
		return fmt.Errorf("op: output size %dx%d: each side must be 1 to %d: %w", op.OutW, op.OutH, MaxOutputSide, ErrArgument)
	case !(op.FlipProb >= 0 && op.FlipProb <= 1):
		return fmt.Errorf("op: flip probability %g: %w", op.FlipProb, ErrArgument)
	case op.Scale != [2]float64{} && !(0 < op.Scale[0] && op.Scale[0] <= op.Scale[1] && op.Scale[1] <= 1):
		return fmt.Errorf("op: scale %v: want area fractions 0 < LOW <= HIGH <= 1: %w", op.Scale, ErrArgument)
	case op.Ratio != [2]float64{} && !(MinRatio <= op.Ratio[0] && op.Ratio[0] <= op.Ratio[1] && op.Ratio[1] <= MaxRatio):
		return fmt.Errorf("op: ratio %v: want aspect ratios %g <= LOW <= HIGH <= %g: %w", op.Ratio, MinRatio, MaxRatio, ErrArgument)
	case !(op.CenterRatio >= 0 && op.CenterRatio <= 1):
		return fmt.Errorf("op: center ratio %g: %w", op.CenterRatio, ErrArgument)
	}
	return nil
}

// Crop returns the crop op takes of a w×h image and whether to flip it,
// drawing from rng in a fixed order: the crop's draws, then one for the
// flip when 0 < FlipProb < 1.
func (op Op) Crop(rng *rand.Rand, w, h int) (x, y, cw, ch int, flip bool) {
	switch op.Kind {
	case Whole:
		x, y, cw, ch = 0, 0, w, h
	case CenterCrop:
		r := op.CenterRatio
		if r == 0 {
			r = DefaultCenterRatio
		}
		x, y, cw, ch = CenterCropParams(w, h, r)
	default:
		scale, ratio := op.Scale, op.Ratio
		if scale == ([2]float64{}) {
			scale = DefaultScale
		}
		if ratio == ([2]float64{}) {
			ratio = DefaultRatio
		}
		x, y, cw, ch = RandomResizedCropParams(rng, w, h, scale, ratio)
	}
	switch {
	case op.FlipProb >= 1:
		flip = true
	case op.FlipProb > 0:
		flip = rng.Float64() < op.FlipProb
	}
	return x, y, cw, ch, flip
}

// Apply transforms one image into dst, OutH×OutW×3 bytes (HWC RGB): it picks
// the crop (Op.Crop), decodes only that region of a JPEG at the DCT scale
// ChooseScale picks (at full size with Op.Exact), or takes it straight from
// Raw pixels, and resizes the crop's exact window (jpeg.ScaledWindow) into dst,
// flipped when drawn. For JPEG, w and h may be 0, in which case
// they are read from the header; for Raw they are required. rng may be nil
// for a CenterCrop without random flips.
func (d *Decoder) Apply(src []byte, mode Mode, w, h int, op Op, rng *rand.Rand, dst []byte) error {
	if err := op.Validate(); err != nil {
		return err
	}
	if need := op.OutW * op.OutH * 3; len(dst) < need {
		return fmt.Errorf("apply: destination has %d bytes, need %d: %w", len(dst), need, ErrArgument)
	}
	if mode == JPEG && (w <= 0 || h <= 0) {
		var err error
		if w, h, err = d.j.Header(src); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
	}
	if w <= 0 || h <= 0 {
		return fmt.Errorf("apply: image size %dx%d: %w", w, h, ErrArgument)
	}
	if op.Kind == Whole && (w != op.OutW || h != op.OutH) {
		return fmt.Errorf("apply: a %dx%d image, decoded whole, cannot make %dx%d: %w", w, h, op.OutW, op.OutH, ErrArgument)
	}
	if mode == JPEG && op.LibjpegEntropy != d.j.LibjpegEntropy() {
		d.j.UseLibjpegEntropy(op.LibjpegEntropy)
	}
	x, y, cw, ch, flip := op.Crop(rng, w, h)
	if op.Kind == Whole {
		return d.whole(src, mode, w, h, flip, dst)
	}
	switch mode {
	case Raw:
		if len(src) < w*h*3 {
			return fmt.Errorf("apply: raw image has %d bytes, %dx%d needs %d: %w", len(src), w, h, w*h*3, ErrArgument)
		}
		stride := w * 3
		d.resizer.Resize(dst, op.OutW*3, op.OutW, op.OutH,
			src[y*stride+x*3:], stride, cw, ch, flip)
		return nil
	case JPEG:
		m := 8
		switch {
		case op.Exact:
		case d.scale != nil:
			m = d.scale(cw, ch, op.OutW, op.OutH)
		default:
			m = ChooseScale(cw, ch, op.OutW, op.OutH)
		}
		win := jpeg.ScaledWindow(x, y, cw, ch, w, h, m)
		// libjpeg's rows, decoded in place, are as wide as the scaled
		// image at most.
		if n := (w*m + 7) / 8 * 3 * win.H; cap(d.region) < n {
			d.region = make([]byte, n)
		}
		r, err := d.j.DecodeSample(src, x, y, cw, ch, m, d.region[:cap(d.region)], 0, jpeg.Size{W: w, H: h})
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		d.resizer.ResizeWindow(dst, op.OutW*3, op.OutW, op.OutH, d.region[r.Off:], r.Stride, r.W, r.H,
			win.FX, win.FY, win.FW, win.FH, flip)
		return nil
	default:
		return fmt.Errorf("apply: unknown mode %d: %w", mode, ErrArgument)
	}
}

// whole decodes a w×h image in full into dst, flipped when asked: raw
// pixels are copied, a JPEG decoded at full scale.
func (d *Decoder) whole(src []byte, mode Mode, w, h int, flip bool, dst []byte) error {
	row := w * 3
	switch mode {
	case Raw:
		if len(src) < w*h*3 {
			return fmt.Errorf("apply: raw image has %d bytes, %dx%d needs %d: %w", len(src), w, h, w*h*3, ErrArgument)
		}
		copy(dst[:w*h*3], src)
	case JPEG:
		r, err := d.j.DecodeSample(src, 0, 0, w, h, 8, dst[:w*h*3], row, jpeg.Size{W: w, H: h})
		if err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		if r.W != w || r.H != h {
			return fmt.Errorf("apply: the JPEG is %dx%d, its metadata says %dx%d: %w", r.W, r.H, w, h, ErrCorrupt)
		}
	default:
		return fmt.Errorf("apply: unknown mode %d: %w", mode, ErrArgument)
	}
	flipRows(dst, w, h, flip)
	return nil
}

// flipRows mirrors each row of a w×h RGB image when flip is set.
func flipRows(dst []byte, w, h int, flip bool) {
	if !flip {
		return
	}
	row := w * 3
	for y := range h {
		r := dst[y*row : (y+1)*row]
		for a, b := 0, w-1; a < b; a, b = a+1, b-1 {
			r[3*a], r[3*b] = r[3*b], r[3*a]
			r[3*a+1], r[3*b+1] = r[3*b+1], r[3*a+1]
			r[3*a+2], r[3*b+2] = r[3*b+2], r[3*a+2]
		}
	}
}

// ApplyPlanes is Apply for a JPEG already decoded to its planes (package
// jpeg's Planes, as DecodePlanes made them into data), without entropy
// decoding or inverse DCT: the same crop and flip drawn from rng. A crop
// Apply decodes at 5/8 or more (all with Op.Exact) has the pixels of
// Apply with Op.Exact, byte for byte: identical wherever Apply decodes at
// full scale. A crop Apply decodes at 4/8 or less is made from the planes
// at half resolution (jpeg.Planes.RGBHalf) and resized. Both are closer to
// the exact pixels than Apply's (TestPlanesFidelity).
func (d *Decoder) ApplyPlanes(p jpeg.Planes, data []byte, op Op, rng *rand.Rand, dst []byte) error {
	if err := op.Validate(); err != nil {
		return err
	}
	if need := op.OutW * op.OutH * 3; len(dst) < need {
		return fmt.Errorf("apply: destination has %d bytes, need %d: %w", len(dst), need, ErrArgument)
	}
	w, h := p.W, p.H
	if w <= 0 || h <= 0 {
		return fmt.Errorf("apply: image size %dx%d: %w", w, h, ErrArgument)
	}
	if op.Kind == Whole && (w != op.OutW || h != op.OutH) {
		return fmt.Errorf("apply: a %dx%d image, decoded whole, cannot make %dx%d: %w", w, h, op.OutW, op.OutH, ErrArgument)
	}
	x, y, cw, ch, flip := op.Crop(rng, w, h)
	if op.Kind == Whole {
		if err := p.RGB(data, 0, 0, w, h, dst, w*3); err != nil {
			return fmt.Errorf("apply: %w", err)
		}
		flipRows(dst, w, h, flip)
		return nil
	}
	// A crop that shrinks to half its size or less (one the JPEG path
	// decodes at 4/8 or below) is made from the planes at half
	// resolution; any other at full resolution, as Exact.
	m := 8
	if !op.Exact && ChooseScale(cw, ch, op.OutW, op.OutH) <= 4 {
		m = 4
	}
	win := jpeg.ScaledWindow(x, y, cw, ch, w, h, m)
	if n := win.W * win.H * 3; cap(d.region) < n {
		d.region = make([]byte, n)
	}
	rgb := p.RGB
	if m == 4 {
		rgb = p.RGBHalf
	}
	if err := rgb(data, win.X0, win.Y0, win.W, win.H, d.region[:cap(d.region)], win.W*3); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	d.resizer.ResizeWindow(dst, op.OutW*3, op.OutW, op.OutH, d.region, win.W*3, win.W, win.H,
		win.FX, win.FY, win.FW, win.FH, flip)
	return nil
}
