package fields

import "testing"

func TestFromNumPy(t *testing.T) {
	for typestr, want := range map[string]string{
		"|u1": "uint8", "<u1": "uint8", ">u1": "uint8", "|i1": "int8", "|b1": "bool", "?1": "bool",
		"<u2": "uint16", "<i2": "int16", "<f2": "float16", "=f4": "float32",
		"<u4": "uint32", "<i4": "int32", "<f4": "float32",
		"<u8": "uint64", "<i8": "int64", "<f8": "float64", "<c8": "complex64", "<c16": "complex128",
	} {
		if got, err := FromNumPy(typestr); got != want || err != nil {
			t.Errorf("FromNumPy(%q) = %q, %v; want %q", typestr, got, err, want)
		}
	}
	for _, bad := range []string{"", "<", "<f", ">f4", ">i8", "<f16", "<c32", "<U4", "|S10", "|O", "<M8", "<f3", "<i16", "<u4x", "<f-4", "<f99999999999999999999", "V8"} {
		if got, err := FromNumPy(bad); err == nil {
			t.Errorf("FromNumPy(%q) = %q, want an error", bad, got)
		}
	}
}

// Betons may hold what batches cannot: big-endian numbers and long doubles
// are read for their size.
func TestParseNumPy(t *testing.T) {
	for typestr, want := range map[string]NumPyType{
		">f8": {Kind: 'f', Size: 8, BigEndian: true}, ">u1": {Kind: 'u', Size: 1},
		"<f16": {Kind: 'f', Size: 16}, "?1": {Kind: 'b', Size: 1}, "<c32": {Kind: 'c', Size: 32},
	} {
		if got, err := ParseNumPy(typestr); got != want || err != nil {
			t.Errorf("ParseNumPy(%q) = %+v, %v; want %+v", typestr, got, err, want)
		}
	}
}

func FuzzParseNumPy(f *testing.F) {
	for _, s := range []string{"<f4", "|u1", ">i8", "<c16", "?1", "<U4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := ParseNumPy(s)
		if err != nil {
			return
		}
		if typ.Size < 1 || typ.Size > 32 {
			t.Fatalf("%q: size %d", s, typ.Size)
		}
		if name := typ.Name(); name != "" && DTypes[name] != typ.Size {
			t.Fatalf("%q: %s of %d bytes", s, name, typ.Size)
		}
	})
}
