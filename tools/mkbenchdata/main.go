// Command mkbenchdata writes an ImageFolder tree of JPEGs cut from real
// photographs, for benchmarks: N images in 100 classes, each a random crop of
// a random source photo, shrunk with area averaging and encoded with
// libjpeg-turbo at a random quality. The output depends only on the flags and
// the source files: the same inputs and seed give the same files, byte for
// byte, whatever the number of cores.
//
//	go run ./tools/mkbenchdata -n 5000 -out DIR -seed 0 PHOTO...
//	go run ./tools/mkbenchdata -select FILE...   # print the files that look like photos
//
// scripts/make-bench-data.sh fetches the photos and runs it.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"image"
	_ "image/jpeg" // header sizes for image.DecodeConfig
	_ "image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ffcvfs/ffcvfs/resize"
	"github.com/pixiv/go-libjpeg/jpeg"
	"github.com/pixiv/go-libjpeg/rgb"

	"github.com/ffcvfs/ffcvfs/beton/imagefolder"
)

const (
	numClasses = 100
	maxImages  = 10_000_000 // file names img0000000..img9999999

	minOutShort = 300 // short side of an output image, uniform in [minOutShort, maxOutShort]
	maxOutShort = 500
	minQuality  = 75 // JPEG quality, uniform in [minQuality, maxQuality]
	maxQuality  = 95
	minAreaFrac = 0.1 // a crop covers a fraction, uniform in [minAreaFrac, 1], of the largest crop of its aspect

	sampleGrid = 256 // -select counts the colours of a sampleGrid×sampleGrid grid of pixels
)

// Crop aspect ratios (width/height) are log-uniform in [minAspect, maxAspect].
const (
	minAspect = 3.0 / 4.0
	maxAspect = 4.0 / 3.0
)

// errReported is a flag error that has been printed already.
var errReported = errors.New("bad flags")

type config struct {
	n          int
	out        string
	seed       uint64
	workers    int
	minSide    int
	minColors  int
	selectOnly bool
	files      []string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "mkbenchdata:", err)
		}
		os.Exit(2)
	}
	if cfg.selectOnly {
		err = runSelect(cfg)
	} else {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkbenchdata:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("mkbenchdata", flag.ContinueOnError)
	fs.IntVar(&cfg.n, "n", 0, fmt.Sprintf("number of images to write, %d-%d", numClasses, maxImages-1))
	fs.StringVar(&cfg.out, "out", "", "folder to create (must not exist, or be empty)")
	fs.Uint64Var(&cfg.seed, "seed", 0, "random seed; the same seed and sources give the same files")
	fs.IntVar(&cfg.workers, "workers", runtime.NumCPU(), "images made in parallel (does not change the output)")
	fs.IntVar(&cfg.minSide, "min-side", 600, "reject (or, with -select, skip) sources whose shorter side is below this many pixels")
	fs.BoolVar(&cfg.selectOnly, "select", false, "print, one per line, those of the files that look like photographs; write nothing")
	fs.IntVar(&cfg.minColors, "min-colors", 2000, "-select: skip images with fewer distinct colours than this in a sample")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, `Usage: go run ./tools/mkbenchdata -n N -out DIR [-seed S] PHOTO...
       go run ./tools/mkbenchdata -select FILE...

Writes an ImageFolder tree of N JPEGs made from the PHOTO files (JPEG or PNG):

  DIR/class000/img0000000.jpg
  DIR/class001/img0000001.jpg
  ...
  DIR/class099/img0000099.jpg
  DIR/class000/img0000100.jpg
  ...

Image i goes to class i mod %d. It is a random crop of a random source photo:
aspect ratio (width/height) log-uniform in 3:4..4:3, area uniform in
%.0f%%..100%% of the largest crop of that aspect that fits the photo, then
resized with area averaging (package resize, as ffcvfeed resizes) so that its shorter side is uniform in %d-%d
pixels, and encoded with libjpeg-turbo (4:2:0) at a quality uniform in %d-%d.
The crop is at least as large as the output whenever the photo allows, so
images are shrunk, never blown up, for photos of at least 667 pixels on the
shorter side.

Every choice for image i comes from a random source seeded with (S, i), and
the photos are used in sorted order, so the output depends only on N, S and
the photo files, not on the order they are given in or on -workers.

-select prints the files that look like photographs and why each other one is
skipped (on stderr): shorter side under -min-side; a PNG with an alpha channel
or transparency; fewer than -min-colors distinct colours among a %d×%d grid of
pixels (flat artwork); and, for pictures kept at several sizes in one folder
under names WIDTHxHEIGHT.ext (KDE's wallpaper layout), all but the largest.

Flags:
`, numClasses, 100*minAreaFrac, minOutShort, maxOutShort, minQuality, maxQuality, sampleGrid, sampleGrid)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, errReported // the flag package printed it, with the usage
	}
	cfg.files = fs.Args()
	switch {
	case len(cfg.files) == 0:
		return cfg, errors.New("no photo files given (see -h)")
	case cfg.workers < 1:
		return cfg, fmt.Errorf("-workers must be ≥ 1, got %d", cfg.workers)
	case cfg.minSide < 1:
		return cfg, fmt.Errorf("-min-side must be ≥ 1, got %d", cfg.minSide)
	case cfg.selectOnly:
		return cfg, nil
	case cfg.out == "":
		return cfg, errors.New("-out DIR is required (see -h)")
	case cfg.n < numClasses || cfg.n >= maxImages:
		return cfg, fmt.Errorf("-n must be between %d and %d, got %d", numClasses, maxImages-1, cfg.n)
	}
	return cfg, nil
}

