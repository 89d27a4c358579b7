package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/fields"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/profile"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/pipeline/decoded"
)

// benchCommand is `ffcvfeed bench`: the pipeline with no consumer, its
// images/s by epoch.
func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "run the pipeline with no consumer and print images/s",
		UsageText: "ffcvfeed bench --data SRC|MOUNT [options]",
		Flags: append(pipelineFlags(),
			&cli.BoolFlag{Name: "checksum", Usage: "print a SHA-256 of every batch delivered, in epoch and batch order (each field's bytes of the batch's samples): the same data, order and seed give the same sum on every build and CPU, with --exact", Category: "output"}),
		Action: func(c *cli.Context) error {
			fd, err := openPipeline(c)
			if err != nil {
				return err
			}
			defer fd.close()
			p := fd.p
			discard, err := pipeline.NewDiscardSink(p, 4)
			if err != nil {
				return err
			}
			defer discard.Close()
			var sink pipeline.Sink = discard
			var sums *checksumSink
			if c.Bool("checksum") {
				sums = &checksumSink{DiscardSink: discard, specs: p.Fields(), sums: map[[2]int][32]byte{}}
				sink = sums
			}
			stopProfiles, err := profile.StartLogged(slog.Default())
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			defer stopProfiles()
			total, start, cpu0 := 0, time.Now(), profile.CPUTime()
			rs := startRunStats()
			var last decoded.Stats
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
				if fd.decoded != nil {
					st := fd.decoded.Stats()
					fmt.Printf("epoch %d: decoded-image cache: %d hits, %d misses (%d not held); holds %d images, %s (%d bytes) in RAM, %d images, %s on disk\n",
						e, st.Hits-last.Hits, st.Misses-last.Misses, st.NotHeld-last.NotHeld, st.RAMImages, bytesize.Format(st.RAMBytes), st.RAMBytes,
						st.DiskImages, bytesize.Format(st.DiskBytes))
					last = st
				}
			}
			el := time.Since(start).Seconds()
			cpu := (profile.CPUTime() - cpu0).Seconds()
			fmt.Printf("total: ffcvfeed bench: %d images in %.2f s: %.0f images/s (errors %d); CPU %.2f s, %.3f ms an image\n",
				total, el, float64(total)/el, p.Errors.Load(), cpu, 1e3*cpu/float64(max(total, 1)))
			fmt.Println(rs.line(total, max(c.Int("workers"), 1)))
			if j := p.JPEGs.Load(); j > 0 {
				fmt.Printf("restart markers: %d of %d JPEGs decoded had them\n", p.Restarts.Load(), j)
			}
			if sums != nil {
				fmt.Printf("checksum: sha256 %s (%d batches)\n", sums.sum(), len(sums.sums))
			}
			for i, s := range fd.sources {
				st, f := s.Cache.Stats(), s.Cache.File()
				fmt.Printf("source %d: %s: %d pages and %d ranges read (%d bytes; it has %d pages)\n", i, f.Name(), st.PagesRead, st.RangesRead, st.BytesRead, f.NumPages())
			}
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
		UsageText: "ffcvfeed decode-bench --data SRC [--workers N] [--passes N] [--entropy-decoder libjpeg|ffcvfeed]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Required: true, Usage: "the beton"},
			&cli.IntFlag{Name: "workers", Value: runtime.NumCPU(), DefaultText: "the cores", Usage: "`N` decoding goroutines (GOMAXPROCS is at least N+1 unless set)"},
			&cli.StringFlag{Name: "entropy-decoder", Value: "libjpeg", Usage: "`NAME` that entropy-decodes the JPEGs: libjpeg (libjpeg-turbo's own: the baseline) or ffcvfeed (the\n\tpipeline's)"},
			&cli.IntFlag{Name: "passes", Value: 1, Usage: "decode every JPEG `N` times (1 to 1000), for a figure over more images than the beton holds"},
		},
		Action: func(c *cli.Context) error {
			passes := c.Int("passes")
			if passes < 1 || passes > 1000 {
				return cli.Exit(fmt.Sprintf("--passes %d: want 1 to 1000", passes), 2)
			}
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
			for range passes {
				for _, b := range jpegs {
					next <- b
				}
			}
			close(next)
			for w := 0; w < workers; w++ {
				if err := <-done; err != nil {
					return err
				}
			}
			el := time.Since(start).Seconds()
			n := len(jpegs) * passes
			fmt.Printf("decode-only: %d images in %.2f s: %.0f images/s\n", n, el, float64(n)/el)
			return nil
		},
	}
}

// checksumSink hashes each batch as it is published (batches come in any
// order), for bench --checksum.
type checksumSink struct {
	*pipeline.DiscardSink
	specs []fields.Spec

	mu   sync.Mutex
	sums map[[2]int][32]byte // by epoch and batch
}

// Publish hashes the batch's bytes, field by field: the samples' rows of
// fixed-size fields, the filled part of variable-size ones.
func (s *checksumSink) Publish(slot, epoch, batch, size int) error {
	bufs := s.Buffers(slot)
	h := sha256.New()
	ends := map[string]int{}
	for i, spec := range s.specs {
		if spec.Ends != "" {
			continue
		}
		per := fields.DTypes[spec.DType]
		for _, d := range spec.Shape[1:] {
			per *= d
		}
		n := min(size*per, len(bufs[i]))
		h.Write(bufs[i][:n])
		if spec.DType == "int64" && len(spec.Shape) == 1 && size > 0 {
			ends[spec.Name] = int(binary.LittleEndian.Uint64(bufs[i][8*(size-1):]))
		}
	}
	for i, spec := range s.specs {
		if spec.Ends != "" {
			n := min(ends[spec.Ends]*fields.DTypes[spec.DType], len(bufs[i]))
			h.Write(bufs[i][:max(n, 0)])
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	s.mu.Lock()
	s.sums[[2]int{epoch, batch}] = sum
	s.mu.Unlock()
	return s.DiscardSink.Publish(slot, epoch, batch, size)
}

// sum is the SHA-256 of the batches' sums in epoch and batch order.
func (s *checksumSink) sum() string {
	keys := make([][2]int, 0, len(s.sums))
	for k := range s.sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	h := sha256.New()
	for _, k := range keys {
		v := s.sums[k]
		h.Write(v[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}
