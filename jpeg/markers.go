package jpeg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// The project's one reader of JPEG markers. It reads no pixels: libjpeg
// does that. Three entry points share one walk of the markers:
//
//   - ParseFrame reads an image's size: strict (a marker must follow
//     every segment), and it stops at the frame header, so it reads no
//     entropy-coded data.
//   - parseHeader reads, as strictly, up to the first scan's header: the
//     frame with its components' sampling, the restart interval and where
//     the entropy-coded data starts, which the decoding of crops from
//     restart intervals needs (restart.go).
//   - Scan reads a file as libjpeg would decode it, to write it: it skips
//     stray bytes before a marker, walks every scan, and insists on a
//     complete file (libjpeg pads a truncated one with gray and only
//     warns; PIL refuses it, and so does this).

// Frame is what the frame header of a JPEG says.
type Frame struct {
	Width, Height int
	Components    int
	Progressive   bool
}

// Color is the color space libjpeg infers for a JPEG's components.
type Color int

// The color spaces of Color.
const (
	Gray Color = iota
	YCbCr
	RGB
	CMYK
	YCCK
	OtherColor
)

// Component is a frame component's sampling factors.
type Component struct{ H, V int }

// maxComponents is how many components' sampling an Info keeps: libjpeg
// decodes at most four.
const maxComponents = 4

// Info is what the markers of a JPEG file say.
type Info struct {
	Frame
	Precision int   // bits per sample
	SOF       byte  // the frame marker, 0xC0..0xCF
	Color     Color // as libjpeg infers it (Scan)
	Adobe     bool  // an Adobe APP14 segment is present (Scan)

	// Of the frame header, read by parseHeader and Scan: the offset of
	// its height field, and the first maxComponents components'
	// sampling.
	SOFAt int
	Comps [maxComponents]Component
	// Read by parseHeader: the restart interval in MCUs (0: none), and
	// the first scan's components and the offset of its entropy-coded
	// data.
	Restart   int
	ScanComps int
	ScanAt    int
}

// HuffmanDCT reports whether the frame is a Huffman-coded DCT one
// (baseline, extended sequential or progressive), the kinds every JPEG
// decoder reads.
func (j *Info) HuffmanDCT() bool {
	return j.SOF == 0xC0 || j.SOF == 0xC1 || j.SOF == 0xC2
}

// Portable reports whether a JPEG can be stored as it is: 8-bit,
// Huffman-coded DCT, grayscale or YCbCr, which every JPEG reader decodes to
// the same RGB pixels libjpeg gives.
func (j *Info) Portable() bool {
	return j.Precision == 8 && j.HuffmanDCT() && (j.Color == Gray || j.Color == YCbCr)
}

// HasSignature reports whether b starts as a JPEG file does: a
// start-of-image marker and the 0xFF of the next marker.
func HasSignature(b []byte) bool {
	return len(b) >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF
}

// ParseFrame walks the markers of a JPEG file up to its frame header
// (any SOFn) and returns the image's size. It reads no entropy-coded data.
func ParseFrame(b []byte) (Frame, error) {
	j, err := walk(b, toFrame)
	return j.Frame, err
}

// parseHeader walks the markers of a JPEG file up to the header of its
// first scan, strictly.
func parseHeader(b []byte) (Info, error) {
	return walk(b, toScan)
}

// Scan walks every marker of a JPEG file, skipping entropy-coded data,
// and checks that it is complete: a frame header, at least one scan, and
// an end-of-image marker (bytes after it are ignored, as decoders do).
func Scan(b []byte) (Info, error) {
	return walk(b, whole)
}

// How far walk reads.
type depth int

const (
	toFrame depth = iota // the frame header
	toScan               // the first scan's header
	whole                // every marker, leniently
)

