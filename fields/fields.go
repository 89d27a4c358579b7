// Package fields describes the fields of the batches that ffcvfeed makes,
// each a name, an element type and a shape whose first dimension is the
// batch size. The pipeline that fills batches (package pipeline) and the
// delivery that carries them (package cudafeed) both speak of them, and
// neither needs the other to do so.
package fields

import (
	"fmt"
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

// FromNumPy returns the dtype name of a NumPy type string as a beton stores
// it ("<f4", "|u1", "|b1", ...). Big-endian types are refused: batches hold
// little-endian numbers.
func FromNumPy(typestr string) (string, error) {
	s := typestr
	if len(s) > 0 && strings.ContainsRune("<>|=", rune(s[0])) {
		if s[0] == '>' && !(len(s) == 3 && s[2] == '1') {
			return "", fmt.Errorf("numpy type %q is big-endian; batches hold little-endian numbers", typestr)
		}
		s = s[1:]
	}
	names := map[string]string{
		"b1": "bool", "?1": "bool", "u1": "uint8", "i1": "int8",
		"u2": "uint16", "i2": "int16", "f2": "float16",
		"u4": "uint32", "i4": "int32", "f4": "float32",
		"u8": "uint64", "i8": "int64", "f8": "float64",
		"c8": "complex64", "c16": "complex128",
	}
	if n, ok := names[s]; ok {
		return n, nil
	}
	return "", fmt.Errorf("numpy type %q cannot be delivered (want a bool, integer, float or complex type)", typestr)
}
