package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/imagefolder"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

// Format and Version are the header's "format" and "version".
const (
	Format  = "ffcvfs-stream"
	Version = 1
)

// Frame kinds.
const (
	KindHeader = 'H'
	KindSample = 'S'
	KindError  = 'E'
)

// Image forms of an rgb_image value.
const (
	FormFile   = 0
	FormPixels = 1
)

// Bounds on what a stream may declare.
const (
	MaxHeaderSize   = 1 << 20
	DefaultMaxFrame = 256 << 20
	MaxFields       = 256
	// NoField is an error frame's field index when the error concerns no
	// single field.
	NoField = 0xFFFF
)

// Header is a stream's first frame.
type Header struct {
	Format   string  `json:"format"`
	Version  int     `json:"version"`
	Samples  int64   `json:"samples"`
	PageSize int64   `json:"page_size,omitempty"`
	Seed     int64   `json:"seed,omitempty"`
	Fields   []Field `json:"fields"`
}

// Field is one field of a header, with FFCV's arguments.
type Field struct {
	Name string `json:"name"`
	Type string `json:"type"`

	// rgb_image
	WriteMode           string   `json:"write_mode,omitempty"`
	MaxResolution       int      `json:"max_resolution,omitempty"`
	SmartThreshold      *int     `json:"smart_threshold,omitempty"`
	JPEGQuality         int      `json:"jpeg_quality,omitempty"`
	CompressProbability *float64 `json:"compress_probability,omitempty"`
	// RestartInterval: MCUs between the restart markers every JPEG
	// stored gets (jpeg.AddRestarts); absent: jpeg.DefaultRestartInterval,
	// 0: none, JPEGs as they are.
	RestartInterval *int `json:"restart_interval,omitempty"`

	// ndarray, torch_tensor
	DType string   `json:"dtype,omitempty"`
	Shape []uint64 `json:"shape,omitempty"`
}

var fieldTypes = map[string]beton.TypeID{
	"int": beton.TypeInt, "float": beton.TypeFloat, "rgb_image": beton.TypeRGBImage, "bytes": beton.TypeBytes,
	"json": beton.TypeJSON, "ndarray": beton.TypeNDArray, "torch_tensor": beton.TypeTorchTensor,
}

// field is a checked Field: its beton field and, for images, the options.
type field struct {
	spec  Field
	beton beton.Field
	image imagefolder.Options
	size  uint64 // arrays: bytes per value
}

// check turns the header's fields into beton fields, refusing with a
// sentence what a beton cannot hold.
func (h *Header) check(pageSize int64) ([]field, error) {
	if h.Format != Format {
		return nil, fmt.Errorf("the header's format is %q, not %q", h.Format, Format)
	}
	if h.Version != Version {
		return nil, fmt.Errorf("stream version %d; this writer reads version %d", h.Version, Version)
	}
	if h.Samples < 0 || h.Samples >= math.MaxUint32 {
		return nil, fmt.Errorf("the header's sample count %d is out of range (0 to %d)", h.Samples, uint32(math.MaxUint32-1))
	}
	if len(h.Fields) == 0 || len(h.Fields) > MaxFields {
		return nil, fmt.Errorf("the header has %d fields; a stream has 1 to %d", len(h.Fields), MaxFields)
	}
	fs := make([]field, len(h.Fields))
	seen := map[string]bool{}
	for i, spec := range h.Fields {
		f := &fs[i]
		f.spec = spec
		if spec.Name == "" || len(spec.Name) > beton.NameSize || !utf8.ValidString(spec.Name) {
			return nil, fmt.Errorf("field %d: name %q: a name has 1 to %d bytes", i, spec.Name, beton.NameSize)
		}
		if seen[spec.Name] {
			return nil, fmt.Errorf("field %q appears twice", spec.Name)
		}
		seen[spec.Name] = true
		t, ok := fieldTypes[spec.Type]
		if !ok {
			return nil, fmt.Errorf("field %q: unknown type %q (want int, float, rgb_image, bytes, json, ndarray or torch_tensor)", spec.Name, spec.Type)
		}
		switch t {
		case beton.TypeNDArray, beton.TypeTorchTensor:
			bf, err := beton.NDArrayField(spec.Name, spec.Shape, spec.DType)
			if err != nil {
				return nil, err
			}
			bf.Type = t
			if f.size, err = bf.DataSize(); err != nil {
				return nil, fmt.Errorf("field %q: %w", spec.Name, err)
			}
			// Refused here, not at every sample.
			switch {
			case f.size == 0:
				return nil, fmt.Errorf("field %q: shape %v of %s holds no element; an array field holds at least one", spec.Name, spec.Shape, spec.DType)
			case f.size > uint64(pageSize):
				return nil, fmt.Errorf("field %q: shape %v of %s takes %d bytes, more than a page (%d bytes), which must hold it", spec.Name, spec.Shape, spec.DType, f.size, pageSize)
			}
			f.beton = bf
		case beton.TypeRGBImage:
			o := imagefolder.Options{
				Mode:            spec.WriteMode,
				MaxResolution:   spec.MaxResolution,
				JPEGQuality:     spec.JPEGQuality,
				RestartInterval: jpeg.DefaultRestartInterval,
				SmartThreshold:  math.MaxInt, // FFCV: no threshold, never a JPEG
			}
			if spec.RestartInterval != nil {
				o.RestartInterval = *spec.RestartInterval
			}
			if spec.SmartThreshold != nil {
				if *spec.SmartThreshold < 0 {
					return nil, fmt.Errorf("field %q: smart_threshold %d is negative", spec.Name, *spec.SmartThreshold)
				}
				// JPEG when width×height×3 > the threshold, as FFCV; 0
				// would mean the default to Options, 1 means the same.
				o.SmartThreshold = max(*spec.SmartThreshold, 1)
			}
			if p := spec.CompressProbability; p != nil {
				if *p == 0 && o.Mode == imagefolder.WriteProportion {
					o.Mode = imagefolder.WriteRaw // no image is compressed
				}
				o.CompressProbability = *p
			}
			if err := o.Validate(); err != nil {
				return nil, fmt.Errorf("field %q: %w", spec.Name, err)
			}
			f.image = o
			f.beton = beton.Field{Type: t, Name: spec.Name}
		default:
			f.beton = beton.Field{Type: t, Name: spec.Name}
		}
	}
	return fs, nil
}

