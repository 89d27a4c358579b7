package imagefolder

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"

	"github.com/ffcvfs/ffcvfs/jpeg"
	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
	"golang.org/x/image/webp"
)

// format is an image file format, as recognised from its first bytes.
type format int

const (
	formatUnknown format = iota
	formatJPEG
	formatPNG
	formatBMP
	formatTIFF
	formatWebP
	formatPNM
)

func (f format) String() string {
	return [...]string{"unknown", "JPEG", "PNG", "BMP", "TIFF", "WebP", "PNM"}[f]
}

// sniff recognises a format by its signature, as PIL's Image.open does.
func sniff(b []byte) format {
	switch {
	case jpeg.HasSignature(b):
		return formatJPEG
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return formatPNG
	case bytes.HasPrefix(b, []byte("BM")):
		return formatBMP
	case bytes.HasPrefix(b, []byte("II*\x00")) || bytes.HasPrefix(b, []byte("MM\x00*")):
		return formatTIFF
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return formatWebP
	case len(b) >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6':
		return formatPNM
	}
	return formatUnknown
}

func checkPixels(w, h int) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("image has an empty size %dx%d", w, h)
	}
	if int64(w)*int64(h) > jpeg.MaxPixels {
		return fmt.Errorf("%w: %dx%d is more than %d pixels", ErrTooLarge, w, h, jpeg.MaxPixels)
	}
	return nil
}

// decode returns src's pixels as packed RGB (stride w*3). owned is true when
// pix was allocated for this call alone and may be handed to the caller;
// otherwise it lives in s.
func decode(src []byte, f format, ji *jpeg.Info, s *Scratch) (pix []byte, w, h int, owned bool, err error) {
	switch f {
	case formatJPEG:
		switch ji.Color {
		case jpeg.Gray, jpeg.YCbCr, jpeg.RGB:
			pix, w, h, err := jpeg.DecodeRGB(src, ji)
			return pix, w, h, true, err
		case jpeg.CMYK, jpeg.YCCK:
			img, err := jpeg.DecodeCMYK(src, ji)
			if err != nil {
				return nil, 0, 0, false, err
			}
			s.pix = grow(s.pix, ji.Width*ji.Height*3)
			toRGB(s.pix, img, false)
			return s.pix, ji.Width, ji.Height, false, nil
		}
		return nil, 0, 0, false, fmt.Errorf("%w: JPEG with %d components", ErrFormat, ji.Components)
	case formatPNG:
		// A 16-bit grayscale PNG is mode "I;16" in PIL, which convert("RGB")
		// clips to 255 rather than scaling; Go may give it as Gray16 or, with
		// a transparent color, as NRGBA64.
		clip16 := len(src) > 25 && src[24] == 16 && src[25] == 0
		return decodeStd(src, "PNG", png.DecodeConfig, png.Decode, clip16, s)
	case formatBMP:
		return decodeStd(src, "BMP", bmp.DecodeConfig, bmp.Decode, false, s)
	case formatTIFF:
		return decodeStd(src, "TIFF", tiff.DecodeConfig, tiff.Decode, false, s)
	case formatWebP:
		return decodeStd(src, "WebP", webp.DecodeConfig, webp.Decode, false, s)
	case formatPNM:
		pix, w, h, err := decodePNM(src, s)
		if err != nil {
			return nil, 0, 0, false, fmt.Errorf("decoding PNM: %w", err)
		}
		return pix, w, h, false, nil
	}
	return nil, 0, 0, false, ErrFormat
}

// decodeStd decodes with a standard-library style decoder after checking the
// size its header claims.
func decodeStd(src []byte, name string,
	config func(io.Reader) (image.Config, error), dec func(io.Reader) (image.Image, error),
	clip16 bool, s *Scratch) ([]byte, int, int, bool, error) {
	cfg, err := config(bytes.NewReader(src))
	if err != nil {
		return nil, 0, 0, false, fmt.Errorf("reading %s header: %w", name, err)
	}
	if err := checkPixels(cfg.Width, cfg.Height); err != nil {
		return nil, 0, 0, false, err
	}
	img, err := dec(bytes.NewReader(src))
	if err != nil {
		return nil, 0, 0, false, fmt.Errorf("decoding %s: %w", name, err)
	}
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w != cfg.Width || h != cfg.Height {
		return nil, 0, 0, false, fmt.Errorf("%s decoded to %dx%d, its header says %dx%d", name, w, h, cfg.Width, cfg.Height)
	}
	s.pix = grow(s.pix, w*h*3)
	toRGB(s.pix, img, clip16)
	return s.pix, w, h, false, nil
}

