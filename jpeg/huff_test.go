package jpeg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"math/rand/v2"
	"strings"
	"testing"

	libjpeg "github.com/pixiv/go-libjpeg/jpeg"
)

// entropyVariants returns f as it is, transcoded with a restart interval
// per MCU and about every 4 MCUs, and re-encoded progressive (which
// huff.c leaves to libjpeg).
func entropyVariants(t testing.TB, f fixture) (plain, rst1, rst4, progressive fixture) {
	t.Helper()
	r1, _, err := AddRestarts(f.data, 1)
	if err != nil {
		t.Fatal(err)
	}
	r4, _, err := AddRestarts(f.data, 4)
	if err != nil {
		t.Fatal(err)
	}
	img, err := libjpeg.Decode(bytes.NewReader(f.data), &libjpeg.DecoderOptions{})
	if err != nil {
		// go-libjpeg decodes into Go's image types, which hold no 4:1:0
		// and the like: the progressive variant is then re-encoded from
		// the pixels ours decodes.
		img = rgbImage(t, f.data)
	}
	var p bytes.Buffer
	if err := libjpeg.Encode(&p, img, &libjpeg.EncoderOptions{Quality: 90, ProgressiveMode: true}); err != nil {
		t.Fatal(err)
	}
	return f, fixture{f.name + "+rst1", r1}, fixture{f.name + "+rst4", r4}, fixture{f.name + "+progressive", p.Bytes()}
}

