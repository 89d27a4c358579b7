// Command ffcvfeed reads a beton (directly or through an ffcvfs mount),
// decodes and augments its images, and delivers finished batches to a
// training process of any framework through shared memory and a Unix
// socket (see package cudafeed, and the Loader of the Python package ffcvfs
// in python/ffcvfs/feed.py).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/cudafeed"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/internal/metrics"
	"github.com/ffcvfs/ffcvfs/internal/version"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
	"github.com/ffcvfs/ffcvfs/storage"
	"github.com/urfave/cli/v2"
)

func main() {
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
	cli.VersionPrinter = func(*cli.Context) { fmt.Print(version.String("ffcvfeed")) }
	app := &cli.App{
		Name:    "ffcvfeed",
		Version: version.Release,
		Usage:   "decode, augment and deliver training batches from a .beton to any framework",
		Description: `ffcvfeed serve reads a beton (a path, s3://, http(s)://, or an ffcvfs mount),
decodes its JPEGs with libjpeg-turbo (only the region each crop needs), crops,
flips and converts them, and puts finished batches into shared memory; a
training process reads them through a Unix socket, without copying:

   from ffcvfs import Loader            # pip install ./python
   for images, labels in Loader("/tmp/feed.sock"): ...

A stopped job resumes mid-epoch: Loader.state_dict() says where, and
Loader.resume_args() gives the --start-epoch and --start-batch to serve with.
--metrics-addr serves Prometheus metrics (images/s, slots, clients, cache).

Examples:
   ffcvfeed serve --data train.beton --socket /tmp/feed.sock --batch-size 256 --resolution 160
   ffcvfeed serve --data /mnt/train --socket /tmp/feed.sock --dtype float16 --layout nchw --normalize imagenet
   ffcvfeed serve --data train.beton --socket /tmp/feed.sock --device cuda:0   # a build with -tags cuda
   ffcvfeed serve --data train.beton --socket /tmp/feed.sock --epochs 16 --start-epoch 3 --start-batch 120
   ffcvfeed serve --data train.beton --socket /tmp/feed.sock --metrics-addr 9101
   ffcvfeed bench --data train.beton --resolution 160`,
		Commands:        []*cli.Command{serveCommand(), benchCommand(), decodeBenchCommand(), versionCommand()},
		HideHelpCommand: true,
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "ffcvfeed:", err)
		if ec, ok := err.(cli.ExitCoder); ok {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

func pipelineFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "data", Required: true, Usage: "the beton: a path, s3://bucket/key, http(s):// URL, or an ffcvfs mountpoint; - reads it from standard input (a presigned URL then stays out of the command line)", Category: "data"},
		&cli.StringFlag{Name: "cache-size", Value: "512MiB", Usage: "RAM for pages of the beton", Category: "data"},
		&cli.StringFlag{Name: "image-field", Usage: "RGB image field (default: the first)", Category: "data"},
		&cli.StringFlag{Name: "label-field", Value: "label", Usage: "int field of labels", Category: "data"},
		&cli.StringFlag{Name: "fields", Usage: "the beton fields each batch carries, `NAME,...` in order, under their names (default: the image\n\tfield and --label-field, as \"image\" and \"label\"): the image field decoded and augmented, int fields as\n\tint64 [B], float fields as float64 [B], ndarray and torch tensor fields as [B, shape...] of their dtype,\n\tbytes and JSON fields as each sample's bytes one after another plus NAME.ends (int64 [B], where\n\teach sample ends); ffcvfs info lists a beton's fields", Category: "data"},
		&cli.IntFlag{Name: "batch-size", Value: 256, Usage: "`N` samples per batch", Category: "batches"},
		&cli.IntFlag{Name: "resolution", Value: 160, Usage: "output side in pixels `N` (square)", Category: "augment"},
		&cli.StringFlag{Name: "crop", Value: "random-resized", Usage: "random-resized (training), center (validation), or none: every image whole and not resized, as\n\tFFCV's SimpleRGBImageDecoder (images of one size, e.g. CIFAR; --resolution is then their size)", Category: "augment"},
		&cli.StringFlag{Name: "scale", Value: "0.08,1", Usage: "random-resized: area fraction range", Category: "augment"},
		&cli.StringFlag{Name: "ratio", Value: "0.75,1.3333333333333333", Usage: "random-resized: aspect ratio range", Category: "augment"},
		&cli.Float64Flag{Name: "center-ratio", Value: decode.DefaultCenterRatio, Usage: "center: crop side over the shorter side", Category: "augment"},
		&cli.Float64Flag{Name: "flip", Value: 0.5, Usage: "probability `P` of a horizontal flip per sample (0: never, 1: always); not a switch", Category: "augment"},
		&cli.BoolFlag{Name: "exact", Usage: "decode each crop at full resolution before resizing it: the pixels of a full decode, cropped and\n\tarea-resized, but slower; by default a crop decodes at the smallest JPEG DCT scale m/8 that keeps\n\tthe output's pixels (about 47 dB from the exact pixels on average, never under 30 dB)", Category: "augment"},
		&cli.StringFlag{Name: "entropy-decoder", Value: "ffcvfeed", Usage: "`NAME` that entropy-decodes baseline JPEGs: ffcvfeed (its own Huffman decoder) or libjpeg\n\t(libjpeg-turbo's: 5-10 % more time per image); both give the same pixels", Category: "augment"},
		&cli.IntFlag{Name: "translate", Usage: "shift each image by up to `N` pixels each way, filling with --translate-fill (FFCV's RandomTranslate)", Category: "augment"},
		&cli.StringFlag{Name: "translate-fill", Value: "0,0,0", Usage: "`R,G,B` (0-255) that --translate fills with", Category: "augment"},
		&cli.IntFlag{Name: "cutout", Usage: "fill a square of side `N` at a random place with --cutout-fill (FFCV's Cutout)", Category: "augment"},
		&cli.StringFlag{Name: "cutout-fill", Value: "0,0,0", Usage: "`R,G,B` (0-255) that --cutout fills with", Category: "augment"},
		&cli.StringFlag{Name: "brightness", Usage: "`M[,P]`: with probability P (default 0.5) scale the pixels by a factor from [max(0, 1-M), 1+M]\n\t(FFCV's RandomBrightness)", Category: "augment"},
		&cli.StringFlag{Name: "contrast", Usage: "`M[,P]`: blend with the mean gray by such a factor (FFCV's RandomContrast)", Category: "augment"},
		&cli.StringFlag{Name: "saturation", Usage: "`M[,P]`: blend each pixel with its gray by such a factor (FFCV's RandomSaturation)", Category: "augment"},
		&cli.Float64Flag{Name: "mixup", Usage: "mix each image with the one before it in its batch by a weight from Beta(`ALPHA`, ALPHA), and add a\n\tfield \"mixup\" (float32 [B, 3]: label, label mixed in, weight), as FFCV's ImageMixup and LabelMixup", Category: "augment"},
		&cli.BoolFlag{Name: "mixup-same-lambda", Usage: "--mixup: one weight per batch, not one per image", Category: "augment"},
		&cli.Int64Flag{Name: "replace-label", Usage: "give the samples of --replace-label-indices the label `N` (FFCV's ReplaceLabel)", Category: "augment"},
		&cli.StringFlag{Name: "replace-label-indices", Usage: "the samples --replace-label relabels: `IDS` as 1,5,9 or @FILE (.npy, or ids in text)", Category: "augment"},
		&cli.StringFlag{Name: "poison-mask", Usage: "poison the images of --poison-indices (FFCV's Poison): x(1-alpha) + mask·alpha, with `FILE`.npy a\n\tuint8 array [H, W, 3] of the output's size", Category: "augment"},
		&cli.StringFlag{Name: "poison-alpha", Usage: "--poison-mask: `FILE`.npy of the weights, [H, W]", Category: "augment"},
		&cli.StringFlag{Name: "poison-indices", Usage: "--poison-mask: the samples poisoned, `IDS` as 1,5,9 or @FILE", Category: "augment"},
		&cli.StringFlag{Name: "poison-clamp", Value: "0,255", Usage: "--poison-mask: clip the poisoned values to `LO,HI`", Category: "augment"},
		&cli.StringFlag{Name: "dtype", Value: "uint8", Usage: "uint8, float16 or float32", Category: "output"},
		&cli.StringFlag{Name: "layout", Value: "nhwc", Usage: "nhwc or nchw", Category: "output"},
		&cli.StringFlag{Name: "normalize", Value: "none", Usage: "none, imagenet, or M,M,M/S,S,S on the 0-1 scale (float dtypes)", Category: "output"},
		&cli.StringFlag{Name: "order", Value: "quasi-random", Usage: "quasi-random, random or sequential", Category: "batches"},
		&cli.Uint64Flag{Name: "seed", Usage: "seed of orders and augmentations", Category: "batches"},
		&cli.IntFlag{Name: "epochs", Value: 1, Usage: "deliver `N` epochs, then end the stream; a client that reads more is told so", Category: "batches"},
		&cli.IntFlag{Name: "rank", Usage: "this process's rank (distributed training)", Category: "batches"},
		&cli.IntFlag{Name: "world-size", Value: 1, Usage: "number of ranks", Category: "batches"},
		&cli.IntFlag{Name: "nodes", Usage: "node-affine order: the `N` machines the ranks run on (--world-size / N ranks each, numbered node by node): each node reads the same pages every epoch, so its caches keep serving them (0: the pages of each epoch are dealt over all ranks)", Category: "batches"},
		&cli.Float64Flag{Name: "move", Usage: "node-affine order: the share `F` (0 to 1) of each node's pages that moves to another node per epoch", Category: "batches"},
		&cli.IntFlag{Name: "workers", Value: runtime.NumCPU(), DefaultText: "the cores", Usage: "`N` decoding goroutines (GOMAXPROCS is at least N+1 unless set: one P to spare keeps Go from handing a worker's P to another thread while it decodes)", Category: "batches"},
		&cli.StringFlag{Name: "indices", Usage: "read only these samples (FFCV's Loader's indices): `IDS` as 1,5,9 or @FILE (.npy, or ids in text);\n\ta sequential order takes them as given, other orders as the whole beton's order without the rest", Category: "batches"},
		&cli.BoolFlag{Name: "drop-last", Usage: "leave out an epoch's last batch when it is incomplete, as FFCV's Loader does with drop_last", Category: "batches"},
		&cli.StringFlag{Name: "on-error", Value: "skip", Usage: "skip (replace an undecodable sample by another of its batch) or fail", Category: "batches"},
	}, append(append(cacheflags.Flags("data"), cacheflags.PeerFlags("peers")...), cacheflags.SourceFlags("storage")...)...)
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var l []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			l = append(l, x)
		}
	}
	return l
}