// toRGB writes img's pixels into dst as packed RGB, the way PIL's
// convert("RGB") treats the corresponding modes. clip16 makes 16-bit gray
// values clip to 255 (PIL's "I;16" and "I" modes) instead of keeping their
// high byte.
func toRGB(dst []byte, img image.Image, clip16 bool) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	switch m := img.(type) {
	case *image.Gray:
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			out := dst[y*w*3 : (y+1)*w*3]
			for x, v := range row {
				out[3*x], out[3*x+1], out[3*x+2] = v, v, v
			}
		}
	case *image.Gray16:
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+2*w]
			out := dst[y*w*3 : (y+1)*w*3]
			for x := 0; x < w; x++ {
				v := clip16to8(row[2*x], row[2*x+1])
				out[3*x], out[3*x+1], out[3*x+2] = v, v, v
			}
		}
	case *image.RGBA:
		rgba8(dst, m.Pix, m.Stride, w, h)
	case *image.NRGBA:
		rgba8(dst, m.Pix, m.Stride, w, h)
	case *image.RGBA64:
		rgba16(dst, m.Pix, m.Stride, w, h, false)
	case *image.NRGBA64:
		rgba16(dst, m.Pix, m.Stride, w, h, clip16)
	case *image.Paletted:
		var lut [256][3]byte
		for i, c := range m.Palette {
			if i < 256 {
				lut[i][0], lut[i][1], lut[i][2] = colorRGB(c)
			}
		}
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+w]
			out := dst[y*w*3 : (y+1)*w*3]
			for x, v := range row {
				c := &lut[v]
				out[3*x], out[3*x+1], out[3*x+2] = c[0], c[1], c[2]
			}
		}
	case *image.CMYK:
		for y := 0; y < h; y++ {
			row := m.Pix[y*m.Stride : y*m.Stride+4*w]
			out := dst[y*w*3 : (y+1)*w*3]
			for x := 0; x < w; x++ {
				out[3*x], out[3*x+1], out[3*x+2] = cmykToRGB(row[4*x], row[4*x+1], row[4*x+2], row[4*x+3])
			}
		}
	case *image.YCbCr:
		ycbcrToRGB(dst, m, w, h)
	case *image.NYCbCrA:
		ycbcrToRGB(dst, &m.YCbCr, w, h)
	default:
		i := 0
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				dst[i], dst[i+1], dst[i+2] = colorRGB(img.At(x, y))
				i += 3
			}
		}
	}
}

func rgba8(dst, pix []byte, stride, w, h int) {
	for y := 0; y < h; y++ {
		row := pix[y*stride : y*stride+4*w]
		out := dst[y*w*3 : (y+1)*w*3]
		for x := 0; x < w; x++ {
			p := row[4*x : 4*x+3 : 4*x+3]
			o := out[3*x : 3*x+3 : 3*x+3]
			o[0], o[1], o[2] = p[0], p[1], p[2]
		}
	}
}

func rgba16(dst, pix []byte, stride, w, h int, clip16 bool) {
	for y := 0; y < h; y++ {
		row := pix[y*stride : y*stride+8*w]
		out := dst[y*w*3 : (y+1)*w*3]
		for x := 0; x < w; x++ {
			p := row[8*x : 8*x+6 : 8*x+6]
			o := out[3*x : 3*x+3 : 3*x+3]
			if clip16 {
				v := clip16to8(p[0], p[1])
				o[0], o[1], o[2] = v, v, v
			} else {
				o[0], o[1], o[2] = p[0], p[2], p[4]
			}
		}
	}
}

