package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/imagefolder"
	"github.com/ffcvfs/ffcvfs/beton/stream"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/internal/interrupt"
	"github.com/ffcvfs/ffcvfs/internal/lifeline"
	"github.com/ffcvfs/ffcvfs/internal/progress"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/storage"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func writeCommand() *cli.Command {
	return &cli.Command{
		Name:      "write",
		Usage:     "write a .beton that FFCV and ffcvfs read, from an ImageFolder tree or from a stream of samples",
		ArgsUsage: "IMAGEFOLDER OUT.beton  |  --from-stream SRC OUT.beton  |  --from-beton SRC OUT.beton",
		Description: `Walks IMAGEFOLDER the way torchvision's ImageFolder does: one folder per class,
sorted by name, label = class index; files with the extensions ImageFolder
accepts (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp). Writes fields
"image" (RGB image) and "label" (int), and with --keep-names "path" (bytes).

Modes:
   jpg         store JPEG (default). A JPEG that already fits --max-resolution is
               stored byte-for-byte; other images are decoded, resized with area
               averaging and encoded with libjpeg-turbo at --jpeg-quality.
               Every JPEG is then transcoded losslessly with restart markers
               (--restart-interval, 4 MCUs by default; 0: none): the same
               pixels for every decoder (FFCV, PIL, torchvision), about 1 %
               more bytes, crops that ffcvfeed entropy-decodes only where
               they lie.
   raw         store decoded RGB pixels (fastest to read, largest).
   smart       raw when width×height×3 ≤ --smart-threshold, else JPEG.
   proportion  JPEG for a --compress-probability fraction of images (chosen
               at random, reproducibly from --seed), raw for the rest.

With --from-stream, the samples of any dataset come framed from SRC (a
file, a FIFO, - for standard input, or fd:N for an inherited descriptor;
repeat the flag for several producers): the stream's header gives the
fields, of any of FFCV's types, and each image field's write mode and
sizes (the image flags above are the ImageFolder's). The format is in the
documentation of package beton/stream; the Python package's DatasetWriter
(a drop-in for FFCV's) writes it.

With --from-beton, SRC is a beton (` + storage.Locations() + `), any
writer's, FFCV's included: it is written anew with every JPEG given
restart markers, losslessly, and everything else as it was (every field
and value, each sample's id, raw images, the names index); a JPEG that
cannot be transcoded is kept as it was and named in the summary. Betons
written by FFCV lack restart markers; this makes ffcvfeed's crops of them
as fast as of the betons ffcvfs writes.

OUT.beton may be s3://BUCKET/KEY: the beton is sent by multipart upload as
it is written, and appears only when it is complete; an interrupted or
failed write aborts the upload. A local file is written to a temporary
name and renamed at the end: an interrupted run never leaves a file that
looks complete.

Examples:
   ffcvfs write ~/data/train train.beton
   ffcvfs write --max-resolution 512 --classes-out classes.txt ~/data/train train.beton
   ffcvfs write --mode smart --max-resolution 256 ~/data/val val.beton
   ffcvfs write --restart-interval 0 ~/data/train train.beton   # JPEGs as they are
   ffcvfs write --from-beton ffcv-train.beton train.beton
   ffcvfs write --from-beton s3://my-bucket/ffcv/train.beton s3://my-bucket/train.beton
   ffcvfs write ~/data/train s3://my-bucket/imagenet/train.beton
   my-producer | ffcvfs write --from-stream - data.beton`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "mode", Value: "jpg", Usage: "how images are stored: jpg, raw, smart or proportion", Category: "images"},
			&cli.IntFlag{Name: "max-resolution", Usage: "resize images whose longer side exceeds `N` pixels (0: keep sizes)", Category: "images"},
			&cli.IntFlag{Name: "jpeg-quality", Value: 90, Usage: "JPEG quality `Q` (1-100) for images that are (re-)encoded", Category: "images"},
			&cli.IntFlag{Name: "restart-interval", Value: jpeg.DefaultRestartInterval, Usage: "store every JPEG losslessly transcoded with a restart marker about every `MCUS` MCUs, so that ffcvfeed entropy-decodes only the part of an image a crop covers;\n\tthe pixels are the source's for every decoder, the bytes are not (0: JPEGs as they are, byte for byte where they fit)", Category: "images"},
			&cli.IntFlag{Name: "smart-threshold", Value: 256 * 256 * 3, Usage: "smart mode: store raw when width×height×3 ≤ `BYTES`", Category: "images"},
			&cli.Float64Flag{Name: "compress-probability", Value: 0.5, Usage: "proportion mode: fraction `P` of images stored as JPEG", Category: "images"},
			&cli.Int64Flag{Name: "seed", Usage: "random seed for proportion mode", Category: "images"},
			&cli.StringFlag{Name: "page-size", Value: "8MiB", Usage: "page `SIZE`: a power of two, 2MiB ≤ SIZE < 4GiB; every sample must fit in one page", Category: "file"},
			&cli.IntFlag{Name: "workers", Value: runtime.NumCPU(), DefaultText: "the cores", Usage: "`N` images decoded and encoded in parallel", Category: "file"},
			&cli.BoolFlag{Name: "keep-names", Usage: "keep each file's path relative to IMAGEFOLDER in a bytes field \"path\" (FFCV reads it as any BytesField;\n\tffcvfeed --fields path delivers it), so that ffcvfs mount serves the files under their own names and folders", Category: "file"},
			&cli.StringFlag{Name: "classes-out", Usage: "write the class names, one per line in label order, to `FILE`", Category: "file"},
			&cli.StringSliceFlag{Name: "from-stream", Usage: "read samples from `SRC` (a file, a FIFO, - for standard input, fd:N) instead of an ImageFolder tree; repeat for several producers, whose samples are merged by id", Category: "stream"},
			&cli.StringFlag{Name: "max-sample-size", Value: "256MiB", Usage: "--from-stream: refuse a sample frame larger than `SIZE`", Category: "stream"},
			&cli.StringFlag{Name: "from-beton", Usage: "write the beton `SRC` (" + storage.Locations() + "; - reads the location from standard input) anew, its JPEGs given restart markers (--restart-interval), everything else as it was; --page-size: the source's unless given", Category: "beton"},
			&cli.DurationFlag{Name: "read-deadline", Value: storage.DefaultReadDeadline, Usage: "--from-beton from S3 or HTTP: give up a read of a page, retries included, after this long", Category: "beton"},
		}, cacheflags.UploadFlags("storage")...),
		Action: runWrite,
	}
}

