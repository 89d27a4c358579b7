package stream

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

// enc builds streams.
type enc struct{ bytes.Buffer }

func (e *enc) frame(kind byte, body []byte) {
	var w [5]byte
	binary.LittleEndian.PutUint32(w[:], uint32(len(body)+1))
	w[4] = kind
	e.Write(w[:])
	e.Write(body)
}

func (e *enc) header(h Header) {
	b, err := json.Marshal(h)
	if err != nil {
		panic(err)
	}
	e.frame(KindHeader, b)
}

func u32(n int) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(n)) }
func u64(n int64) []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(n))
}

// testHeader has every field type.
func testHeader(n int) Header {
	return Header{Format: Format, Version: Version, Samples: int64(n), PageSize: beton.MinPageSize, Fields: []Field{
		{Name: "image", Type: "rgb_image", WriteMode: "raw"},
		{Name: "photo", Type: "rgb_image", WriteMode: "jpg", MaxResolution: 64},
		{Name: "label", Type: "int"},
		{Name: "weight", Type: "float"},
		{Name: "vec", Type: "ndarray", DType: "<i2", Shape: []uint64{2, 3}},
		{Name: "t", Type: "torch_tensor", DType: "<f8", Shape: []uint64{4}},
		{Name: "blob", Type: "bytes"},
		{Name: "meta", Type: "json"},
	}}
}

// photo is a real JPEG of the fixtures.
func photo(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join(testenv.Fixture(t, "imagefolder-small"), "class000", "img00000.jpg"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sampleBody is sample id of testHeader.
func sampleBody(id int, jpg []byte) []byte {
	var b []byte
	b = append(b, u64(int64(id))...)
	w, h := 3+id%5, 2+id%3
	pix := bytes.Repeat([]byte{byte(id)}, w*h*3)
	b = append(b, FormPixels)
	b = append(b, u32(w)...)
	b = append(b, u32(h)...)
	b = append(b, u32(len(pix))...)
	b = append(b, pix...)
	b = append(b, FormFile)
	b = append(b, u32(0)...)
	b = append(b, u32(0)...)
	b = append(b, u32(len(jpg))...)
	b = append(b, jpg...)
	b = append(b, u64(int64(id*7-3))...)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(id)/3))
	b = append(b, u32(12)...)
	for k := range 6 {
		b = binary.LittleEndian.AppendUint16(b, uint16(id+k))
	}
	b = append(b, u32(32)...)
	for k := range 4 {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(k*id)))
	}
	blob := bytes.Repeat([]byte{0xAB}, id%4)
	b = append(b, u32(len(blob))...)
	b = append(b, blob...)
	js := fmt.Sprintf(`{"id": %d}`, id)
	b = append(b, u32(len(js))...)
	b = append(b, js...)
	return b
}

// streams returns the samples of testHeader(n) split among k streams, in
// chunks of chunk ids taken in turn, as the Python writer's workers do.
func streams(n, k, chunk int, jpg []byte) [][]byte {
	es := make([]enc, k)
	for i := range es {
		es[i].header(testHeader(n))
	}
	for id := range n {
		es[id/chunk%k].frame(KindSample, sampleBody(id, jpg))
	}
	out := make([][]byte, k)
	for i := range es {
		out[i] = es[i].Bytes()
	}
	return out
}

// write runs Write over the byte streams into a file and returns its path
// and the error.
func writeStreams(t *testing.T, data [][]byte, opts Options) (string, Result, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.beton")
	dst, err := beton.NewFileDestination(path)
	if err != nil {
		t.Fatal(err)
	}
	var srcs []Source
	for i, d := range data {
		srcs = append(srcs, Source{Name: fmt.Sprintf("stream %d", i), R: bytes.NewReader(d)})
	}
	res, err := Write(context.Background(), dst, srcs, opts)
	return path, res, err
}