// rgbImage decodes a JPEG whole into an RGBA image.
func rgbImage(t testing.TB, src []byte) *image.RGBA {
	t.Helper()
	w, h, err := Header(src)
	if err != nil {
		t.Fatal(err)
	}
	pix := make([]byte, w*h*3)
	if _, _, err := DecodeRegion(src, 0, 0, w, h, 8, pix, w*3); err != nil {
		t.Fatal(err)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range w * h {
		copy(img.Pix[4*i:], pix[3*i:3*i+3])
		img.Pix[4*i+3] = 0xFF
	}
	return img
}

// entropyDecoders returns two Decoders, closed when the test ends: ours
// with huff.c's entropy decoder, theirs with libjpeg's.
func entropyDecoders(t testing.TB) (ours, theirs *Decoder) {
	t.Helper()
	ours, theirs = newDecoder(t), newDecoder(t)
	theirs.UseLibjpegEntropy(true)
	return ours, theirs
}

// TestEntropyMatchesLibjpeg: regions decoded with huff.c's entropy decoder
// equal, byte for byte, the same regions decoded with libjpeg-turbo's own,
// for fixture photos in every sampling layout, without and with restart
// intervals (from the whole JPEG and from the intervals around the
// region), at every m/8, whole images and regions anywhere. Progressive
// JPEGs stay with libjpeg's decoder.
func TestEntropyMatchesLibjpeg(t *testing.T) {
	ours, theirs := entropyDecoders(t)
	rng := rand.New(rand.NewPCG(17, 18))
	hooked := map[string]int{}
	var decodes int
	for _, f := range append(loadFixtures(t, shortOr(4, 1)), layoutFixtures(t, 1)...) {
		plain, rst1, rst4, prog := entropyVariants(t, f)
		for i, src := range []fixture{plain, rst1, rst4, prog} {
			kind := []string{"plain", "rst1", "rst4", "progressive"}[i]
			w, h, err := ours.Header(src.data)
			if err != nil {
				t.Fatal(err)
			}
			rs := testRegions(rng, w, h, 3)
			rs = append(rs[:1], rs[len(rs)-5:]...) // whole, an edge, three anywhere
			for _, m := range testScales() {
				for _, r := range rs {
					win := ScaledWindow(r.x, r.y, r.w, r.h, w, h, m)
					for _, whole := range []bool{true, false} {
						if whole && i == 0 {
							continue // the plain JPEG has no intervals: one path
						}
						ours.noRestarts, theirs.noRestarts = whole, whole
						want := make([]byte, win.W*win.H*3)
						if _, _, err := theirs.DecodeRegion(src.data, r.x, r.y, r.w, r.h, m, want, win.W*3); err != nil {
							t.Fatalf("%s %+v at %d/8, libjpeg's entropy decoder: %v", src.name, r, m, err)
						}
						if theirs.entropyHooked() {
							t.Fatalf("%s: UseLibjpegEntropy(true) still used huff.c", src.name)
						}
						got := make([]byte, win.W*win.H*3)
						if _, _, err := ours.DecodeRegion(src.data, r.x, r.y, r.w, r.h, m, got, win.W*3); err != nil {
							t.Fatalf("%s %+v at %d/8: %v", src.name, r, m, err)
						}
						if ours.entropyHooked() {
							hooked[kind]++
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("%s %+v at %d/8 (whole JPEG %v): huff.c's pixels differ from libjpeg's", src.name, r, m, whole)
						}
						decodes++
					}
				}
			}
		}
	}
	ours.noRestarts, theirs.noRestarts = false, false
	for _, kind := range []string{"plain", "rst1", "rst4"} {
		if hooked[kind] == 0 {
			t.Errorf("no %s JPEG was entropy-decoded by huff.c", kind)
		}
	}
	if hooked["progressive"] != 0 {
		t.Errorf("%d progressive decodes went through huff.c", hooked["progressive"])
	}
	t.Logf("%d decodes equal; by huff.c: %v", decodes, hooked)
}

// TestEntropyDamage: damaged entropy-coded data gives an error naming the
// damage with huff.c's decoder as with libjpeg's (a code no table has, a
// marker where data should be, the wrong RSTn, a truncated file), never
// made-up pixels.
func TestEntropyDamage(t *testing.T) {
	d := newDecoder(t)
	f := loadFixtures(t, 1)[0]
	_, _, rst4, _ := entropyVariants(t, f)
	w, h, err := d.Header(rst4.data)
	if err != nil {
		t.Fatal(err)
	}
	var x intervals
	if !restartIndex(rst4.data, &x) {
		t.Fatal("not indexed")
	}
	mid := int(x.starts[len(x.starts)/2])
	at := func(i int, b ...byte) []byte {
		c := bytes.Clone(rst4.data)
		copy(c[i:], b)
		return c
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		// All ones is no code in an optimized table (libjpeg never
		// assigns one).
		{"no such code", at(mid, 0xFF, 0x00, 0xFF, 0x00, 0xFF, 0x00, 0xFF, 0x00), "bad Huffman code"},
		{"marker in the data", at(mid+4, 0xFF, 0xC4), "premature end of data segment"},
		{"wrong RSTn", at(mid-1, 0xD0+(rst4.data[mid-1]-0xD0+1)%8), "RST"},
		{"truncated", rst4.data[:mid+40], "Premature end of JPEG file"},
	}
	for _, c := range cases {
		for _, lib := range []bool{false, true} {
			d.UseLibjpegEntropy(lib)
			for _, whole := range []bool{true, false} {
				d.noRestarts = whole
				dst := make([]byte, w*h*3)
				_, _, err := d.DecodeRegion(c.data, 0, 0, w, h, 8, dst, w*3)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.want)) {
					t.Errorf("%s (libjpeg's decoder %v, whole %v): got %v, want an error saying %q", c.name, lib, whole, err, c.want)
				}
				if !lib && !d.entropyHooked() {
					t.Errorf("%s: not decoded by huff.c", c.name)
				}
			}
		}
	}
	d.UseLibjpegEntropy(false)
	d.noRestarts = false
}

// agree decodes the region of b with both decoders and fails unless they
// agree: the same pixels when both decode, an error from both otherwise,
// but for two differences of libjpeg's: where a file ends early (see
// FuzzEntropy), and a bad Huffman code in a JPEG without restart markers,
// which libjpeg-turbo's fast path decodes as a 0 (its slow path reports
// it, as huff.c does: the pixels after it are made up).
func agree(t *testing.T, ours, theirs *Decoder, b []byte, x, y, cw, ch, m int) (decoded bool) {
	t.Helper()
	w, h, err := theirs.Header(b)
	if err != nil || w*h > 1<<22 {
		return false
	}
	if x+cw > w || y+ch > h {
		x, y, cw, ch = 0, 0, w, h
	}
	win := ScaledWindow(x, y, cw, ch, w, h, m)
	for _, whole := range []bool{true, false} {
		ours.noRestarts, theirs.noRestarts = whole, whole
		want := make([]byte, win.W*win.H*3)
		_, _, errT := theirs.DecodeRegion(b, x, y, cw, ch, m, want, win.W*3)
		got := make([]byte, win.W*win.H*3)
		_, _, errO := ours.DecodeRegion(b, x, y, cw, ch, m, got, win.W*3)
		switch {
		case errO == nil && errT == nil:
			decoded = true
			if !bytes.Equal(got, want) && !fastPathBacksOut(b) {
				t.Fatalf("%dx%d+%d+%d at %d/8 (whole %v): huff.c's pixels differ from libjpeg's", cw, ch, x, y, m, whole)
			}
		case errO != nil && errT == nil && strings.Contains(errO.Error(), "bad Huffman code"):
			// libjpeg-turbo's fast path (JPEGs without restart markers)
			// takes a code no table has as 0 without a word; its slow
			// path warns, as huff.c does.
		case errO == nil || errT == nil:
			e := errO
			if e == nil {
				e = errT
			}
			if !strings.Contains(e.Error(), "Premature end of JPEG file") {
				t.Fatalf("%dx%d+%d+%d at %d/8 (whole %v): huff.c: %v; libjpeg: %v", cw, ch, x, y, m, whole, errO, errT)
			}
		}
	}
	ours.noRestarts, theirs.noRestarts = false, false
	return decoded
}