func runWrite(c *cli.Context) error {
	pageSize, err := bytesize.Parse(c.String("page-size"))
	if err != nil {
		return usageError("--page-size: %v", err)
	}
	for _, f := range []string{"attempt-timeout", "upload-deadline", "read-deadline"} {
		if d := c.Duration(f); d < 0 || d > storage.MaxDeadline || c.IsSet(f) && d == 0 {
			return usageError("--%s %v: want more than 0 and at most %v", f, d, storage.MaxDeadline)
		}
	}
	if c.IsSet("from-beton") {
		if len(c.StringSlice("from-stream")) > 0 {
			return usageError("--from-beton and --from-stream: give one source")
		}
		return runWriteBeton(c, pageSize)
	}
	if len(c.StringSlice("from-stream")) > 0 {
		return runWriteStream(c, pageSize)
	}
	if err := needArgs(c, "IMAGEFOLDER", "OUT.beton"); err != nil {
		return err
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

	ctx := interrupt.Context(c.Context)
	var bar *progress.Bar
	opts.Progress = func(done, total int) {
		if bar == nil {
			bar = progress.New(os.Stderr, "write", int64(total), "images")
		}
		bar.Set(int64(done))
	}
	dst, err := destination(ctx, c, out)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	res, err := imagefolder.ConvertTo(ctx, root, dst, opts)
	bar.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(out, err)
		}
		return cli.Exit(err.Error(), 1)
	}
	if f := c.String("classes-out"); f != "" {
		if err := writeClasses(f, res.Classes); err != nil {
			return cli.Exit(err.Error(), 1)
		}
	}
	fmt.Printf("%s: %d images in %d classes, %s of %s (%s); jpg %d (%s), raw %d; %.0f images/s\n",
		out, res.Samples, len(res.Classes), pages(res.Pages), bytesize.Format(pageSize), bytesize.Format(res.Bytes),
		res.JPEG, jpegSummary(res.Verbatim, res.Restarts), res.Raw, float64(res.Samples)/res.Elapsed.Seconds())
	printNoRestarts(res.NoRestarts, res.FirstNoRestarts)
	return nil
}

