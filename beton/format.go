package beton

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ffcvfs/ffcvfs/fields"
)

// Version is the only file-format version this package reads and writes.
const Version = 2

// Sizes of the fixed parts of a file.
const (
	HeaderSize     = 24
	DescriptorSize = 1041
	NameSize       = 16
	ArgsSize       = 1024
	AllocEntrySize = 24

	MinPageSize     = 1 << 21 // 2 MiB
	MaxPageSize     = 1 << 32 // exclusive
	DefaultPageSize = 1 << 23 // 8 MiB, the reference writer's default

	// MaxImageSide bounds an RGB image's width and height, which its
	// metadata holds as 16-bit numbers.
	MaxImageSide = 1<<16 - 1
)

// Sentinel errors. Every error this package returns for a bad file wraps one
// of them, so callers can tell a corrupt file from an I/O failure.
var (
	// ErrCorrupt marks a file that breaks a rule of the format.
	ErrCorrupt = errors.New("corrupt beton")
	// ErrVersion marks a file of another format version.
	ErrVersion = errors.New("unsupported beton version")
	// ErrNotBeton marks a file of another kind: an image, an archive, text.
	ErrNotBeton = errors.New("not a beton file")
	// ErrUnsupported marks a field this package cannot decode (custom fields).
	ErrUnsupported = errors.New("unsupported field")
	// ErrTooLarge marks a file whose tables would take more memory than
	// this machine has free.
	ErrTooLarge = errors.New("too large for this machine's memory")
)

// TypeID identifies the type of a field, as stored in its descriptor.
type TypeID uint8

// The built-in field types.
const (
	TypeFloat       TypeID = 0
	TypeInt         TypeID = 1
	TypeRGBImage    TypeID = 2
	TypeBytes       TypeID = 3
	TypeNDArray     TypeID = 4
	TypeJSON        TypeID = 5
	TypeTorchTensor TypeID = 6
	TypeCustom      TypeID = 255
)

var typeNames = map[TypeID]string{
	TypeFloat:       "float",
	TypeInt:         "int",
	TypeRGBImage:    "rgb_image",
	TypeBytes:       "bytes",
	TypeNDArray:     "ndarray",
	TypeJSON:        "json",
	TypeTorchTensor: "torch_tensor",
	TypeCustom:      "custom",
}

func (t TypeID) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Known reports whether t is a type this package understands (custom included).
func (t TypeID) Known() bool { _, ok := typeNames[t]; return ok }

// Variable reports whether a field of type t points at data in a page.
func (t TypeID) Variable() bool {
	switch t {
	case TypeRGBImage, TypeBytes, TypeNDArray, TypeJSON, TypeTorchTensor:
		return true
	}
	return false
}

// member returns the size and alignment of the field's member in a metadata
// record. Custom fields have no known layout.
func (t TypeID) member() (size, align int, ok bool) {
	switch t {
	case TypeFloat, TypeInt, TypeNDArray, TypeTorchTensor:
		return 8, 8, true
	case TypeRGBImage:
		return 13, 1, true
	case TypeBytes, TypeJSON:
		return 16, 1, true
	}
	return 0, 0, false
}

// ImageMode says how an RGB image's data is stored.
type ImageMode uint8

// Image modes.
const (
	ModeJPEG ImageMode = 0
	ModeRaw  ImageMode = 1
)

