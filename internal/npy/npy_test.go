package npy

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/fields"
)

// file makes a version-1 .npy file as numpy.save does.
func file(descr, shape string, data []byte) []byte {
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
	h += strings.Repeat(" ", 63-(10+len(h))%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(b[8:], uint16(len(h)))
	return append(append(b, h...), data...)
}

func TestRead(t *testing.T) {
	f8 := binary.LittleEndian.AppendUint64(nil, math.Float64bits(0.25))
	f8 = binary.LittleEndian.AppendUint64(f8, math.Float64bits(-3))
	a, err := Read(file("<f8", "2,", f8))
	if err != nil || a.Len() != 2 || a.Float64s()[0] != 0.25 || a.Float64s()[1] != -3 {
		t.Fatalf("float64 array: %+v, %v", a, err)
	}
	a, err = Read(file("|u1", "2, 3", []byte{1, 2, 3, 4, 5, 255}))
	if err != nil || len(a.Shape) != 2 || a.Shape[1] != 3 || a.Float64s()[5] != 255 {
		t.Fatalf("uint8 array: %+v, %v", a, err)
	}
	if a := mustRead(t, file("|b1", "2,", []byte{0, 1})); a.DType != "bool" || a.Float64s()[1] != 1 {
		t.Errorf("bool array: %+v", a)
	}
	i8 := binary.LittleEndian.AppendUint64(nil, 7)
	if v, err := mustRead(t, file("<i8", "1,", i8)).Int64s(); err != nil || v[0] != 7 {
		t.Errorf("int64 array: %v, %v", v, err)
	}
	if _, err := mustRead(t, file("<f8", "2,", f8)).Int64s(); err == nil {
		t.Error("0.25 read as a whole number")
	}
	for _, bad := range [][]byte{
		[]byte("not npy"),
		file("<f8", "3,", f8),           // too few bytes
		file(">f8", "2,", f8),           // big-endian
		file("<U4", "2,", f8),           // strings
		file("<c8", "2,", f8),           // complex
		file("<f8", "99999999999,", f8), // huge
	} {
		if _, err := Read(bad); err == nil {
			t.Errorf("%q accepted", bad[:min(len(bad), 80)])
		}
	}
}

func mustRead(t *testing.T, b []byte) *Array {
	t.Helper()
	a, err := Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// FuzzRead: no input makes Read panic, and what it accepts is consistent.
func FuzzRead(f *testing.F) {
	f.Add(file("|u1", "2, 3", []byte{1, 2, 3, 4, 5, 6}))
	f.Add(file("<f8", "1,", make([]byte, 8)))
	f.Add(file("<i4", "", make([]byte, 4)))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Read(b)
		if err != nil {
			return
		}
		size := fields.DTypes[a.DType]
		if len(a.Data) != a.Len()*size {
			t.Fatalf("%d bytes for %v of %s", len(a.Data), a.Shape, a.Descr)
		}
		a.Float64s()
		a.Int64s()
	})
}
