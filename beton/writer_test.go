package beton_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// values reads every field of sample s back as Values for the writer.
func values(t *testing.T, f *beton.File, s int) []beton.Value {
	t.Helper()
	vals := make([]beton.Value, len(f.Fields()))
	for fi, fd := range f.Fields() {
		v := &vals[fi]
		switch fd.Type {
		case beton.TypeInt:
			v.Int = f.Int(s, fi)
		case beton.TypeFloat:
			v.Float = f.Float(s, fi)
		default:
			data, err := f.ReadData(s, fi, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fd.Type == beton.TypeJSON {
				data = data[:len(data)-1]
			}
			v.Data = data
			if fd.Type == beton.TypeRGBImage {
				img, _ := f.Image(s, fi)
				v.Mode, v.Width, v.Height = img.Mode, img.Width, img.Height
			}
		}
	}
	return vals
}

// rewrite writes f's samples, in id order, to a new file and returns its path.
func rewrite(t *testing.T, f *beton.File, pageSize int64) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.beton")
	w, err := beton.Create(out, f.Fields(), f.NumSamples(), beton.WriterOptions{PageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < f.NumSamples(); s++ {
		if err := w.WriteSample(values(t, f, s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sequential reports whether the reference writer laid f out as one worker
// does: samples in id order, packed page after page.
func sequential(f *beton.File) bool {
	var last uint64
	for s := 0; s < f.NumSamples(); s++ {
		for fi, fd := range f.Fields() {
			if !fd.Type.Variable() {
				continue
			}
			a, err := f.Data(s, fi)
			if err != nil || a.Ptr < last {
				return false
			}
			last = a.Ptr
		}
	}
	return true
}

// TestRewriteFixtures writes every fixture's values again. Where the
// reference wrote samples in id order (one worker), the bytes must be
// identical; otherwise every value must read back the same.
func TestRewriteFixtures(t *testing.T) {
	for _, path := range fixtureBetons(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := beton.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			out := rewrite(t, f, f.PageSize())
			if sequential(f) {
				want, _ := os.ReadFile(path)
				got, _ := os.ReadFile(out)
				if !bytes.Equal(got, want) {
					t.Fatalf("rewrite of a sequentially written fixture differs: %d bytes vs %d, first difference at %d", len(got), len(want), firstDiff(got, want))
				}
				t.Logf("byte-identical to the reference")
			}
			g, err := beton.OpenFile(out)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			m := readManifest(t, path)
			if h := g.Header(); h.Version != m.Header.Version || g.NumSamples() != m.NumSamples || g.RecordLayout().RecordSize != m.ItemSize {
				t.Errorf("rewritten header %+v", h)
			}
			for s := 0; s < f.NumSamples(); s++ {
				a, b := values(t, f, s), values(t, g, s)
				for i := range a {
					if a[i].Int != b[i].Int || a[i].Float != b[i].Float || a[i].Mode != b[i].Mode ||
						a[i].Width != b[i].Width || a[i].Height != b[i].Height || !bytes.Equal(a[i].Data, b[i].Data) {
						t.Fatalf("sample %d field %d differs after rewrite", s, i)
					}
				}
			}
			if errs := beton.Verify(g, beton.VerifyOptions{All: true}); len(errs) > 0 {
				t.Errorf("Verify: %v", errs)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestWriterPageRules(t *testing.T) {
	fields := []beton.Field{{Type: beton.TypeBytes, Name: "blob"}, {Type: beton.TypeInt, Name: "label"}}
	const ps = beton.MinPageSize
	sizes := []int{ps / 2, ps / 2, 1, ps, 0, 3} // the third must open a new page; the fourth fills one alone
	out := filepath.Join(t.TempDir(), "p.beton")
	w, err := beton.Create(out, fields, len(sizes), beton.WriterOptions{PageSize: ps})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if err := w.WriteSample([]beton.Value{{Data: bytes.Repeat([]byte{byte(i + 1)}, n)}, {Int: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first := f.FirstPage()
	wantPages := []int64{first, first, first + 1, first + 2, beton.NoPage, first + 3}
	for s, want := range wantPages {
		if got := f.SamplePage(s); got != want {
			t.Errorf("sample %d in page %d, want %d", s, got, want)
		}
		data, err := f.ReadData(s, 0, nil)
		if err != nil || len(data) != sizes[s] || (len(data) > 0 && data[0] != byte(s+1)) {
			t.Errorf("sample %d data: %d bytes, err %v", s, len(data), err)
		}
	}
	if f.NumPages() != 4 || f.Size() != (first+4)*ps+int64(len(f.Allocs()))*beton.AllocEntrySize {
		t.Errorf("%d pages, %d bytes", f.NumPages(), f.Size())
	}
	// A sample larger than a page is refused with a clear error.
	w, err = beton.Create(filepath.Join(t.TempDir(), "big.beton"), fields, 1, beton.WriterOptions{PageSize: ps})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSample([]beton.Value{{Data: make([]byte, ps+1)}, {}}); err == nil {
		t.Fatal("a sample larger than a page was accepted")
	}
	w.Abort()
	for _, bad := range []int64{3 << 20, 1 << 20, 1 << 32} {
		if _, err := beton.Create(filepath.Join(t.TempDir(), "x.beton"), fields, 1, beton.WriterOptions{PageSize: bad}); err == nil {
			t.Errorf("page size %d accepted", bad)
		}
	}
}

// An unfinished write leaves nothing under the destination name.
func TestWriterAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.beton")
	w, err := beton.Create(out, []beton.Field{{Type: beton.TypeInt, Name: "label"}}, 2, beton.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSample([]beton.Value{{Int: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close with 1 of 2 samples succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// TestNamesIndex: names written with SetNames come back from Names, in
// sample order; the per-sample values of the field hold them too; a
// damaged index is an error naming the file, never wrong names.
func TestNamesIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "names.beton")
	fields := []beton.Field{{Type: beton.TypeInt, Name: "label"}, {Type: beton.TypeBytes, Name: beton.PathField}}
	w, err := beton.Create(path, fields, 3, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"b/x.jpg", "a/é y.jpg", "a/sub/z.JPEG"}
	if err := w.SetNames(1, names); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if err := w.WriteSample([]beton.Value{{Int: int64(i)}, {Data: []byte(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Names()
	if err != nil || !slices.Equal(got, names) || f.NumPages() != 1 {
		t.Fatalf("Names: %q, %v (%d pages); want %q", got, err, f.NumPages(), names)
	}
	for i, n := range names {
		if b, err := f.ReadData(i, 1, nil); err != nil || string(b) != n {
			t.Errorf("sample %d's path value: %q, %v", i, b, err)
		}
	}
	f.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := int(binary.LittleEndian.Uint64(raw[16:])) // the allocation table: the index ends there
	damaged := bytes.Clone(raw)
	damaged[end-3] ^= 0xff // a byte of the last name
	if f, err := beton.Open(bytes.NewReader(damaged), int64(len(damaged)), "damaged.beton"); err != nil {
		t.Fatal(err)
	} else if _, err := f.Names(); err == nil || !errors.Is(err, beton.ErrCorrupt) || !strings.Contains(err.Error(), "damaged.beton") {
		t.Errorf("a damaged names index: %v", err)
	}
	moved := bytes.Clone(raw)
	arg := 24 + beton.DescriptorSize + 1 + beton.NameSize + 16 // the path field's index offset
	binary.LittleEndian.PutUint64(moved[arg:], 99)
	if _, err := beton.Open(bytes.NewReader(moved), int64(len(moved)), "moved.beton"); err == nil || !errors.Is(err, beton.ErrCorrupt) {
		t.Errorf("a names index that is not before the allocation table: %v", err)
	}
}
