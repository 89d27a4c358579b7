package imagefolder

import (
	"bytes"
	"fmt"
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

// BenchmarkResizeArea shrinks a 553×445 image (a fixture's size) to the
// sizes the reference fixtures use; MB/s is source pixels.
func BenchmarkResizeArea(b *testing.B) {
	const sw, sh = 553, 445
	src := make([]byte, sw*sh*3)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for _, m := range []int{320, 96} {
		dw, dh, _ := ResizedSize(sw, sh, m)
		b.Run(fmt.Sprintf("to%dx%d", dw, dh), func(b *testing.B) {
			dst := make([]byte, dw*dh*3)
			s := new(Scratch)
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if err := resizeArea(dst, dw, dh, src, sw, sh, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("half", func(b *testing.B) {
		dst := make([]byte, sw/2*(sh/2)*3)
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			if err := resizeArea(dst, sw/2, sh/2, src[:sw/2*2*(sh/2)*2*3], sw/2*2, sh/2*2, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