// frameReader reads the frames of one stream.
type frameReader struct {
	r        *bufio.Reader
	name     string
	maxFrame int64
	word     [5]byte
}

// frameSlack is what a frame holds beyond its sample's data, at most: a
// frame of a page and this much is always read.
const frameSlack = 1 << 20

// smallFrame: frames up to this size are read into a buffer of their size
// at once; larger ones as their bytes arrive.
const smallFrame = 1 << 20

// buffered returns the bytes at hand without a read.
func (f *frameReader) buffered() int { return f.r.Buffered() }

// errEnd is the end of a stream at a frame boundary.
var errEnd = errors.New("end of stream")

// next reads one frame: its kind and body. A stream that ends at a frame
// boundary gives errEnd; within a frame, an error naming the stream.
func (f *frameReader) next() (byte, []byte, error) {
	if _, err := io.ReadFull(f.r, f.word[:]); err != nil {
		if err == io.EOF {
			return 0, nil, errEnd
		}
		return 0, nil, fmt.Errorf("%s: reading a frame: %w", f.name, err)
	}
	size := int64(binary.LittleEndian.Uint32(f.word[:]))
	kind := f.word[4]
	if size < 1 || size > f.maxFrame {
		return 0, nil, fmt.Errorf("%s: a frame of %d bytes; frames hold 1 to %d, a page and %d bytes (ffcvfs write --max-sample-size raises it)", f.name, size, f.maxFrame, frameSlack)
	}
	if size <= smallFrame {
		body := make([]byte, size-1)
		if n, err := io.ReadFull(f.r, body); err != nil {
			return 0, nil, fmt.Errorf("%s: a frame of %d bytes ended after %d: %w", f.name, size, n+1, errOrEOF(err))
		}
		return kind, body, nil
	}
	// Read as the bytes arrive: a size word alone allocates little.
	var buf bytes.Buffer
	if n, err := io.CopyN(&buf, f.r, size-1); err != nil {
		return 0, nil, fmt.Errorf("%s: a frame of %d bytes ended after %d: %w", f.name, size, n+1, errOrEOF(err))
	}
	return kind, buf.Bytes(), nil
}

func errOrEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readHeader reads and parses a stream's header.
func (f *frameReader) readHeader() (*Header, error) {
	if _, err := io.ReadFull(f.r, f.word[:]); err != nil {
		return nil, fmt.Errorf("%s: no header: %w", f.name, errOrEOF(err))
	}
	size := int64(binary.LittleEndian.Uint32(f.word[:]))
	if f.word[4] != KindHeader || size < 2 || size > MaxHeaderSize {
		return nil, fmt.Errorf("%s: not an ffcvfs sample stream (it starts with % x, not a header frame)", f.name, f.word[:])
	}
	body := make([]byte, size-1)
	if _, err := io.ReadFull(f.r, body); err != nil {
		return nil, fmt.Errorf("%s: the header ended early: %w", f.name, errOrEOF(err))
	}
	var h Header
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%s: the header is not the JSON a stream starts with: %w", f.name, err)
	}
	return &h, nil
}

// sample is one parsed sample frame: its values, images still to prepare.
type sample struct {
	id     int64
	values []beton.Value
	forms  []byte // per field, for images
	err    error  // met while preparing

	verbatim bool // an image is the file sent, byte for byte
	restarts int  // images given or kept with restart markers
	// noRestarts: an image stored without the restart markers asked for,
	// and why.
	noRestarts string
	noRestartN int
	cost       int64 // the bytes it holds until written, as heldBytes estimates
}