// pair reads LOW,HIGH: two finite numbers, LOW <= HIGH, within [lo, hi].
func pair(s, name string, lo, hi float64) ([2]float64, error) {
	a, b, ok := strings.Cut(s, ",")
	x, err1 := strconv.ParseFloat(strings.TrimSpace(a), 64)
	y, err2 := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if !ok || err1 != nil || err2 != nil || !(lo <= x && x <= y && y <= hi) {
		return [2]float64{}, cli.Exit(fmt.Sprintf("--%s %q: want two numbers LOW,HIGH with %g <= LOW <= HIGH <= %g", name, s, lo, hi), 2)
	}
	return [2]float64{x, y}, nil
}

func triple(s string) ([3]float64, error) {
	var v [3]float64
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return v, fmt.Errorf("want three numbers, got %q", s)
	}
	for i, p := range parts {
		f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return v, fmt.Errorf("%q is not a finite number", p)
		}
		v[i] = f
	}
	return v, nil
}

// libjpegEntropy reads --entropy-decoder: whether libjpeg-turbo's Huffman
// decoder is asked for rather than ffcvfeed's.
func libjpegEntropy(c *cli.Context) (bool, error) {
	switch v := c.String("entropy-decoder"); v {
	case "ffcvfeed":
		return false, nil
	case "libjpeg":
		return true, nil
	default:
		return false, cli.Exit(fmt.Sprintf("--entropy-decoder %q: want ffcvfeed or libjpeg", v), 2)
	}
}

