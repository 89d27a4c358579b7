package beton

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// JPEGHeader is what the frame header of a JPEG says.
type JPEGHeader struct {
	Width, Height int
	Components    int
	Progressive   bool
}

// ParseJPEGHeader walks the markers of a JPEG file up to its frame header
// (any SOFn) and returns the image's size. It reads no entropy-coded data.
func ParseJPEGHeader(b []byte) (JPEGHeader, error) {
	if len(b) < 4 || b[0] != 0xFF || b[1] != 0xD8 {
		return JPEGHeader{}, errors.New("not a JPEG: no start-of-image marker")
	}
	i := 2
	for {
		// A marker: 0xFF, after any number of fill bytes (0xFF).
		start := i
		for i < len(b) && b[i] == 0xFF {
			i++
		}
		if i >= len(b) {
			return JPEGHeader{}, errors.New("JPEG ends before its frame header")
		}
		if i == start {
			return JPEGHeader{}, fmt.Errorf("JPEG: expected a marker at byte %d", i)
		}
		m := b[i]
		i++
		switch {
		case m == 0xD8 || m == 0x01 || m >= 0xD0 && m <= 0xD7:
			continue // markers without a length
		case m == 0xD9 || m == 0xDA:
			return JPEGHeader{}, errors.New("JPEG has no frame header before its scan data")
		}
		if i+2 > len(b) {
			return JPEGHeader{}, errors.New("JPEG ends inside a marker segment")
		}
		n := int(binary.BigEndian.Uint16(b[i:]))
		if n < 2 || i+n > len(b) {
			return JPEGHeader{}, fmt.Errorf("JPEG marker 0x%02X segment of %d bytes runs past the end", m, n)
		}
		// SOF0..SOF15, except DHT (C4), JPG (C8) and DAC (CC).
		if m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC {
			if n < 8 {
				return JPEGHeader{}, errors.New("JPEG frame header too short")
			}
			s := b[i+2:]
			h := JPEGHeader{
				Height:      int(binary.BigEndian.Uint16(s[1:])),
				Width:       int(binary.BigEndian.Uint16(s[3:])),
				Components:  int(s[5]),
				Progressive: m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE,
			}
			if h.Width == 0 || h.Height == 0 || h.Components == 0 {
				return h, fmt.Errorf("JPEG frame header says %dx%d with %d components", h.Width, h.Height, h.Components)
			}
			return h, nil
		}
		i += n
	}
}
