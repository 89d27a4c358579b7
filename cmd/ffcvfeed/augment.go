package main

import (
	"fmt"
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
		o.Indices = make([]uint32, len(ids))
		for i, id := range ids {
			o.Indices[i] = uint32(id)
		}
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

// indices reads a list of sample ids: 1,5,9 or @FILE, a .npy array of
// integers or ids separated by commas or white space.
func indices(c *cli.Context, flag string) ([]int64, error) {
	s := strings.TrimSpace(c.String(flag))
	fail := func(format string, a ...any) error {
		return cli.Exit(fmt.Sprintf("--%s: ", flag)+fmt.Sprintf(format, a...), 2)
	}
	var ids []int64
	if path, ok := strings.CutPrefix(s, "@"); ok {
		if strings.HasSuffix(path, ".npy") {
			a, err := npy.ReadFile(path)
			if err != nil {
				return nil, fail("%v", err)
			}
			if ids, err = a.Int64s(); err != nil {
				return nil, fail("%s: %v", path, err)
			}
		} else {
			b, err := readfile.Bounded(path, npy.MaxBytes)
			if err != nil {
				return nil, fail("%v", err)
			}
			s = string(b)
		}
	}
	if ids == nil {
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' }) {
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fail("%q is not a sample id", f)
			}
			ids = append(ids, id)
			if len(ids) > MaxIndices {
				return nil, fail("more than %d ids", int64(MaxIndices))
			}
		}
	}
	for _, id := range ids {
		if id < 0 || id >= MaxIndices {
			return nil, fail("sample id %d is out of range", id)
		}
	}
	return ids, nil
}

func poison(c *cli.Context) (*augment.Poison, error) {
	if c.String("poison-mask") == "" || c.String("poison-alpha") == "" || c.String("poison-indices") == "" {
		return nil, cli.Exit("--poison-mask, --poison-alpha and --poison-indices go together", 2)
	}
	mask, err := npy.ReadFile(c.String("poison-mask"))
	if err != nil {
		return nil, cli.Exit("--poison-mask: "+err.Error(), 2)
	}
	if strings.TrimLeft(mask.Descr, "<|=") != "u1" || len(mask.Shape) != 3 || mask.Shape[2] != 3 {
		return nil, cli.Exit(fmt.Sprintf("--poison-mask: a %s array of shape %v; want uint8 [H, W, 3]", mask.Descr, mask.Shape), 2)
	}
	alpha, err := npy.ReadFile(c.String("poison-alpha"))
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
	p := &augment.Poison{Mask: mask.Data, Alpha: alpha.Float64s(), Clamp: lo, Samples: map[int64]bool{}}
	for _, id := range ids {
		p.Samples[id] = true
	}
	return p, nil
}
