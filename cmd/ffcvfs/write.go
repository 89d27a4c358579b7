package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/ffcvfs/ffcvfs/beton/imagefolder"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/progress"
	"github.com/urfave/cli/v2"
)

func writeCommand() *cli.Command {
	return &cli.Command{
		Name:      "write",
		Usage:     "convert an ImageFolder tree into a .beton that FFCV and ffcvfs read",
		ArgsUsage: "IMAGEFOLDER OUT.beton",
		Description: `Walks IMAGEFOLDER the way torchvision's ImageFolder does: one folder per class,
sorted by name, label = class index; files with the extensions ImageFolder
accepts (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp). Writes fields
"image" (RGB image) and "label" (int), and with --keep-names "path" (bytes).

Modes:
   jpg         store JPEG (default). A JPEG that already fits --max-resolution is
               stored byte-for-byte; other images are decoded, resized with area
               averaging and encoded with libjpeg-turbo at --jpeg-quality.
               With --restart-interval, every JPEG is then transcoded losslessly
               with restart markers: same pixels, faster crops in ffcvfeed.
   raw         store decoded RGB pixels (fastest to read, largest).
   smart       raw when width×height×3 ≤ --smart-threshold, else JPEG.
   proportion  JPEG for a --compress-probability fraction of images (chosen
               at random, reproducibly from --seed), raw for the rest.

The output is written to a temporary file and renamed at the end, so an
interrupted run never leaves a file that looks complete.

Examples:
   ffcvfs write ~/data/train train.beton
   ffcvfs write --max-resolution 512 --classes-out classes.txt ~/data/train train.beton
   ffcvfs write --mode smart --max-resolution 256 ~/data/val val.beton
   ffcvfs write --restart-interval 4 ~/data/train train.beton`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "mode", Value: "jpg", Usage: "how images are stored: jpg, raw, smart or proportion", Category: "images"},
			&cli.IntFlag{Name: "max-resolution", Usage: "resize images whose longer side exceeds `N` pixels (0: keep sizes)", Category: "images"},
			&cli.IntFlag{Name: "jpeg-quality", Value: 90, Usage: "JPEG quality `Q` (1-100) for images that are (re-)encoded", Category: "images"},
			&cli.IntFlag{Name: "restart-interval", Usage: "store every JPEG losslessly transcoded with a restart marker about every `MCUS` MCUs (4 is a good choice), so that ffcvfeed entropy-decodes only the part of an image a crop covers;\n\tthe pixels are the source's, the bytes are not (0: JPEGs as they are)", Category: "images"},
			&cli.IntFlag{Name: "smart-threshold", Value: 256 * 256 * 3, Usage: "smart mode: store raw when width×height×3 ≤ `BYTES`", Category: "images"},
			&cli.Float64Flag{Name: "compress-probability", Value: 0.5, Usage: "proportion mode: fraction `P` of images stored as JPEG", Category: "images"},
			&cli.Int64Flag{Name: "seed", Usage: "random seed for proportion mode", Category: "images"},
			&cli.StringFlag{Name: "page-size", Value: "8MiB", Usage: "page `SIZE`: a power of two, 2MiB ≤ SIZE < 4GiB; every sample must fit in one page", Category: "file"},
			&cli.IntFlag{Name: "workers", Value: runtime.NumCPU(), DefaultText: "the cores", Usage: "`N` images decoded and encoded in parallel", Category: "file"},
			&cli.BoolFlag{Name: "keep-names", Usage: "keep each file's path relative to IMAGEFOLDER in a bytes field \"path\" (FFCV reads it as any BytesField;\n\tffcvfeed --fields path delivers it), so that ffcvfs mount serves the files under their own names and folders", Category: "file"},
			&cli.StringFlag{Name: "classes-out", Usage: "write the class names, one per line in label order, to `FILE`", Category: "file"},
		},
		Action: runWrite,
	}
}

