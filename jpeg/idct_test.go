package jpeg

import (
	"github.com/ffcvfs/ffcvfs/internal/testenv"

	"bytes"
	"fmt"
	"testing"
)

// TestIDCTMatchesLibjpeg compares whole images decoded at every scale m/8
// with idct.c's inverse DCT (at the scales libjpeg-turbo has no SIMD code
// for) and with libjpeg's own: the two compute the same transform, ours in
// floating point, libjpeg's in fixed point, so they agree to within
// rounding, above 55 dB on every image, in every sampling layout; at the
// other scales they are the same code and must agree byte for byte.
func TestIDCTMatchesLibjpeg(t *testing.T) {
	fs := append(loadFixtures(t, 50), layoutFixtures(t, 3)...)
	ours := newDecoder(t)
	theirs := newDecoder(t)
	theirs.useLibjpegIDCT(true)
	for m := 1; m <= 8; m++ {
		worst, sum := 99.0, 0.0
		for _, f := range fs {
			w, h, err := ours.Header(f.data)
			if err != nil {
				t.Fatal(err)
			}
			a, b := make([]byte, w*h*3), make([]byte, w*h*3)
			ow, oh, err := ours.DecodeRegion(f.data, 0, 0, w, h, m, a, w*3)
			if err != nil {
				t.Fatalf("%s at %d/8: %v", f.name, m, err)
			}
			if _, _, err := theirs.DecodeRegion(f.data, 0, 0, w, h, m, b, w*3); err != nil {
				t.Fatalf("%s at %d/8 (libjpeg's IDCT): %v", f.name, m, err)
			}
			p := min(99, testenv.PSNR(a[:ow*oh*3], b[:ow*oh*3]))
			worst = min(worst, p)
			sum += p
		}
		switch m {
		case 1, 2, 4, 8:
			if worst < 99 {
				t.Errorf("at %d/8 the decodes differ (worst %.1f dB); both should be libjpeg's", m, worst)
			}
		default:
			if worst < 55 {
				t.Errorf("at %d/8: worst PSNR against libjpeg's IDCT %.1f dB < 55", m, worst)
			}
		}
		t.Logf("at %d/8: PSNR against libjpeg's IDCT mean %.1f dB, worst %.1f dB", m, sum/float64(len(fs)), worst)
	}
}

// BenchmarkDecodeScale times whole-image decodes at each scale m/8 with
// idct.c's inverse DCT and with libjpeg's.
func BenchmarkDecodeScale(b *testing.B) {
	fs := loadFixtures(b, 50)
	for _, which := range []string{"ours", "libjpeg"} {
		d := newDecoder(b)
		d.useLibjpegIDCT(which == "libjpeg")
		buf := make([]byte, 4096*4096*3)
		for m := 1; m <= 8; m++ {
			b.Run(fmt.Sprintf("%s/%d-8", which, m), func(b *testing.B) {
				wholeDecodes(b, d, fs, m, buf)
			})
		}
	}
}

// TestIDCTShortcuts: idct.c's IDCT over the 4 lowest frequencies of
// blocks that have no others gives the bytes of the whole transform, for
// whole images at every scale it serves, in every sampling layout.
func TestIDCTShortcuts(t *testing.T) {
	fs := append(loadFixtures(t, 20), layoutFixtures(t, 2)...)
	d := newDecoder(t)
	defer useIDCTShortcuts(true)
	for _, m := range []int{3, 5, 6, 7} {
		for _, f := range fs {
			w, h, err := d.Header(f.data)
			if err != nil {
				t.Fatal(err)
			}
			a, b := make([]byte, w*h*3), make([]byte, w*h*3)
			useIDCTShortcuts(true)
			if _, _, err := d.DecodeRegion(f.data, 0, 0, w, h, m, a, w*3); err != nil {
				t.Fatalf("%s at %d/8: %v", f.name, m, err)
			}
			useIDCTShortcuts(false)
			if _, _, err := d.DecodeRegion(f.data, 0, 0, w, h, m, b, w*3); err != nil {
				t.Fatalf("%s at %d/8, no shortcuts: %v", f.name, m, err)
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("%s at %d/8: the shortcuts change the pixels", f.name, m)
			}
		}
	}
}
