package imagefolder

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/resize"
)

// Write modes accepted in Options.Mode; they are the reference writer's.
const (
	WriteJPG        = "jpg"
	WriteRaw        = "raw"
	WriteSmart      = "smart"
	WriteProportion = "proportion"
)

// Defaults that Validate fills in.
const (
	DefaultWriteMode           = WriteRaw
	DefaultJPEGQuality         = 90
	DefaultSmartThreshold      = 256 * 256 * 3
	DefaultCompressProbability = 0.5
)

// Options say how Prepare stores images. The zero value is valid: raw
// pixels, no size limit.
type Options struct {
	// Mode is the write mode:
	//   - "jpg": a JPEG, the source file itself when it can be kept as is;
	//   - "raw": RGB pixels;
	//   - "smart": RGB pixels when they take at most SmartThreshold bytes,
	//     else a JPEG;
	//   - "proportion": a JPEG with probability CompressProbability, else
	//     RGB pixels.
	// Empty means "raw", the reference writer's default.
	Mode string
	// MaxResolution bounds the longer side of the stored image; larger
	// images are shrunk (see ResizedSize). 0 means no bound.
	MaxResolution int
	// JPEGQuality is the libjpeg quality, 1 to 100, of JPEGs this package
	// encodes. 0 means 90.
	JPEGQuality int
	// SmartThreshold is the most bytes of RGB pixels (width×height×3) that
	// "smart" mode stores raw. 0 means 256×256×3.
	SmartThreshold int
	// CompressProbability is the probability that "proportion" mode stores
	// a JPEG, in [0, 1]. 0 means 0.5; to never store a JPEG, use "raw".
	CompressProbability float64
	// AlwaysEncode decodes and re-encodes JPEG sources even when they could
	// be kept as they are, as the reference writer does; with it, stored
	// JPEGs are byte for byte the reference's.
	AlwaysEncode bool
	// RestartInterval, when positive, stores every JPEG losslessly
	// transcoded with restart markers about every RestartInterval MCUs
	// (jpeg.AddRestarts: the divisor of the MCUs per row nearest it), so
	// that a crop is entropy-decoded only where it lies. The pixels are
	// the source's; the bytes are not. 0 stores JPEGs as they are (the
	// command line and the stream format default to
	// jpeg.DefaultRestartInterval).
	RestartInterval int
}

// MaxRestartInterval bounds Options.RestartInterval (the JPEG field is 16
// bits).
const MaxRestartInterval = 1<<16 - 1

// Validate checks o and fills in the defaults of its zero fields.
func (o *Options) Validate() error {
	switch o.Mode {
	case "":
		o.Mode = DefaultWriteMode
	case WriteJPG, WriteRaw, WriteSmart, WriteProportion:
	default:
		return fmt.Errorf("imagefolder: unknown image write mode %q (want %s, %s, %s or %s)",
			o.Mode, WriteJPG, WriteRaw, WriteSmart, WriteProportion)
	}
	if o.MaxResolution < 0 {
		return fmt.Errorf("imagefolder: max resolution %d is negative (0 means no limit)", o.MaxResolution)
	}
	switch {
	case o.JPEGQuality == 0:
		o.JPEGQuality = DefaultJPEGQuality
	case o.JPEGQuality < 1 || o.JPEGQuality > 100:
		return fmt.Errorf("imagefolder: JPEG quality %d is outside 1..100", o.JPEGQuality)
	}
	if o.RestartInterval < 0 || o.RestartInterval > MaxRestartInterval {
		return fmt.Errorf("imagefolder: restart interval %d is outside 0..%d MCUs", o.RestartInterval, MaxRestartInterval)
	}
	switch {
	case o.SmartThreshold == 0:
		o.SmartThreshold = DefaultSmartThreshold
	case o.SmartThreshold < 0:
		return fmt.Errorf("imagefolder: smart threshold %d is negative", o.SmartThreshold)
	}
	switch {
	case o.CompressProbability == 0:
		o.CompressProbability = DefaultCompressProbability
	case math.IsNaN(o.CompressProbability) || o.CompressProbability < 0 || o.CompressProbability > 1:
		return fmt.Errorf("imagefolder: compress probability %v is outside [0, 1]", o.CompressProbability)
	}
	return nil
}

// Prepared is one image as an RGB image field stores it.
type Prepared struct {
	// JPEG is true when Data is a JPEG file, false when it is raw pixels.
	JPEG bool
	// Width and Height are the stored image's size.
	Width, Height int
	// Data is the JPEG file, or Height×Width×3 bytes of RGB pixels. It never
	// shares memory with a Scratch; when Verbatim is set it is the src slice
	// given to Prepare.
	Data []byte
	// Verbatim is true when Data is the source file itself, unchanged.
	Verbatim bool
	// Restarts is true when Data is a JPEG with restart intervals a crop
	// can be decoded from (Options.RestartInterval: transcoded, or a
	// source that had them, kept verbatim). NoRestarts says why a JPEG
	// that Options.RestartInterval asked markers for has none: a JPEG that
	// cannot be transcoded is stored as it is, not refused.
	Restarts   bool
	NoRestarts error

	// unmarked is the JPEG before restart markers were added, and
	// unmarkedVerbatim whether it was the source file (see Unmark).
	unmarked         []byte
	unmarkedVerbatim bool
}