func (m ImageMode) String() string {
	switch m {
	case ModeJPEG:
		return "jpg"
	case ModeRaw:
		return "raw"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Header is the 24-byte file header.
type Header struct {
	Version       uint16
	NumFields     uint16
	PageSize      uint32
	NumSamples    uint64
	AllocTablePtr uint64
}

func (h *Header) marshal() []byte {
	b := make([]byte, HeaderSize)
	binary.LittleEndian.PutUint16(b[0:], h.Version)
	binary.LittleEndian.PutUint16(b[2:], h.NumFields)
	binary.LittleEndian.PutUint32(b[4:], h.PageSize)
	binary.LittleEndian.PutUint64(b[8:], h.NumSamples)
	binary.LittleEndian.PutUint64(b[16:], h.AllocTablePtr)
	return b
}

func unmarshalHeader(b []byte) Header {
	return Header{
		Version:       binary.LittleEndian.Uint16(b[0:]),
		NumFields:     binary.LittleEndian.Uint16(b[2:]),
		PageSize:      binary.LittleEndian.Uint32(b[4:]),
		NumSamples:    binary.LittleEndian.Uint64(b[8:]),
		AllocTablePtr: binary.LittleEndian.Uint64(b[16:]),
	}
}

// Field describes one field: its descriptor and, for arrays, the parsed
// arguments.
type Field struct {
	Type TypeID
	Name string
	Args [ArgsSize]byte

	// Shape and DType are set for ndarray and torch tensor fields.
	Shape []uint64
	DType string // numpy type string, e.g. "<f4"
}

// NDArrayField returns a Field of type ndarray with the given shape and numpy
// type string (e.g. "<f4"), its arguments encoded as the reference does.
func NDArrayField(name string, shape []uint64, dtype string) (Field, error) {
	f := Field{Type: TypeNDArray, Name: name, Shape: shape, DType: dtype}
	if len(shape) == 0 || len(shape) > 32 {
		return f, fmt.Errorf("ndarray field %q: %d dimensions, want 1 to 32", name, len(shape))
	}
	if _, err := dtypeItemSize(dtype); err != nil {
		return f, fmt.Errorf("ndarray field %q: %w", name, err)
	}
	desc, _ := json.Marshal([][]string{{"", dtype}})
	for i, d := range shape {
		binary.LittleEndian.PutUint64(f.Args[8*i:], d)
	}
	binary.LittleEndian.PutUint64(f.Args[256:], uint64(len(desc)))
	copy(f.Args[264:], desc)
	return f, nil
}

// parseArgs fills Shape and DType of array fields from Args.
func (f *Field) parseArgs() error {
	if f.Type != TypeNDArray && f.Type != TypeTorchTensor {
		return nil
	}
	f.Shape = f.Shape[:0]
	for i := 0; i < 32; i++ {
		d := binary.LittleEndian.Uint64(f.Args[8*i:])
		if d == 0 {
			break
		}
		f.Shape = append(f.Shape, d)
	}
	n := binary.LittleEndian.Uint64(f.Args[256:])
	if n > ArgsSize-264 {
		return fmt.Errorf("dtype description of %d bytes does not fit the arguments", n)
	}
	var descr []json.RawMessage
	if err := json.Unmarshal(f.Args[264:264+n], &descr); err != nil || len(descr) == 0 {
		return fmt.Errorf("dtype description %q is not numpy's descr JSON", f.Args[264:264+n])
	}
	var entry []string
	if err := json.Unmarshal(descr[0], &entry); err != nil || len(entry) < 2 || len(descr) != 1 {
		return fmt.Errorf("dtype description %q is not a single plain type", f.Args[264:264+n])
	}
	f.DType = entry[1]
	return nil
}

// ItemSize returns the byte size of one element of an array field, or an
// error for a dtype this package does not know.
func (f *Field) ItemSize() (int, error) { return dtypeItemSize(f.DType) }

// DataSize returns the byte size of one sample's data for an array field.
func (f *Field) DataSize() (uint64, error) {
	item, err := f.ItemSize()
	if err != nil {
		return 0, err
	}
	n := uint64(item)
	for _, d := range f.Shape {
		if d != 0 && n > (1<<62)/d {
			return 0, fmt.Errorf("shape %v overflows", f.Shape)
		}
		n *= d
	}
	return n, nil
}

func dtypeItemSize(dt string) (int, error) {
	t, err := fields.ParseNumPy(dt)
	return t.Size, err
}

func (f *Field) marshal() []byte {
	b := make([]byte, DescriptorSize)
	b[0] = byte(f.Type)
	copy(b[1:1+NameSize], f.Name) // the reference cuts names to 16 bytes
	copy(b[1+NameSize:], f.Args[:])
	return b
}

func unmarshalField(b []byte) Field {
	f := Field{Type: TypeID(b[0])}
	name := b[1 : 1+NameSize]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	f.Name = string(name)
	copy(f.Args[:], b[1+NameSize:DescriptorSize])
	return f
}

// RecordLayout is the C-aligned layout of a metadata record.
type RecordLayout struct {
	Offsets    []int // byte offset of each field's member
	RecordSize int
}

// NewRecordLayout computes the metadata record layout for fields, as numpy does
// for an aligned struct. Custom fields make the layout unknowable.
func NewRecordLayout(fields []Field) (RecordLayout, error) {
	var l RecordLayout
	off, maxAlign := 0, 1
	for _, f := range fields {
		size, align, ok := f.Type.member()
		if !ok {
			if f.Type == TypeCustom {
				return l, fmt.Errorf("field %q is a custom field (type 255): its layout needs the code that wrote it: %w", f.Name, ErrUnsupported)
			}
			return l, fmt.Errorf("field %q has unknown type id %d: %w", f.Name, uint8(f.Type), ErrCorrupt)
		}
		off = (off + align - 1) / align * align
		l.Offsets = append(l.Offsets, off)
		off += size
		if align > maxAlign {
			maxAlign = align
		}
	}
	l.RecordSize = (off + maxAlign - 1) / maxAlign * maxAlign
	return l, nil
}

func validPageSize(ps uint64) error {
	if ps < MinPageSize || ps >= MaxPageSize || ps&(ps-1) != 0 {
		return fmt.Errorf("page size %d is not a power of two between 2 MiB and 4 GiB", ps)
	}
	return nil
}

// notBeton is an ErrNotBeton whose message says it all already: it is
// ErrNotBeton to errors.Is, and does not repeat its text.
type notBeton string

func (e notBeton) Error() string        { return string(e) }
func (e notBeton) Is(target error) bool { return target == ErrNotBeton }
