package jpeg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	libjpeg "github.com/pixiv/go-libjpeg/jpeg"
)

// decodeWhole decodes the whole of src at m/8 from the whole JPEG.
func decodeWhole(t *testing.T, d *Decoder, name string, src []byte, m int) (pix []byte, w, h int) {
	t.Helper()
	iw, ih, err := d.Header(src)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	w, h = (iw*m+7)/8, (ih*m+7)/8
	pix = make([]byte, w*h*3)
	d.noRestarts = true
	defer func() { d.noRestarts = false }()
	if gw, gh, err := d.DecodeRegion(src, 0, 0, iw, ih, m, pix, w*3); err != nil || gw != w || gh != h {
		t.Fatalf("%s at %d/8: %dx%d %v", name, m, gw, gh, err)
	}
	return pix, w, h
}

// TestAddRestartsLossless: every fixture photo, and photos in every
// sampling layout, transcoded with restart intervals, decode to exactly
// the original's pixels; the intervals divide the MCU rows and are found
// again by restartIndex.
func TestAddRestartsLossless(t *testing.T) {
	d := newDecoder(t)
	var in, out int
	for _, f := range append(loadFixtures(t, 0), layoutFixtures(t, 3)...) {
		rst, k, err := AddRestarts(f.data, 4)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		in, out = in+len(f.data), out+len(rst)
		var x intervals
		if !restartIndex(rst, &x) || x.k != k || x.perRow%k != 0 || len(x.starts) != x.rows*x.cols() {
			t.Fatalf("%s: restart interval %d not indexed: %+v", f.name, k, x)
		}
		if restartIndex(f.data, &x) || HasCropRestarts(f.data) {
			t.Fatalf("%s: the original has restart intervals already", f.name)
		}
		if !HasCropRestarts(rst) {
			t.Fatalf("%s: HasCropRestarts is false after AddRestarts", f.name)
		}
		want, _, _ := decodeWhole(t, d, f.name, f.data, 8)
		got, _, _ := decodeWhole(t, d, f.name, rst, 8)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the transcoded JPEG's pixels differ from the original's", f.name)
		}
	}
	t.Logf("transcoded %d bytes to %d (%+.2f %%)", in, out, 100*float64(out-in)/float64(in))
}

// restartFixtures is how many fixture photos TestRestartCropExact crops.
const restartFixtures = 10