// Unmark stores p's JPEG as it was before restart markers were added
// (transcoded, it may no longer fit a page that holds it as it was), with
// why as NoRestarts, and reports whether it had been transcoded.
func (p *Prepared) Unmark(why error) bool {
	if p.unmarked == nil {
		return false
	}
	p.Data, p.Verbatim, p.Restarts, p.NoRestarts = p.unmarked, p.unmarkedVerbatim, false, why
	p.unmarked = nil
	return true
}

// addRestarts gives p's JPEG restart markers every ri MCUs, where it
// has none a crop can use.
func (p *Prepared) addRestarts(ri int) {
	if !p.JPEG || ri <= 0 {
		return
	}
	if jpeg.HasCropRestarts(p.Data) {
		p.Restarts = true
		return
	}
	data, _, err := jpeg.AddRestarts(p.Data, ri)
	if err != nil {
		p.NoRestarts = err
		return
	}
	p.unmarked, p.unmarkedVerbatim = p.Data, p.Verbatim
	p.Data, p.Verbatim, p.Restarts = data, false, true
}

// Mode is the storage mode of p.
func (p Prepared) Mode() beton.ImageMode {
	if p.JPEG {
		return beton.ModeJPEG
	}
	return beton.ModeRaw
}

// Scratch holds buffers that Prepare reuses from one image to the next. The
// zero value is ready to use; a Scratch must not be used by two Prepare calls
// at once.
type Scratch struct {
	pix  []byte       // decoded RGB pixels, for decoders that do not allocate their own
	rsz  []byte       // resized RGB pixels on their way to the JPEG encoder
	lut  []byte       // PNM sample scaling
	enc  bytes.Buffer // JPEG encoder output, copied out
	area resize.AreaScratch
}

// Prepare turns the image file src (read from path, which only labels errors)
// into what an RGB image field stores for it under opts:
//
//  1. The image is decoded to RGB as PIL's Image.convert("RGB") does:
//     grayscale is replicated, palettes looked up, alpha dropped without
//     compositing, CMYK converted with PIL's formula, 16-bit samples cut to
//     their high byte, except 16-bit grayscale, which PIL clips to 255. The
//     format comes from the content, not the name.
//  2. If opts.MaxResolution is set and the longer side exceeds it, the image
//     is shrunk to ResizedSize with OpenCV's INTER_AREA averaging.
//  3. It is stored as the mode says. In "jpg" mode (and in "smart" and
//     "proportion" mode when they choose a JPEG) a source JPEG that is 8-bit,
//     Huffman-coded, grayscale or YCbCr, complete, and within
//     MaxResolution is returned unchanged (Verbatim); any other image is
//     encoded with libjpeg-turbo at opts.JPEGQuality (4:2:0, like OpenCV's
//     imencode).
//
// With opts.RestartInterval, every JPEG stored is then transcoded with
// restart markers, losslessly; one that has usable markers already stays
// as it is, and one that cannot be transcoded too (Prepared.NoRestarts).
//
// rnd draws the "proportion" mode's choice (one Float64 per call) and is not
// used in other modes. scratch may be nil.
//
// Errors name path; Prepare does not panic on any input.
func Prepare(path string, src []byte, opts Options, rnd *rand.Rand, scratch *Scratch) (p Prepared, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = Prepared{}, fmt.Errorf("imagefolder: %s: decoder failure: %v", path, r)
		}
	}()
	if err := opts.Validate(); err != nil {
		return Prepared{}, err
	}
	if scratch == nil {
		scratch = new(Scratch)
	}
	p, err = prepare(src, &opts, rnd, scratch)
	if err != nil {
		return Prepared{}, fmt.Errorf("imagefolder: %s: %w", path, err)
	}
	p.addRestarts(opts.RestartInterval)
	return p, nil
}

// ErrFormat is wrapped by errors for content that is no supported image
// format.
var ErrFormat = errors.New("unrecognized or unsupported image format")

// ErrTooLarge is wrapped by errors for images with more pixels than PIL
// opens (its decompression-bomb limit, 2×89478485 pixels).
var ErrTooLarge = errors.New("image too large")

