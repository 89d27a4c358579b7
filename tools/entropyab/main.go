// Command entropyab compares ffcvfeed's entropy decoder with libjpeg-turbo's
// on one goroutine, alternating the two image by image (so that a machine
// whose speed drifts from second to second slows both alike), for three
// decodes of each photo of an ImageFolder tree: in full, the pipeline's
// random-resized crop to 160 at m/8 (decode.Apply), and the same crop of
// the photo transcoded with restart intervals about every 4 MCUs. Each
// round prints the mean time per image of each, their ratios, and a full
// libjpeg-turbo decode over each crop from restart intervals.
//
//	go run ./tools/entropyab -folder DIR [-n 1500] [-rounds 6]
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
)

func main() {
	folder := flag.String("folder", "", "an ImageFolder tree of JPEGs (<class>/<file>.jpg)")
	n := flag.Int("n", 1500, "photos to use, at most")
	rounds := flag.Int("rounds", 6, "rounds over the photos")
	flag.Parse()
	if err := run(*folder, *n, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "entropyab:", err)
		os.Exit(1)
	}
}

func run(folder string, n, rounds int) error {
	if folder == "" {
		return errors.New("-folder is required")
	}
	if n < 1 || n > 1_000_000 || rounds < 1 || rounds > 1000 {
		return fmt.Errorf("-n %d, -rounds %d: want 1 to 1000000 and 1 to 1000", n, rounds)
	}
	paths, err := filepath.Glob(filepath.Join(folder, "*", "*.jpg"))
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("no %s/*/*.jpg", folder)
	}
	paths = paths[:min(n, len(paths))]
	var plain, rst [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r, _, err := jpeg.AddRestarts(b, 4)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		plain, rst = append(plain, b), append(rst, r)
	}
	runtime.LockOSThread()
	d, err := decode.NewDecoder()
	if err != nil {
		return err
	}
	defer d.Close()
	j := d.JPEG()
	op := decode.Op{Kind: decode.RandomResizedCrop, OutW: 160, OutH: 160, FlipProb: 0.5}
	dst := make([]byte, op.OutW*op.OutH*3)
	var full []byte
	fmt.Printf("%d photos, one goroutine; µs per image, libjpeg-turbo's entropy decoder / ffcvfeed's (ratio)\n", len(plain))
	for round := range rounds {
		var t [3][2]time.Duration // full, crop, crop from intervals × libjpeg's, ffcvfeed's
		for i := range plain {
			w, h, err := j.Header(plain[i])
			if err != nil {
				return fmt.Errorf("%s: %w", paths[i], err)
			}
			if len(full) < w*h*3 {
				full = make([]byte, w*h*3)
			}
			seed := uint64(round)<<32 | uint64(i)
			for k := range 2 {
				lib := (k+i+round)%2 == 0 // who goes first alternates
				which := 1
				if lib {
					which = 0
				}
				j.UseLibjpegEntropy(lib)
				o := op
				o.LibjpegEntropy = lib
				s := time.Now()
				if _, _, err := j.DecodeRegion(plain[i], 0, 0, w, h, 8, full, w*3); err != nil {
					return fmt.Errorf("%s: %w", paths[i], err)
				}
				t[0][which] += time.Since(s)
				s = time.Now()
				if err := d.Apply(plain[i], decode.JPEG, w, h, o, rand.New(rand.NewPCG(seed, 1)), dst); err != nil {
					return fmt.Errorf("%s: %w", paths[i], err)
				}
				t[1][which] += time.Since(s)
				s = time.Now()
				if err := d.Apply(rst[i], decode.JPEG, w, h, o, rand.New(rand.NewPCG(seed, 1)), dst); err != nil {
					return fmt.Errorf("%s with restart intervals: %w", paths[i], err)
				}
				t[2][which] += time.Since(s)
			}
		}
		us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(len(plain)) }
		r := func(a, b time.Duration) float64 { return float64(a) / float64(b) }
		fmt.Printf("round %d: full %.0f/%.0f (%.3f)  crop %.0f/%.0f (%.3f)  crop from intervals %.0f/%.0f (%.3f);"+
			" full libjpeg-turbo decode over crop from intervals: %.3f with ffcvfeed's, %.3f with libjpeg-turbo's\n", round,
			us(t[0][0]), us(t[0][1]), r(t[0][0], t[0][1]), us(t[1][0]), us(t[1][1]), r(t[1][0], t[1][1]),
			us(t[2][0]), us(t[2][1]), r(t[2][0], t[2][1]), r(t[0][0], t[2][1]), r(t[0][0], t[2][0]))
	}
	return nil
}
