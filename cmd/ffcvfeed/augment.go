package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/npy"
	"github.com/ffcvfs/ffcvfs/internal/readfile"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/augment"
)

// MaxIndices bounds the ids of an --indices list or file.
const MaxIndices = 1 << 32

// augmentOptions reads the augmentation and subset flags into o.
func augmentOptions(c *cli.Context, o *pipeline.Options) error {
	var err error
	a := &o.Augment
	a.TranslatePad, a.CutoutSize = c.Int("translate"), c.Int("cutout")
	if a.TranslateFill, err = rgb(c, "translate-fill"); err != nil {
		return err
	}
	if a.CutoutFill, err = rgb(c, "cutout-fill"); err != nil {
		return err
	}
	for _, j := range []struct {
		flag string
		to   *augment.Jitter
	}{{"brightness", &a.Brightness}, {"contrast", &a.Contrast}, {"saturation", &a.Saturation}} {
		if *j.to, err = jitter(c, j.flag); err != nil {
			return err
		}
	}
	o.MixupAlpha, o.MixupSameLambda = c.Float64("mixup"), c.Bool("mixup-same-lambda")
	if c.IsSet("replace-label") != c.IsSet("replace-label-indices") {
		return cli.Exit("--replace-label and --replace-label-indices go together", 2)
	}
	if c.IsSet("replace-label") {
		ids, err := indices(c, "replace-label-indices")
		if err != nil {
			return err
		}
		o.ReplaceLabel = augment.NewReplaceLabel(ids, c.Int64("replace-label"))
	}
	if mask := c.String("poison-mask"); mask != "" || c.IsSet("poison-alpha") || c.IsSet("poison-indices") {
		if o.Poison, err = poison(c); err != nil {
			return err
		}
	}
	if c.IsSet("indices") {
		ids, err := indices(c, "indices")
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return cli.Exit("--indices: no sample named", 2)
		}
		o.Indices = ids
	}
	return nil
}

func rgb(c *cli.Context, flag string) ([3]uint8, error) {
	var v [3]uint8
	parts := strings.Split(c.String(flag), ",")
	if len(parts) != 3 {
		return v, cli.Exit(fmt.Sprintf("--%s %q: want R,G,B, each 0 to 255", flag, c.String(flag)), 2)
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 8)
		if err != nil {
			return v, cli.Exit(fmt.Sprintf("--%s %q: want R,G,B, each 0 to 255", flag, c.String(flag)), 2)
		}
		v[i] = uint8(n)
	}
	return v, nil
}

// jitter reads M[,P] (P defaults to FFCV's 0.5).
func jitter(c *cli.Context, flag string) (augment.Jitter, error) {
	s := c.String(flag)
	if s == "" {
		return augment.Jitter{}, nil
	}
	m, p, ok := strings.Cut(s, ",")
	j := augment.Jitter{P: 0.5}
	var err1, err2 error
	j.Magnitude, err1 = strconv.ParseFloat(strings.TrimSpace(m), 64)
	if ok {
		j.P, err2 = strconv.ParseFloat(strings.TrimSpace(p), 64)
	}
	if err1 != nil || err2 != nil || !(j.Magnitude >= 0) || !(j.P >= 0 && j.P <= 1) {
		return j, cli.Exit(fmt.Sprintf("--%s %q: want MAGNITUDE[,PROBABILITY], a magnitude ≥ 0 and a probability 0 to 1", flag, s), 2)
	}
	return j, nil
}

// MaxIndexCount bounds how many ids a list (--indices, --poison-indices,
// --replace-label-indices) holds: what parsing keeps is at most 4 bytes each.
const MaxIndexCount = 1 << 26

// maxIDText bounds an id list file in text: MaxIndexCount ids of ten digits
// and a separator.
const maxIDText = MaxIndexCount * 11