// walk reads the markers of b to the depth given.
func walk(b []byte, to depth) (Info, error) {
	var j Info
	if len(b) < 3 || b[0] != 0xFF || b[1] != 0xD8 {
		return j, errors.New("not a JPEG: no start-of-image marker")
	}
	var (
		sawSOF, sawSOS, jfif bool
		adobeTransform       = -1
		compIDs              [3]byte
	)
	lenient := to == whole
	i := 2
	for {
		// A marker: 0xFF, after any number of fill bytes (0xFF). libjpeg
		// skips stray bytes before one, with a warning.
		start := i
		if lenient {
			for i < len(b) && b[i] != 0xFF {
				i++
			}
			start = i
		}
		for i < len(b) && b[i] == 0xFF {
			i++
		}
		if i >= len(b) {
			if lenient {
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
		case m == 0xD9 && lenient: // EOI
			if !sawSOF {
				return j, errors.New("JPEG has no frame header")
			}
			if !sawSOS {
				return j, errors.New("JPEG has no scan data")
			}
			j.Color = jpegColorSpace(j.Components, jfif, adobeTransform, compIDs)
			return j, nil
		case m == 0xD8 && lenient:
			return j, errors.New("JPEG has a second start-of-image marker before its end")
		case m == 0xD8 || m >= 0xD0 && m <= 0xD7:
			if to == toScan {
				return j, fmt.Errorf("JPEG has marker 0x%02X before its scan data", m)
			}
			continue // SOI, RSTn: no length
		case m == 0x01:
			continue // TEM: no length
		case m == 0x00 && lenient:
			continue // a stuffed zero outside scan data: garbage libjpeg skips
		case !lenient && m == 0xD9, to == toFrame && m == 0xDA:
			return j, errors.New("JPEG has no frame header before its scan data")
		}
		if i+2 > len(b) {
			if lenient {
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
			j.SOFAt = i - n + 3
			j.Precision = int(seg[0])
			j.Height = int(binary.BigEndian.Uint16(seg[1:]))
			j.Width = int(binary.BigEndian.Uint16(seg[3:]))
			j.Components = int(seg[5])
			j.Progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE
			if j.Width == 0 || j.Height == 0 || j.Components == 0 {
				return j, fmt.Errorf("JPEG frame header says %dx%d pixels, %d components", j.Width, j.Height, j.Components)
			}
			if to == toFrame {
				return j, nil
			}
			if len(seg) < 6+3*j.Components {
				return j, errors.New("JPEG frame header too short for its components")
			}
			for c := range min(j.Components, maxComponents) {
				f := seg[6+3*c+1]
				j.Comps[c] = Component{H: int(f >> 4), V: int(f & 15)}
				if c < 3 {
					compIDs[c] = seg[6+3*c]
				}
			}
		case m == 0xDD: // DRI
			if len(seg) < 2 {
				return j, errors.New("JPEG restart interval segment too short")
			}
			j.Restart = int(binary.BigEndian.Uint16(seg))
		case m == 0xE0: // APP0
			if !sawSOF && len(seg) >= 5 && string(seg[:5]) == "JFIF\x00" {
				jfif = true
			}
		case m == 0xEE: // APP14
			if len(seg) >= 12 && string(seg[:5]) == "Adobe" {
				j.Adobe = true
				adobeTransform = int(seg[11])
			}
		case m == 0xDA: // SOS
			if !sawSOF {
				return j, errors.New("JPEG has scan data before its frame header")
			}
			if to == toScan {
				if len(seg) < 1 {
					return j, errors.New("JPEG scan header too short")
				}
				j.ScanComps, j.ScanAt = int(seg[0]), i
				return j, nil
			}
			// Skip the entropy-coded data that follows.
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
func jpegColorSpace(n int, jfif bool, adobeTransform int, ids [3]byte) Color {
	switch n {
	case 1:
		return Gray
	case 3:
		switch {
		case jfif:
			return YCbCr
		case adobeTransform == 0:
			return RGB
		case adobeTransform > 0:
			return YCbCr
		case ids == [3]byte{'R', 'G', 'B'}:
			return RGB
		}
		return YCbCr
	case 4:
		if adobeTransform > 0 {
			return YCCK
		}
		return CMYK
	}
	return OtherColor
}

// Stub returns the shortest bytes that begin and end as a JPEG does, a
// start-of-image and an end-of-image marker: no image (nothing decodes
// it), for betons made to list files whose contents nobody reads.
func Stub() []byte { return []byte{0xFF, 0xD8, 0xFF, 0xD9} }
