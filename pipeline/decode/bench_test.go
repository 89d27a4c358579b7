package decode

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ffcvfs/ffcvfs/jpeg"
)

// BenchmarkTrainCrop compares a full decode (the baseline) with
// Decoder.Apply for RandomResizedCrop to 160×160, from whole JPEGs and
// from restart intervals, cycling over the fixture photos, on one
// goroutine. Package jpeg's BenchmarkDecode times the decodes alone.
func BenchmarkTrainCrop(b *testing.B) {
	fs := loadFixtures(b, 50)
	var total int
	for _, f := range fs {
		total += len(f.data)
	}
	avg := int64(total / len(fs))
	op := Op{Kind: RandomResizedCrop, OutW: 160, OutH: 160, FlipProb: 0.5}

	b.Run("full-decode", func(b *testing.B) {
		b.SetBytes(avg)
		b.ReportAllocs()
		buf := make([]byte, 4096*4096*3)
		for i := 0; b.Loop(); i++ {
			f := fs[i%len(fs)]
			w, h, err := jpeg.Header(f.data)
			if err == nil {
				_, _, err = jpeg.DecodeRegion(f.data, 0, 0, w, h, 8, buf, w*3)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "images/s")
	})
	d := newDecoder(b)
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
				data, _, err := jpeg.AddRestarts(f.data, k)
				if err != nil {
					b.Fatal(err)
				}
				rst[i] = fixture{f.name, data}
			}
			apply(rst)(b)
		})
	}
}