// indices reads a list of sample ids: 1,5,9 or @FILE, a .npy array of
// integers or ids separated by commas or white space. A file must be a
// regular one; a .npy's header is read first and an array of more than
// MaxIndexCount elements refused; text is parsed as it is read.
func indices(c *cli.Context, flag string) ([]uint32, error) {
	s := strings.TrimSpace(c.String(flag))
	fail := func(format string, a ...any) error {
		return cli.Exit(fmt.Sprintf("--%s: ", flag)+fmt.Sprintf(format, a...), 2)
	}
	path, isFile := strings.CutPrefix(s, "@")
	var ids []uint32
	switch {
	case isFile && strings.HasSuffix(path, ".npy"):
		a, err := npy.ReadFileMax(path, MaxIndexCount)
		if err != nil {
			return nil, fail("%v", err)
		}
		v, err := a.Int64s()
		if err != nil {
			return nil, fail("%s: %v", path, err)
		}
		ids = make([]uint32, len(v))
		for i, id := range v {
			if id < 0 || id >= MaxIndices {
				return nil, fail("%s: sample id %d is out of range", path, id)
			}
			ids[i] = uint32(id)
		}
	case isFile:
		f, size, err := readfile.Open(path)
		if err != nil {
			return nil, fail("%v", err)
		}
		defer f.Close()
		if size > maxIDText {
			return nil, fail("%s: %d bytes, more than a list of %d ids takes", path, size, MaxIndexCount)
		}
		if ids, err = parseIDs(io.LimitReader(f, maxIDText+1), size); err != nil {
			return nil, fail("%s: %v", path, err)
		}
	default:
		var err error
		if ids, err = parseIDs(strings.NewReader(s), int64(len(s))); err != nil {
			return nil, fail("%v", err)
		}
	}
	return ids, nil
}

// parseIDs reads sample ids separated by commas or white space from size
// bytes, keeping at most MaxIndexCount of them; a word longer than any id
// is refused at once. The list is allocated once, for as many ids as size
// bytes can hold (an id and a separator take two at least).
func parseIDs(r io.Reader, size int64) ([]uint32, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	ids := make([]uint32, 0, min(size/2+1, MaxIndexCount))
	var word []byte
	flush := func() error {
		if len(word) == 0 {
			return nil
		}
		id, err := strconv.ParseUint(string(word), 10, 64)
		if err != nil || id >= MaxIndices {
			return fmt.Errorf("%q is not a sample id (0 to %d)", word, int64(MaxIndices-1))
		}
		if len(ids) == MaxIndexCount {
			return fmt.Errorf("more than %d ids", MaxIndexCount)
		}
		ids = append(ids, uint32(id))
		word = word[:0]
		return nil
	}
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			return ids, flush()
		}
		if err != nil {
			return nil, err
		}
		switch b {
		case ',', ' ', '\n', '\t', '\r':
			if err := flush(); err != nil {
				return nil, err
			}
		default:
			if len(word) == 20 {
				return nil, fmt.Errorf("%q... is not a sample id", word)
			}
			word = append(word, b)
		}
	}
}

// maxPoisonPixels bounds a poison mask whose size the flags do not give:
// 4096×4096.
const maxPoisonPixels = 1 << 24

func poison(c *cli.Context) (*augment.Poison, error) {
	if c.String("poison-mask") == "" || c.String("poison-alpha") == "" || c.String("poison-indices") == "" {
		return nil, cli.Exit("--poison-mask, --poison-alpha and --poison-indices go together", 2)
	}
	// The mask and the weights are of the output's size: the flags give it,
	// but for whole images (--crop none), whose size is the beton's.
	maxPixels := c.Int("resolution") * c.Int("resolution")
	if c.String("crop") == "none" && !c.IsSet("resolution") || maxPixels <= 0 || maxPixels > maxPoisonPixels {
		maxPixels = maxPoisonPixels
	}
	mask, err := npy.ReadFileMax(c.String("poison-mask"), 3*maxPixels)
	if err != nil {
		return nil, cli.Exit("--poison-mask: "+err.Error(), 2)
	}
	if mask.DType != "uint8" || len(mask.Shape) != 3 || mask.Shape[2] != 3 {
		return nil, cli.Exit(fmt.Sprintf("--poison-mask: a %s array of shape %v; want uint8 [H, W, 3]", mask.Descr, mask.Shape), 2)
	}
	alpha, err := npy.ReadFileMax(c.String("poison-alpha"), maxPixels)
	if err != nil {
		return nil, cli.Exit("--poison-alpha: "+err.Error(), 2)
	}
	if len(alpha.Shape) != 2 || alpha.Shape[0] != mask.Shape[0] || alpha.Shape[1] != mask.Shape[1] {
		return nil, cli.Exit(fmt.Sprintf("--poison-alpha: shape %v; want the mask's [H, W], %v", alpha.Shape, mask.Shape[:2]), 2)
	}
	lo, err := pair(c.String("poison-clamp"), "poison-clamp", -math.MaxFloat64, math.MaxFloat64)
	if err != nil {
		return nil, err
	}
	ids, err := indices(c, "poison-indices")
	if err != nil {
		return nil, err
	}
	p := &augment.Poison{Mask: mask.Data, Alpha: alpha.Float64s(), Clamp: lo, Samples: augment.NewSampleSet(ids)}
	return p, nil
}
