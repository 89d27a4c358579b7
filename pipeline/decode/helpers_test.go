package decode

import (
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

type fixture struct {
	name string
	data []byte
}

// loadFixtures returns n of the fixture photos (all for n ≤ 0).
func loadFixtures(t testing.TB, n int) []fixture {
	t.Helper()
	var fs []fixture
	for _, p := range testenv.Photos(t, n) {
		fs = append(fs, fixture{p.Name, p.Data})
	}
	return fs
}

// newDecoder returns a Decoder closed when the test ends.
func newDecoder(t testing.TB) *Decoder {
	t.Helper()
	d, err := NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// fullDecode decodes the whole image with libjpeg's accurate IDCT (through
// go-libjpeg), as the reference.
func fullDecode(t testing.TB, b []byte) (pix []byte, stride, w, h int) {
	t.Helper()
	info, err := jpeg.Scan(b)
	if err != nil {
		t.Fatal(err)
	}
	pix, w, h, err = jpeg.DecodeRGB(b, &info)
	if err != nil {
		t.Fatal(err)
	}
	return pix, w * 3, w, h
}

// psnrStat sums PSNRs: their mean and the worst, each capped at 99 dB (an
// identical image).
type psnrStat struct {
	sum, worst float64
	n          int
}

func (s *psnrStat) add(p float64) {
	p = min(p, 99)
	if s.n == 0 || p < s.worst {
		s.worst = p
	}
	s.sum += p
	s.n++
}

func (s *psnrStat) mean() float64 { return s.sum / float64(s.n) }
