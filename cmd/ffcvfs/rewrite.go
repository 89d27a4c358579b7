package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/rewrite"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/internal/interrupt"
	"github.com/ffcvfs/ffcvfs/internal/progress"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// runWriteBeton is write --from-beton: SRC written anew, its JPEGs given
// restart markers.
func runWriteBeton(c *cli.Context, pageSize int64) error {
	if v := c.String("from-beton"); strings.HasPrefix(v, "-") && v != storage.StdinLocation {
		return usageError("--from-beton %s: the flag takes the source beton, as in --from-beton SRC OUT.beton", v)
	}
	if err := needArgs(c, "OUT.beton"); err != nil {
		return err
	}
	for _, f := range imageFlags {
		if f != "restart-interval" && c.IsSet(f) {
			return usageError("--%s is for ImageFolder trees: --from-beton keeps every image's mode, size and pixels, and every other value", f)
		}
	}
	if c.IsSet("max-sample-size") {
		return usageError("--max-sample-size is for --from-stream")
	}
	ri := c.Int("restart-interval")
	if ri < 1 || ri > 1<<16-1 {
		return usageError("--restart-interval %d with --from-beton: want 1 to 65535 MCUs (a rewrite only adds restart markers; 0 would change nothing)", ri)
	}
	if c.IsSet("page-size") {
		wo := beton.WriterOptions{PageSize: pageSize}
		if err := wo.Validate(); err != nil {
			return usageError("--page-size: %v", err)
		}
	}
	if w := c.Int("workers"); w < 1 || w > 4096 {
		return usageError("--workers: want 1 to 4096, got %d", w)
	}
	src, err := srcArg(c.String("from-beton"))
	if err != nil {
		return usageError("--from-beton: %v", err)
	}
	if src == "" {
		return usageError("--from-beton: give the source beton (%s)", storage.Locations())
	}
	out := c.Args().Get(0)
	ctx := interrupt.Context(c.Context)

	octx, cancel := context.WithTimeout(ctx, cacheflags.OpenTimeout)
	source, f, err := pagecache.OpenBeton(octx, src, cacheflags.SourceOptions(c))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(out, err)
		}
		return cli.Exit(err.Error(), 1)
	}
	defer source.Close()
	opts := rewrite.Options{RestartInterval: ri, Workers: c.Int("workers"), Reader: source}
	if c.IsSet("page-size") {
		opts.PageSize = pageSize
	}
	var bar *progress.Bar
	opts.Progress = func(done, total int) {
		if bar == nil {
			bar = progress.New(os.Stderr, "write", int64(total), "samples")
		}
		bar.Set(int64(done))
	}
	dst, err := destination(ctx, c, out)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	res, err := rewrite.Rewrite(ctx, f, dst, opts)
	bar.Finish()
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(out, err)
		}
		return cli.Exit(fmt.Sprintf("%v; %s was not written", err, out), 1)
	}
	fmt.Print(rewriteSummary(out, res))
	return nil
}

// rewriteSummary is what write --from-beton prints when done.
func rewriteSummary(out string, res rewrite.Result) string {
	var b strings.Builder
	growth := 0.0
	if res.JPEGBytesIn > 0 {
		growth = 100 * float64(res.JPEGBytesOut-res.JPEGBytesIn) / float64(res.JPEGBytesIn)
	}
	fmt.Fprintf(&b, "%s: %d samples, %s of %s (%s); images: jpg %d, raw %d; %.0f samples/s\n",
		out, res.Samples, pages(res.Pages), bytesize.Format(res.PageSize), bytesize.Format(res.Bytes), res.JPEG, res.Raw,
		float64(res.Samples)/res.Elapsed.Seconds())
	if res.JPEG > 0 {
		fmt.Fprintf(&b, "restart markers about every %d MCUs: %d JPEGs transcoded, %d had them already, %d kept without; JPEG bytes %s → %s (%+.2f %%)\n",
			res.RestartInterval, res.Transcoded, res.HadRestarts, res.Kept,
			bytesize.Format(res.JPEGBytesIn), bytesize.Format(res.JPEGBytesOut), growth)
	}
	for _, k := range res.KeptSamples {
		fmt.Fprintf(&b, "  kept as it was: %s\n", k)
	}
	if more := res.Kept - len(res.KeptSamples); more > 0 {
		fmt.Fprintf(&b, "  and %d more kept as they were\n", more)
	}
	return b.String()
}