func prepare(src []byte, o *Options, rnd *rand.Rand, s *Scratch) (Prepared, error) {
	mode := o.Mode
	if mode == WriteProportion {
		if rnd == nil {
			return Prepared{}, errors.New("proportion mode needs a random source")
		}
		if rnd.Float64() < o.CompressProbability {
			mode = WriteJPG
		} else {
			mode = WriteRaw
		}
	}

	f := sniff(src)
	if len(src) == 0 {
		return Prepared{}, fmt.Errorf("%w: empty file", ErrFormat)
	}
	if f == formatUnknown {
		return Prepared{}, fmt.Errorf("%w (content starts with % x)", ErrFormat, src[:min(len(src), 8)])
	}
	var ji jpeg.Info
	if f == formatJPEG {
		var err error
		if ji, err = jpeg.Scan(src); err != nil {
			return Prepared{}, err
		}
		if err := checkPixels(ji.Width, ji.Height); err != nil {
			return Prepared{}, err
		}
		// Keep the file when it can be stored as it is.
		if (mode == WriteJPG || mode == WriteSmart) && !o.AlwaysEncode && ji.Portable() {
			_, _, resized := ResizedSize(ji.Width, ji.Height, o.MaxResolution)
			if !resized && (mode == WriteJPG || ji.Width*ji.Height*3 > o.SmartThreshold) {
				if err := jpeg.CheckConfig(src, &ji); err != nil {
					return Prepared{}, err
				}
				return Prepared{JPEG: true, Width: ji.Width, Height: ji.Height, Data: src, Verbatim: true}, nil
			}
		}
	}

	pix, w, h, owned, err := decode(src, f, &ji, s)
	if err != nil {
		return Prepared{}, err
	}
	return store(pix, w, h, owned, mode, o, s)
}

// PreparePixels is Prepare for an image given as pixels: h rows of w RGB
// pixels (w×h×3 bytes), as a dataset that decodes its own images gives
// them. The mode and the size are chosen as Prepare's are; Data may be pix
// itself (raw, not resized), which the caller then must not change.
func PreparePixels(pix []byte, w, h int, opts Options, rnd *rand.Rand, scratch *Scratch) (p Prepared, err error) {
	if err := opts.Validate(); err != nil {
		return Prepared{}, err
	}
	if w <= 0 || h <= 0 || len(pix) != w*h*3 {
		return Prepared{}, fmt.Errorf("imagefolder: %dx%d RGB pixels need %d bytes, got %d", w, h, w*h*3, len(pix))
	}
	if err := checkPixels(w, h); err != nil {
		return Prepared{}, fmt.Errorf("imagefolder: %w", err)
	}
	if scratch == nil {
		scratch = new(Scratch)
	}
	mode := opts.Mode
	if mode == WriteProportion {
		if rnd == nil {
			return Prepared{}, errors.New("imagefolder: proportion mode needs a random source")
		}
		if rnd.Float64() < opts.CompressProbability {
			mode = WriteJPG
		} else {
			mode = WriteRaw
		}
	}
	p, err = store(pix, w, h, true, mode, &opts, scratch)
	if err != nil {
		return Prepared{}, fmt.Errorf("imagefolder: %w", err)
	}
	p.addRestarts(opts.RestartInterval)
	return p, nil
}

// store stores decoded pixels as mode says (smart is decided here),
// resized to fit o.MaxResolution. owned says pix may be returned.
func store(pix []byte, w, h int, owned bool, mode string, o *Options, s *Scratch) (Prepared, error) {
	nw, nh, resized := ResizedSize(w, h, o.MaxResolution)
	if resized && (nw == 0 || nh == 0) {
		return Prepared{}, fmt.Errorf("resizing %dx%d to fit %d gives an empty %dx%d image", w, h, o.MaxResolution, nw, nh)
	}
	if mode == WriteSmart {
		if nw*nh*3 <= o.SmartThreshold {
			mode = WriteRaw
		} else {
			mode = WriteJPG
		}
	}

	if mode == WriteRaw {
		var out []byte
		switch {
		case resized:
			out = make([]byte, nw*nh*3)
			if err := resize.Area(out, nw, nh, pix, w, h, &s.area); err != nil {
				return Prepared{}, err
			}
		case owned:
			out = pix[: w*h*3 : w*h*3]
		default:
			out = bytes.Clone(pix[:w*h*3])
		}
		return Prepared{Width: nw, Height: nh, Data: out}, nil
	}

	if resized {
		s.rsz = grow(s.rsz, nw*nh*3)
		if err := resize.Area(s.rsz, nw, nh, pix, w, h, &s.area); err != nil {
			return Prepared{}, err
		}
		pix = s.rsz
	}
	s.enc.Reset()
	if err := jpeg.EncodeRGB(&s.enc, pix[:nw*nh*3], nw, nh, nw*3, o.JPEGQuality); err != nil {
		return Prepared{}, err
	}
	return Prepared{JPEG: true, Width: nw, Height: nh, Data: bytes.Clone(s.enc.Bytes())}, nil
}
