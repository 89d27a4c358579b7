package imagefolder

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// jpegColor is the color space libjpeg infers for a JPEG's components.
type jpegColor int

const (
	jpegGray jpegColor = iota
	jpegYCbCr
	jpegRGB
	jpegCMYK
	jpegYCCK
	jpegOther
)

// jpegInfo is what the markers of a JPEG file say.
type jpegInfo struct {
	width, height int
	components    int
	precision     int
	sof           byte // the frame marker, 0xC0..0xCF
	color         jpegColor
	adobe         bool // saw an Adobe APP14 segment
}

// huffmanDCT reports whether the frame is a Huffman-coded DCT one (baseline,
// extended sequential or progressive), the kinds every JPEG decoder reads.
func (j *jpegInfo) huffmanDCT() bool {
	return j.sof == 0xC0 || j.sof == 0xC1 || j.sof == 0xC2
}

// scanJPEG walks every marker of a JPEG file, skipping entropy-coded data,
// and checks that it is complete: a frame header, at least one scan, and an
// end-of-image marker (bytes after it are ignored, as decoders do). libjpeg
// pads a truncated file with gray and only warns; this check turns that case
// into an error, as PIL does.
func scanJPEG(b []byte) (jpegInfo, error) {
	var j jpegInfo
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
		// Find the next marker: libjpeg skips stray bytes before one (with a
		// warning), and any number of 0xFF fill bytes.
		for i < len(b) && b[i] != 0xFF {
			i++
		}
		for i < len(b) && b[i] == 0xFF {
			i++
		}
		if i >= len(b) {
			return j, errors.New("JPEG is truncated: no end-of-image marker")
		}
		m := b[i]
		i++
		switch {
		case m == 0xD9: // EOI
			if !sawSOF {
				return j, errors.New("JPEG has no frame header")
			}
			if !sawSOS {
				return j, errors.New("JPEG has no scan data")
			}
			j.color = jpegColorSpace(j.components, jfif, adobeTransform, compIDs)
			return j, nil
		case m == 0xD8:
			return j, errors.New("JPEG has a second start-of-image marker before its end")
		case m == 0x01 || m >= 0xD0 && m <= 0xD7:
			continue // TEM, RSTn: no length
		case m == 0x00:
			continue // a stuffed zero outside scan data: garbage libjpeg skips
		}
		if i+2 > len(b) {
			return j, errors.New("JPEG is truncated inside a marker segment")
		}
		n := int(binary.BigEndian.Uint16(b[i:]))
		if n < 2 || i+n > len(b) {
			return j, fmt.Errorf("JPEG is truncated: marker 0x%02X segment of %d bytes runs past the end", m, n)
		}
		seg := b[i+2 : i+n]
		i += n
		switch {
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC:
			if sawSOF {
				return j, errors.New("JPEG has more than one frame header")
			}
			if len(seg) < 6 {
				return j, errors.New("JPEG frame header too short")
			}
			sawSOF = true
			j.sof = m
			j.precision = int(seg[0])
			j.height = int(binary.BigEndian.Uint16(seg[1:]))
			j.width = int(binary.BigEndian.Uint16(seg[3:]))
			j.components = int(seg[5])
			if j.width == 0 || j.height == 0 || j.components == 0 {
				return j, fmt.Errorf("JPEG frame header says %dx%d pixels, %d components", j.width, j.height, j.components)
			}
			if len(seg) < 6+3*j.components {
				return j, errors.New("JPEG frame header too short for its components")
			}
			for c := 0; c < 3 && c < j.components; c++ {
				compIDs[c] = seg[6+3*c]
			}
		case m == 0xE0: // APP0
			if !sawSOF && len(seg) >= 5 && string(seg[:5]) == "JFIF\x00" {
				jfif = true
			}
		case m == 0xEE: // APP14
			if len(seg) >= 12 && string(seg[:5]) == "Adobe" {
				j.adobe = true
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
func jpegColorSpace(n int, jfif bool, adobeTransform int, ids [3]byte) jpegColor {
	switch n {
	case 1:
		return jpegGray
	case 3:
		switch {
		case jfif:
			return jpegYCbCr
		case adobeTransform == 0:
			return jpegRGB
		case adobeTransform > 0:
			return jpegYCbCr
		case ids == [3]byte{'R', 'G', 'B'}:
			return jpegRGB
		}
		return jpegYCbCr
	case 4:
		if adobeTransform > 0 {
			return jpegYCCK
		}
		return jpegCMYK
	}
	return jpegOther
}