// clip16to8 is PIL's "I;16" to 8-bit conversion: values above 255 become
// 255.
func clip16to8(hi, lo byte) byte {
	if hi != 0 {
		return 255
	}
	return lo
}

// cmykToRGB is PIL's cmyk2rgb.
func cmykToRGB(c, m, y, k byte) (byte, byte, byte) {
	nk := 255 - int(k)
	f := func(v byte) byte {
		t := int(v)*nk + 128
		return byte(nk - ((t>>8)+t)>>8)
	}
	return f(c), f(m), f(y)
}

// ycbcrToRGB converts the 4:2:0 YCbCr planes of a lossy WebP (the only
// decoder here that gives YCbCr) as libwebp does when PIL decodes them: its
// "fancy" chroma upsampling, then its fixed-point BT.601 limited-range
// conversion. Other subsampling ratios fall back to nearest chroma.
func ycbcrToRGB(dst []byte, m *image.YCbCr, w, h int) {
	if m.SubsampleRatio != image.YCbCrSubsampleRatio420 {
		i := 0
		for y := m.Rect.Min.Y; y < m.Rect.Min.Y+h; y++ {
			for x := m.Rect.Min.X; x < m.Rect.Min.X+w; x++ {
				yi, ci := m.YOffset(x, y), m.COffset(x, y)
				dst[i], dst[i+1], dst[i+2] = vp8YUVToRGB(int(m.Y[yi]), int(m.Cb[ci]), int(m.Cr[ci]))
				i += 3
			}
		}
		return
	}
	yRow := func(r int) []byte { o := m.YOffset(m.Rect.Min.X, m.Rect.Min.Y+r); return m.Y[o : o+w] }
	cw := (w + 1) / 2
	uRow := func(r int) []byte { o := m.COffset(m.Rect.Min.X, m.Rect.Min.Y+2*r); return m.Cb[o : o+cw] }
	vRow := func(r int) []byte { o := m.COffset(m.Rect.Min.X, m.Rect.Min.Y+2*r); return m.Cr[o : o+cw] }
	out := func(r int) []byte { return dst[r*w*3 : (r+1)*w*3] }

	// libwebp's EmitFancyRGB over the whole picture: the first row mirrors
	// its chroma row, then rows come in pairs between two chroma rows, and
	// an even height ends with a mirrored last row.
	upsampleLinePair(yRow(0), nil, uRow(0), vRow(0), uRow(0), vRow(0), out(0), nil, w)
	y := 0
	for ; y+2 < h; y += 2 {
		upsampleLinePair(yRow(y+1), yRow(y+2), uRow(y/2), vRow(y/2), uRow(y/2+1), vRow(y/2+1), out(y+1), out(y+2), w)
	}
	if h%2 == 0 {
		upsampleLinePair(yRow(y+1), nil, uRow(y/2), vRow(y/2), uRow(y/2), vRow(y/2), out(y+1), nil, w)
	}
}

// upsampleLinePair is libwebp's UpsampleRgbLinePair: it writes the RGB of
// one or two luma rows lying between two chroma rows, interpolating chroma
// with 9-3-3-1 weights.
func upsampleLinePair(topY, botY, topU, topV, curU, curV, topDst, botDst []byte, n int) {
	put := func(dst []byte, x int, y byte, u, v int) {
		dst[3*x], dst[3*x+1], dst[3*x+2] = vp8YUVToRGB(int(y), u, v)
	}
	last := (n - 1) >> 1
	tlU, tlV := int(topU[0]), int(topV[0])
	lU, lV := int(curU[0]), int(curV[0])
	put(topDst, 0, topY[0], (3*tlU+lU+2)>>2, (3*tlV+lV+2)>>2)
	if botY != nil {
		put(botDst, 0, botY[0], (3*lU+tlU+2)>>2, (3*lV+tlV+2)>>2)
	}
	for x := 1; x <= last; x++ {
		tU, tV := int(topU[x]), int(topV[x])
		u, v := int(curU[x]), int(curV[x])
		avgU, avgV := tlU+tU+lU+u+8, tlV+tV+lV+v+8
		d12U, d12V := (avgU+2*(tU+lU))>>3, (avgV+2*(tV+lV))>>3
		d03U, d03V := (avgU+2*(tlU+u))>>3, (avgV+2*(tlV+v))>>3
		put(topDst, 2*x-1, topY[2*x-1], (d12U+tlU)>>1, (d12V+tlV)>>1)
		put(topDst, 2*x, topY[2*x], (d03U+tU)>>1, (d03V+tV)>>1)
		if botY != nil {
			put(botDst, 2*x-1, botY[2*x-1], (d03U+lU)>>1, (d03V+lV)>>1)
			put(botDst, 2*x, botY[2*x], (d12U+u)>>1, (d12V+v)>>1)
		}
		tlU, tlV, lU, lV = tU, tV, u, v
	}
	if n&1 == 0 {
		put(topDst, n-1, topY[n-1], (3*tlU+lU+2)>>2, (3*tlV+lV+2)>>2)
		if botY != nil {
			put(botDst, n-1, botY[n-1], (3*lU+tlU+2)>>2, (3*lV+tlV+2)>>2)
		}
	}
}

