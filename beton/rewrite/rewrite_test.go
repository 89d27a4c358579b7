package rewrite_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/rewrite"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

// The fields of the betons these tests write: one of each kind a rewrite
// passes on, the names index's path field among them.
var fields = []beton.Field{
	{Type: beton.TypeRGBImage, Name: "image"},
	{Type: beton.TypeInt, Name: "label"},
	{Type: beton.TypeFloat, Name: "weight"},
	{Type: beton.TypeBytes, Name: beton.PathField},
	{Type: beton.TypeJSON, Name: "meta"},
	{Type: beton.TypeBytes, Name: "blob"}, // 100 KB, so that a few samples fill a page
}

// source writes a beton of the fixture photos, n samples (the photos
// over again), sample i's JPEG damaged where damaged(i), every fourth
// image raw, and returns its path. Samples are written in the order
// order gives (nil: id order), so that pages hold ids out of order as
// FFCV's writer's do.
func source(t testing.TB, n int, pageSize int64, order []int, damaged func(int) bool) string {
	t.Helper()
	photos := testenv.Photos(t, 0)
	path := filepath.Join(t.TempDir(), "src.beton")
	w, err := beton.Create(path, slices.Clone(fields), n, beton.WriterOptions{PageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, n)
	if order == nil {
		for i := range n {
			order = append(order, i)
		}
	}
	for _, i := range order {
		p := photos[i%len(photos)]
		names[i] = fmt.Sprintf("%s#%d", p.Name, i)
		img := beton.Value{Mode: beton.ModeJPEG, Data: p.Data}
		fr, err := jpeg.ParseFrame(p.Data)
		if err != nil {
			t.Fatal(err)
		}
		img.Width, img.Height = fr.Width, fr.Height
		switch {
		case damaged != nil && damaged(i):
			d := slices.Clone(p.Data[:len(p.Data)*2/3]) // no EOI, a scan cut short
			img.Data = d
		case i%4 == 3:
			img = beton.Value{Mode: beton.ModeRaw, Width: 3, Height: 2, Data: bytes.Repeat([]byte{byte(i)}, 18)}
		}
		vals := []beton.Value{img, {Int: int64(i % 10)}, {Float: math.Float64frombits(0x7ff8_0000_0000_0001 + uint64(i))},
			{Data: []byte(names[i])}, {Data: fmt.Appendf(nil, `{"i": %d}`, i)}, {Data: bytes.Repeat([]byte{byte(i), 1, 2}, 100000/3)}}
		if err := w.WriteSampleAt(i, vals); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.SetNames(3, names); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string) *beton.File {
	t.Helper()
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func run(t *testing.T, src string, opts rewrite.Options) (string, rewrite.Result) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.beton")
	dst, err := beton.NewFileDestination(out)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rewrite.Rewrite(context.Background(), open(t, src), dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out, res
}

// decode returns a JPEG's pixels as libjpeg-turbo decodes it whole.
func decode(t *testing.T, what string, b []byte) []byte {
	t.Helper()
	info, err := jpeg.Scan(b)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	pix, _, _, err := jpeg.DecodeRGB(b, &info)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return pix
}

// same checks that g holds f's samples: every value equal, but the JPEGs'
// bytes, which must decode to the same pixels and carry restart markers
// unless kept names them; and every page's samples as f's.
func same(t *testing.T, f, g *beton.File, kept map[int]bool) {
	t.Helper()
	for fi, a := range f.Fields() {
		b := g.Fields()[fi]
		// The names index's place in the path field's arguments moves.
		if a.Type != b.Type || a.Name != b.Name || fi != f.NamesField() && a.Args != b.Args {
			t.Fatalf("field %d: %+v, the source's %+v", fi, b, a)
		}
	}
	if g.NumSamples() != f.NumSamples() {
		t.Fatalf("%d samples, the source's %d", g.NumSamples(), f.NumSamples())
	}
	for s := range f.NumSamples() {
		for fi, fd := range f.Fields() {
			switch fd.Type {
			case beton.TypeInt:
				if f.Int(s, fi) != g.Int(s, fi) {
					t.Fatalf("sample %d, %s: %d, was %d", s, fd.Name, g.Int(s, fi), f.Int(s, fi))
				}
				continue
			case beton.TypeFloat:
				if math.Float64bits(f.Float(s, fi)) != math.Float64bits(g.Float(s, fi)) {
					t.Fatalf("sample %d, %s: float bits differ", s, fd.Name)
				}
				continue
			}
			a, err := f.ReadData(s, fi, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := g.ReadData(s, fi, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fd.Type != beton.TypeRGBImage {
				if !bytes.Equal(a, b) {
					t.Fatalf("sample %d, %s: %q, was %q", s, fd.Name, b, a)
				}
				continue
			}
			ia, _ := f.Image(s, fi)
			ib, _ := g.Image(s, fi)
			if ia.Mode != ib.Mode || ia.Width != ib.Width || ia.Height != ib.Height {
				t.Fatalf("sample %d: image %+v, was %+v", s, ib, ia)
			}
			switch {
			case ia.Mode == beton.ModeRaw || kept[s]:
				if !bytes.Equal(a, b) {
					t.Fatalf("sample %d: image bytes changed", s)
				}
			default:
				if !jpeg.HasCropRestarts(b) {
					t.Fatalf("sample %d: no restart markers", s)
				}
				if !bytes.Equal(decode(t, "source", a), decode(t, "rewritten", b)) {
					t.Fatalf("sample %d: the pixels differ", s)
				}
			}
		}
	}
	if f.HasNames() {
		a, err := f.Names()
		if err != nil {
			t.Fatal(err)
		}
		b, err := g.Names()
		if err != nil || !slices.Equal(a, b) {
			t.Fatalf("names index: %v", err)
		}
	}
	if errs := beton.Verify(g, beton.VerifyOptions{All: true}); len(errs) > 0 {
		t.Fatalf("Verify: %v", errs)
	}
}

// TestRewrite: a beton whose pages hold ids out of order, with a damaged
// JPEG, raw images and values of every kind, rewritten: every value and
// every page's samples as they were, the JPEGs with restart markers and
// the same pixels, the damaged one kept and named; the same bytes for 1
// and 3 workers and for any bound on what is held.
func TestRewrite(t *testing.T) {
	n := 60
	if testing.Short() {
		n = 24
	}
	// Ids in runs of 10 taken from the ends, as a writer's workers
	// interleave them.
	var order []int
	for lo, hi := 0, n; lo < hi; lo, hi = lo+10, hi-10 {
		for i := lo; i < min(lo+10, hi); i++ {
			order = append(order, i)
		}
		for i := max(hi-10, lo+10); i < hi; i++ {
			order = append(order, i)
		}
	}
	src := source(t, n, beton.MinPageSize, order, func(i int) bool { return i == 5 })
	f := open(t, src)
	if f.NumPages() < 2 {
		t.Fatalf("the source has %d pages; the test wants several", f.NumPages())
	}
	out, res := run(t, src, rewrite.Options{Workers: 3})
	g := open(t, out)
	same(t, f, g, map[int]bool{5: true})
	raw := (n + 1) / 4
	if res.Samples != n || res.JPEG != n-raw || res.Raw != raw || res.Kept != 1 || res.Transcoded != n-raw-1 || res.HadRestarts != 0 {
		t.Fatalf("result %+v", res)
	}
	if len(res.KeptSamples) != 1 || res.KeptSamples[0].Sample != 5 || res.KeptSamples[0].Field != "image" || !strings.Contains(res.KeptSamples[0].String(), "sample 5, field \"image\"") {
		t.Fatalf("kept: %v", res.KeptSamples)
	}
	// Optimized Huffman tables may win back what the markers take.
	if res.JPEGBytesOut < res.JPEGBytesIn*9/10 || res.JPEGBytesOut > res.JPEGBytesIn*11/10 {
		t.Fatalf("JPEG bytes %d → %d", res.JPEGBytesIn, res.JPEGBytesOut)
	}
	// Page neighbours stay neighbours: each output page's samples are a
	// run of one source page's (the source pages fill a little more, so
	// their runs may spill into the next).
	for dp := range g.NumPages() {
		ids := g.PageSamples(g.FirstPage() + int64(dp))
		first := f.SamplePage(int(ids[0]))
		for _, s := range ids {
			if p := f.SamplePage(int(s)); p != first && p != first+1 {
				t.Fatalf("output page %d holds samples of source pages %d and %d", dp, first, p)
			}
		}
	}
	want, _ := os.ReadFile(out)
	for _, o := range []rewrite.Options{{Workers: 1}, {Workers: 3, MaxHeld: 1}} {
		again, r := run(t, src, o)
		if got, _ := os.ReadFile(again); !bytes.Equal(got, want) {
			t.Fatalf("%+v: other bytes than with 3 workers", o)
		}
		if o.MaxHeld == 1 && r.MaxHeld > 2*beton.MinPageSize {
			t.Fatalf("MaxHeld 1: held %d bytes, more than one page twice", r.MaxHeld)
		}
	}
	// Rewritten again, everything has its markers.
	_, res = run(t, out, rewrite.Options{})
	if res.HadRestarts != res.JPEG-1 || res.Transcoded != 0 || res.Kept != 1 {
		t.Fatalf("a rewrite of a rewrite: %+v", res)
	}
}

// TestRewriteNoPages: a beton whose values lie in no page (ints, empty
// bytes) has nothing to transcode and is written whole.
func TestRewriteNoPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ints.beton")
	fs := []beton.Field{{Type: beton.TypeInt, Name: "label"}, {Type: beton.TypeBytes, Name: "b"}}
	w, err := beton.Create(path, fs, 200, beton.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		var b []byte
		if i == 150 {
			b = []byte("one")
		}
		if err := w.WriteSample([]beton.Value{{Int: int64(i * 7)}, {Data: b}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, res := run(t, path, rewrite.Options{Workers: 2})
	if res.Samples != 200 || res.JPEG != 0 {
		t.Fatalf("%+v", res)
	}
	same(t, open(t, path), open(t, out), nil)
}

// failing reads the source through its file but fails at one offset.
type failing struct {
	f  *os.File
	at int64
}

func (r *failing) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if off == r.at {
		return 0, errors.New("connection reset by peer")
	}
	return r.f.ReadAt(p, off)
}

// TestRewriteErrors: a page that cannot be read fails the rewrite naming
// it and leaves nothing; so does a cancelled context; bad options are
// refused before anything is read.
func TestRewriteErrors(t *testing.T) {
	src := source(t, 24, beton.MinPageSize, nil, nil)
	f := open(t, src)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.beton")
	file, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	second := f.PageOffset(f.FirstPage() + 1)
	dst, _ := beton.NewFileDestination(out)
	_, err = rewrite.Rewrite(context.Background(), f, dst, rewrite.Options{Reader: &failing{f: file, at: second}})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("reading page %d", f.FirstPage()+1)) || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Fatalf("a page read failed: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dst, _ = beton.NewFileDestination(out)
	if _, err := rewrite.Rewrite(ctx, f, dst, rewrite.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	for _, o := range []rewrite.Options{{RestartInterval: -1}, {RestartInterval: 1 << 16}, {Workers: -2}, {PageSize: 3 << 20}, {MaxHeld: -1}} {
		dst, _ = beton.NewFileDestination(out)
		if _, err := rewrite.Rewrite(context.Background(), f, dst, o); err == nil {
			t.Fatalf("%+v accepted", o)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// TestRewriteOutgrowsPage: a sample that fits a page as it is but not with
// restart markers keeps its JPEG, named.
func TestRewriteOutgrowsPage(t *testing.T) {
	p := testenv.Photos(t, 1)[0]
	fr, _ := jpeg.ParseFrame(p.Data)
	rst, _, err := jpeg.AddRestarts(p.Data, 1)
	if err != nil || len(rst) <= len(p.Data) {
		t.Fatalf("%d → %d bytes, %v", len(p.Data), len(rst), err)
	}
	path := filepath.Join(t.TempDir(), "big.beton")
	fs := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeBytes, Name: "pad"}}
	w, err := beton.Create(path, fs, 1, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	pad := make([]byte, beton.MinPageSize-len(p.Data))
	if err := w.WriteSample([]beton.Value{{Mode: beton.ModeJPEG, Width: fr.Width, Height: fr.Height, Data: p.Data}, {Data: pad}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out, res := run(t, path, rewrite.Options{RestartInterval: 1})
	if res.Kept != 1 || res.Transcoded != 0 || !strings.Contains(res.KeptSamples[0].String(), "more than a page") {
		t.Fatalf("%+v", res)
	}
	same(t, open(t, path), open(t, out), map[int]bool{0: true})
}
