package main

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/decode"
	"github.com/ffcvfs/ffcvfs/pipeline/decoded"
	"github.com/ffcvfs/ffcvfs/storage"
)

// pipelineFlags are the flags of serve and bench: the data, the batches,
// the augmentations and the output, and the cache's and storage's.
func pipelineFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringSliceFlag{Name: "data", Required: true, Usage: "the beton `SRC`: " + storage.Locations() + ", or an ffcvfs mountpoint; - reads it from standard input (a presigned URL then stays out of the command line);\n\tgive it once per source to mix several betons (--weights)", Category: everyRun},
		&cli.StringFlag{Name: "weights", Usage: "mix the --data sources, each's share of an epoch in the order of --data: `W,...` proportions (0.5,0.3,0.2; taken relative to their sum,\n\tof --epoch-size samples), or repeat factors (x2: each sample twice an epoch) and counts (n1000); within its share a\n\tsource's samples are drawn without replacement, a share larger than the source repeats it, a smaller one takes another\n\tpart each epoch until all are seen; batches carry a field \"source\" (default: each source once an epoch)", Category: "data"},
		&cli.IntFlag{Name: "epoch-size", Usage: "`N` samples an epoch of --weights proportions holds (default: the sources' samples in all)", Category: "data"},
		&cli.StringFlag{Name: "cache-size", Value: "512MiB", Usage: "RAM for pages of the beton (of the betons: each --data has its part)", Category: "data"},
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
		&cli.StringFlag{Name: "decoded-cache-size", Value: "0", Usage: "RAM `SIZE` for JPEG images kept decoded (their planes after the inverse DCT, at full resolution:\n\t1.5 bytes a pixel for 4:2:0, 3 for 4:4:4; 0.28 MB for a 500x375 photo), so that epochs after the\n\tfirst make their crops without decoding them: as many images as fit, kept for the run, filled in\n\tthe first epoch; crops made from them have the pixels of --exact (0: off)", Category: "decoded-image cache"},
		&cli.StringFlag{Name: "decoded-cache-dir", Usage: "a folder `DIR` on a local disk for decoded images beyond --decoded-cache-size, in one file of at\n\tmost --decoded-cache-disk-size, deleted when ffcvfeed ends", Category: "decoded-image cache"},
		&cli.StringFlag{Name: "decoded-cache-disk-size", Usage: "the most bytes `SIZE` --decoded-cache-dir takes", Category: "decoded-image cache"},
	}, append(append(cacheflags.Flags("data"), cacheflags.PeerFlags("peers")...), cacheflags.SourceFlags("storage")...)...)
}

// decodedOptions reads the decoded-image cache's flags: the tier's sizes
// (both 0: no tier).
func decodedOptions(c *cli.Context) (decoded.Options, error) {
	var o decoded.Options
	size := func(name string) (int64, error) {
		v := c.String(name)
		if v == "" {
			return 0, nil
		}
		n, err := bytesize.Parse(v)
		if err == nil && n > decoded.MaxSize {
			err = fmt.Errorf("more than %s", bytesize.Format(decoded.MaxSize))
		}
		if err != nil {
			return 0, cli.Exit(fmt.Sprintf("--%s %q: want a size such as 8GiB (0: none): %v", name, v, err), 2)
		}
		return n, nil
	}
	var err error
	if o.RAM, err = size("decoded-cache-size"); err != nil {
		return o, err
	}
	if o.Disk, err = size("decoded-cache-disk-size"); err != nil {
		return o, err
	}
	o.Dir = c.String("decoded-cache-dir")
	switch {
	case o.Dir != "" && !c.IsSet("decoded-cache-disk-size"):
		return o, cli.Exit("--decoded-cache-dir needs --decoded-cache-disk-size SIZE, the most bytes it may take", 2)
	case o.Disk > 0 && o.Dir == "":
		return o, cli.Exit("--decoded-cache-disk-size needs --decoded-cache-dir DIR, a folder on a local disk", 2)
	}
	return o, nil
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

// everyRun is the category of the flags every run needs: capitalized, it
// comes first in --help (urfave/cli sorts categories by name).
const everyRun = "Every run needs"

// MaxEpochs bounds --epochs.
const MaxEpochs = 1 << 20

// epochsFlag is --epochs, 1 to MaxEpochs.
func epochsFlag(c *cli.Context) (int, error) {
	e := c.Int("epochs")
	if e < 1 || e > MaxEpochs {
		return 0, cli.Exit(fmt.Sprintf("--epochs %d: want 1 to %d epochs (a run that reads nothing is a mistake)", e, MaxEpochs), 2)
	}
	return e, nil
}

// pipelineOptions turns the flags into pipeline options.
func pipelineOptions(c *cli.Context) (pipeline.Options, error) {
	if _, err := epochsFlag(c); err != nil {
		return pipeline.Options{}, err
	}
	// 0 would be the pipeline's default (256), not what was asked for.
	if b := c.Int("batch-size"); b < 1 || b > order.MaxBatchSize {
		return pipeline.Options{}, cli.Exit(fmt.Sprintf("--batch-size %d: want 1 to %d samples a batch", b, order.MaxBatchSize), 2)
	}
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