// interrupted is the exit of a write stopped by a signal: nothing was
// written, and an upload that could not be aborted is named.
func interrupted(out string, err error) error {
	msg := fmt.Sprintf("interrupted; %s was not written", out)
	if ae := (*storage.AbortError)(nil); errors.As(err, &ae) {
		msg += "; " + ae.Error()
	}
	return cli.Exit(msg, 130)
}

// destination opens where a beton is written: a local file, or an S3
// object by multipart upload.
func destination(ctx context.Context, c *cli.Context, out string) (beton.Destination, error) {
	if p, ok, err := storage.LocalPath(out); ok {
		if err != nil {
			return nil, err
		}
		return beton.NewFileDestination(p)
	}
	return storage.Create(ctx, out, cacheflags.SourceOptions(c))
}

// imageFlags are the flags that say how an ImageFolder's images are
// stored, which a stream's header says for itself.
var imageFlags = []string{"mode", "max-resolution", "jpeg-quality", "restart-interval", "smart-threshold", "compress-probability", "seed", "keep-names", "classes-out"}

// exitWithParentEnv, set to 1, stops a write (and aborts it) when the
// process that started it exits, however it exits: the Python
// DatasetWriter sets it.
const exitWithParentEnv = "FFCVFS_EXIT_WITH_PARENT"

// writeReadyFDEnv names a pipe's write end that write --from-stream closes once
// it catches SIGINT and SIGTERM: the Python DatasetWriter starts it with
// SIGINT ignored (the one signal Go keeps ignored until it is caught, with
// SIGHUP), and signals it only once the pipe reads its end, so that the
// write always ends by its own exit and says what became of the beton.
const writeReadyFDEnv = "FFCVFS_WRITE_READY_FD"

// closeWriteReadyFD closes the pipe writeReadyFDEnv names, if it names one.
func closeWriteReadyFD() {
	v := os.Getenv(writeReadyFDEnv)
	if v == "" {
		return
	}
	fd, err := strconv.Atoi(v)
	var st unix.Stat_t
	if err == nil && fd >= 3 && fd <= 1<<20 && unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
		if fl, ferr := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); ferr != nil || fl&unix.O_ACCMODE != unix.O_WRONLY {
			err = errors.New("not a pipe's write end")
		}
	} else {
		err = errors.New("not a pipe")
	}
	if err != nil {
		slog.Warn(writeReadyFDEnv+" names no pipe's write end of this process; ignored", "value", v)
		return
	}
	unix.Close(fd)
}

