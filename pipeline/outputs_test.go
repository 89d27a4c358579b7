package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
)

// fieldSink keeps a copy of every field of every published batch.
type fieldSink struct {
	slots [][][]byte
	free  chan int
	got   []fieldBatch
}

type fieldBatch struct {
	epoch, batch, size int
	bufs               [][]byte
}

func newFieldSink(p *Pipeline, slots int) *fieldSink {
	s := &fieldSink{free: make(chan int, slots)}
	for i := 0; i < slots; i++ {
		var bufs [][]byte
		for _, o := range p.outs {
			bufs = append(bufs, make([]byte, p.opts.BatchSize*o.per))
		}
		s.slots = append(s.slots, bufs)
		s.free <- i
	}
	return s
}

func (s *fieldSink) Acquire(ctx context.Context) (int, error) {
	select {
	case i := <-s.free:
		return i, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
func (s *fieldSink) Buffers(slot int) [][]byte { return s.slots[slot] }
func (s *fieldSink) Publish(slot, epoch, batch, size int) error {
	b := fieldBatch{epoch: epoch, batch: batch, size: size}
	for _, buf := range s.slots[slot] {
		b.bufs = append(b.bufs, append([]byte(nil), buf...))
	}
	s.got = append(s.got, b)
	s.free <- slot
	return nil
}

// allFieldsSample is one sample of the all-fields fixture's manifest: what
// FFCV's reader saw.
type allFieldsSample struct {
	Label    int64
	Weight   float64
	Features struct{ Values []float32 }
	Blob     struct{ SHA256 string }
	Meta     struct {
		SHA256 string
		JSON   json.RawMessage
	}
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// TestEveryFieldByteExact delivers every field but the image (its sizes
// vary; TestWholeImagesByteExact) of FFCV's all-fields fixture, in
// sequential order, and compares each sample's values and bytes with what
// FFCV's reader reports: int and float fields, an ndarray, bytes and JSON
// packed with their ends.
func TestEveryFieldByteExact(t *testing.T) {
	path := testenv.Fixture(t, "beton", "all-fields.beton")
	raw, err := os.ReadFile(path + ".manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Samples []allFieldsSample }
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, path)
	opts := Options{BatchSize: 10, Workers: 2, Op: decode.Op{Kind: decode.Whole},
		Fields: []string{"meta", "label", "weight", "features", "blob"},
		Order:  order.Options{Kind: order.Sequential}}
	p, err := New(c, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range p.Fields() {
		names = append(names, f.Name+":"+f.DType+jsonOf(f.Shape))
	}
	if got, want := strings.Join(names, " "), "meta:uint8[10,52] meta.ends:int64[10] label:int64[10] weight:float64[10] features:float32[10,3,4] blob:uint8[10,297] blob.ends:int64[10]"; got != want {
		t.Fatalf("fields %s\nwant %s", got, want)
	}
	sink := newFieldSink(p, 2)
	if n, err := p.RunEpoch(t.Context(), 0, sink); err != nil || n != len(m.Samples) {
		t.Fatalf("RunEpoch: %d samples, %v; want %d", n, err, len(m.Samples))
	}
	s := 0
	for _, b := range sink.got {
		var metaStart, blobStart int
		for j := range b.size {
			want := m.Samples[s]
			metaEnd := int(binary.LittleEndian.Uint64(b.bufs[1][8*j:]))
			meta := b.bufs[0][metaStart:metaEnd]
			label := int64(binary.LittleEndian.Uint64(b.bufs[2][8*j:]))
			weight := math.Float64frombits(binary.LittleEndian.Uint64(b.bufs[3][8*j:]))
			blobEnd := int(binary.LittleEndian.Uint64(b.bufs[6][8*j:]))
			blob := b.bufs[5][blobStart:blobEnd]
			if label != want.Label || weight != want.Weight || sha(blob) != want.Blob.SHA256 || sha(meta) != want.Meta.SHA256 {
				t.Errorf("sample %d: label %d weight %v blob %.8s meta %.8s; FFCV reads label %d weight %v blob %.8s meta %.8s",
					s, label, weight, sha(blob), sha(meta), want.Label, want.Weight, want.Blob.SHA256, want.Meta.SHA256)
			}
			for k, v := range want.Features.Values {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(b.bufs[4][(j*12+k)*4:])); got != v {
					t.Errorf("sample %d: features[%d] = %v, FFCV reads %v", s, k, got, v)
				}
			}
			var gotJSON, wantJSON any
			if err := json.Unmarshal([]byte(strings.TrimRight(string(meta), "\x00")), &gotJSON); err != nil {
				t.Errorf("sample %d: meta %q: %v", s, meta, err)
			}
			_ = json.Unmarshal(want.Meta.JSON, &wantJSON)
			if jsonOf(gotJSON) != jsonOf(wantJSON) {
				t.Errorf("sample %d: meta %s, FFCV reads %s", s, jsonOf(gotJSON), jsonOf(wantJSON))
			}
			metaStart, blobStart = metaEnd, blobEnd
			s++
		}
	}
	if s != len(m.Samples) {
		t.Errorf("%d samples delivered, want %d", s, len(m.Samples))
	}
}

// TestWholeImagesByteExact decodes the raw 40x30 thumbnails of a fixture
// whole (FFCV's SimpleRGBImageDecoder), unflipped and flipped: the pixels
// are those FFCV's reader stored, mirrored when flipped.
func TestWholeImagesByteExact(t *testing.T) {
	path := testenv.Fixture(t, "beton", "label-first-two-images.beton")
	raw, err := os.ReadFile(path + ".manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Samples []struct {
			Label int64
			Thumb struct{ SHA256 string }
		}
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	c := openCache(t, path)
	for _, flip := range []float64{0, 1} {
		p, err := New(c, Options{BatchSize: 7, Workers: 2, Op: decode.Op{Kind: decode.Whole, FlipProb: flip},
			Fields: []string{"thumb", "label"}, Order: order.Options{Kind: order.Sequential}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if f := p.Fields()[0]; jsonOf(f.Shape) != "[7,30,40,3]" {
			t.Fatalf("thumb field shape %v, want [7,30,40,3]", f.Shape)
		}
		sink := newFieldSink(p, 2)
		if _, err := p.RunEpoch(t.Context(), 0, sink); err != nil {
			t.Fatal(err)
		}
		s := 0
		for _, b := range sink.got {
			for j := range b.size {
				img := append([]byte(nil), b.bufs[0][j*3600:(j+1)*3600]...)
				if flip == 1 {
					for y := range 30 {
						r := img[y*120 : (y+1)*120]
						for a, z := 0, 39; a < z; a, z = a+1, z-1 {
							for k := range 3 {
								r[3*a+k], r[3*z+k] = r[3*z+k], r[3*a+k]
							}
						}
					}
				}
				if sha(img) != m.Samples[s].Thumb.SHA256 || int64(binary.LittleEndian.Uint64(b.bufs[1][8*j:])) != m.Samples[s].Label {
					t.Errorf("flip %v: sample %d: thumb %.8s, FFCV stored %.8s", flip, s, sha(img), m.Samples[s].Thumb.SHA256)
				}
				s++
			}
		}
		if s != len(m.Samples) {
			t.Errorf("%d samples, want %d", s, len(m.Samples))
		}
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestFieldsErrors: a missing field, two image fields, and a whole-image
// decode of images of several sizes are refused with the field or sample
// named.
func TestFieldsErrors(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		opts    Options
		want    string
	}{
		{"all-fields.beton", Options{Fields: []string{"label", "nope"}, Op: decode.Op{Kind: decode.Whole}}, `no field "nope"`},
		{"label-first-two-images.beton", Options{Fields: []string{"image", "thumb"}, Op: decode.Op{Kind: decode.Whole}}, "two image fields"},
		{"imagefolder-jpg.beton", Options{Op: decode.Op{Kind: decode.Whole}}, "decoding whole images needs images of one size"},
		{"label-first-two-images.beton", Options{Fields: []string{"thumb"}, Op: decode.Op{Kind: decode.Whole, OutW: 16, OutH: 16}}, "cannot make 16x16"},
	} {
		c := openCache(t, testenv.Fixture(t, "beton", tc.fixture))
		tc.opts.Workers = 1
		_, err := New(c, tc.opts, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: %v, want an error saying %q", tc.fixture, tc.opts.Fields, err, tc.want)
		}
	}
}

// ffcvEveryField decompresses the beton FFCV 1.0 wrote with every field
// type (scripts/make_ffcv_fixture.py) and returns its path and manifest.
func ffcvEveryField(t *testing.T) (string, ffcvManifest) {
	t.Helper()
	path := testenv.Gunzip(t, "testdata/ffcv-every-field.beton.gz")
	raw, err := os.ReadFile("testdata/ffcv-every-field.beton.manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m ffcvManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return path, m
}

type ffcvManifest struct {
	Samples []map[string]struct {
		SHA256         string
		AccurateSHA256 string `json:"accurate_sha256"`
		StoredSHA256   string `json:"stored_sha256"`
	}
}

// TestFFCVEveryField delivers every field of a beton FFCV wrote with every
// field type it has (raw and JPEG images of one size, int, float, ndarray,
// torch tensor, bytes, JSON), decoding each image field whole, and
// compares every sample's bytes with FFCV's: what its Loader delivers for
// the raw image and the numbers and arrays, the stored bytes for bytes and
// JSON (FFCV's Loader delivers a sample's JSON wrongly when its bytes field
// before it is empty: both lie at one address and its reader takes the
// empty one), and the accurate decode of the stored JPEG (FFCV's Loader
// decodes with libjpeg-turbo's fast IDCT, a few levels off).
func TestFFCVEveryField(t *testing.T) {
	path, m := ffcvEveryField(t)
	c := openCache(t, path)
	for _, image := range []string{"image", "jpeg"} {
		names := []string{image, "label", "weight", "vec", "tensor", "blob", "meta"}
		p, err := New(c, Options{BatchSize: 16, Workers: 2, Op: decode.Op{Kind: decode.Whole}, Fields: names,
			Order: order.Options{Kind: order.Sequential}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sink := newFieldSink(p, 2)
		if _, err := p.RunEpoch(t.Context(), 0, sink); err != nil {
			t.Fatal(err)
		}
		s := 0
		for _, b := range sink.got {
			starts := map[int]int{}
			for j := range b.size {
				got := map[string][]byte{}
				for k, o := range p.outs {
					switch o.kind {
					case outVar:
						end := int(binary.LittleEndian.Uint64(b.bufs[k+1][8*j:]))
						got[o.spec.Name] = b.bufs[k][starts[k]:end]
						starts[k] = end
					case outEnds:
					default:
						got[o.spec.Name] = b.bufs[k][j*o.per : (j+1)*o.per]
					}
				}
				want := m.Samples[s]
				for _, name := range names {
					w := want[name].SHA256
					switch name {
					case "jpeg":
						w = want[name].AccurateSHA256
					case "blob", "meta":
						w = want[name].StoredSHA256
					}
					if sha(got[name]) != w {
						t.Errorf("sample %d, field %s: %.12s, FFCV %.12s", s, name, sha(got[name]), w)
					}
				}
				s++
			}
		}
		if s != len(m.Samples) {
			t.Errorf("%d samples, want %d", s, len(m.Samples))
		}
	}
}