func runWrite(c *cli.Context) error {
	if err := needArgs(c, "IMAGEFOLDER", "OUT.beton"); err != nil {
		return err
	}
	pageSize, err := bytesize.Parse(c.String("page-size"))
	if err != nil {
		return usageError("--page-size: %v", err)
	}
	opts := imagefolder.ConvertOptions{
		Image: imagefolder.Options{
			Mode:                c.String("mode"),
			MaxResolution:       c.Int("max-resolution"),
			JPEGQuality:         c.Int("jpeg-quality"),
			SmartThreshold:      c.Int("smart-threshold"),
			CompressProbability: c.Float64("compress-probability"),
			RestartInterval:     c.Int("restart-interval"),
		},
		PageSize:  pageSize,
		Workers:   c.Int("workers"),
		Seed:      c.Int64("seed"),
		KeepNames: c.Bool("keep-names"),
	}
	// Zero means "the default" to the options struct; said on the command
	// line it means something else, which another mode expresses.
	if c.IsSet("compress-probability") && c.Float64("compress-probability") == 0 {
		return usageError("--compress-probability 0 would store no JPEG: use --mode raw")
	}
	if c.IsSet("smart-threshold") && c.Int("smart-threshold") == 0 {
		return usageError("--smart-threshold 0 would store every image as JPEG: use --mode jpg")
	}
	if err := opts.Validate(); err != nil {
		return usageError("%v", err)
	}
	root, out := c.Args().Get(0), c.Args().Get(1)
	if c.String("classes-out") != "" || c.Bool("keep-names") {
		// Class names the mount would serve (a class list, kept paths)
		// must be ones it can serve. Said before anything is written.
		ents, err := os.ReadDir(root)
		if err != nil {
			return cli.Exit(fmt.Sprintf("reading %s: %v", root, err), 1)
		}
		for _, e := range ents {
			// A class list holds a name per line: a folder whose name
			// has a line break cannot be in it, and mount --classes
			// would misname every folder after it.
			if c.String("classes-out") != "" && strings.ContainsAny(e.Name(), "\n\r") {
				return cli.Exit(fmt.Sprintf("class folder %q has a line break in its name, which a class list (--classes-out) cannot hold: rename it, or write without --classes-out", filepath.Join(root, e.Name())), 1)
			}
			if st, err := os.Stat(filepath.Join(root, e.Name())); err == nil && st.IsDir() && e.Name() == control.Dir {
				return cli.Exit(fmt.Sprintf("class folder %s is named as the mount's control folder, which the mount serves in its place: rename it, or write without --keep-names and --classes-out (the mount then names the class by its label)", filepath.Join(root, e.Name())), 1)
			}
		}
	}

	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var bar *progress.Bar
	opts.Progress = func(done, total int) {
		if bar == nil {
			bar = progress.New(os.Stderr, "write", int64(total), "images")
		}
		bar.Set(int64(done))
	}
	res, err := imagefolder.Convert(ctx, root, out, opts)
	bar.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return cli.Exit(fmt.Sprintf("interrupted; %s was not written", out), 130)
		}
		return cli.Exit(err.Error(), 1)
	}
	if f := c.String("classes-out"); f != "" {
		if err := writeClasses(f, res.Classes); err != nil {
			return cli.Exit(err.Error(), 1)
		}
	}
	fmt.Printf("%s: %d images in %d classes, %d pages of %s (%s); jpg %d (%d stored verbatim), raw %d; %.0f images/s\n",
		out, res.Samples, len(res.Classes), res.Pages, bytesize.Format(pageSize), bytesize.Format(res.Bytes),
		res.JPEG, res.Verbatim, res.Raw, float64(res.Samples)/res.Elapsed.Seconds())
	return nil
}

func writeClasses(path string, classes []string) error {
	var b []byte
	for _, c := range classes {
		b = append(b, c...)
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing class names: %w", err)
	}
	return nil
}