// TestRestartCropExact: a region decoded from the intervals around it
// equals, byte for byte, the same region decoded from the whole JPEG, at
// every m/8, in every sampling layout, for regions anywhere, edges
// included.
func TestRestartCropExact(t *testing.T) {
	d := newDecoder(t)
	rng := rand.New(rand.NewPCG(13, 14))
	used := 0
	for _, f := range append(loadFixtures(t, shortOr(restartFixtures, 1)), layoutFixtures(t, shortOr(restartFixtures/3, 1))...) {
		for _, target := range []int{1, 4} {
			rst, _, err := AddRestarts(f.data, target)
			if err != nil {
				t.Fatal(err)
			}
			w, h, _ := d.Header(rst)
			for _, m := range testScales() {
				for _, r := range testRegions(rng, w, h, 6) {
					win := ScaledWindow(r.x, r.y, r.w, r.h, w, h, m)
					want := make([]byte, win.W*win.H*3)
					d.noRestarts = true
					if _, _, err := d.DecodeRegion(rst, r.x, r.y, r.w, r.h, m, want, win.W*3); err != nil {
						t.Fatal(err)
					}
					d.noRestarts = false
					if _, _, _, ok := d.restartCrop(rst, r.x, r.y, r.w, r.h, m, Size{}); ok {
						used++
					}
					got := make([]byte, win.W*win.H*3)
					gw, gh, err := d.DecodeRegion(rst, r.x, r.y, r.w, r.h, m, got, win.W*3)
					if err != nil || gw != win.W || gh != win.H {
						t.Fatalf("%s k~%d %+v at %d/8: %dx%d %v", f.name, target, r, m, gw, gh, err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%s k~%d %+v at %d/8: the region from intervals differs from the whole JPEG's", f.name, target, r, m)
					}
				}
			}
		}
	}
	if used == 0 {
		t.Fatal("no region was decoded from intervals")
	}
	t.Logf("%d regions decoded from intervals, equal to the whole JPEG's", used)
}

// indexByBytes is intervals.index written plainly, one FF at a time: the
// reference restart.c's scan must agree with.
func indexByBytes(x *intervals, src []byte, n int) (starts, ends []int32, ok bool) {
	total := x.rows * x.cols()
	n = min(n, total)
	start := x.scan
	for pos := x.scan; pos+1 < len(src); pos++ {
		if src[pos] != 0xFF {
			continue
		}
		switch m := src[pos+1]; {
		case m == 0x00 || m == 0xFF: // stuffed byte, fill
			continue
		case m >= 0xD0 && m <= 0xD7:
			if int(m-0xD0) != len(starts)%8 {
				return starts, ends, false
			}
		case m != 0xD9:
			return starts, ends, false
		}
		starts, ends = append(starts, int32(start)), append(ends, int32(pos))
		if src[pos+1] == 0xD9 {
			return starts, ends, len(starts) == total
		}
		if len(starts) == n {
			return starts, ends, n < total
		}
		start = pos + 2
		pos++
	}
	return starts, ends, false
}

// checkIndex: index finds what indexByBytes finds, asked for all the
// intervals and for the first n.
func checkIndex(t *testing.T, b []byte, n int) {
	t.Helper()
	var x intervals
	if !restartHeader(b, &x) {
		return
	}
	for _, want := range []int{x.rows * x.cols(), n} {
		ok := x.index(b, want)
		starts, ends, wantOK := indexByBytes(&x, b, want)
		if ok != wantOK || (ok && (!slices.Equal(x.starts, starts) || !slices.Equal(x.ends, ends))) {
			t.Fatalf("index of %d: %v %v %v, by bytes %v %v %v", want, ok, x.starts, x.ends, wantOK, starts, ends)
		}
	}
}

// TestRestartIndexDamage: on fixtures with bytes of their entropy-coded
// data overwritten (FF and markers among them), index agrees with the
// plain scan, whether it finds the intervals or not.
func TestRestartIndexDamage(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	marks := []byte{0xFF, 0x00, 0xD0, 0xD3, 0xD7, 0xD9, 0xDA, 0xC4}
	for _, f := range loadFixtures(t, 5) {
		rst, _, err := AddRestarts(f.data, 4)
		if err != nil {
			t.Fatal(err)
		}
		var x intervals
		if !restartIndex(rst, &x) {
			t.Fatal("not indexed")
		}
		checkIndex(t, rst, len(x.starts)/2)
		for range 300 {
			b := bytes.Clone(rst)
			for range 1 + rng.IntN(3) {
				b[int(x.starts[0])+rng.IntN(len(b)-int(x.starts[0]))] = marks[rng.IntN(len(marks))]
			}
			checkIndex(t, b[:len(b)-rng.IntN(3)], 1+rng.IntN(len(x.starts)))
		}
	}
}

// FuzzRestartIndex: whatever the bytes, indexing agrees with the plain
// scan, cutting never panics, and a cut indexes again.
func FuzzRestartIndex(f *testing.F) {
	for _, fx := range loadFixtures(f, 3) {
		rst, _, err := AddRestarts(fx.data, 4)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(rst)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkIndex(t, b, 3)
		var x intervals
		if !restartIndex(b, &x) {
			return
		}
		sub, _, _ := x.sub(nil, b, 0, x.cols(), 0, x.rows)
		var y intervals
		if !restartIndex(sub, &y) || len(y.starts) != len(x.starts) {
			t.Fatalf("the whole cut of an indexed JPEG does not index the same: %d vs %d intervals", len(y.starts), len(x.starts))
		}
	})
}

func BenchmarkRestartIndex(b *testing.B) {
	var fs [][]byte
	var total int
	for _, f := range loadFixtures(b, 20) {
		rst, _, err := AddRestarts(f.data, 4)
		if err != nil {
			b.Fatal(err)
		}
		fs = append(fs, rst)
		total += len(rst)
	}
	b.SetBytes(int64(total / len(fs)))
	var x intervals
	for i := 0; b.Loop(); i++ {
		if !restartIndex(fs[i%len(fs)], &x) {
			b.Fatal("not indexed")
		}
	}
}

