package jpeg

import (
	"bytes"
	"math/rand/v2"
	"testing"

	libjpeg "github.com/pixiv/go-libjpeg/jpeg"
)

// BenchmarkDecode compares full decodes (go-libjpeg's, and ours: the
// baselines) with Decoder.DecodeRegion of a random crop at the scale that
// keeps 160×160 pixels, cycling over the fixture photos, on one goroutine.
// Package decode's BenchmarkTrainCrop adds the crop's resize.
func BenchmarkDecode(b *testing.B) {
	fs := loadFixtures(b, 50)
	var total int
	for _, f := range fs {
		total += len(f.data)
	}
	avg := int64(total / len(fs))

	b.Run("full-decode-golibjpeg", func(b *testing.B) {
		b.SetBytes(avg)
		b.ReportAllocs()
		opts := &libjpeg.DecoderOptions{DCTMethod: libjpeg.DCTISlow}
		for i := 0; b.Loop(); i++ {
			if _, err := libjpeg.DecodeIntoRGB(bytes.NewReader(fs[i%len(fs)].data), opts); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	})
	d := newDecoder(b)
	b.Run("full-decode", func(b *testing.B) {
		b.SetBytes(avg)
		b.ReportAllocs()
		wholeDecodes(b, d, fs, 8, make([]byte, 4096*4096*3))
	})
	b.Run("decode-region", func(b *testing.B) {
		b.SetBytes(avg)
		b.ReportAllocs()
		rng := rand.New(rand.NewPCG(1, 2))
		buf := make([]byte, 4096*4096*3)
		for i := 0; b.Loop(); i++ {
			f := fs[i%len(fs)]
			w, h, err := d.Header(f.data)
			if err != nil {
				b.Fatal(err)
			}
			// A crop of a quarter of the area, at the scale that keeps
			// 160 pixels a side.
			cw, ch := w/2, h/2
			x, y := rng.IntN(w-cw+1), rng.IntN(h-ch+1)
			m := min(max((8*160+cw-1)/cw, (8*160+ch-1)/ch, 1), 8)
			if _, _, err := d.DecodeRegion(f.data, x, y, cw, ch, m, buf, cw*3); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	})
}

// wholeDecodes decodes the whole of fs's images in turn at m/8 into buf
// for the benchmark's loop, and reports images/s.
func wholeDecodes(b *testing.B, d *Decoder, fs []fixture, m int, buf []byte) {
	b.Helper()
	for i := 0; b.Loop(); i++ {
		f := fs[i%len(fs)]
		w, h, err := d.Header(f.data)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := d.DecodeRegion(f.data, 0, 0, w, h, m, buf, w*3); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
}
