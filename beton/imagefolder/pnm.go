package imagefolder

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// decodePNM decodes a PBM, PGM or PPM file (P1 to P6) into s.pix as packed
// RGB, giving the pixels PIL's PpmImagePlugin and convert("RGB") give:
//
//   - samples are scaled to 8 bits as round(v/maxval*255), rounding half to
//     even (Python's round);
//   - grayscale with maxval above 255 is PIL's 32-bit mode "I",
//     round(v/maxval*65535), which convert("RGB") clips to 255;
//   - binary samples above maxval are clamped, plain ones are an error;
//   - in bitmaps, 1 is black.
func decodePNM(b []byte, s *Scratch) ([]byte, int, int, error) {
	if len(b) < 2 || b[0] != 'P' || b[1] < '1' || b[1] > '6' {
		return nil, 0, 0, errors.New("not a PNM file")
	}
	kind := b[1]
	r := pnmReader{b: b, i: 2}
	// PIL reads the magic up to whitespace: "P6x" is no PNM file.
	if r.i < len(b) && !isPNMSpace(b[r.i]) {
		return nil, 0, 0, fmt.Errorf("bad magic %q", b[:min(len(b), 4)])
	}
	w, err := r.int("width")
	if err != nil {
		return nil, 0, 0, err
	}
	h, err := r.int("height")
	if err != nil {
		return nil, 0, 0, err
	}
	if err := checkPixels(w, h); err != nil {
		return nil, 0, 0, err
	}
	maxval := 1
	if kind != '1' && kind != '4' {
		if maxval, err = r.int("maxval"); err != nil {
			return nil, 0, 0, err
		}
		if maxval <= 0 || maxval >= 65536 {
			return nil, 0, 0, fmt.Errorf("maxval %d is outside 1..65535", maxval)
		}
	}
	bands := 1
	if kind == '3' || kind == '6' {
		bands = 3
	}
	s.pix = grow(s.pix, w*h*3)
	dst := s.pix
	n := w * h * bands

	// lut maps a sample to its 8-bit RGB value.
	var lut []byte
	if kind != '1' && kind != '4' {
		s.lut = grow(s.lut, maxval+1)
		lut = s.lut
		outMax := 255.0
		if bands == 1 && maxval > 255 {
			outMax = 65535 // mode "I"
		}
		for v := range lut {
			lut[v] = byte(min(math.RoundToEven(float64(v)/float64(maxval)*outMax), 255))
		}
	}

	put := func(i int, v byte) {
		if bands == 3 {
			dst[i] = v
			return
		}
		dst[3*i], dst[3*i+1], dst[3*i+2] = v, v, v
	}

	switch kind {
	case '4':
		rowBytes := (w + 7) / 8
		data := b[r.i:]
		if len(data) < rowBytes*h {
			return nil, 0, 0, errTruncatedPNM
		}
		for y := 0; y < h; y++ {
			row := data[y*rowBytes:]
			for x := 0; x < w; x++ {
				var v byte = 255
				if row[x/8]&(0x80>>(x%8)) != 0 {
					v = 0
				}
				put(y*w+x, v)
			}
		}
	case '5', '6':
		data := b[r.i:]
		if maxval < 256 {
			if len(data) < n {
				return nil, 0, 0, errTruncatedPNM
			}
			switch {
			case maxval == 255 && bands == 3:
				copy(dst, data[:n])
			default:
				for i, v := range data[:n] {
					if int(v) > maxval {
						v = byte(maxval)
					}
					put(i, lut[v])
				}
			}
		} else {
			if len(data) < 2*n {
				return nil, 0, 0, errTruncatedPNM
			}
			for i := 0; i < n; i++ {
				v := min(int(data[2*i])<<8|int(data[2*i+1]), maxval)
				put(i, lut[v])
			}
		}
	case '1':
		// Plain bitmap: the digits need no separators.
		i := 0
		for i < n {
			c, ok := r.next()
			if !ok {
				return nil, 0, 0, errTruncatedPNM
			}
			switch c {
			case '0':
				put(i, 255)
			case '1':
				put(i, 0)
			default:
				return nil, 0, 0, fmt.Errorf("invalid character %q in a plain bitmap", c)
			}
			i++
		}
	case '2', '3':
		for i := 0; i < n; i++ {
			tok, err := r.token()
			if err != nil {
				if errors.Is(err, errPNMEOF) {
					return nil, 0, 0, errTruncatedPNM
				}
				return nil, 0, 0, err
			}
			v, err := strconv.Atoi(tok)
			if err != nil || v < 0 {
				return nil, 0, 0, fmt.Errorf("invalid sample %q", tok)
			}
			if v > maxval {
				return nil, 0, 0, fmt.Errorf("sample %d is above maxval %d", v, maxval)
			}
			put(i, lut[v])
		}
	}
	return dst, w, h, nil
}

var (
	errTruncatedPNM = errors.New("PNM file is truncated: fewer samples than its size needs")
	errPNMEOF       = errors.New("PNM file ends inside its header")
)

// pnmReader reads PNM header tokens the way PIL's PpmImageFile does.
type pnmReader struct {
	b []byte
	i int
}

func isPNMSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// token reads one token: it skips whitespace and '#' comments and consumes
// the single whitespace byte that ends it.
func (r *pnmReader) token() (string, error) {
	var tok []byte
	for len(tok) <= 10 {
		if r.i >= len(r.b) {
			break
		}
		c := r.b[r.i]
		r.i++
		switch {
		case isPNMSpace(c):
			if len(tok) == 0 {
				continue
			}
			return string(tok), nil
		case c == '#':
			// The comment runs up to and including a CR or LF; the token
			// may go on after it.
			for r.i < len(r.b) {
				r.i++
				if c := r.b[r.i-1]; c == '\r' || c == '\n' {
					break
				}
			}
			continue
		}
		tok = append(tok, c)
	}
	if len(tok) == 0 {
		return "", errPNMEOF
	}
	if len(tok) > 10 {
		return "", fmt.Errorf("PNM header token too long: %q", tok)
	}
	return string(tok), nil
}

func (r *pnmReader) int(what string) (int, error) {
	tok, err := r.token()
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", what, err)
	}
	v, err := strconv.Atoi(tok)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a number", what, tok)
	}
	return v, nil
}

// next returns the next byte that is neither whitespace nor in a comment.
func (r *pnmReader) next() (byte, bool) {
	for r.i < len(r.b) {
		c := r.b[r.i]
		r.i++
		switch {
		case isPNMSpace(c):
		case c == '#':
			for r.i < len(r.b) && r.b[r.i] != '\r' && r.b[r.i] != '\n' {
				r.i++
			}
		default:
			return c, true
		}
	}
	return 0, false
}
