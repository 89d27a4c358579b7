package decode

import (
	"bytes"
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
	d, err := NewDecoder()
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	b.Run("full-decode", func(b *testing.B) {
		b.SetBytes(avg)
		b.ReportAllocs()
		buf := make([]byte, 4096*4096*3)
		for i := 0; b.Loop(); i++ {
			f := fs[i%len(fs)]
			w, h, err := d.Header(f.data)
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := d.DecodeRegion(f.data, 0, 0, w, h, 8, buf, w*3); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
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
	b.Run("apply", func(b *testing.B) {
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
	})
}

// BenchmarkResize times Resizer.ResizeWindow alone on random pixels for
// sizes typical of Apply's RandomResizedCrop to 160×160 (the mean scaled
// crop is about 235×230; crops under 160 pixels enlarge).
func BenchmarkResize(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, c := range []struct {
		name           string
		sw, sh, ow, oh int
	}{
		{"300x300-160x160", 300, 300, 160, 160},
		{"235x230-160x160", 235, 230, 160, 160},
		{"120x130-160x160", 120, 130, 160, 160},
	} {
		b.Run(c.name, func(b *testing.B) {
			src := randomRGB(rng, c.sw, c.sh)
			dst := make([]byte, c.ow*c.oh*3)
			var r Resizer
			for i := 0; b.Loop(); i++ {
				// Vary the window a little, as Apply does, so tables are rebuilt.
				f := float64(i%2) * 0.25
				r.ResizeWindow(dst, c.ow*3, c.ow, c.oh, src, c.sw*3, c.sw, c.sh,
					f, f, float64(c.sw)-f, float64(c.sh)-f, i%2 == 0)
			}
		})
	}
}
