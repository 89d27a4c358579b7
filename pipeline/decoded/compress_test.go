package decoded

import (
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
)

// BenchmarkCompressedPlanes is why the tier holds planes uncompressed: per
// fixture photo, a crop made from its planes (what a hit costs), against
// decompressing the planes with zstd (level 1, "fastest") and S2, the fast
// lossless codecs of klauspost/compress; it reports each codec's ratio.
// Run: go test -run X -bench CompressedPlanes ./pipeline/decoded
func BenchmarkCompressedPlanes(b *testing.B) {
	d, err := decode.NewDecoder()
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	type img struct {
		p            jpeg.Planes
		data, zs, ss []byte
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	dec, _ := zstd.NewReader(nil)
	var imgs []img
	var raw, zn, sn int
	for _, ph := range testenv.Photos(b, 40) {
		p, err := d.JPEG().PlanesOf(ph.Data, jpeg.Size{})
		if err != nil {
			b.Fatal(err)
		}
		data := make([]byte, p.Bytes())
		if err := d.JPEG().DecodePlanes(ph.Data, p, data); err != nil {
			b.Fatal(err)
		}
		m := img{p: p, data: data, zs: enc.EncodeAll(data, nil), ss: s2.Encode(nil, data)}
		raw, zn, sn = raw+len(data), zn+len(m.zs), sn+len(m.ss)
		imgs = append(imgs, m)
	}
	op := decode.Op{Kind: decode.RandomResizedCrop, OutW: 160, OutH: 160, FlipProb: 0.5}
	out := make([]byte, 160*160*3)
	buf := make([]byte, 0, 1<<22)
	rng := rand.New(rand.NewPCG(1, 2))
	b.Run("crop-from-planes", func(b *testing.B) {
		for i := range b.N {
			m := imgs[i%len(imgs)]
			if err := d.ApplyPlanes(m.p, m.data, op, rng, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("zstd-fastest-decompress", func(b *testing.B) {
		for i := range b.N {
			if _, err := dec.DecodeAll(imgs[i%len(imgs)].zs, buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(raw)/float64(zn), "ratio")
	})
	b.Run("s2-decompress", func(b *testing.B) {
		for i := range b.N {
			if _, err := s2.Decode(buf[:cap(buf)], imgs[i%len(imgs)].ss); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(raw)/float64(sn), "ratio")
	})
}
