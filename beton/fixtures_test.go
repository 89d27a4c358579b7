package beton_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// manifest is what the reference reader sees in a fixture.
type manifest struct {
	NumSamples int             `json:"num_samples"`
	PageSize   uint32          `json:"page_size"`
	Fields     json.RawMessage `json:"fields"`
	Header     struct {
		Version       uint16 `json:"version"`
		NumFields     uint16 `json:"num_fields"`
		AllocTablePtr uint64 `json:"alloc_table_ptr"`
	} `json:"header"`
	ItemSize     int                          `json:"metadata_itemsize"`
	Offsets      []int                        `json:"metadata_offsets"`
	AllocEntries int                          `json:"alloc_entries"`
	Samples      []map[string]json.RawMessage `json:"samples"`
}

type manifestField struct {
	Name   string
	TypeID uint8 `json:"type_id"`
}

// orderedFields decodes the "fields" object keeping its key order.
func orderedFields(t *testing.T, raw json.RawMessage) []manifestField {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var out []manifestField
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var f manifestField
		if err := dec.Decode(&f); err != nil {
			t.Fatal(err)
		}
		f.Name = tok.(string)
		out = append(out, f)
	}
	return out
}

// fixtureBetons returns the paths of the fixture betons (decompressed from
// the repository's testdata/beton), each with its manifest beside it.
func fixtureBetons(t testing.TB) []string {
	t.Helper()
	dir := testenv.Fixture(t, "beton")
	paths, err := filepath.Glob(filepath.Join(dir, "*.beton"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no .beton fixtures in %s", dir)
	}
	return paths
}

func readManifest(t *testing.T, path string) manifest {
	t.Helper()
	b, err := os.ReadFile(path + ".manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

var numpyNames = map[string]string{"float32": "<f4", "float64": "<f8", "int64": "<i8", "int32": "<i4", "uint8": "|u1", "int16": "<i2", "float16": "<f2"}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestFixtures(t *testing.T) {
	for _, path := range fixtureBetons(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			m := readManifest(t, path)
			f, err := beton.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			checkAgainstManifest(t, f, m)
			if errs := beton.Verify(f, beton.VerifyOptions{All: true}); len(errs) > 0 {
				t.Errorf("Verify: %v", errs)
			}
		})
	}
}

func checkAgainstManifest(t *testing.T, f *beton.File, m manifest) {
	t.Helper()
	h := f.Header()
	if h.Version != m.Header.Version || h.NumFields != m.Header.NumFields || h.AllocTablePtr != m.Header.AllocTablePtr {
		t.Errorf("header %+v, manifest %+v", h, m.Header)
	}
	if f.NumSamples() != m.NumSamples || h.PageSize != m.PageSize {
		t.Errorf("samples %d page size %d, manifest %d %d", f.NumSamples(), h.PageSize, m.NumSamples, m.PageSize)
	}
	mf := orderedFields(t, m.Fields)
	fields := f.Fields()
	if len(mf) != len(fields) {
		t.Fatalf("%d fields, manifest %d", len(fields), len(mf))
	}
	for i := range mf {
		if fields[i].Name != mf[i].Name || uint8(fields[i].Type) != mf[i].TypeID {
			t.Errorf("field %d: %q type %d, manifest %q type %d", i, fields[i].Name, fields[i].Type, mf[i].Name, mf[i].TypeID)
		}
	}
	if l := f.RecordLayout(); l.RecordSize != m.ItemSize || !equalInts(l.Offsets, m.Offsets) {
		t.Errorf("layout %+v, manifest size %d offsets %v", l, m.ItemSize, m.Offsets)
	}
	if len(f.Allocs()) != m.AllocEntries {
		t.Errorf("%d allocation entries, manifest %d", len(f.Allocs()), m.AllocEntries)
	}
	var buf []byte
	for s, want := range m.Samples {
		for fi, fd := range fields {
			raw := want[fd.Name]
			switch fd.Type {
			case beton.TypeInt:
				var v int64
				mustJSON(t, raw, &v)
				if got := f.Int(s, fi); got != v {
					t.Errorf("sample %d %s: %d, want %d", s, fd.Name, got, v)
				}
			case beton.TypeFloat:
				var v float64
				mustJSON(t, raw, &v)
				if got := f.Float(s, fi); got != v {
					t.Errorf("sample %d %s: %v, want %v", s, fd.Name, got, v)
				}
			case beton.TypeRGBImage:
				var v struct {
					Mode          string
					Width, Height int
					DataPtr       uint64 `json:"data_ptr"`
					Size          uint64
					SHA256        string
				}
				mustJSON(t, raw, &v)
				img, err := f.Image(s, fi)
				if err != nil {
					t.Fatal(err)
				}
				if img.Mode.String() != v.Mode || img.Width != v.Width || img.Height != v.Height || img.Ptr != v.DataPtr || img.Size != v.Size {
					t.Errorf("sample %d %s: %+v, want %+v", s, fd.Name, img, v)
				}
				buf, err = f.ReadData(s, fi, buf)
				if err != nil {
					t.Fatal(err)
				}
				if sha(buf) != v.SHA256 {
					t.Errorf("sample %d %s: data sha256 differs", s, fd.Name)
				}
			case beton.TypeNDArray, beton.TypeTorchTensor:
				var v struct {
					Ptr    uint64
					DType  string
					Shape  []uint64
					Values []float64
				}
				mustJSON(t, raw, &v)
				if fd.DType != numpyNames[v.DType] || !equalU64(fd.Shape, v.Shape) {
					t.Errorf("field %s: dtype %s shape %v, want %s %v", fd.Name, fd.DType, fd.Shape, v.DType, v.Shape)
				}
				if p, _ := f.Pointer(s, fi); p != v.Ptr {
					t.Errorf("sample %d %s: ptr %d, want %d", s, fd.Name, p, v.Ptr)
				}
				data, err := f.ReadData(s, fi, nil)
				if err != nil {
					t.Fatal(err)
				}
				if fd.DType != "<f4" || len(data) != 4*len(v.Values) {
					t.Fatalf("sample %d %s: %d bytes of %s for %d values", s, fd.Name, len(data), fd.DType, len(v.Values))
				}
				for k, want := range v.Values {
					if got := math.Float32frombits(binary.LittleEndian.Uint32(data[4*k:])); float64(got) != want {
						t.Errorf("sample %d %s[%d] = %v, want %v", s, fd.Name, k, got, want)
					}
				}
			case beton.TypeBytes, beton.TypeJSON:
				var v struct {
					Ptr    uint64
					Size   uint64
					SHA256 string
					JSON   json.RawMessage
				}
				mustJSON(t, raw, &v)
				p, size := f.Pointer(s, fi)
				if p != v.Ptr || size != v.Size {
					t.Errorf("sample %d %s: (%d, %d), want (%d, %d)", s, fd.Name, p, size, v.Ptr, v.Size)
				}
				data, err := f.ReadData(s, fi, nil)
				if err != nil {
					t.Fatal(err)
				}
				if sha(data) != v.SHA256 {
					t.Errorf("sample %d %s: data sha256 differs", s, fd.Name)
				}
				if fd.Type == beton.TypeJSON {
					var got, exp any
					mustJSON(t, bytes.TrimRight(data, "\x00"), &got)
					mustJSON(t, v.JSON, &exp)
					if g, e := canon(got), canon(exp); g != e {
						t.Errorf("sample %d %s: JSON %s, want %s", s, fd.Name, g, e)
					}
				}
			default:
				t.Fatalf("field %s: unexpected type %v", fd.Name, fd.Type)
			}
		}
	}
	// Pages and samples agree both ways, and every sample with data has a page.
	seen := 0
	for p := f.FirstPage(); p < f.FirstPage()+int64(f.NumPages()); p++ {
		for _, s := range f.PageSamples(p) {
			if f.SamplePage(int(s)) != p {
				t.Errorf("sample %d listed in page %d, SamplePage says %d", s, p, f.SamplePage(int(s)))
			}
			seen++
		}
	}
	if seen != f.NumSamples() {
		t.Errorf("pages list %d samples, file has %d", seen, f.NumSamples())
	}
}

func canon(v any) string { b, _ := json.Marshal(v); return string(b) }

func mustJSON(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("manifest value %s: %v", strings.TrimSpace(string(raw)), err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
