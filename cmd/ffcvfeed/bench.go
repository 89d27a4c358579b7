package main

import (
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/pipeline"
)

// benchCommand is `ffcvfeed bench`: the pipeline with no consumer, its
// images/s by epoch.
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

// decodeBenchCommand is `ffcvfeed decode-bench`: every JPEG of a beton
// decoded in full and nothing else, the baseline of ffcvfeed bench.
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