// pipelineOptions turns the flags into pipeline options.
func pipelineOptions(c *cli.Context) (pipeline.Options, error) {
	kind, err := order.ParseKind(c.String("order"))
	if err != nil {
		return pipeline.Options{}, cli.Exit("--order: "+err.Error(), 2)
	}
	dtype, err := pipeline.ParseDType(c.String("dtype"))
	if err != nil {
		return pipeline.Options{}, cli.Exit("--dtype: "+err.Error(), 2)
	}
	layout, err := pipeline.ParseDimOrder(c.String("layout"))
	if err != nil {
		return pipeline.Options{}, cli.Exit("--layout: "+err.Error(), 2)
	}
	onError, err := pipeline.ParseOnError(c.String("on-error"))
	if err != nil {
		return pipeline.Options{}, cli.Exit("--on-error: "+err.Error(), 2)
	}
	o := pipeline.Options{
		Order: order.Options{Kind: kind, Seed: c.Uint64("seed"), Rank: c.Int("rank"), WorldSize: c.Int("world-size"),
			Nodes: c.Int("nodes"), MoveFraction: c.Float64("move")},
		BatchSize: c.Int("batch-size"), DropLast: c.Bool("drop-last"),
		DType: dtype, DimOrder: layout,
		Workers: c.Int("workers"), OnError: onError,
		ImageField: c.String("image-field"), LabelField: c.String("label-field"),
		Fields: splitList(c.String("fields")),
		Op:     decode.Op{OutW: c.Int("resolution"), OutH: c.Int("resolution"), FlipProb: c.Float64("flip"), CenterRatio: c.Float64("center-ratio"), Exact: c.Bool("exact")},
	}
	if o.Op.LibjpegEntropy, err = libjpegEntropy(c); err != nil {
		return o, err
	}
	switch c.String("crop") {
	case "random-resized":
		o.Op.Kind = decode.RandomResizedCrop
		// Area fractions down to a millionth; aspect ratios as decode.Op allows.
		if o.Op.Scale, err = pair(c.String("scale"), "scale", 1e-6, 1); err != nil {
			return o, err
		}
		if o.Op.Ratio, err = pair(c.String("ratio"), "ratio", decode.MinRatio, decode.MaxRatio); err != nil {
			return o, err
		}
	case "center":
		o.Op.Kind = decode.CenterCrop
	case "none":
		o.Op.Kind = decode.Whole
		if !c.IsSet("resolution") {
			o.Op.OutW, o.Op.OutH = 0, 0 // the images' size
		}
	default:
		return o, cli.Exit(fmt.Sprintf("--crop %q: want random-resized, center or none", c.String("crop")), 2)
	}
	switch n := c.String("normalize"); n {
	case "none", "":
	case "imagenet":
		o.Normalize, o.Mean, o.Std = true, pipeline.ImageNetMean, pipeline.ImageNetStd
	default:
		m, s, ok := strings.Cut(n, "/")
		var err1, err2 error
		o.Mean, err1 = triple(m)
		o.Std, err2 = triple(s)
		if !ok || err1 != nil || err2 != nil {
			return o, cli.Exit(fmt.Sprintf("--normalize %q: want none, imagenet or M,M,M/S,S,S", n), 2)
		}
		o.Normalize = true
	}
	if err := augmentOptions(c, &o); err != nil {
		return o, err
	}
	if err := o.Validate(); err != nil {
		return o, cli.Exit(err.Error(), 2)
	}
	return o, nil
}

