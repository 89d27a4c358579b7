// Command mkimagefolder writes a small synthetic ImageFolder tree (one folder
// per class, images inside) for demos and tests. The output depends only on the
// flags: the same flags give the same files, byte for byte.
//
//	go run ./tools/mkimagefolder -out DIR -classes 4 -per-class 25 -seed 1
package main

import (
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

const (
	minSide     = 160
	maxSide     = 480
	maxClasses  = 100   // folder names cls00..cls99
	maxPerClass = 10000 // file names img0000..img9999
	jpegQuality = 90
)

// errReported is a flag error that has been printed already.
var errReported = errors.New("bad flags")

type config struct {
	out      string
	classes  int
	perClass int
	seed     uint64
	pngEvery int
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "mkimagefolder:", err)
		}
		os.Exit(2)
	}
	n, pngs, err := run(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimagefolder:", err)
		os.Exit(1)
	}
	fmt.Printf("%s: %d images (%d JPEG, %d PNG) in %d classes\n", cfg.out, n, n-pngs, pngs, cfg.classes)
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("mkimagefolder", flag.ContinueOnError)
	fs.StringVar(&cfg.out, "out", "", "folder to create (must not exist, or be empty)")
	fs.IntVar(&cfg.classes, "classes", 4, fmt.Sprintf("number of classes, 1-%d", maxClasses))
	fs.IntVar(&cfg.perClass, "per-class", 25, fmt.Sprintf("images per class, 1-%d", maxPerClass))
	fs.Uint64Var(&cfg.seed, "seed", 1, "random seed; the same seed gives the same files")
	fs.IntVar(&cfg.pngEvery, "png-every", 10, "write every Nth image of a class as PNG instead of JPEG (0: none)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, `Usage: go run ./tools/mkimagefolder -out DIR [flags]

Writes a synthetic ImageFolder tree, as torchvision's ImageFolder reads it:

  DIR/cls00/img0000.jpg
  DIR/cls00/img0001.jpg
  ...
  DIR/cls00/img0009.png   (every -png-every'th image is a PNG)
  ...
  DIR/cls03/img0024.jpg

Images are %d-%d pixels per side (width and height chosen independently),
smooth gradients with a few shapes whose colour depends on the class, and a
little noise, so that they do not compress to nothing. JPEGs are written at
quality %d. The output is deterministic: the same flags give the same bytes.

Flags:
`, minSide, maxSide, jpegQuality)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, errReported // the flag package printed it, with the usage
	}
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected argument %q (all options are flags; see -h)", fs.Arg(0))
	case cfg.out == "":
		return cfg, errors.New("-out DIR is required (see -h)")
	case cfg.classes < 1 || cfg.classes > maxClasses:
		return cfg, fmt.Errorf("-classes must be between 1 and %d, got %d", maxClasses, cfg.classes)
	case cfg.perClass < 1 || cfg.perClass > maxPerClass:
		return cfg, fmt.Errorf("-per-class must be between 1 and %d, got %d", maxPerClass, cfg.perClass)
	case cfg.pngEvery < 0:
		return cfg, fmt.Errorf("-png-every must be ≥ 0, got %d", cfg.pngEvery)
	}
	return cfg, nil
}

// run writes the tree and returns the number of images and of PNGs written.
func run(cfg config) (n, pngs int, err error) {
	if entries, err := os.ReadDir(cfg.out); err == nil && len(entries) > 0 {
		return 0, 0, fmt.Errorf("%s exists and is not empty; remove it or choose another -out", cfg.out)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	for c := range cfg.classes {
		if err := os.MkdirAll(filepath.Join(cfg.out, className(c)), 0o755); err != nil {
			return 0, 0, err
		}
	}

	type job struct{ class, index int }
	jobs := make(chan job)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := writeImage(cfg, j.class, j.index); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for c := range cfg.classes {
		for i := range cfg.perClass {
			jobs <- job{c, i}
			n++
			if isPNG(cfg, i) {
				pngs++
			}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, 0, err
	default:
	}
	return n, pngs, nil
}

func className(c int) string { return fmt.Sprintf("cls%02d", c) }

func isPNG(cfg config, index int) bool {
	return cfg.pngEvery > 0 && index%cfg.pngEvery == cfg.pngEvery-1
}

// writeImage draws and writes one image. Each image has its own random
// source, seeded from (seed, class, index), so the result does not depend on
// which goroutine draws it or when.
func writeImage(cfg config, class, index int) error {
	rng := rand.New(rand.NewPCG(cfg.seed, uint64(class)<<32|uint64(index)))
	img := draw(rng, class, cfg.classes)

	ext := ".jpg"
	if isPNG(cfg, index) {
		ext = ".png"
	}
	path := filepath.Join(cfg.out, className(class), fmt.Sprintf("img%04d%s", index, ext))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if ext == ".png" {
		err = png.Encode(f, img)
	} else {
		err = jpeg.Encode(f, img, &jpeg.Options{Quality: jpegQuality})
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// draw paints an opaque RGB image: a gradient between four random corner
// colours with a soft wave pattern, three to six shapes in the class's hue,
// and a little per-pixel noise.
func draw(rng *rand.Rand, class, classes int) *image.RGBA {
	w := minSide + rng.IntN(maxSide-minSide+1)
	h := minSide + rng.IntN(maxSide-minSide+1)
	img := image.NewRGBA(image.Rect(0, 0, w, h))

	var corners [4][3]float64
	for i := range corners {
		for ch := range 3 {
			corners[i][ch] = 40 + 175*rng.Float64()
		}
	}
	freqX := (1 + 5*rng.Float64()) * 2 * math.Pi / float64(w)
	freqY := (1 + 5*rng.Float64()) * 2 * math.Pi / float64(h)
	phase := 2 * math.Pi * rng.Float64()
	for y := range h {
		fy := float64(y) / float64(h-1)
		for x := range w {
			fx := float64(x) / float64(w-1)
			wave := 18 * math.Sin(freqX*float64(x)+phase) * math.Cos(freqY*float64(y))
			o := img.PixOffset(x, y)
			for ch := range 3 {
				top := corners[0][ch]*(1-fx) + corners[1][ch]*fx
				bottom := corners[2][ch]*(1-fx) + corners[3][ch]*fx
				img.Pix[o+ch] = clamp(top*(1-fy) + bottom*fy + wave)
			}
			img.Pix[o+3] = 255
		}
	}

	hue := 360 * float64(class) / float64(classes)
	for range 3 + rng.IntN(4) {
		c := hsv(hue+20*(rng.Float64()-0.5), 0.55+0.45*rng.Float64(), 0.45+0.55*rng.Float64())
		cx, cy := rng.IntN(w), rng.IntN(h)
		r := min(w, h) / 12 * (1 + rng.IntN(3))
		if rng.IntN(2) == 0 {
			fillCircle(img, cx, cy, r, c)
		} else {
			fillRect(img, image.Rect(cx-r, cy-r*2/3, cx+r, cy+r*2/3), c)
		}
	}

	for i := 0; i < len(img.Pix); i += 4 {
		n := rng.IntN(13) - 6
		for ch := range 3 {
			img.Pix[i+ch] = clamp(float64(img.Pix[i+ch]) + float64(n))
		}
	}
	return img
}

func fillCircle(img *image.RGBA, cx, cy, r int, c color.RGBA) {
	b := image.Rect(cx-r, cy-r, cx+r+1, cy+r+1).Intersect(img.Rect)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if dx, dy := x-cx, y-cy; dx*dx+dy*dy <= r*r {
				img.SetRGBA(x, y, c)
			}
		}
	}
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Rect)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

// hsv converts hue (degrees), saturation and value (0-1) to an opaque colour.
func hsv(h, s, v float64) color.RGBA {
	h = math.Mod(h, 360)
	if h < 0 {
		h += 360
	}
	c := v * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	var r, g, b float64
	switch {
	case h < 60:
		r, g, b = c, x, 0
	case h < 120:
		r, g, b = x, c, 0
	case h < 180:
		r, g, b = 0, c, x
	case h < 240:
		r, g, b = 0, x, c
	case h < 300:
		r, g, b = x, 0, c
	default:
		r, g, b = c, 0, x
	}
	m := v - c
	return color.RGBA{clamp(255 * (r + m)), clamp(255 * (g + m)), clamp(255 * (b + m)), 255}
}

func clamp(v float64) uint8 {
	switch {
	case v <= 0:
		return 0
	case v >= 255:
		return 255
	}
	return uint8(v + 0.5)
}