// source is one photo.
type source struct {
	path string
	w, h int
}

// params are the random choices for one output image.
type params struct {
	src        int             // index into the sorted sources
	crop       image.Rectangle // in the source's pixels
	outW, outH int
	quality    int
}

// drawParams makes the choices for image index from a random source seeded
// with (seed, index) alone.
func drawParams(seed uint64, index int, srcs []source) params {
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	var p params
	p.src = rng.IntN(len(srcs))
	s := srcs[p.src]
	aspect := math.Exp(math.Log(minAspect) + rng.Float64()*(math.Log(maxAspect)-math.Log(minAspect)))
	short := minOutShort + rng.IntN(maxOutShort-minOutShort+1)
	p.quality = minQuality + rng.IntN(maxQuality-minQuality+1)
	area := minAreaFrac + rng.Float64()*(1-minAreaFrac)
	fx, fy := rng.Float64(), rng.Float64()

	// The largest crop of this aspect that fits, then scaled down by the
	// drawn area fraction, but not below the output size.
	maxW := math.Min(float64(s.w), float64(s.h)*aspect)
	maxH := maxW / aspect
	scale := math.Sqrt(area)
	if lo := float64(short) / math.Min(maxW, maxH); scale < lo {
		scale = math.Min(lo, 1)
	}
	cw := max(1, min(s.w, int(math.Round(maxW*scale))))
	ch := max(1, min(s.h, int(math.Round(maxH*scale))))
	x := int(fx * float64(s.w-cw+1))
	y := int(fy * float64(s.h-ch+1))
	p.crop = image.Rect(x, y, x+cw, y+ch)

	// The output keeps the crop's aspect, with the drawn shorter side.
	if cw <= ch {
		p.outW = short
		p.outH = max(1, int(math.Round(float64(short)*float64(ch)/float64(cw))))
	} else {
		p.outH = short
		p.outW = max(1, int(math.Round(float64(short)*float64(cw)/float64(ch))))
	}
	return p
}