// openData opens --data: a source URL or path, or an ffcvfs mount whose
// dataset.beton is read and whose announce socket is told each order.
func openData(c *cli.Context) (*cacheflags.Opened, func([]uint32) error, error) {
	data := c.String("data")
	if data == storage.StdinLocation {
		var err error
		if data, err = storage.ReadLocation(os.Stdin); err != nil {
			return nil, nil, cli.Exit(err.Error(), 2)
		}
	}
	var announce func([]uint32) error
	if control.IsMount(data) {
		mnt := data
		data = control.Path(mnt, control.DatasetFile)
		announce = func(ids []uint32) error {
			ctx, cancel := context.WithTimeout(c.Context, time.Minute)
			defer cancel()
			return control.Announce(ctx, mnt, ids, false)
		}
	}
	d, err := cacheflags.Open(c, data, pagecache.Options{})
	if err != nil {
		return nil, nil, err
	}
	return d, announce, nil
}

// fed is the pipeline the flags describe, with the beton it reads.
type fed struct {
	p *pipeline.Pipeline
	*cacheflags.Opened
}

// close releases the cache and the source.
func (f *fed) close() { f.Opened.Close() }

// openPipeline builds the pipeline the flags describe.
func openPipeline(c *cli.Context) (*fed, error) {
	opts, err := pipelineOptions(c)
	if err != nil {
		return nil, err
	}
	data, announce, err := openData(c)
	if err != nil {
		return nil, err
	}
	f := &fed{Opened: data}
	if f.p, err = pipeline.New(data.Cache, opts, announce); err != nil {
		f.close()
		return nil, err
	}
	spareProc(opts.Workers)
	return f, nil
}

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "serve batches over a Unix socket and shared memory",
		UsageText: "ffcvfeed serve --data SRC|MOUNT --socket PATH [options]",
		Flags: append(pipelineFlags(),
			&cli.StringFlag{Name: "socket", Required: true, Usage: "Unix socket to serve on (created 0600)", Category: "output"},
			&cli.IntFlag{Name: "slots", Value: 4, Usage: "batches in shared memory at once", Category: "output"},
			&cli.IntFlag{Name: "start-epoch", Usage: "resume: the first epoch to deliver (the client's Loader.state_dict() says which)", Category: "batches"},
			&cli.IntFlag{Name: "start-batch", Usage: "resume: the first batch of --start-epoch to deliver; the earlier ones are neither read nor announced", Category: "batches"},
			&cli.StringFlag{Name: "resume", Usage: "resume at another world size: the parts of --start-epoch read before, as `WORLDxPOSITION[,...]` (each of WORLD ranks took POSITION samples); this rank serves its share of the rest of the epoch (the client's Loader.resume_args() gives it)", Category: "batches"},
			&cli.StringFlag{Name: "metrics-addr", Usage: metrics.FlagUsage, Category: "monitoring"},
			deviceFlag(),
		),
		Action: func(c *cli.Context) error {
			if os.Getenv(exitWithParentEnv) == "1" {
				// First thing, while the parent is the one that started
				// this server; the data is opened under this context too.
				var parentGone func() bool
				c.Context, parentGone = exitWithParent(c.Context)
				defer removeOwnedFolder(parentGone, c.String("socket"))
			}
			dev, err := deliveryDevice(c)
			if err != nil {
				return err
			}
			if err := checkSocketPath(c.String("socket")); err != nil {
				return err
			}
			startEpoch, startBatch, epochs := c.Int("start-epoch"), c.Int("start-batch"), c.Int("epochs")
			if startEpoch < 0 || startEpoch >= epochs {
				return cli.Exit(fmt.Sprintf("--start-epoch %d: want 0 to --epochs - 1 (%d)", startEpoch, epochs-1), 2)
			}
			var resumed []order.Segment
			if v := c.String("resume"); v != "" {
				if resumed, err = order.ParseSegments(v, ","); err != nil {
					return cli.Exit("--resume: "+err.Error(), 2)
				}
				if startBatch != 0 {
					return cli.Exit("--resume and --start-batch: give one; --resume names the rest of --start-epoch after the parts read before", 2)
				}
			}
			if c.String("metrics-addr") != "" {
				if _, err := metrics.ListenAddr(c.String("metrics-addr")); err != nil {
					return cli.Exit(err.Error(), 2)
				}
			}
			fd, err := openPipeline(c)
			if err != nil {
				return err
			}
			defer fd.close()
			p := fd.p
			nb, err := p.BatchesPerEpoch()
			if err != nil {
				return err
			}
			if startBatch < 0 || startBatch >= nb {
				return cli.Exit(fmt.Sprintf("--start-batch %d: an epoch has batches 0 to %d", startBatch, nb-1), 2)
			}
			var rest *pipeline.Rest // the rest of --start-epoch after --resume's segments
			if resumed != nil {
				// The rest of the epoch stands in its last batches.
				if rest, err = p.Rest(startEpoch, resumed); err != nil {
					return cli.Exit("--resume: "+err.Error(), 1)
				}
				if rest.Batches == 0 {
					if startEpoch+1 >= epochs {
						return cli.Exit(fmt.Sprintf("--resume: nothing is left of epoch %d, the last of --epochs %d", startEpoch, epochs), 1)
					}
					slog.Info("nothing is left of the resumed epoch: starting at the next", "epoch", startEpoch+1)
					startEpoch, resumed, rest = startEpoch+1, nil, nil
				} else {
					startBatch = rest.Start
				}
			}
			stream := cudafeed.StreamInfo{WorldSize: max(1, c.Int("world-size")), BatchSize: c.Int("batch-size")}
			for _, s := range resumed {
				stream.Segments = append(stream.Segments, [2]int{s.WorldSize, s.Position})
			}
			if removed, err := cudafeed.CleanStaleRings(); err != nil {
				slog.Warn("looking for rings of dead servers", "err", err)
			} else if len(removed) > 0 {
				slog.Info("removed the rings of dead servers", "rings", removed)
			}
			// From here on a signal ends the stream through ctx, so that
			// the shared memory and the socket are removed on the way out.
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			ring, err := cudafeed.CreateServerRing(cudafeed.RingSpec{Fields: p.Fields(), Slots: c.Int("slots")})
			var full *cudafeed.ShmFullError
			if errors.As(err, &full) {
				return cli.Exit(fmt.Sprintf("%v: free space in %s, make it larger (in a container: docker run --shm-size, or Kubernetes' emptyDir of medium Memory), or lower --slots (%d) or --batch-size (%d)",
					err, full.Dir, c.Int("slots"), c.Int("batch-size")), 2)
			}
			if err != nil {
				return err
			}
			defer ring.Close()
			devSlots, closeDevice, err := openDevice(dev, ring)
			if err != nil {
				return err
			}
			defer func() {
				if err := closeDevice(); err != nil {
					slog.Warn("closing the device ring", "err", err)
				}
			}()
			srv, err := cudafeed.NewServer(ring, cudafeed.Options{SocketPath: c.String("socket"), BatchesPerEpoch: nb, Epochs: epochs, Device: devSlots,
				StartEpoch: startEpoch, StartBatch: startBatch, Stream: stream})
			if err != nil {
				return err
			}
			defer srv.Close()
			var epoch atomic.Int64
			epoch.Store(int64(startEpoch))
			if addr := c.String("metrics-addr"); addr != "" {
				ms, err := serveMetrics(addr, fd, srv, &epoch)
				if err != nil {
					return cli.Exit(err.Error(), 1)
				}
				defer ms.Close()
				slog.Info("serving metrics", "url", "http://"+ms.Addr()+"/metrics")
			}
			slog.Info("serving", "socket", c.String("socket"), "shm", ring.Path(), "device", dev, "batches_per_epoch", nb, "epochs", c.Int("epochs"))
			sink := serverSink{srv: srv, ring: ring}
			for e := startEpoch; e < epochs; e++ {
				start, from := time.Now(), 0
				if e == startEpoch {
					from = startBatch
				}
				epoch.Store(int64(e))
				var n int
				var err error
				if e == startEpoch && rest != nil {
					n, err = p.RunRest(ctx, rest, sink)
				} else {
					n, err = p.RunEpochFrom(ctx, e, from, sink)
				}
				if err != nil {
					if ctx.Err() != nil {
						// A signal, or the end of the parent: the
						// stream ends early, as asked; the ring and
						// the socket go on the way out.
						slog.Info("stopped", "epoch", e)
						return nil
					}
					return err
				}
				slog.Info("epoch done", "epoch", e, "images", n, "images_per_s", fmt.Sprintf("%.0f", float64(n)/time.Since(start).Seconds()), "errors", p.Errors.Load())
			}
			// Wait until the consumer has released every slot and has been
			// sent the end of the stream.
			for i := 0; i < ring.Slots(); i++ {
				if _, err := srv.AcquireSlot(ctx); err != nil {
					return nil
				}
			}
			drain, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := srv.Drain(drain); err != nil {
				slog.Warn("the consumer did not receive the end of the stream", "err", err)
			}
			return nil
		},
	}
}