// fastPathBacksOut reports whether libjpeg-turbo's fast Huffman path may
// leave wrong coefficients in b's pixels: in a JPEG without restart markers
// (where it uses that path), FF FF in the entropy-coded data (a fill byte,
// which a marker or a stuffed FF 00 follows) makes it back out of the MCU
// it is decoding, and its slow path decodes the MCU again into blocks not
// zeroed, over the coefficients the fast path took from zero bits
// (libjpeg-turbo 2.1's jdhuff.c, decode_mcu: goto use_slow). huff.c reads
// fill bytes as the slow path does, and gets the MCU right.
func fastPathBacksOut(b []byte) bool {
	// The header's segments, up to the scan's.
	for pos := 2; pos+4 <= len(b) && b[pos] == 0xFF; {
		m, n := b[pos+1], int(binary.BigEndian.Uint16(b[pos+2:]))
		switch {
		case m == 0xFF:
			pos++
			continue
		case m == 0xDD && n >= 4 && pos+6 <= len(b) && binary.BigEndian.Uint16(b[pos+4:]) != 0:
			return false // restart markers: libjpeg-turbo stays on its slow path
		case m == 0xDA:
			return pos+2+n <= len(b) && bytes.Contains(b[pos+2+n:], []byte{0xFF, 0xFF})
		}
		pos += 2 + n
	}
	return false
}

// damagesPerJPEG is how many damaged copies TestEntropyRandomDamage makes
// of each JPEG: 100, or 30 with -short.
func damagesPerJPEG() int {
	if testing.Short() {
		return 30
	}
	return 100
}

// TestEntropyRandomDamage: bytes of the entropy-coded data overwritten,
// inserted and cut at random, in plain JPEGs and with restart intervals:
// the two decoders agree (agree) on every one.
func TestEntropyRandomDamage(t *testing.T) {
	ours, theirs := entropyDecoders(t)
	rng := rand.New(rand.NewPCG(19, 20))
	var n, decoded int
	for _, f := range loadFixtures(t, 3) {
		plain, rst1, rst4, _ := entropyVariants(t, f)
		for _, src := range []fixture{plain, rst1, rst4} {
			var x intervals
			scan := len(src.data) / 4 // past the headers of these photos
			if restartIndex(src.data, &x) {
				scan = x.scan
			}
			for range damagesPerJPEG() {
				b := bytes.Clone(src.data)
				at := scan + rng.IntN(len(b)-scan)
				switch rng.IntN(4) {
				case 0: // a few bytes overwritten
					for range 1 + rng.IntN(4) {
						b[scan+rng.IntN(len(b)-scan)] = byte(rng.Uint32())
					}
				case 1: // a marker-like pair
					b[at] = 0xFF
					if at+1 < len(b) {
						b[at+1] = []byte{0x00, 0xD0, 0xD3, 0xD9, 0xC4, 0xFF}[rng.IntN(6)]
					}
				case 2: // bytes inserted
					b = append(b[:at], append(bytes.Repeat([]byte{byte(rng.Uint32())}, 1+rng.IntN(8)), b[at:]...)...)
				default: // cut short
					b = b[:at]
				}
				w, h, _ := theirs.Header(b)
				m := 1 + rng.IntN(8)
				if agree(t, ours, theirs, b, rng.IntN(max(1, w/2)), rng.IntN(max(1, h/2)), max(1, w/2), max(1, h/2), m) {
					decoded++
				}
				n++
			}
		}
	}
	t.Logf("%d damaged JPEGs, %d of them decoded (to the same pixels) by both", n, decoded)
}

