package pipeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/half"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
)

// convertOracle is the output stage as it was first written, element by
// element through an index function: the oracle of TestConvertMatchesOracle.
func convertOracle(o Options, out, src []byte) {
	hw := o.Op.OutW * o.Op.OutH
	var lut [3][256]float32
	for c := 0; c < 3; c++ {
		for v := 0; v < 256; v++ {
			x := float64(v)
			if o.Normalize {
				x = (x/255 - o.Mean[c]) / o.Std[c]
			}
			lut[c][v] = float32(x)
		}
	}
	idx := func(i, c int) int {
		if o.DimOrder == NCHW {
			return c*hw + i
		}
		return i*3 + c
	}
	for i := 0; i < hw; i++ {
		for c := 0; c < 3; c++ {
			v := src[i*3+c]
			switch o.DType {
			case Uint8:
				out[idx(i, c)] = v
			case Float16:
				binary.LittleEndian.PutUint16(out[2*idx(i, c):], half.Bits(lut[c][v]))
			case Float32:
				binary.LittleEndian.PutUint32(out[4*idx(i, c):], math.Float32bits(lut[c][v]))
			}
		}
	}
}

// TestConvertMatchesOracle: every dtype, layout and normalization gives
// the oracle's bytes, on images whose pixel counts are no multiple of any
// SIMD width; then again on the portable path (without AVX-512 VBMI).
func TestConvertMatchesOracle(t *testing.T) {
	checkConvert(t)
	noVBMI()
	checkConvert(t)
}

func checkConvert(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 6))
	for _, size := range [][2]int{{1, 1}, {7, 3}, {33, 17}, {160, 160}, {161, 157}, {224, 225}} {
		src := make([]byte, size[0]*size[1]*3)
		for i := range src {
			src[i] = byte(rng.UintN(256))
		}
		for _, dt := range []DType{Uint8, Float16, Float32} {
			for _, layout := range []DimOrder{NHWC, NCHW} {
				for _, norm := range []bool{false, true} {
					if dt == Uint8 && norm {
						continue
					}
					o := Options{DType: dt, DimOrder: layout, Normalize: norm, Mean: ImageNetMean, Std: ImageNetStd,
						Op: decode.Op{OutW: size[0], OutH: size[1]}}
					p := &Pipeline{opts: o}
					p.buildLUTs()
					n := p.sampleBytes()
					got, want := make([]byte, n+8), make([]byte, n+8)
					for i := range got {
						got[i], want[i] = 0xA5, 0xA5 // bytes past the image stay untouched
					}
					p.convert(got[:n], src)
					convertOracle(o, want, src)
					if !bytes.Equal(got, want) {
						t.Errorf("%dx%d %s %s normalize=%v: bytes differ from the oracle's", size[0], size[1], dt, layout, norm)
					}
				}
			}
		}
	}
}

func BenchmarkConvert(b *testing.B) {
	src := make([]byte, 160*160*3)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, dt := range []DType{Uint8, Float16, Float32} {
		for _, layout := range []DimOrder{NHWC, NCHW} {
			o := Options{DType: dt, DimOrder: layout, Normalize: dt != Uint8, Mean: ImageNetMean, Std: ImageNetStd, Op: decode.Op{OutW: 160, OutH: 160}}
			p := &Pipeline{opts: o}
			p.buildLUTs()
			out := make([]byte, p.sampleBytes())
			b.Run(fmt.Sprintf("%s-%s", dt, layout), func(b *testing.B) {
				b.SetBytes(int64(len(out)))
				for b.Loop() {
					p.convert(out, src)
				}
			})
			b.Run(fmt.Sprintf("%s-%s-oracle", dt, layout), func(b *testing.B) {
				b.SetBytes(int64(len(out)))
				for b.Loop() {
					convertOracle(o, out, src)
				}
			})
		}
	}
}