// maxSocketPath is the longest path a Unix socket may have: sun_path holds
// 108 bytes with the terminating NUL.
const maxSocketPath = 107

// checkSocketPath refuses a --socket path that cannot be listened on, with
// the fix, before the data is opened: a folder that does not exist, or is
// not a folder, and a path too long for a Unix socket.
func checkSocketPath(path string) error {
	if path == "" {
		return cli.Exit("--socket: give the path of the Unix socket to serve on, such as /tmp/feed.sock", 2)
	}
	if len(path) > maxSocketPath {
		return cli.Exit(fmt.Sprintf("--socket %s: the path is %d bytes long, and a Unix socket's may be at most %d: choose a shorter one, such as /tmp/feed.sock", path, len(path), maxSocketPath), 2)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return cli.Exit(fmt.Sprintf("--socket %s: the folder %s does not exist: create it first (mkdir -p %s), or put the socket in a folder that exists, such as /tmp", path, dir, dir), 2)
	case err != nil:
		return cli.Exit(fmt.Sprintf("--socket %s: %v", path, err), 2)
	case !st.IsDir():
		return cli.Exit(fmt.Sprintf("--socket %s: %s is not a folder", path, dir), 2)
	}
	return nil
}

// versionCommand is `ffcvfeed version`, which --version does too.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit and the Go toolchain of this build",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("version takes no arguments", 2)
			}
			fmt.Print(version.String("ffcvfeed"))
			return nil
		},
	}
}