// heldBytes estimates what an image value of f takes once prepared,
// beyond its frame: its pixels (w×h×3, resized to fit the field's
// max_resolution), from the size the frame or the file's header gives,
// before anything is decoded; 0 for a file it cannot read the size of
// (preparing it fails) or that is stored as it is (a JPEG within bounds,
// whose bytes are the frame's).
func (f *field) heldBytes(form byte, v *beton.Value) int64 {
	w, h, ok := v.Width, v.Height, true
	if form == FormFile {
		w, h, ok = imagefolder.Size(v.Data)
	}
	if !ok || w <= 0 || h <= 0 || w > beton.MaxImageSide || h > beton.MaxImageSide {
		return 0
	}
	nw, nh, resized := imagefolder.ResizedSize(w, h, f.image.MaxResolution)
	if form == FormFile && !resized && f.image.Mode == imagefolder.WriteJPG && jpeg.HasSignature(v.Data) {
		return 0 // most likely kept byte for byte
	}
	return int64(nw) * int64(nh) * 3
}

// parseSample parses a sample frame's body against fields.
func parseSample(body []byte, fields []field) (*sample, error) {
	if len(body) < 8 {
		return nil, fmt.Errorf("a sample frame of %d bytes has no id", len(body)+1)
	}
	s := &sample{id: int64(binary.LittleEndian.Uint64(body)), values: make([]beton.Value, len(fields)), forms: make([]byte, len(fields)), cost: int64(len(body))}
	if s.id < 0 {
		return nil, fmt.Errorf("sample id %d is out of range", uint64(s.id))
	}
	p := body[8:]
	short := func(i int) error {
		return fmt.Errorf("sample %d, field %q: the frame ends within the value", s.id, fields[i].spec.Name)
	}
	for i := range fields {
		v := &s.values[i]
		switch fields[i].beton.Type {
		case beton.TypeInt, beton.TypeFloat:
			if len(p) < 8 {
				return nil, short(i)
			}
			u := binary.LittleEndian.Uint64(p)
			v.Int, v.Float = int64(u), math.Float64frombits(u)
			p = p[8:]
		case beton.TypeRGBImage:
			if len(p) < 13 {
				return nil, short(i)
			}
			s.forms[i] = p[0]
			v.Width, v.Height = int(binary.LittleEndian.Uint32(p[1:])), int(binary.LittleEndian.Uint32(p[5:]))
			n := uint64(binary.LittleEndian.Uint32(p[9:]))
			p = p[13:]
			if uint64(len(p)) < n {
				return nil, short(i)
			}
			v.Data, p = p[:n:n], p[n:]
			if s.forms[i] != FormFile && s.forms[i] != FormPixels {
				return nil, fmt.Errorf("sample %d, field %q: image form %d (want 0, a file, or 1, pixels)", s.id, fields[i].spec.Name, s.forms[i])
			}
			s.cost += fields[i].heldBytes(s.forms[i], v)
		default:
			if len(p) < 4 {
				return nil, short(i)
			}
			n := uint64(binary.LittleEndian.Uint32(p))
			p = p[4:]
			if uint64(len(p)) < n {
				return nil, short(i)
			}
			v.Data, p = p[:n:n], p[n:]
		}
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("sample %d: %d bytes after the last field's value", s.id, len(p))
	}
	return s, nil
}

// parseError parses an error frame's body.
func parseError(body []byte, fields []field) error {
	if len(body) < 10 {
		return errors.New("the producer sent an error frame too short to say which sample")
	}
	id := binary.LittleEndian.Uint64(body)
	fi := int(binary.LittleEndian.Uint16(body[8:]))
	msg := string(body[10:])
	if !utf8.ValidString(msg) {
		msg = fmt.Sprintf("%q", msg)
	}
	if fi < len(fields) {
		return fmt.Errorf("sample %d, field %q: %s", id, fields[fi].spec.Name, msg)
	}
	return fmt.Errorf("sample %d: %s", id, msg)
}

// validJSON reports whether b is JSON text as Python's json module writes
// and reads it, which FFCV's JSONField uses: standard JSON, with the values
// NaN, Infinity and -Infinity, which it writes for such floats.
func validJSON(b []byte) bool {
	if json.Valid(b) {
		return true
	}
	std, ok := withoutNonFinite(b)
	return ok && json.Valid(std)
}

// withoutNonFinite returns b with each NaN, Infinity and -Infinity where a
// value begins (outside strings) replaced by 0, and whether it held one.
func withoutNonFinite(b []byte) ([]byte, bool) {
	var out []byte
	found, inString, escaped := false, false, false
	valueNext := true // the last byte outside strings and white space was [ , : or none
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			out = append(out, c)
			continue
		}
		if valueNext {
			if tok := nonFinite(b[i:]); tok > 0 {
				out = append(out, '0')
				i += tok - 1
				found, valueNext = true, false
				continue
			}
		}
		switch c {
		case ' ', '\t', '\n', '\r':
		case '[', ',', ':':
			valueNext = true
		case '"':
			inString, valueNext = true, false
		default:
			valueNext = false
		}
		out = append(out, c)
	}
	return out, found
}

// nonFinite returns the length of the non-finite value b starts with, 0
// for none.
func nonFinite(b []byte) int {
	for _, tok := range []string{"NaN", "Infinity", "-Infinity"} {
		if bytes.HasPrefix(b, []byte(tok)) {
			return len(tok)
		}
	}
	return 0
}