func run(cfg config) error {
	if entries, err := os.ReadDir(cfg.out); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty; remove it or choose another -out", cfg.out)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	srcs, err := readSources(cfg.files, cfg.workers)
	if err != nil {
		return err
	}
	for _, s := range srcs {
		if min(s.w, s.h) < cfg.minSide {
			return fmt.Errorf("%s is %dx%d, smaller than -min-side %d on its shorter side", s.path, s.w, s.h, cfg.minSide)
		}
	}
	for c := range numClasses {
		if err := os.MkdirAll(filepath.Join(cfg.out, className(c)), 0o755); err != nil {
			return err
		}
	}

	// Draw every image's choices up front (cheap), then decode each source
	// once and make all the images cut from it.
	all := make([]params, cfg.n)
	bySrc := make([][]int, len(srcs))
	for i := range cfg.n {
		all[i] = drawParams(cfg.seed, i, srcs)
		bySrc[all[i].src] = append(bySrc[all[i].src], i)
	}

	var (
		firstErr atomic.Pointer[error]
		done     atomic.Int64
	)
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	failed := func() bool { return firstErr.Load() != nil }

	// At most slots decoded sources are held at once; a slot is freed when
	// the last image cut from its source is written.
	slots := make(chan struct{}, cfg.workers+1)
	type task struct {
		index int
		pix   []byte // the source's RGB pixels
		src   source
		left  *atomic.Int64
	}
	tasks := make(chan task, 4*cfg.workers)
	srcJobs := make(chan int)

	var decoders, renderers sync.WaitGroup
	for range min(cfg.workers, len(srcs)) {
		decoders.Add(1)
		go func() {
			defer decoders.Done()
			for si := range srcJobs {
				if failed() {
					continue
				}
				slots <- struct{}{}
				pix, err := decodeRGB(srcs[si])
				if err != nil {
					<-slots
					fail(err)
					continue
				}
				left := new(atomic.Int64)
				left.Store(int64(len(bySrc[si])))
				for _, i := range bySrc[si] {
					tasks <- task{i, pix, srcs[si], left}
				}
			}
		}()
	}
	for range cfg.workers {
		renderers.Add(1)
		go func() {
			defer renderers.Done()
			var r renderer
			for t := range tasks {
				if !failed() {
					if err := r.write(cfg.out, t.index, all[t.index], t.pix, t.src); err != nil {
						fail(err)
					}
					if n := done.Add(1); n%1000 == 0 {
						fmt.Fprintf(os.Stderr, "mkbenchdata: %d/%d images\n", n, cfg.n)
					}
				}
				if t.left.Add(-1) == 0 {
					<-slots
				}
			}
		}()
	}
	for si := range srcs {
		if len(bySrc[si]) > 0 {
			srcJobs <- si
		}
	}
	close(srcJobs)
	decoders.Wait()
	close(tasks)
	renderers.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	used := 0
	for _, b := range bySrc {
		if len(b) > 0 {
			used++
		}
	}
	fmt.Printf("%s: %d images in %d classes, from %d of %d source photos (seed %d)\n",
		cfg.out, cfg.n, numClasses, used, len(srcs), cfg.seed)
	return nil
}

func className(c int) string { return fmt.Sprintf("class%03d", c) }