type serverSink struct {
	srv  *cudafeed.Server
	ring *cudafeed.Ring
}

func (s serverSink) Acquire(ctx context.Context) (int, error) { return s.srv.AcquireSlot(ctx) }
func (s serverSink) Buffers(slot int) [][]byte                { return s.ring.Slot(slot) }
func (s serverSink) Publish(slot, epoch, batch, size int) error {
	return s.srv.Publish(slot, epoch, batch, size)
}

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "run the pipeline with no consumer and print images/s",
		UsageText: "ffcvfeed bench --data SRC|MOUNT [options]",
		Flags:     pipelineFlags(),
		Action: func(c *cli.Context) error {
			fd, err := openPipeline(c)
			if err != nil {
				return err
			}
			defer fd.close()
			p := fd.p
			sink, err := pipeline.NewDiscardSink(p, 4)
			if err != nil {
				return err
			}
			defer sink.Close()
			total, start := 0, time.Now()
			for e := 0; e < c.Int("epochs"); e++ {
				t := time.Now()
				n, err := p.RunEpoch(c.Context, e, sink)
				if err != nil {
					return err
				}
				total += n
				el := time.Since(t).Seconds()
				fmt.Printf("epoch %d: ffcvfeed bench: %d images in %.2f s: %.0f images/s", e, n, el, float64(n)/el)
				if m := memory(); m != "" {
					fmt.Printf(" (%s)", m)
				}
				fmt.Println()
			}
			el := time.Since(start).Seconds()
			fmt.Printf("total: ffcvfeed bench: %d images in %.2f s: %.0f images/s (errors %d)\n", total, el, float64(total)/el, p.Errors.Load())
			return nil
		},
	}
}