// TestDecodeInPlace: a region libjpeg writes into the buffer as it decodes
// (DecodeSample with stride 0, what package decode's Apply uses) holds the
// same pixels as DecodeRegion's rows placed at a caller's stride, for every
// sampling layout, with and without restart intervals, at every scale, in
// a buffer of the size DecodeSample promises is enough.
func TestDecodeInPlace(t *testing.T) {
	d := newDecoder(t)
	rng := rand.New(rand.NewPCG(15, 16))
	fixtures := append(loadFixtures(t, restartFixtures/2), layoutFixtures(t, restartFixtures/3)...)
	if testing.Short() {
		fixtures = append(loadFixtures(t, 1), layoutFixtures(t, 1)...)
	}
	for _, f := range fixtures {
		rst, _, err := AddRestarts(f.data, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range [][]byte{f.data, rst} {
			w, h, err := d.Header(src)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range testScales() {
				for _, r := range testRegions(rng, w, h, 4) {
					win := ScaledWindow(r.x, r.y, r.w, r.h, w, h, m)
					want := make([]byte, win.W*win.H*3)
					if _, _, err := d.DecodeRegion(src, r.x, r.y, r.w, r.h, m, want, win.W*3); err != nil {
						t.Fatal(err)
					}
					buf := make([]byte, (w*m+7)/8*3*win.H)
					p, err := d.DecodeSample(src, r.x, r.y, r.w, r.h, m, buf, 0, Size{})
					if err != nil {
						t.Fatalf("%s %+v at %d/8: %v", f.name, r, m, err)
					}
					if p.W != win.W || p.H != win.H || p.Stride < p.W*3 || p.Off+(p.H-1)*p.Stride+p.W*3 > len(buf) {
						t.Fatalf("%s %+v at %d/8: placed %+v in %d bytes, want %dx%d", f.name, r, m, p, len(buf), win.W, win.H)
					}
					for y := 0; y < p.H; y++ {
						row := buf[p.Off+y*p.Stride:][:p.W*3]
						if !bytes.Equal(row, want[y*win.W*3:][:win.W*3]) {
							t.Fatalf("%s %+v at %d/8: row %d decoded in place differs from DecodeRegion's", f.name, r, m, y)
						}
					}
				}
			}
		}
	}
}

// sosOffsets returns the offsets of the SOS markers of a JPEG.
func sosOffsets(b []byte) []int {
	var out []int
	for i := 2; i+3 < len(b); {
		if b[i] != 0xFF {
			i++
			continue
		}
		m := b[i+1]
		switch {
		case m == 0xD9:
			return out
		case m == 0x00 || m == 0xFF || m >= 0xD0 && m <= 0xD7:
			i += 2
			continue
		case m == 0xDA:
			out = append(out, i)
		}
		i += 2 + int(b[i+2])<<8 | int(b[i+3])
	}
	return out
}

// TestAddRestartsProgressiveCut: a progressive JPEG cut after any scan but
// its last (and closed with EOI) is ErrInexact: libjpeg smooths its
// blocks, which a sequential copy would not have (transcoded, they decoded
// to other pixels). The whole one transcodes to the same pixels.
func TestAddRestartsProgressiveCut(t *testing.T) {
	f := loadFixtures(t, 1)[0]
	img, err := libjpeg.Decode(bytes.NewReader(f.data), &libjpeg.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var enc bytes.Buffer
	if err := libjpeg.Encode(&enc, img, &libjpeg.EncoderOptions{Quality: 90, ProgressiveMode: true}); err != nil {
		t.Fatal(err)
	}
	prog := enc.Bytes()
	decode := func(b []byte) []byte {
		im, err := libjpeg.DecodeIntoRGB(bytes.NewReader(b), &libjpeg.DecoderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return im.Pix
	}
	scans := sosOffsets(prog)
	if len(scans) < 3 {
		t.Fatalf("a progressive JPEG of %d scans", len(scans))
	}
	for k := 1; k < len(scans); k++ {
		cut := append(slices.Clip(prog[:scans[k]]), 0xFF, 0xD9)
		if _, _, err := AddRestarts(cut, 4); !errors.Is(err, ErrInexact) {
			t.Errorf("cut after scan %d of %d: %v, want ErrInexact", k, len(scans), err)
		}
	}
	out, _, err := AddRestarts(prog, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(decode(out), decode(prog)) {
		t.Error("the whole progressive JPEG transcoded to other pixels")
	}
}

// withFrame returns the JPEG b with its frame header saying w×h.
func withFrame(t *testing.T, b []byte, w, h int) []byte {
	t.Helper()
	info, err := parseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(b)
	binary.BigEndian.PutUint16(out[info.SOFAt:], uint16(h))
	binary.BigEndian.PutUint16(out[info.SOFAt+2:], uint16(w))
	return out
}

// TestAddRestartsTooLarge: a JPEG of more than MaxPixels, or whose
// coefficients would take more than MaxTranscodeMemory, is ErrTooLarge
// before they are read: a 4 MB JPEG of 32768² took 2.1 GB to transcode.
func TestAddRestartsTooLarge(t *testing.T) {
	f := loadFixtures(t, 1)[0]
	for _, c := range []struct{ w, h int }{{32768, 32768}, {65500, 65500}, {12000, 12000}} {
		b := withFrame(t, f.data, c.w, c.h)
		if _, _, err := AddRestarts(b, 4); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%dx%d: %v, want ErrTooLarge", c.w, c.h, err)
		}
	}
}