// TestWriteEveryField writes samples of every field type from one, two and
// three streams (and 1 or 3 workers): the same bytes every time, and a
// beton whose values are the samples'.
func TestWriteEveryField(t *testing.T) {
	jpg := photo(t)
	const n = 50
	var first []byte
	for _, c := range []struct{ k, chunk, workers int }{{1, 100, 1}, {2, 7, 3}, {3, 1, 2}} {
		path, res, err := writeStreams(t, streams(n, c.k, c.chunk, jpg), Options{Workers: c.workers})
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = got
		} else if !bytes.Equal(got, first) {
			t.Errorf("%+v: a beton of other bytes than one stream's", c)
		}
		if res.Samples != n || res.Raw != n || res.JPEG != n || res.Bytes != int64(len(got)) {
			t.Errorf("%+v: result %+v", c, res)
		}
	}
	f, err := beton.OpenFile(filepathOf(t, first))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if errs := beton.Verify(f, beton.VerifyOptions{}); len(errs) > 0 {
		t.Fatal(errs)
	}
	for id := range n {
		img, err := f.Image(id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if img.Mode != beton.ModeRaw || img.Width != 3+id%5 || img.Height != 2+id%3 {
			t.Errorf("sample %d: image %+v", id, img)
		}
		ph, _ := f.Image(id, 1)
		if ph.Mode != beton.ModeJPEG || max(ph.Width, ph.Height) != 64 {
			t.Errorf("sample %d: photo %dx%d mode %v, want JPEG fitting 64", id, ph.Width, ph.Height, ph.Mode)
		}
		if v := f.Int(id, 2); v != int64(id*7-3) {
			t.Errorf("sample %d: label %d", id, v)
		}
		if v := f.Float(id, 3); v != float64(id)/3 {
			t.Errorf("sample %d: weight %v", id, v)
		}
		js, err := f.ReadData(id, 7, nil)
		if err != nil || string(js) != fmt.Sprintf("{\"id\": %d}\x00", id) {
			t.Errorf("sample %d: meta %q, %v", id, js, err)
		}
	}
}

