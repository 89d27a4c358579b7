package beton

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The project's one reader of JPEG markers. It reads no pixels: libjpeg
// (package pipeline/decode, and go-libjpeg when writing) does that. Two
// entry points share one walk of the markers:
//
//   - ParseJPEGHeader checks an image stored in a beton: strict (a marker
//     must follow every segment), and it stops at the frame header, so it
//     reads no entropy-coded data.
//   - ScanJPEG reads a file as libjpeg would decode it, to write it: it
//     skips stray bytes before a marker, walks every scan, and insists on a
//     complete file (libjpeg pads a truncated one with gray and only
//     warns; PIL refuses it, and so does this).

// JPEGHeader is what the frame header of a JPEG says.
type JPEGHeader struct {
	Width, Height int
	Components    int
	Progressive   bool
}

// JPEGColor is the color space libjpeg infers for a JPEG's components.
type JPEGColor int

// The color spaces of JPEGColor.
const (
	JPEGGray JPEGColor = iota
	JPEGYCbCr
	JPEGRGB
	JPEGCMYK
	JPEGYCCK
	JPEGOther
)

// JPEGInfo is what the markers of a whole JPEG file say.
type JPEGInfo struct {
	JPEGHeader
	Precision int       // bits per sample
	SOF       byte      // the frame marker, 0xC0..0xCF
	Color     JPEGColor // as libjpeg infers it
	Adobe     bool      // an Adobe APP14 segment is present
}

// HuffmanDCT reports whether the frame is a Huffman-coded DCT one
// (baseline, extended sequential or progressive), the kinds every JPEG
// decoder reads.
func (j *JPEGInfo) HuffmanDCT() bool {
	return j.SOF == 0xC0 || j.SOF == 0xC1 || j.SOF == 0xC2
}

// ParseJPEGHeader walks the markers of a JPEG file up to its frame header
// (any SOFn) and returns the image's size. It reads no entropy-coded data.
func ParseJPEGHeader(b []byte) (JPEGHeader, error) {
	j, err := walkJPEG(b, false)
	return j.JPEGHeader, err
}

// ScanJPEG walks every marker of a JPEG file, skipping entropy-coded data,
// and checks that it is complete: a frame header, at least one scan, and
// an end-of-image marker (bytes after it are ignored, as decoders do).
func ScanJPEG(b []byte) (JPEGInfo, error) {
	return walkJPEG(b, true)
}

// walkJPEG is ParseJPEGHeader (whole false) and ScanJPEG (whole true).
func walkJPEG(b []byte, whole bool) (JPEGInfo, error) {
	var j JPEGInfo
	if len(b) < 3 || b[0] != 0xFF || b[1] != 0xD8 {
		return j, errors.New("not a JPEG: no start-of-image marker")
	}
	var (
		sawSOF, sawSOS, jfif bool
		adobeTransform       = -1
		compIDs              [3]byte
	)
	i := 2
	for {
		// A marker: 0xFF, after any number of fill bytes (0xFF). libjpeg
		// skips stray bytes before one, with a warning.
		start := i
		if whole {
			for i < len(b) && b[i] != 0xFF {
				i++
			}
			start = i
		}
		for i < len(b) && b[i] == 0xFF {
			i++
		}
		if i >= len(b) {
			if whole {
				return j, errors.New("JPEG is truncated: no end-of-image marker")
			}
			return j, errors.New("JPEG ends before its frame header")
		}
		if i == start {
			return j, fmt.Errorf("JPEG: expected a marker at byte %d", i)
		}
		m := b[i]
		i++
		switch {
		case m == 0xD9 && whole: // EOI
			if !sawSOF {
				return j, errors.New("JPEG has no frame header")
			}
			if !sawSOS {
				return j, errors.New("JPEG has no scan data")
			}
			j.Color = jpegColorSpace(j.Components, jfif, adobeTransform, compIDs)
			return j, nil
		case m == 0xD8 && whole:
			return j, errors.New("JPEG has a second start-of-image marker before its end")
		case m == 0xD8 || m == 0x01 || m >= 0xD0 && m <= 0xD7:
			continue // SOI, TEM, RSTn: no length
		case m == 0x00 && whole:
			continue // a stuffed zero outside scan data: garbage libjpeg skips
		case !whole && (m == 0xD9 || m == 0xDA):
			return j, errors.New("JPEG has no frame header before its scan data")
		}
		if i+2 > len(b) {
			if whole {
				return j, errors.New("JPEG is truncated inside a marker segment")
			}
			return j, errors.New("JPEG ends inside a marker segment")
		}
		n := int(binary.BigEndian.Uint16(b[i:]))
		if n < 2 || i+n > len(b) {
			return j, fmt.Errorf("JPEG is truncated: marker 0x%02X segment of %d bytes runs past the end", m, n)
		}
		seg := b[i+2 : i+n]
		i += n
		switch {
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC: // SOFn
			if sawSOF {
				return j, errors.New("JPEG has more than one frame header")
			}
			if len(seg) < 6 {
				return j, errors.New("JPEG frame header too short")
			}
			sawSOF = true
			j.SOF = m
			j.Precision = int(seg[0])
			j.Height = int(binary.BigEndian.Uint16(seg[1:]))
			j.Width = int(binary.BigEndian.Uint16(seg[3:]))
			j.Components = int(seg[5])
			j.Progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE
			if j.Width == 0 || j.Height == 0 || j.Components == 0 {
				return j, fmt.Errorf("JPEG frame header says %dx%d pixels, %d components", j.Width, j.Height, j.Components)
			}
			if !whole {
				return j, nil
			}
			if len(seg) < 6+3*j.Components {
				return j, errors.New("JPEG frame header too short for its components")
			}
			for c := 0; c < 3 && c < j.Components; c++ {
				compIDs[c] = seg[6+3*c]
			}
		case m == 0xE0: // APP0
			if !sawSOF && len(seg) >= 5 && string(seg[:5]) == "JFIF\x00" {
				jfif = true
			}
		case m == 0xEE: // APP14
			if len(seg) >= 12 && string(seg[:5]) == "Adobe" {
				j.Adobe = true
				adobeTransform = int(seg[11])
			}
		case m == 0xDA: // SOS: skip the entropy-coded data that follows.
			if !sawSOF {
				return j, errors.New("JPEG has scan data before its frame header")
			}
			sawSOS = true
			for {
				k := bytes.IndexByte(b[i:], 0xFF)
				if k < 0 {
					return j, errors.New("JPEG is truncated: scan data runs to the end of the file")
				}
				i += k
				if i+1 >= len(b) {
					return j, errors.New("JPEG is truncated: scan data runs to the end of the file")
				}
				if c := b[i+1]; c == 0x00 || c >= 0xD0 && c <= 0xD7 {
					i += 2 // stuffed byte or restart marker
					continue
				}
				break // a marker (or fill bytes before one)
			}
		}
	}
}

// jpegColorSpace is libjpeg's default_decompress_parms: the color space it
// assumes for the components.
func jpegColorSpace(n int, jfif bool, adobeTransform int, ids [3]byte) JPEGColor {
	switch n {
	case 1:
		return JPEGGray
	case 3:
		switch {
		case jfif:
			return JPEGYCbCr
		case adobeTransform == 0:
			return JPEGRGB
		case adobeTransform > 0:
			return JPEGYCbCr
		case ids == [3]byte{'R', 'G', 'B'}:
			return JPEGRGB
		}
		return JPEGYCbCr
	case 4:
		if adobeTransform > 0 {
			return JPEGYCCK
		}
		return JPEGCMYK
	}
	return JPEGOther
}