// readSources reads the sizes of the files, sorted by path with duplicates
// removed.
func readSources(files []string, workers int) ([]source, error) {
	paths := slices.Clone(files)
	slices.Sort(paths)
	paths = slices.Compact(paths)
	srcs := make([]source, len(paths))
	errs := make([]error, len(paths))
	parallel(len(paths), workers, func(i int) {
		srcs[i].path = paths[i]
		srcs[i].w, srcs[i].h, errs[i] = imageSize(paths[i])
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return srcs, nil
}

func imageSize(path string) (w, h int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	cfg, _, err := image.DecodeConfig(bufio.NewReader(f))
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return cfg.Width, cfg.Height, nil
}

// decodeRGB decodes a source to packed RGB pixels.
func decodeRGB(s source) ([]byte, error) {
	src, err := os.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	p, err := imagefolder.Prepare(s.path, src, imagefolder.Options{Mode: imagefolder.WriteRaw}, nil, nil)
	if err != nil {
		return nil, err
	}
	if p.Width != s.w || p.Height != s.h {
		return nil, fmt.Errorf("%s: decoded to %dx%d, but its header says %dx%d", s.path, p.Width, p.Height, s.w, s.h)
	}
	return p.Data, nil
}

// renderer holds one worker's buffers.
type renderer struct {
	resizer resize.Resizer // the crop to the output size, as ffcvfeed resizes
	out     []byte
	enc     bytes.Buffer
}

func (r *renderer) write(dir string, index int, p params, pix []byte, s source) error {
	r.out = grow(r.out, p.outW*p.outH*3)
	c := p.crop
	r.resizer.ResizeWindow(r.out, p.outW*3, p.outW, p.outH, pix, s.w*3, s.w, s.h,
		float64(c.Min.X), float64(c.Min.Y), float64(c.Dx()), float64(c.Dy()), false)
	img := &rgb.Image{Pix: r.out, Stride: p.outW * 3, Rect: image.Rect(0, 0, p.outW, p.outH)}
	r.enc.Reset()
	if err := jpeg.Encode(&r.enc, img, &jpeg.EncoderOptions{Quality: p.quality}); err != nil {
		return fmt.Errorf("encoding image %d: %w", index, err)
	}
	path := filepath.Join(dir, className(index%numClasses), fmt.Sprintf("img%07d.jpg", index))
	if err := os.WriteFile(path, r.enc.Bytes(), 0o644); err != nil {
		return err
	}
	return nil
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// parallel calls f(0) … f(n-1) on up to workers goroutines.
func parallel(n, workers int, f func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// sizeName matches the file names of KDE wallpaper packages: WIDTHxHEIGHT.ext.
var sizeName = regexp.MustCompile(`^(\d+)x(\d+)\.[A-Za-z]+$`)

// runSelect prints the files that look like photographs, in sorted order, and
// says on stderr why each other file is skipped.
func runSelect(cfg config) error {
	paths := slices.Clone(cfg.files)
	slices.Sort(paths)
	paths = slices.Compact(paths)
	reasons := make([]string, len(paths)) // "" for a kept file
	sizes := make([]int, len(paths))      // pixels
	parallel(len(paths), cfg.workers, func(i int) {
		reasons[i], sizes[i] = judge(paths[i], cfg)
	})

	// Of several sizes of one picture in one folder, keep the largest.
	largest := map[string]int{} // folder → index of its largest WxH-named kept file
	for i, p := range paths {
		if reasons[i] != "" || !sizeName.MatchString(filepath.Base(p)) {
			continue
		}
		dir := filepath.Dir(p)
		if j, ok := largest[dir]; !ok || sizes[i] > sizes[j] {
			largest[dir] = i
		}
	}
	for i, p := range paths {
		if reasons[i] != "" || !sizeName.MatchString(filepath.Base(p)) {
			continue
		}
		if j := largest[filepath.Dir(p)]; j != i {
			reasons[i] = "a smaller size of " + filepath.Base(paths[j])
		}
	}

	kept := 0
	for i, p := range paths {
		if reasons[i] == "" {
			fmt.Println(p)
			kept++
		} else {
			fmt.Fprintf(os.Stderr, "mkbenchdata: skip %s: %s\n", p, reasons[i])
		}
	}
	fmt.Fprintf(os.Stderr, "mkbenchdata: %d of %d files look like photographs\n", kept, len(paths))
	if kept == 0 {
		return errors.New("no file looks like a photograph")
	}
	return nil
}

// judge returns why path should be skipped ("" to keep it) and its pixel
// count.
func judge(path string, cfg config) (string, int) {
	src, err := os.ReadFile(path)
	if err != nil {
		return err.Error(), 0
	}
	ic, format, err := image.DecodeConfig(bytes.NewReader(src))
	if err != nil {
		return "not a readable JPEG or PNG: " + err.Error(), 0
	}
	size := ic.Width * ic.Height
	if short := min(ic.Width, ic.Height); short < cfg.minSide {
		return fmt.Sprintf("%dx%d, shorter side under %d", ic.Width, ic.Height, cfg.minSide), size
	}
	if format == "png" {
		if why := pngAlpha(src); why != "" {
			return why, size
		}
	}
	p, err := imagefolder.Prepare(path, src, imagefolder.Options{Mode: imagefolder.WriteRaw}, nil, nil)
	if err != nil {
		return err.Error(), size
	}
	if n := sampleColors(p.Data, p.Width, p.Height); n < cfg.minColors {
		return strconv.Itoa(n) + " distinct colours in a sample, under -min-colors", size
	}
	return "", size
}

// pngAlpha says whether a PNG has an alpha channel or a transparency chunk,
// from its chunk headers ("" when it has neither).
func pngAlpha(b []byte) string {
	const sig = 8
	if len(b) < sig+8+13 {
		return ""
	}
	if ct := b[sig+8+9]; ct == 4 || ct == 6 {
		return "PNG with an alpha channel"
	}
	for off := sig; off+8 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[off:]))
		typ := string(b[off+4 : off+8])
		switch typ {
		case "tRNS":
			return "PNG with transparency (tRNS)"
		case "IDAT", "IEND":
			return ""
		}
		off += 12 + n
		if n < 0 {
			return ""
		}
	}
	return ""
}

// sampleColors counts the distinct colours of a sampleGrid×sampleGrid grid of
// pixels spread over the image.
func sampleColors(pix []byte, w, h int) int {
	seen := make(map[uint32]struct{}, sampleGrid*sampleGrid)
	for j := range sampleGrid {
		y := (2*j + 1) * h / (2 * sampleGrid)
		for i := range sampleGrid {
			x := (2*i + 1) * w / (2 * sampleGrid)
			o := (y*w + x) * 3
			seen[uint32(pix[o])<<16|uint32(pix[o+1])<<8|uint32(pix[o+2])] = struct{}{}
		}
	}
	return len(seen)
}
