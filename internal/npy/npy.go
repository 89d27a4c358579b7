// Package npy reads NumPy's .npy files (format versions 1 to 3): the
// arrays FFCV users hold their poison masks, weights and index lists in.
// Written here because the format is a dozen lines of header and no
// maintained Go module reads it without pulling in far more.
package npy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/ffcvfs/ffcvfs/fields"
	"github.com/ffcvfs/ffcvfs/internal/half"
	"github.com/ffcvfs/ffcvfs/internal/readfile"
)

// Array is a C-ordered array: its NumPy type string, shape and bytes.
type Array struct {
	Descr string // e.g. "|u1", "<f8", "<i8"
	// DType is Descr's name as package fields gives it ("uint8",
	// "float64", ...): a little-endian integer, float or bool.
	DType string
	Shape []int
	Data  []byte
}

// MaxBytes bounds what ReadFile reads.
const MaxBytes = 1 << 30

var magic = []byte("\x93NUMPY")

var (
	descrRE = regexp.MustCompile(`'descr':\s*'([^']*)'`)
	fortRE  = regexp.MustCompile(`'fortran_order':\s*(True|False)`)
	shapeRE = regexp.MustCompile(`'shape':\s*\(([^)]*)\)`)
)

// maxHeader bounds a .npy header: NumPy writes tens of bytes (aligned to
// 64), and version 2's 4-byte length could otherwise claim gigabytes.
const maxHeader = 1 << 16

// header reads the header at the start of b (which may hold the data too,
// or only the header): the array without its data, where the data starts,
// and its length in bytes.
func header(b []byte) (a *Array, start, dataLen int, err error) {
	if len(b) < 10 || !bytes.Equal(b[:6], magic) {
		return nil, 0, 0, errors.New("not a .npy file (no \\x93NUMPY magic)")
	}
	var hlen int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:])), 10
	case 2, 3:
		if len(b) < 12 {
			return nil, 0, 0, errors.New(".npy header cut short")
		}
		h := binary.LittleEndian.Uint32(b[8:])
		if h > maxHeader {
			return nil, 0, 0, fmt.Errorf(".npy header of %d bytes: at most %d", h, maxHeader)
		}
		hlen, start = int(h), 12
	default:
		return nil, 0, 0, fmt.Errorf(".npy format version %d.%d is not known", b[6], b[7])
	}
	if start+hlen > len(b) {
		return nil, 0, 0, fmt.Errorf(".npy header of %d bytes in %d", hlen, len(b))
	}
	h := string(b[start : start+hlen])
	d, f, sh := descrRE.FindStringSubmatch(h), fortRE.FindStringSubmatch(h), shapeRE.FindStringSubmatch(h)
	if d == nil || f == nil || sh == nil {
		return nil, 0, 0, fmt.Errorf(".npy header %q lacks descr, fortran_order or shape", h)
	}
	if f[1] == "True" {
		return nil, 0, 0, errors.New(".npy array is in Fortran order; save it C-ordered (np.ascontiguousarray)")
	}
	a = &Array{Descr: d[1]}
	if a.DType, err = fields.FromNumPy(a.Descr); err != nil || strings.HasPrefix(a.DType, "complex") {
		return nil, 0, 0, fmt.Errorf(".npy type %q: want a little-endian integer, float or bool", a.Descr)
	}
	size := fields.DTypes[a.DType]
	n := 1
	for _, p := range strings.Split(sh[1], ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		k, err := strconv.Atoi(p)
		if err != nil || k < 0 || k > MaxBytes {
			return nil, 0, 0, fmt.Errorf(".npy shape (%s): %q is not a dimension", sh[1], p)
		}
		a.Shape = append(a.Shape, k)
		if n = n * k; n > MaxBytes {
			return nil, 0, 0, fmt.Errorf(".npy shape (%s) is too large", sh[1])
		}
	}
	return a, start + hlen, n * size, nil
}

// Read parses a .npy file's bytes.
func Read(b []byte) (*Array, error) {
	a, start, n, err := header(b)
	if err != nil {
		return nil, err
	}
	if data := b[start:]; len(data) != n {
		return nil, fmt.Errorf(".npy array of shape %v and type %s needs %d bytes, the file holds %d", a.Shape, a.Descr, n, len(data))
	}
	a.Data = b[start:]
	return a, nil
}

// ReadFile reads a .npy file, at most MaxBytes.
func ReadFile(path string) (*Array, error) {
	return ReadFileMax(path, MaxBytes)
}

// ReadFileMax reads a .npy file of at most maxElems elements. The header is
// read first, and an array of more elements, or a file whose size is not
// the header's and the data's, is refused before its data is read.
func ReadFileMax(path string, maxElems int) (*Array, error) {
	f, size, err := readfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, min(size, maxHeader+12))
	if _, err := io.ReadFull(f, head); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a, start, n, err := header(head)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if elems := a.Len(); elems > maxElems {
		return nil, fmt.Errorf("%s: an array of shape %v (%d elements); at most %d here", path, a.Shape, elems, maxElems)
	}
	if size != int64(start+n) {
		return nil, fmt.Errorf("%s: an array of shape %v and type %s needs %d bytes after its header, the file holds %d", path, a.Shape, a.Descr, n, size-int64(start))
	}
	b := make([]byte, start+n)
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Read(b)
}

// Len is the number of elements.
func (a *Array) Len() int {
	n := 1
	for _, d := range a.Shape {
		n *= d
	}
	return n
}

// Float64s returns the values as float64.
func (a *Array) Float64s() []float64 {
	out := make([]float64, a.Len())
	for i := range out {
		out[i] = a.at(i)
	}
	return out
}

// Int64s returns the values as int64, or an error naming one that is not
// a whole number.
func (a *Array) Int64s() ([]int64, error) {
	out := make([]int64, a.Len())
	for i := range out {
		v := a.at(i)
		if v != float64(int64(v)) {
			return nil, fmt.Errorf("value %d, %v, is not a whole number", i, v)
		}
		out[i] = int64(v)
	}
	return out, nil
}

func (a *Array) at(i int) float64 {
	b := a.Data
	switch a.DType {
	case "uint8", "bool":
		return float64(b[i])
	case "int8":
		return float64(int8(b[i]))
	case "uint16":
		return float64(binary.LittleEndian.Uint16(b[2*i:]))
	case "int16":
		return float64(int16(binary.LittleEndian.Uint16(b[2*i:])))
	case "float16":
		return float64(half.Value(binary.LittleEndian.Uint16(b[2*i:])))
	case "uint32":
		return float64(binary.LittleEndian.Uint32(b[4*i:]))
	case "int32":
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case "float32":
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case "uint64":
		return float64(binary.LittleEndian.Uint64(b[8*i:]))
	case "int64":
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	case "float64":
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return 0
}