// filepathOf writes b to a file and returns its path.
func filepathOf(t *testing.T, b []byte) string {
	p := filepath.Join(t.TempDir(), "b.beton")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWriteHostile: streams that break the format, or carry values their
// fields cannot hold, fail with a sentence naming the sample and field (or
// the stream), and nothing is written.
func TestWriteHostile(t *testing.T) {
	jpg := photo(t)
	good := streams(4, 1, 100, jpg)[0]
	hdr := func(mod func(h *Header)) []byte {
		h := testHeader(4)
		mod(&h)
		var e enc
		e.header(h)
		return e.Bytes()
	}
	var e enc
	e.header(testHeader(4))
	headerLen := e.Len()
	body := func(id int, mod func([]byte) []byte) []byte {
		var e enc
		e.frame(KindSample, mod(sampleBody(id, jpg)))
		return e.Bytes()
	}
	samples := func(ids ...int) []byte {
		var e enc
		for _, id := range ids {
			e.frame(KindSample, sampleBody(id, jpg))
		}
		return e.Bytes()
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	errFrame := func(id, field int, msg string) []byte {
		var e enc
		b := append(u64(int64(id)), binary.LittleEndian.AppendUint16(nil, uint16(field))...)
		e.frame(KindError, append(b, msg...))
		return e.Bytes()
	}
	for _, c := range []struct {
		name string
		data [][]byte
		want string
	}{
		{"empty", [][]byte{nil}, "stream 0: no header"},
		{"a JPEG", [][]byte{jpg}, "not an ffcvfs sample stream"},
		{"header not JSON", [][]byte{func() []byte { var e enc; e.frame(KindHeader, []byte("{nope")); return e.Bytes() }()}, "not the JSON"},
		{"other format", [][]byte{hdr(func(h *Header) { h.Format = "tar" })}, `format is "tar"`},
		{"version 2", [][]byte{hdr(func(h *Header) { h.Version = 2 })}, "stream version 2"},
		{"absurd count", [][]byte{hdr(func(h *Header) { h.Samples = 1 << 40 })}, "sample count 1099511627776 is out of range"},
		{"negative count", [][]byte{hdr(func(h *Header) { h.Samples = -1 })}, "out of range"},
		{"no fields", [][]byte{hdr(func(h *Header) { h.Fields = nil })}, "0 fields"},
		{"long name", [][]byte{hdr(func(h *Header) { h.Fields[0].Name = strings.Repeat("n", 17) })}, "a name has 1 to 16 bytes"},
		{"twice", [][]byte{hdr(func(h *Header) { h.Fields[1].Name = "image" })}, `field "image" appears twice`},
		{"unknown type", [][]byte{hdr(func(h *Header) { h.Fields[2].Type = "str" })}, `unknown type "str"`},
		{"bad dtype", [][]byte{hdr(func(h *Header) { h.Fields[4].DType = "<U8" })}, "<U8"},
		{"huge shape", [][]byte{hdr(func(h *Header) { h.Fields[4].Shape = []uint64{1 << 40, 1 << 40} })}, "overflows"},
		{"bad mode", [][]byte{hdr(func(h *Header) { h.Fields[0].WriteMode = "png" })}, `"png"`},
		{"bad quality", [][]byte{hdr(func(h *Header) { h.Fields[1].JPEGQuality = 101 })}, "quality 101"},
		{"bad page size", [][]byte{hdr(func(h *Header) { h.PageSize = 12345 })}, "page size 12345"},
		{"unknown key", [][]byte{func() []byte {
			var e enc
			e.frame(KindHeader, []byte(`{"format":"ffcvfs-stream","version":1,"samples":1,"fields":[{"name":"a","type":"int"}],"x":1}`))
			return e.Bytes()
		}()}, `unknown field "x"`},
		{"huge header", [][]byte{append([]byte{0xff, 0xff, 0xff, 0x7f, 'H'}, good[5:]...)}, "not an ffcvfs sample stream"},
		{"headers differ", [][]byte{good, hdr(func(h *Header) { h.Samples = 5 })}, "stream 1: its header differs"},
		{"huge frame", [][]byte{cat(good[:headerLen], []byte{0xff, 0xff, 0xff, 0xff, 'S'})}, "frames hold 1 to"},
		{"zero frame", [][]byte{cat(good[:headerLen], []byte{0, 0, 0, 0, 'S'})}, "a frame of 0 bytes"},
		{"truncated frame", [][]byte{good[:len(good)-10]}, "ended after"},
		{"stops early", [][]byte{cat(good[:headerLen], samples(0, 1))}, "no stream has sample 2 of the 4 the header says (stream 0 has ended)"},
		{"skips one", [][]byte{cat(good[:headerLen], samples(0, 2, 3))}, "no stream has sample 1 of the 4 the header says (stream 0 is at sample 2)"},
		{"backwards", [][]byte{cat(good[:headerLen], samples(1, 0))}, "sample 0 after sample 1"},
		{"twice in one", [][]byte{cat(good[:headerLen], samples(0, 0))}, "sample 0 after sample 0"},
		{"twice in two", [][]byte{cat(good[:headerLen], samples(0, 1, 2, 3)), cat(good[:headerLen], samples(1))}, "sample 1"},
		{"beyond count", [][]byte{cat(good[:headerLen], samples(0, 1, 2, 3, 4))}, "sample 4; the header says 4 samples"},
		{"unknown kind", [][]byte{cat(good[:headerLen], func() []byte { var e enc; e.frame('Z', u64(0)); return e.Bytes() }())}, "kind 'Z'"},
		{"a second header", [][]byte{cat(good[:headerLen], good[:headerLen])}, "kind 'H'"},
		{"producer error", [][]byte{cat(good[:headerLen], samples(0), errFrame(1, 4, "ValueError: want int16 of shape (2, 3), got float32"))}, `sample 1, field "vec": ValueError: want int16`},
		{"producer error, no field", [][]byte{cat(good[:headerLen], errFrame(0, NoField, "KeyError: 7"))}, "sample 0: KeyError: 7"},
		{"short error", [][]byte{cat(good[:headerLen], func() []byte { var e enc; e.frame(KindError, []byte{1}); return e.Bytes() }())}, "too short"},
		{"no id", [][]byte{cat(good[:headerLen], func() []byte { var e enc; e.frame(KindSample, []byte{1, 2}); return e.Bytes() }())}, "has no id"},
		{"value cut", [][]byte{cat(good[:headerLen], body(0, func(b []byte) []byte { return b[:len(b)-3] }))}, `sample 0, field "meta": the frame ends within the value`},
		{"bytes after", [][]byte{cat(good[:headerLen], body(0, func(b []byte) []byte { return append(b, 0) }))}, "1 bytes after the last field's value"},
		{"pixels short", [][]byte{cat(good[:headerLen], body(0, func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[9:], 1000) // width
			return b
		}))}, `sample 0, field "image": 1000x2 RGB pixels need 6000 bytes, the frame has 18`},
		{"bad form", [][]byte{cat(good[:headerLen], body(0, func(b []byte) []byte { b[8] = 7; return b }))}, "image form 7"},
		{"not an image", [][]byte{cat(good[:headerLen], samples(0), func() []byte {
			b := sampleBody(1, []byte("hello, not a picture"))
			var e enc
			e.frame(KindSample, b)
			return e.Bytes()
		}())}, `sample 1, field "photo": unrecognized or unsupported image format`},
		{"wrong array size", [][]byte{cat(good[:headerLen], body(0, func(b []byte) []byte {
			i := bytes.Index(b, u32(12))
			return slicesReplace(b, i, i+4+12, append(u32(10), make([]byte, 10)...))
		}))}, `sample 0, field "vec": 10 bytes; shape [2 3] of <i2 takes 12`},
		{"not JSON", [][]byte{cat(good[:headerLen], body(0, func(b []byte) []byte {
			js := `{"id": 0}`
			i := bytes.Index(b, []byte(js))
			return append(b[:i-4], append(u32(5), "{nope"...)...)
		}))}, `sample 0, field "meta": 5 bytes that are not JSON text`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.beton")
			dst, err := beton.NewFileDestination(path)
			if err != nil {
				t.Fatal(err)
			}
			var srcs []Source
			for i, d := range c.data {
				srcs = append(srcs, Source{Name: fmt.Sprintf("stream %d", i), R: bytes.NewReader(d)})
			}
			_, err = Write(context.Background(), dst, srcs, Options{Workers: 2, MaxFrame: 8 << 20})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v; want one with %q", err, c.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

func slicesReplace(b []byte, i, j int, v []byte) []byte {
	return append(append(append([]byte(nil), b[:i]...), v...), b[j:]...)
}

// TestWriteCancel: a cancelled write, and a stream whose producer is
// silent, end with nothing written once the context ends.
func TestWriteCancel(t *testing.T) {
	good := streams(4, 1, 100, photo(t))[0]
	dir := t.TempDir()
	dst, err := beton.NewFileDestination(filepath.Join(dir, "out.beton"))
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go pw.Write(good[:len(good)/2]) // then silence
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := Write(ctx, dst, []Source{{Name: "silent", R: pr}}, Options{Workers: 1})
		done <- err
	}()
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("error %v", err)
	}
	pw.Close()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// FuzzStream: any bytes after a valid header end in a beton or an error,
// never a panic or a hang.
func FuzzStream(f *testing.F) {
	jpg := photo(f)
	good := streams(3, 1, 100, jpg)[0]
	var e enc
	e.header(testHeader(3))
	hl := e.Len()
	f.Add(good[hl:])
	f.Add(good[hl : hl+40])
	f.Fuzz(func(t *testing.T, rest []byte) {
		data := append(append([]byte(nil), good[:hl]...), rest...)
		dst, err := beton.NewFileDestination(filepath.Join(t.TempDir(), "f.beton"))
		if err != nil {
			t.Fatal(err)
		}
		Write(context.Background(), dst, []Source{{Name: "fuzz", R: bytes.NewReader(data)}}, Options{Workers: 1, MaxFrame: 1 << 20})
	})
}

// TestWriteClaimedCount: a header of a hundred bytes that claims four
// billion samples, and delivers two, allocates as the samples arrive (the
// metadata table of the whole count would be 32 GiB) and ends with a
// sentence that names the count; nothing is left.
func TestWriteClaimedCount(t *testing.T) {
	var e enc
	e.header(Header{Format: Format, Version: Version, Samples: math.MaxUint32 - 1, Fields: []Field{{Name: "label", Type: "int"}}})
	for id := range 2 {
		e.frame(KindSample, append(u64(int64(id)), u64(7)...))
	}
	if e.Len() > 200 {
		t.Fatalf("the stream has %d bytes", e.Len())
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	dir := t.TempDir()
	dst, err := beton.NewFileDestination(filepath.Join(dir, "out.beton"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Write(context.Background(), dst, []Source{{Name: "stream 0", R: bytes.NewReader(e.Bytes())}}, Options{Workers: 2})
	runtime.ReadMemStats(&after)
	if want := "no stream has sample 2 of the 4294967294 the header says (stream 0 has ended)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v; want one with %q", err, want)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Errorf("the write allocated %d MiB", got>>20)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// discard is a Destination that keeps nothing: the tests of memory write
// gigabytes of pixels.
type discard struct{ n int64 }

func (d *discard) Reserve(int64) error         { return nil }
func (d *discard) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }
func (d *discard) Commit([]byte) error         { return nil }
func (d *discard) Abort() error                { return nil }
func (d *discard) Name() string                { return "discard" }

// TestWriteHeldBounded: 24 samples of a 2000×2000 PNG of 20 KB, 12 MB each
// once decoded, stored raw by 2 workers. What a write holds is bounded by
// prepared bytes, not by frames: at most MaxHeld counted, and the live heap
// (measured after a collection at every batch written) within it, the
// workers' images and a page. The batches of frames held 24 samples at once
// (288 MB), and samples once written stayed reachable from the merge's
// queues.
func TestWriteHeldBounded(t *testing.T) {
	const side, n = 2000, 24
	pngBytes := testenv.SmoothPNG(t, side)
	var e enc
	e.header(Header{Format: Format, Version: Version, Samples: n, PageSize: 16 << 20, Fields: []Field{
		{Name: "image", Type: "rgb_image", WriteMode: "raw"}, {Name: "label", Type: "int"}}})
	for id := range n {
		b := u64(int64(id))
		b = append(b, FormFile)
		b = append(b, u32(0)...)
		b = append(b, u32(0)...)
		b = append(b, u32(len(pngBytes))...)
		b = append(b, pngBytes...)
		e.frame(KindSample, append(b, u64(int64(id))...))
	}
	if e.Len() > n*64<<10 {
		t.Fatalf("the stream has %d bytes", e.Len())
	}
	const maxHeld = 32 << 20
	var live uint64
	opts := Options{Workers: 2, MaxHeld: maxHeld, Progress: func(done, total int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		live = max(live, m.HeapAlloc)
	}}
	var dst discard
	res, err := Write(context.Background(), &dst, []Source{{Name: "pngs", R: bytes.NewReader(e.Bytes())}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Raw != n || dst.n < n*side*side*3 {
		t.Fatalf("%d raw images, %d bytes written", res.Raw, dst.n)
	}
	if res.MaxHeld > maxHeld || res.MaxHeld < side*side*3 {
		t.Errorf("held %d bytes at most; want at most %d and at least a sample", res.MaxHeld, maxHeld)
	}
	// MaxHeld, per worker the decoded PNG (NRGBA), its RGB and the raw
	// copy, a page: 32 + 2×40 + 16 MiB.
	if bound := uint64(maxHeld + 2*40<<20 + 16<<20 + 8<<20); live > bound {
		t.Errorf("live heap %d MiB while writing; want at most %d MiB", live>>20, bound>>20)
	}
	t.Logf("held at most %d MiB (counted), live heap at most %d MiB", res.MaxHeld>>20, live>>20)
}

// writeOne writes the stream data (one stream) with opts into a file and
// returns its path and the error; nothing may be left on error.
func writeOne(t *testing.T, data []byte, opts Options) (string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "out.beton")
	dst, err := beton.NewFileDestination(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Write(context.Background(), dst, []Source{{Name: "stream 0", R: bytes.NewReader(data)}}, opts)
	if ents, _ := os.ReadDir(dir); err != nil && len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
	return path, err
}

// TestWriteFrameFitsPage: a sample that fits the header's page fits a
// frame, whatever MaxFrame (--max-sample-size, which DatasetWriter cannot
// pass) says: a 3 MiB array in pages of 4 MiB with frames bounded at 1 MiB
// was refused naming the flag. Beyond a page and its framing, frames are
// still refused.
func TestWriteFrameFitsPage(t *testing.T) {
	stream := func(n int) []byte {
		var e enc
		e.header(Header{Format: Format, Version: Version, Samples: 1, PageSize: 4 << 20, Fields: []Field{{Name: "blob", Type: "bytes"}}})
		e.frame(KindSample, append(append(u64(0), u32(n)...), make([]byte, n)...))
		return e.Bytes()
	}
	if _, err := writeOne(t, stream(3<<20), Options{Workers: 1, MaxFrame: 1 << 20}); err != nil {
		t.Errorf("a sample of 3 MiB in pages of 4 MiB: %v", err)
	}
	_, err := writeOne(t, stream(6<<20), Options{Workers: 1, MaxFrame: 1 << 20})
	if want := "frames hold 1 to 5242880, a page and 1048576 bytes"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a sample of 6 MiB in pages of 4 MiB: %v; want %q", err, want)
	}
}

// TestWritePixelsBound: pixels with a side beyond a beton's 65535 are
// refused naming the bound (1×70000 said "need 210000 bytes, the frame
// has 210000"), and sides whose product overflows give no negative size.
func TestWritePixelsBound(t *testing.T) {
	for _, c := range []struct {
		w, h uint32
		n    int
		want string
	}{
		{1, 70000, 210000, "1x70000 RGB pixels: a side has 1 to 65535 pixels in a beton"},
		{1<<32 - 1, 1<<32 - 1, 12, "4294967295x4294967295 RGB pixels: a side has 1 to 65535"},
		{65535, 65535, 12, "65535x65535 RGB pixels need 12884508675 bytes, the frame has 12"},
	} {
		var e enc
		e.header(Header{Format: Format, Version: Version, Samples: 1, Fields: []Field{{Name: "image", Type: "rgb_image", WriteMode: "raw"}}})
		b := append(u64(0), FormPixels)
		b = binary.LittleEndian.AppendUint32(b, c.w)
		b = binary.LittleEndian.AppendUint32(b, c.h)
		b = append(b, u32(c.n)...)
		e.frame(KindSample, append(b, make([]byte, c.n)...))
		_, err := writeOne(t, e.Bytes(), Options{Workers: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%dx%d: %v; want %q", c.w, c.h, err, c.want)
		}
	}
}

// TestWriteArrayShapeInHeader: an array field that holds no element, or
// more than a page, is refused in the header with a sentence, not at
// every sample.
func TestWriteArrayShapeInHeader(t *testing.T) {
	for _, c := range []struct {
		shape []uint64
		want  string
	}{
		{[]uint64{0}, `field "a": shape [0] of <f4 holds no element`},
		{[]uint64{3, 0, 2}, "holds no element"},
		{[]uint64{1 << 40}, `field "a": shape [1099511627776] of <f4 takes 4398046511104 bytes, more than a page (8388608 bytes)`},
	} {
		var e enc
		e.header(Header{Format: Format, Version: Version, Samples: 1, Fields: []Field{{Name: "a", Type: "ndarray", DType: "<f4", Shape: c.shape}}})
		_, err := writeOne(t, e.Bytes(), Options{Workers: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "sample") {
			t.Errorf("shape %v: %v; want %q in the header", c.shape, err, c.want)
		}
	}
}

// TestWriteJSONNaN: JSON values with NaN and ±Infinity, which Python's
// json (and so FFCV's JSONField) writes for such floats, are stored as
// they came ("14 bytes that are not JSON text" before); other text that is
// not JSON is still refused.
func TestWriteJSONNaN(t *testing.T) {
	values := []string{`{"loss": NaN, "hi": Infinity, "lo": -Infinity}`, `[NaN]`, `"NaN"`}
	var e enc
	e.header(Header{Format: Format, Version: Version, Samples: int64(len(values)), Fields: []Field{{Name: "meta", Type: "json"}}})
	for id, v := range values {
		e.frame(KindSample, append(append(u64(int64(id)), u32(len(v))...), v...))
	}
	path, err := writeOne(t, e.Bytes(), Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for id, v := range values {
		got, err := f.ReadData(id, 0, nil)
		if err != nil || string(got) != v+"\x00" {
			t.Errorf("sample %d: %q, %v; want %q", id, got, err, v)
		}
	}
	for _, bad := range []string{`{NaN: 1}`, `[1NaN]`, `[-NaN]`, `nan`, `[NaNa]`} {
		var e enc
		e.header(Header{Format: Format, Version: Version, Samples: 1, Fields: []Field{{Name: "meta", Type: "json"}}})
		e.frame(KindSample, append(append(u64(0), u32(len(bad))...), bad...))
		if _, err := writeOne(t, e.Bytes(), Options{Workers: 1}); err == nil || !strings.Contains(err.Error(), "not JSON text") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// TestWriteRestartIntervalDefault: a header without restart_interval gets
// restart markers in every JPEG (a file kept, one encoded), the pixels of
// the file sent; restart_interval 0 keeps the file sent byte for byte.
func TestWriteRestartIntervalDefault(t *testing.T) {
	jpg := photo(t)
	for _, ri := range []*int{nil, new(int)} {
		var e enc
		h := Header{Format: Format, Version: Version, Samples: 2, PageSize: beton.MinPageSize, Fields: []Field{
			{Name: "kept", Type: "rgb_image", WriteMode: "jpg", RestartInterval: ri},
			{Name: "encoded", Type: "rgb_image", WriteMode: "jpg", MaxResolution: 64, RestartInterval: ri},
		}}
		e.header(h)
		for id := range 2 {
			b := u64(int64(id))
			for range 2 {
				b = append(b, FormFile)
				b = append(b, u32(0)...)
				b = append(b, u32(0)...)
				b = append(b, u32(len(jpg))...)
				b = append(b, jpg...)
			}
			e.frame(KindSample, b)
		}
		path, res, err := writeStreams(t, [][]byte{e.Bytes()}, Options{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		f, err := beton.OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for id := range 2 {
			kept, err := f.ReadData(id, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := f.ReadData(id, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ri == nil {
				if !jpeg.HasCropRestarts(kept) || !jpeg.HasCropRestarts(enc) || bytes.Equal(kept, jpg) {
					t.Fatalf("by default, sample %d: JPEGs without restart markers", id)
				}
				if a, b := decodeRGB(t, jpg), decodeRGB(t, kept); !bytes.Equal(a, b) {
					t.Fatalf("sample %d: the kept JPEG's pixels changed", id)
				}
			} else if !bytes.Equal(kept, jpg) || jpeg.HasCropRestarts(enc) {
				t.Fatalf("restart_interval 0, sample %d: the file sent was not kept as it was", id)
			}
		}
		if want := map[bool]int{true: 4, false: 0}[ri == nil]; res.Restarts != want || res.NoRestarts != 0 || res.JPEG != 4 {
			t.Fatalf("restart_interval %v: %+v", ri, res)
		}
	}
}

func decodeRGB(t *testing.T, b []byte) []byte {
	t.Helper()
	info, err := jpeg.Scan(b)
	if err != nil {
		t.Fatal(err)
	}
	pix, _, _, err := jpeg.DecodeRGB(b, &info)
	if err != nil {
		t.Fatal(err)
	}
	return pix
}

// TestWriteRestartIntervalBounds: a header's restart_interval outside 0 to
// 65535 MCUs is refused in the header, naming it, before any sample.
func TestWriteRestartIntervalBounds(t *testing.T) {
	for _, ri := range []int{-1, 1 << 16, 1 << 40} {
		var e enc
		e.header(Header{Format: Format, Version: Version, Samples: 1, PageSize: beton.MinPageSize, Fields: []Field{
			{Name: "photo", Type: "rgb_image", WriteMode: "jpg", RestartInterval: &ri},
		}})
		_, _, err := writeStreams(t, [][]byte{e.Bytes()}, Options{Workers: 1})
		if err == nil || !strings.Contains(err.Error(), "restart interval") {
			t.Errorf("restart_interval %d: %v", ri, err)
		}
	}
}