// vp8YUVToRGB is libwebp's VP8YuvToRgb (14-bit fixed point, BT.601 limited
// range).
func vp8YUVToRGB(y, u, v int) (byte, byte, byte) {
	mulHi := func(a, c int) int { return (a * c) >> 8 }
	clip := func(x int) byte {
		if x&^(256<<6-1) == 0 {
			return byte(x >> 6)
		}
		if x < 0 {
			return 0
		}
		return 255
	}
	yy := mulHi(y, 19077)
	return clip(yy + mulHi(v, 26149) - 14234),
		clip(yy - mulHi(u, 6419) - mulHi(v, 13320) + 8708),
		clip(yy + mulHi(u, 33050) - 17685)
}

// colorRGB is one color's RGB channels, without undoing premultiplication
// for the non-premultiplied types (alpha is dropped, not composited).
func colorRGB(c color.Color) (byte, byte, byte) {
	switch c := c.(type) {
	case color.RGBA:
		return c.R, c.G, c.B
	case color.NRGBA:
		return c.R, c.G, c.B
	case color.Gray:
		return c.Y, c.Y, c.Y
	case color.Gray16:
		v := clip16to8(byte(c.Y>>8), byte(c.Y))
		return v, v, v
	case color.RGBA64:
		return byte(c.R >> 8), byte(c.G >> 8), byte(c.B >> 8)
	case color.NRGBA64:
		return byte(c.R >> 8), byte(c.G >> 8), byte(c.B >> 8)
	case color.CMYK:
		return cmykToRGB(c.C, c.M, c.Y, c.K)
	case color.YCbCr:
		return color.YCbCrToRGB(c.Y, c.Cb, c.Cr)
	case color.NYCbCrA:
		return color.YCbCrToRGB(c.Y, c.Cb, c.Cr)
	}
	r, g, b, _ := c.RGBA()
	return byte(r >> 8), byte(g >> 8), byte(b >> 8)
}

// Size returns the width and height an image file's header gives, reading
// no pixels (a PNM file's header is parsed in full), and whether it could:
// what the image takes once decoded (w×h×3 bytes), before it is.
func Size(src []byte) (w, h int, ok bool) {
	var cfg func(io.Reader) (image.Config, error)
	switch sniff(src) {
	case formatJPEG:
		f, err := jpeg.ParseFrame(src)
		return f.Width, f.Height, err == nil && f.Width > 0 && f.Height > 0
	case formatPNG:
		cfg = png.DecodeConfig
	case formatBMP:
		cfg = bmp.DecodeConfig
	case formatTIFF:
		cfg = tiff.DecodeConfig
	case formatWebP:
		cfg = webp.DecodeConfig
	case formatPNM:
		r := pnmReader{b: src, i: 2}
		w, err1 := r.int("width")
		h, err2 := r.int("height")
		return w, h, err1 == nil && err2 == nil && w > 0 && h > 0
	default:
		return 0, 0, false
	}
	c, err := cfg(bytes.NewReader(src))
	return c.Width, c.Height, err == nil && c.Width > 0 && c.Height > 0
}