// runWriteStream is write --from-stream.
func runWriteStream(c *cli.Context, pageSize int64) error {
	ctx := c.Context
	if os.Getenv(exitWithParentEnv) == "1" {
		// Standard error is a pipe the parent reads: once the parent
		// is gone, a write to it must fail, not kill this process
		// (SIGPIPE) before the upload is aborted.
		signal.Ignore(syscall.SIGPIPE)
		ctx, _ = lifeline.WithParent(ctx)
	}
	ctx = interrupt.Context(ctx)
	closeWriteReadyFD()
	if err := needArgs(c, "OUT.beton"); err != nil {
		return err
	}
	for _, f := range imageFlags {
		if c.IsSet(f) {
			return usageError("--%s is for ImageFolder trees: with --from-stream, the stream's header says how each field is stored", f)
		}
	}
	maxFrame, err := bytesize.Parse(c.String("max-sample-size"))
	if err != nil || maxFrame < 1<<20 || maxFrame > 1<<32-1 {
		return usageError("--max-sample-size: want a size from 1MiB to 4GiB, got %q", c.String("max-sample-size"))
	}
	if c.Int("workers") < 1 || c.Int("workers") > 4096 {
		return usageError("--workers: want 1 to 4096, got %d", c.Int("workers"))
	}
	srcs, err := openStreams(c.StringSlice("from-stream"))
	if err != nil {
		return usageError("--from-stream: %v", err)
	}
	closeAll := func() {
		for _, s := range srcs {
			s.R.(io.Closer).Close()
		}
	}
	defer closeAll()
	out := c.Args().Get(0)
	dst, err := destination(ctx, c, out)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	var bar *progress.Bar
	opts := stream.Options{
		Workers: c.Int("workers"), MaxFrame: maxFrame, PageSize: pageSize,
		Progress: func(done, total int) {
			if bar == nil {
				bar = progress.New(os.Stderr, "write", int64(total), "samples")
			}
			bar.Set(int64(done))
		},
	}
	res, err := stream.Write(ctx, dst, srcs, opts)
	bar.Finish()
	if err != nil {
		closeAll()
		if ctx.Err() != nil {
			return interrupted(out, err)
		}
		return cli.Exit(fmt.Sprintf("%v; %s was not written", err, out), 1)
	}
	fmt.Printf("%s: %d samples, %s of %s (%s); images: jpg %d (%s), raw %d; %.0f samples/s\n",
		out, res.Samples, pages(res.Pages), bytesize.Format(res.PageSize), bytesize.Format(res.Bytes),
		res.JPEG, jpegSummary(res.Verbatim, res.Restarts), res.Raw, float64(res.Samples)/res.Elapsed.Seconds())
	printNoRestarts(res.NoRestarts, res.FirstNoRestarts)
	return nil
}

// jpegSummary says how the JPEGs were stored.
func jpegSummary(verbatim, restarts int) string {
	return fmt.Sprintf("%d with restart markers, %d stored verbatim", restarts, verbatim)
}

// printNoRestarts names the JPEGs stored without the restart markers
// asked for, if any.
func printNoRestarts(n int, first string) {
	if n > 0 {
		fmt.Printf("%d JPEGs stored as they were, without restart markers, which they could not be given; the first: %s\n", n, first)
	}
}

// openStreams opens --from-stream's sources.
func openStreams(names []string) ([]stream.Source, error) {
	var srcs []stream.Source
	type opened struct {
		name string
		info os.FileInfo
	}
	var stats []opened // the sources Stat could tell
	fail := func(err error) ([]stream.Source, error) {
		for _, s := range srcs {
			s.R.(io.Closer).Close()
		}
		return nil, err
	}
	for _, name := range names {
		var f *os.File
		switch {
		case name == "-":
			f = os.Stdin
			name = "standard input"
		case strings.HasPrefix(name, "fd:"):
			n, err := strconv.Atoi(name[3:])
			if err != nil || n < 0 || n > 1<<20 {
				return fail(fmt.Errorf("%q: want fd:N, N a file descriptor", name))
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(n, &st); err != nil {
				return fail(fmt.Errorf("%s: %v (no such descriptor open)", name, err))
			}
			f = os.NewFile(uintptr(n), name)
		default:
			var err error
			if f, err = os.Open(name); err != nil {
				return fail(err)
			}
			if st, err := f.Stat(); err == nil && st.IsDir() {
				f.Close()
				return fail(fmt.Errorf("%s is a folder, not a stream (an ImageFolder is written without --from-stream)", name))
			}
		}
		// The same stream twice (- twice, fd:0 and -, a file by two
		// names) would split its frames between two readers.
		if st, err := f.Stat(); err == nil {
			for _, prev := range stats {
				if os.SameFile(prev.info, st) {
					if f != os.Stdin {
						f.Close()
					}
					return fail(fmt.Errorf("%s and %s are the same stream: each producer needs one of its own", prev.name, name))
				}
			}
			stats = append(stats, opened{name, st})
		}
		srcs = append(srcs, stream.Source{Name: name, R: f})
	}
	return srcs, nil
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

// pages is "1 page" or "N pages".
func pages(n int) string {
	if n == 1 {
		return "1 page"
	}
	return fmt.Sprintf("%d pages", n)
}
