package testenv

import (
	"bytes"
	"image"
	"image/color"
	"testing"

	libjpeg "github.com/pixiv/go-libjpeg/jpeg"
)

// Layout is a JPEG re-encoded in one sampling layout.
type Layout struct {
	Name string // "444", "422", "440", "420" or "gray"
	Data []byte
}

// Layouts re-encodes the JPEG b, decoded by libjpeg, at quality 90 in each
// sampling layout a JPEG commonly has: 4:4:4, 4:2:2, 4:4:0, 4:2:0 and
// grayscale, in that order. No Go encoder writes the rarer ones.
func Layouts(t testing.TB, b []byte) []Layout {
	t.Helper()
	img, err := libjpeg.Decode(bytes.NewReader(b), &libjpeg.DecoderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bounds := img.Bounds()
	encode := func(m image.Image) []byte {
		var enc bytes.Buffer
		if err := libjpeg.Encode(&enc, m, &libjpeg.EncoderOptions{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		return enc.Bytes()
	}
	var out []Layout
	for _, l := range []struct {
		name  string
		ratio image.YCbCrSubsampleRatio
	}{{"444", image.YCbCrSubsampleRatio444}, {"422", image.YCbCrSubsampleRatio422},
		{"440", image.YCbCrSubsampleRatio440}, {"420", image.YCbCrSubsampleRatio420}} {
		y := image.NewYCbCr(bounds, l.ratio)
		for py := bounds.Min.Y; py < bounds.Max.Y; py++ {
			for px := bounds.Min.X; px < bounds.Max.X; px++ {
				r, g, bl, _ := img.At(px, py).RGBA()
				yy, cb, cr := color.RGBToYCbCr(uint8(r>>8), uint8(g>>8), uint8(bl>>8))
				y.Y[y.YOffset(px, py)] = yy
				y.Cb[y.COffset(px, py)] = cb
				y.Cr[y.COffset(px, py)] = cr
			}
		}
		out = append(out, Layout{l.name, encode(y)})
	}
	gray := image.NewGray(bounds)
	for py := bounds.Min.Y; py < bounds.Max.Y; py++ {
		for px := bounds.Min.X; px < bounds.Max.X; px++ {
			gray.Set(px, py, img.At(px, py))
		}
	}
	return append(out, Layout{"gray", encode(gray)})
}
