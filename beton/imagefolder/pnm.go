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
	r, p, err := readPNMHeader(b)
	if err != nil {
		return nil, 0, 0, err
	}
	s.pix = grow(s.pix, p.w*p.h*3)
	p.dst = s.pix
	if p.kind != '1' && p.kind != '4' {
		// lut maps a sample to its 8-bit RGB value.
		s.lut = grow(s.lut, p.maxval+1)
		p.lut = s.lut
		outMax := 255.0
		if p.bands == 1 && p.maxval > 255 {
			outMax = 65535 // mode "I"
		}
		for v := range p.lut {
			p.lut[v] = byte(min(math.RoundToEven(float64(v)/float64(p.maxval)*outMax), 255))
		}
	}
	switch p.kind {
	case '4':
		err = p.bitmap(b[r.i:])
	case '5', '6':
		err = p.binary(b[r.i:])
	case '1':
		err = p.plainBitmap(&r)
	case '2', '3':
		err = p.plain(&r)
	}
	if err != nil {
		return nil, 0, 0, err
	}
	return p.dst, p.w, p.h, nil
}

// pnmImage is a PNM file's header, and where its pixels go: dst, packed
// RGB, through lut for gray and color samples.
type pnmImage struct {
	kind                byte // '1' to '6'
	w, h, maxval, bands int
	dst, lut            []byte
}

// readPNMHeader reads the magic, the size and the maxval, and returns the
// reader at the first sample.
func readPNMHeader(b []byte) (pnmReader, *pnmImage, error) {
	if len(b) < 2 || b[0] != 'P' || b[1] < '1' || b[1] > '6' {
		return pnmReader{}, nil, errors.New("not a PNM file")
	}
	p := &pnmImage{kind: b[1], maxval: 1, bands: 1}
	r := pnmReader{b: b, i: 2}
	// PIL reads the magic up to whitespace: "P6x" is no PNM file.
	if r.i < len(b) && !isPNMSpace(b[r.i]) {
		return r, nil, fmt.Errorf("bad magic %q", b[:min(len(b), 4)])
	}
	var err error
	if p.w, err = r.int("width"); err != nil {
		return r, nil, err
	}
	if p.h, err = r.int("height"); err != nil {
		return r, nil, err
	}
	if err := checkPixels(p.w, p.h); err != nil {
		return r, nil, err
	}
	if p.kind != '1' && p.kind != '4' {
		if p.maxval, err = r.int("maxval"); err != nil {
			return r, nil, err
		}
		if p.maxval <= 0 || p.maxval >= 65536 {
			return r, nil, fmt.Errorf("maxval %d is outside 1..65535", p.maxval)
		}
	}
	if p.kind == '3' || p.kind == '6' {
		p.bands = 3
	}
	return r, p, nil
}

// samples is the number of samples the pixels hold.
func (p *pnmImage) samples() int { return p.w * p.h * p.bands }

// put sets sample i to v: a channel, or a gray pixel's three.
func (p *pnmImage) put(i int, v byte) {
	if p.bands == 3 {
		p.dst[i] = v
		return
	}
	p.dst[3*i], p.dst[3*i+1], p.dst[3*i+2] = v, v, v
}

// bitmap reads a binary bitmap (P4): rows of packed bits, 1 black.
func (p *pnmImage) bitmap(data []byte) error {
	rowBytes := (p.w + 7) / 8
	if len(data) < rowBytes*p.h {
		return errTruncatedPNM
	}
	for y := 0; y < p.h; y++ {
		row := data[y*rowBytes:]
		for x := 0; x < p.w; x++ {
			var v byte = 255
			if row[x/8]&(0x80>>(x%8)) != 0 {
				v = 0
			}
			p.put(y*p.w+x, v)
		}
	}
	return nil
}

// binary reads binary samples (P5, P6), of one byte or two (big-endian);
// samples above maxval are clamped.
func (p *pnmImage) binary(data []byte) error {
	n := p.samples()
	if p.maxval >= 256 {
		if len(data) < 2*n {
			return errTruncatedPNM
		}
		for i := 0; i < n; i++ {
			p.put(i, p.lut[min(int(data[2*i])<<8|int(data[2*i+1]), p.maxval)])
		}
		return nil
	}
	if len(data) < n {
		return errTruncatedPNM
	}
	if p.maxval == 255 && p.bands == 3 {
		copy(p.dst, data[:n])
		return nil
	}
	for i, v := range data[:n] {
		p.put(i, p.lut[min(int(v), p.maxval)])
	}
	return nil
}

// plainBitmap reads a plain bitmap (P1): the digits need no separators.
func (p *pnmImage) plainBitmap(r *pnmReader) error {
	for i := 0; i < p.samples(); i++ {
		c, ok := r.next()
		if !ok {
			return errTruncatedPNM
		}
		switch c {
		case '0':
			p.put(i, 255)
		case '1':
			p.put(i, 0)
		default:
			return fmt.Errorf("invalid character %q in a plain bitmap", c)
		}
	}
	return nil
}

// plain reads plain samples (P2, P3): decimal, none above maxval.
func (p *pnmImage) plain(r *pnmReader) error {
	for i := 0; i < p.samples(); i++ {
		tok, err := r.token()
		if err != nil {
			if errors.Is(err, errPNMEOF) {
				return errTruncatedPNM
			}
			return err
		}
		v, err := strconv.Atoi(tok)
		if err != nil || v < 0 {
			return fmt.Errorf("invalid sample %q", tok)
		}
		if v > p.maxval {
			return fmt.Errorf("sample %d is above maxval %d", v, p.maxval)
		}
		p.put(i, p.lut[v])
	}
	return nil
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
