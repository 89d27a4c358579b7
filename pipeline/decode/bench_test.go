package decode

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	libjpeg "github.com/pixiv/go-libjpeg/jpeg"
)

// BenchmarkTrainCrop compares full decodes (go-libjpeg's, and ours: the
// baselines) with Decoder.DecodeRegion and Decoder.Apply for RandomResizedCrop to 160×160,
// cycling over the fixture photos, on one goroutine.
func BenchmarkTrainCrop(b *testing.B) {
	fs := loadFixtures(b, 50)
	var total int
	for _, f := range fs {
		total += len(f.data)
	}
	avg := int64(total / len(fs))
	op := Op{Kind: RandomResizedCrop, OutW: 160, OutH: 160, FlipProb: 0.5}

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
			x, y, cw, ch, _ := op.Crop(rng, w, h)
			m := ChooseScale(cw, ch, op.OutW, op.OutH)
			if _, _, err := d.DecodeRegion(f.data, x, y, cw, ch, m, buf, cw*3); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	})
	apply := func(fs []fixture) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetBytes(avg)
			b.ReportAllocs()
			rng := rand.New(rand.NewPCG(1, 2))
			dst := make([]byte, op.OutW*op.OutH*3)
			for i := 0; b.Loop(); i++ {
				if err := d.Apply(fs[i%len(fs)].data, JPEG, 0, 0, op, rng, dst); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
		}
	}
	b.Run("apply", apply(fs))
	// The same photos with restart intervals (AddRestarts): only the
	// intervals around each crop are entropy-decoded.
	for _, k := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("apply-restarts-%d", k), func(b *testing.B) {
			rst := make([]fixture, len(fs))
			for i, f := range fs {
				data, _, err := AddRestarts(f.data, k)
				if err != nil {
					b.Fatal(err)
				}
				rst[i] = fixture{f.name, data}
			}
			apply(rst)(b)
		})
	}
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
