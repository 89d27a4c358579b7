// Package fields describes the fields of the batches that ffcvfeed makes,
// each a name, an element type and a shape whose first dimension is the
// batch size. The pipeline that fills batches (package pipeline) and the
// delivery that carries them (package cudafeed) both speak of them, and
// neither needs the other to do so.
package fields

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Spec describes one field of a batch.
type Spec struct {
	Name  string
	DType string // one of DTypes' keys, e.g. "uint8", "float32", "int64"
	Shape []int  // per batch; Shape[0] is the batch size, e.g. [B, H, W, 3]
	// Ends, when set, makes the field variable-size: its bytes are one
	// flat buffer of up to Shape[0]×Shape[1] elements holding the batch's
	// samples one after another, and field Ends (int64, [B]) holds where
	// each sample ends (sample i is [Ends[i-1], Ends[i]), the first starts
	// at 0).
	Ends string
}

// DTypes gives the element size of every dtype a field may have: NumPy's
// names of little-endian numbers and of bool.
var DTypes = map[string]int{
	"bool": 1, "uint8": 1, "int8": 1,
	"uint16": 2, "int16": 2, "float16": 2,
	"uint32": 4, "int32": 4, "float32": 4,
	"uint64": 8, "int64": 8, "float64": 8,
	"complex64": 8, "complex128": 16,
}

// EndsSuffix names the companion field of a variable-size field NAME:
// NAME + EndsSuffix.
const EndsSuffix = ".ends"

// NumPyType is a NumPy type string of a number or bool, read: "<f4" is a
// little-endian float of 4 bytes.
type NumPyType struct {
	Kind      byte // 'b' bool, 'i' signed integer, 'u' unsigned, 'f' float, 'c' complex
	Size      int  // bytes of one element
	BigEndian bool // '>' and more than one byte
}

// numpySizes are the sizes NumPy gives each kind.
var numpySizes = map[byte][]int{
	'b': {1}, 'i': {1, 2, 4, 8}, 'u': {1, 2, 4, 8},
	'f': {2, 4, 8, 12, 16}, 'c': {8, 16, 24, 32},
}

// ParseNumPy reads a NumPy type string as a beton or a .npy file stores
// it ("<f4", "|u1", "|b1", ">i8", ...): the project's one reader of them.
// Strings, objects, dates and records are refused.
func ParseNumPy(typestr string) (NumPyType, error) {
	var t NumPyType
	s := typestr
	if len(s) > 0 && strings.ContainsRune("<>|=", rune(s[0])) {
		t.BigEndian = s[0] == '>'
		s = s[1:]
	}
	if len(s) < 2 {
		return t, fmt.Errorf("numpy type %q: want a bool, integer, float or complex type such as <f4", typestr)
	}
	t.Kind = s[0]
	if t.Kind == '?' {
		t.Kind = 'b'
	}
	n, err := strconv.Atoi(s[1:])
	if err != nil || !slices.Contains(numpySizes[t.Kind], n) {
		return t, fmt.Errorf("numpy type %q: want a bool, integer, float or complex type such as <f4", typestr)
	}
	t.Size = n
	t.BigEndian = t.BigEndian && n > 1
	return t, nil
}

// Name is the dtype name of t, one of DTypes' keys ("float32"), or "" for
// a type batches cannot hold (long doubles).
func (t NumPyType) Name() string {
	prefix := map[byte]string{'b': "bool", 'i': "int", 'u': "uint", 'f': "float", 'c': "complex"}[t.Kind]
	name := prefix
	if t.Kind != 'b' {
		name += strconv.Itoa(8 * t.Size)
	}
	if DTypes[name] != t.Size {
		return ""
	}
	return name
}

// FromNumPy returns the dtype name of a NumPy type string as a beton stores
// it ("<f4", "|u1", "|b1", ...). Big-endian types are refused: batches hold
// little-endian numbers.
func FromNumPy(typestr string) (string, error) {
	t, err := ParseNumPy(typestr)
	if err != nil {
		return "", fmt.Errorf("numpy type %q cannot be delivered (want a bool, integer, float or complex type)", typestr)
	}
	if t.BigEndian {
		return "", fmt.Errorf("numpy type %q is big-endian; batches hold little-endian numbers", typestr)
	}
	name := t.Name()
	if name == "" {
		return "", fmt.Errorf("numpy type %q cannot be delivered (want a bool, integer, float or complex type of at most 8 bytes, or complex128)", typestr)
	}
	return name, nil
}