func decodeBenchCommand() *cli.Command {
	return &cli.Command{
		Name:      "decode-bench",
		Usage:     "decode every JPEG of a beton in full with libjpeg-turbo (the baseline of ffcvfeed bench)",
		UsageText: "ffcvfeed decode-bench --data SRC [--workers N] [--entropy-decoder libjpeg|ffcvfeed]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Required: true, Usage: "the beton"},
			&cli.IntFlag{Name: "workers", Value: runtime.NumCPU(), DefaultText: "the cores", Usage: "`N` decoding goroutines (GOMAXPROCS is at least N+1 unless set)"},
			&cli.StringFlag{Name: "entropy-decoder", Value: "libjpeg", Usage: "`NAME` that entropy-decodes the JPEGs: libjpeg (libjpeg-turbo's own: the baseline) or ffcvfeed (the\n\tpipeline's)"},
		},
		Action: func(c *cli.Context) error {
			f, err := beton.OpenFile(c.String("data"))
			if err != nil {
				return err
			}
			defer f.Close()
			fi := f.ImageField("")
			if fi < 0 {
				return cli.Exit("no RGB image field", 1)
			}
			// Load every JPEG first: the figure is decoding alone.
			var jpegs [][]byte
			for s := 0; s < f.NumSamples(); s++ {
				if img, err := f.Image(s, fi); err == nil && img.Mode == beton.ModeJPEG {
					b, err := f.ReadData(s, fi, nil)
					if err != nil {
						return err
					}
					jpegs = append(jpegs, b)
				}
			}
			workers := c.Int("workers")
			if workers < 1 || workers > pipeline.MaxWorkers {
				return cli.Exit(fmt.Sprintf("--workers %d: want 1 to %d", workers, pipeline.MaxWorkers), 2)
			}
			lib, err := libjpegEntropy(c)
			if err != nil {
				return err
			}
			spareProc(workers)
			next := make(chan []byte, workers)
			done := make(chan error, workers)
			start := time.Now()
			for w := 0; w < workers; w++ {
				go func() {
					d, err := jpeg.NewDecoder()
					if err != nil {
						done <- err
						return
					}
					defer d.Close()
					d.UseLibjpegEntropy(lib)
					var buf []byte
					for b := range next {
						w, h, err := d.Header(b)
						if err == nil {
							if len(buf) < w*h*3 {
								buf = make([]byte, w*h*3)
							}
							_, _, err = d.DecodeRegion(b, 0, 0, w, h, 8, buf, w*3)
						}
						if err != nil {
							slog.Warn("decode failed", "err", err)
						}
					}
					done <- nil
				}()
			}
			for _, b := range jpegs {
				next <- b
			}
			close(next)
			for w := 0; w < workers; w++ {
				if err := <-done; err != nil {
					return err
				}
			}
			el := time.Since(start).Seconds()
			fmt.Printf("decode-only: %d images in %.2f s: %.0f images/s\n", len(jpegs), el, float64(len(jpegs))/el)
			return nil
		},
	}
}
