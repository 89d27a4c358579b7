package jpeg

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	stdjpeg "image/jpeg"

	libjpeg "github.com/pixiv/go-libjpeg/jpeg"
	"github.com/pixiv/go-libjpeg/rgb"
)

// Whole-image decoding and encoding, for writing betons: through
// go-libjpeg (libjpeg-turbo, the accurate IDCT), as PIL and OpenCV decode
// and FFCV's writer encodes, and for CMYK through the standard library.

// DecodeRGB decodes a whole JPEG whose components libjpeg takes as
// grayscale, YCbCr or RGB (info, from Scan) into packed RGB, rows w·3
// bytes apart.
func DecodeRGB(src []byte, info *Info) (pix []byte, w, h int, err error) {
	if info.Color != Gray && info.Color != YCbCr && info.Color != RGB {
		return nil, 0, 0, fmt.Errorf("jpeg: a JPEG of %d components is not grayscale, YCbCr or RGB: %w", info.Components, ErrCorrupt)
	}
	img, err := libjpeg.DecodeIntoRGB(bytes.NewReader(src), &libjpeg.DecoderOptions{})
	if err != nil {
		return nil, 0, 0, fmt.Errorf("decoding JPEG: %w", err)
	}
	w, h = img.Rect.Dx(), img.Rect.Dy()
	if w != info.Width || h != info.Height || img.Stride != w*3 || len(img.Pix) < w*h*3 {
		return nil, 0, 0, fmt.Errorf("JPEG decoded to %dx%d, its header says %dx%d", w, h, info.Width, info.Height)
	}
	return img.Pix, w, h, nil
}

// DecodeCMYK decodes a whole 4-component JPEG (CMYK, or YCCK) with the
// standard library, which handles Adobe's inverted CMYK and YCCK. PIL
// assumes Adobe's conventions even without an Adobe segment; the standard
// library refuses such files, so one is inserted.
func DecodeCMYK(src []byte, info *Info) (*image.CMYK, error) {
	data := src
	if !info.Adobe {
		adobe := []byte{0xFF, 0xEE, 0x00, 0x0E, 'A', 'd', 'o', 'b', 'e', 0x00, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00}
		data = make([]byte, 0, len(src)+len(adobe))
		data = append(append(append(data, src[:2]...), adobe...), src[2:]...)
	}
	img, err := stdjpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decoding CMYK JPEG: %w", err)
	}
	b := img.Bounds()
	if b.Dx() != info.Width || b.Dy() != info.Height {
		return nil, fmt.Errorf("JPEG decoded to %dx%d, its header says %dx%d", b.Dx(), b.Dy(), info.Width, info.Height)
	}
	cmyk, ok := img.(*image.CMYK)
	if !ok {
		return nil, errors.New("4-component JPEG did not decode to CMYK")
	}
	return cmyk, nil
}

// CheckConfig checks that libjpeg reads the size info says from src's
// header: a file stored as it is must be the image its metadata says to
// every reader.
func CheckConfig(src []byte, info *Info) error {
	cfg, err := libjpeg.DecodeConfig(bytes.NewReader(src))
	if err != nil {
		return fmt.Errorf("reading JPEG header: %w", err)
	}
	if cfg.Width != info.Width || cfg.Height != info.Height {
		return fmt.Errorf("JPEG header size %dx%d disagrees with libjpeg's %dx%d", info.Width, info.Height, cfg.Width, cfg.Height)
	}
	return nil
}

// EncodeRGB encodes w×h packed RGB pixels, rows stride bytes apart, as a
// baseline JPEG of the quality given (1 to 100) into dst, with libjpeg's
// defaults otherwise (4:2:0, the accurate DCT), as OpenCV's imencode does.
func EncodeRGB(dst *bytes.Buffer, pix []byte, w, h, stride, quality int) error {
	img := &rgb.Image{Pix: pix, Stride: stride, Rect: image.Rect(0, 0, w, h)}
	if err := libjpeg.Encode(dst, img, &libjpeg.EncoderOptions{Quality: quality}); err != nil {
		return fmt.Errorf("encoding JPEG: %w", err)
	}
	return nil
}