// FuzzEntropy: whatever the bytes, huff.c's decoder never crashes, and
// agrees with libjpeg's (agree): the same pixels when both decode, an
// error from both otherwise. Where a file ends early, the two read ahead
// of the bits they need by different amounts, so one may reach the end
// (and report it) where the other has stopped.
func FuzzEntropy(f *testing.F) {
	for _, fx := range loadFixtures(f, 2) {
		plain, rst1, rst4, _ := entropyVariants(f, fx)
		for _, v := range []fixture{plain, rst1, rst4} {
			f.Add(v.data, uint8(7), uint16(0))
			f.Add(v.data, uint8(3), uint16(0x1234))
		}
	}
	ours, theirs := entropyDecoders(f)
	f.Fuzz(func(t *testing.T, b []byte, scale uint8, where uint16) {
		w, h, err := theirs.Header(b)
		if err != nil {
			return
		}
		x, y, cw, ch := 0, 0, w, h
		if where != 0 {
			x, y = int(where&0xFF)*w/256, int(where>>8)*h/256
			cw, ch = max(1, (w-x)/2), max(1, (h-y)/2)
		}
		agree(t, ours, theirs, b, x, y, cw, ch, 1+int(scale%8))
	})
}

// BenchmarkEntropy: full decodes of the fixture photos, plain and with
// restart intervals about every 4 MCUs, entropy-decoded by libjpeg-turbo
// and by huff.c, on one goroutine.
func BenchmarkEntropy(b *testing.B) {
	fs := loadFixtures(b, 50)
	rst := make([]fixture, len(fs))
	for i, f := range fs {
		_, _, r4, _ := entropyVariants(b, f)
		rst[i] = r4
	}
	d := newDecoder(b)
	buf := make([]byte, 4096*4096*3)
	for _, set := range []struct {
		name string
		fs   []fixture
	}{{"plain", fs}, {"rst4", rst}} {
		for _, lib := range []bool{true, false} {
			name := set.name + "/huff.c"
			if lib {
				name = set.name + "/libjpeg"
			}
			b.Run(name, func(b *testing.B) {
				d.UseLibjpegEntropy(lib)
				d.noRestarts = true
				defer func() { d.UseLibjpegEntropy(false); d.noRestarts = false }()
				wholeDecodes(b, d, set.fs, 8, buf)
			})
		}
	}
}

// TestEntropyLongIntervals: restart intervals longer than huff.c's buffer
// of unstuffed data (FFH_BUF), so that it tops the buffer up inside an
// interval and meets the marker after it while copying: noise at quality
// 100, one interval per MCU row. Intact, the two decoders give the same
// pixels; with bytes damaged inside the intervals they agree (agree).
func TestEntropyLongIntervals(t *testing.T) {
	const w, h = 768, 64
	rng := rand.New(rand.NewPCG(29, 30))
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = byte(rng.Uint32())
	}
	var enc bytes.Buffer
	if err := libjpeg.Encode(&enc, img, &libjpeg.EncoderOptions{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	src, k, err := AddRestarts(enc.Bytes(), 1<<16-1) // one interval per MCU row
	if err != nil {
		t.Fatal(err)
	}
	var x intervals
	if !restartIndex(src, &x) || k != x.perRow {
		t.Fatalf("not one interval per MCU row (k %d)", k)
	}
	if n := x.ends[0] - x.starts[0]; n <= entropyBuffer {
		t.Fatalf("the first interval has %d bytes, not more than %d", n, entropyBuffer)
	}
	ours, theirs := entropyDecoders(t)
	if !agree(t, ours, theirs, src, 0, 0, w, h, 8) {
		t.Fatal("the intact JPEG did not decode")
	}
	for range 40 {
		b := bytes.Clone(src)
		i := rng.IntN(len(x.starts))
		at := int(x.starts[i]) + rng.IntN(int(x.ends[i]-x.starts[i]))
		b[at] = byte(rng.Uint32())
		agree(t, ours, theirs, b, 0, 0, w, h, 1+rng.IntN(8))
	}
}
