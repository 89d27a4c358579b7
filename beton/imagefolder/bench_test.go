package imagefolder

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/pixiv/go-libjpeg/jpeg"
)

// BenchmarkPrepare converts the 200 fixture JPEGs per operation; MB/s is
// source bytes read. "decode" is the floor: libjpeg decoding alone.
func BenchmarkPrepare(b *testing.B) {
	paths := fixtureSamples(b)
	srcs := make([][]byte, len(paths))
	var total int64
	for i, p := range paths {
		srcs[i] = readFile(b, p)
		total += int64(len(srcs[i]))
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(srcs)), "ns/image")
	}

	b.Run("decode", func(b *testing.B) {
		b.SetBytes(total)
		b.ReportAllocs()
		for b.Loop() {
			for _, src := range srcs {
				if _, err := jpeg.DecodeIntoRGB(bytes.NewReader(src), &jpeg.DecoderOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b)
	})

	for _, c := range []struct {
		name string
		opts Options
	}{
		{"jpg-verbatim", Options{Mode: WriteJPG}},
		{"jpg-max320", Options{Mode: WriteJPG, MaxResolution: 320}},
		{"jpg-reencode", Options{Mode: WriteJPG, AlwaysEncode: true}},
		{"raw", Options{Mode: WriteRaw}},
		{"raw-max320", Options{Mode: WriteRaw, MaxResolution: 320}},
		{"raw-max96", Options{Mode: WriteRaw, MaxResolution: 96}},
		{"smart-max256", Options{Mode: WriteSmart, MaxResolution: 256}},
		{"proportion-max96", Options{Mode: WriteProportion, MaxResolution: 96}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := new(Scratch)
			rnd := rand.New(rand.NewPCG(1, 2))
			b.SetBytes(total)
			b.ReportAllocs()
			for b.Loop() {
				for i, src := range srcs {
					if _, err := Prepare(paths[i], src, c.opts, rnd, s); err != nil {
						b.Fatal(err)
					}
				}
			}
			report(b)
		})
	}
}
