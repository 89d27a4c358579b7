package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/cudafeed"
	"github.com/ffcvfs/ffcvfs/feed"
	"github.com/ffcvfs/ffcvfs/internal/interrupt"
	"github.com/ffcvfs/ffcvfs/internal/lifeline"
	"github.com/ffcvfs/ffcvfs/internal/metrics"
	"github.com/ffcvfs/ffcvfs/internal/profile"
	"github.com/ffcvfs/ffcvfs/internal/sockpath"
	"github.com/ffcvfs/ffcvfs/order"
	"github.com/ffcvfs/ffcvfs/pipeline"
)

// serveCommand is `ffcvfeed serve`: its flags are checked, the pipeline
// is opened, and package feed streams it to the socket's consumer.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "serve batches over a Unix socket and shared memory",
		UsageText: "ffcvfeed serve --data SRC|MOUNT --socket PATH [options]",
		Flags: append(pipelineFlags(),
			&cli.StringFlag{Name: "socket", Required: true, Usage: "the Unix socket `PATH` to serve on (created 0600; at most 107 bytes: /tmp/feed.sock, say)", Category: everyRun},
			&cli.IntFlag{Name: "slots", Value: 4, Usage: "batches in shared memory at once", Category: "output"},
			&cli.IntFlag{Name: "start-epoch", Usage: "resume: the first epoch to deliver (the client's Loader.state_dict() says which)", Category: "batches"},
			&cli.IntFlag{Name: "start-batch", Usage: "resume: the first batch of --start-epoch to deliver; the earlier ones are neither read nor announced", Category: "batches"},
			&cli.StringFlag{Name: "resume", Usage: "resume at another world size: the parts of --start-epoch read before, as `WORLDxPOSITION[,...]` (each of WORLD ranks took POSITION samples); this rank serves its share of the rest of the epoch (the client's Loader.resume_args() gives it)", Category: "batches"},
			&cli.StringFlag{Name: "mixture", Usage: "resume: the `FINGERPRINT` of the mixture of --data sources the state was saved under (the client's resume_args() gives it); another mixture's state is\n\trefused, or taken as --resume-changed says", Category: "batches"},
			&cli.StringFlag{Name: "resume-changed", Value: "refuse", Usage: "what a resume whose mixture changed (a weight, a source, --epoch-size, --seed) does: refuse, or new-epoch (start\n\t--start-epoch + 1 whole)", Category: "batches"},
			&cli.StringFlag{Name: "metrics-addr", Usage: metrics.FlagUsage, Category: "monitoring"},
			deviceFlag(),
		),
		Action: func(c *cli.Context) error {
			if os.Getenv(exitWithParentEnv) == "1" {
				// First thing, while the parent is the one that started
				// this server; the data is opened under this context too.
				var parentGone func() bool
				c.Context, parentGone = lifeline.WithParent(c.Context)
				defer removeOwnedFolder(parentGone, c.String("socket"))
			}
			dev, err := deliveryDevice(c)
			if err != nil {
				return err
			}
			stopProfiles, err := profile.StartLogged(slog.Default())
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			defer stopProfiles()
			if err := checkSocketPath(c.String("socket")); err != nil {
				return err
			}
			epochs, err := epochsFlag(c)
			if err != nil {
				return err
			}
			startEpoch, startBatch := c.Int("start-epoch"), c.Int("start-batch")
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
			if rc := c.String("resume-changed"); rc != "refuse" && rc != "new-epoch" {
				return cli.Exit(fmt.Sprintf("--resume-changed %q: want refuse or new-epoch", rc), 2)
			}
			if m := c.String("mixture"); c.IsSet("mixture") && !fingerprint.MatchString(m) {
				return cli.Exit(fmt.Sprintf("--mixture: %d bytes, not a mixture's fingerprint (16 hex digits, from the client's resume_args())", len(m)), 2)
			}
			fd, err := openPipeline(c)
			if err != nil {
				return err
			}
			defer fd.close()
			if startEpoch, startBatch, resumed, err = resumeMixture(c, fd.p, epochs, startEpoch, startBatch, resumed); err != nil {
				return err
			}
			// From here on a signal ends the stream through ctx, so that
			// the shared memory and the socket are removed on the way out.
			ctx := interrupt.Context(c.Context)
			opts := feed.Options{Socket: c.String("socket"), Slots: c.Int("slots"),
				Epochs: epochs, StartEpoch: startEpoch, StartBatch: startBatch, Resumed: resumed,
				WorldSize: c.Int("world-size"), BatchSize: c.Int("batch-size"), Mixture: fd.p.Fingerprint()}
			if dev.CUDA {
				opts.Device = func(r *cudafeed.Ring) (cudafeed.DeviceSlots, func() error, error) { return openDevice(dev, r) }
			}
			s, err := feed.New(fd.p, opts)
			var (
				full   *cudafeed.ShmFullError
				start  *feed.StartError
				resume *feed.ResumeError
			)
			switch {
			case errors.As(err, &full):
				return cli.Exit(fmt.Sprintf("%v: free space in %s, make it larger (in a container: docker run --shm-size, or Kubernetes' emptyDir of medium Memory), or lower --slots (%d) or --batch-size (%d)",
					err, full.Dir, c.Int("slots"), c.Int("batch-size")), 2)
			case errors.As(err, &start):
				flag := map[string]string{"StartEpoch": "--start-epoch", "StartBatch": "--start-batch"}[start.Option]
				return cli.Exit(fmt.Sprintf("%s %d: %s", flag, start.Value, start.Reason), 2)
			case errors.As(err, &resume):
				return cli.Exit("--resume: "+err.Error(), 1)
			case err != nil:
				return err
			}
			defer s.Close()
			if addr := c.String("metrics-addr"); addr != "" {
				ms, err := serveMetrics(addr, fd, s)
				if err != nil {
					return cli.Exit(err.Error(), 1)
				}
				defer ms.Close()
				slog.Info("serving metrics", "url", "http://"+ms.Addr()+"/metrics")
			}
			slog.Info("serving", "socket", opts.Socket, "shm", s.RingPath(), "device", dev, "batches_per_epoch", s.BatchesPerEpoch(), "epochs", epochs)
			return s.Run(ctx)
		},
	}
}

// checkSocketPath refuses a --socket path that cannot be listened on, with
// the fix, before the data is opened: a folder that does not exist, or is
// not a folder, and a path too long for a Unix socket.
func checkSocketPath(path string) error {
	if path == "" {
		return cli.Exit("--socket: give the path of the Unix socket to serve on, such as /tmp/feed.sock", 2)
	}
	if !sockpath.Fits(path) {
		return cli.Exit(fmt.Sprintf("--socket %s: the path is %d bytes long, and a Unix socket's may be at most %d: choose a shorter one, such as /tmp/feed.sock", path, len(path), sockpath.Max), 2)
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

// resumeMixture checks a resume against the mixture it was saved under
// (--mixture): the same mixture resumes as asked; another is refused, or
// with --resume-changed new-epoch starts the epoch after whole.
func resumeMixture(c *cli.Context, p *pipeline.Pipeline, epochs, startEpoch, startBatch int, resumed []order.Segment) (int, int, []order.Segment, error) {
	saved, now := c.String("mixture"), p.Fingerprint()
	resuming := startBatch != 0 || resumed != nil
	if !c.IsSet("mixture") || saved == now || !resuming {
		return startEpoch, startBatch, resumed, nil
	}
	if c.String("resume-changed") != "new-epoch" {
		return 0, 0, nil, cli.Exit(fmt.Sprintf("--mixture %s: the state was saved under another mixture of sources than this one (%s): a weight, a source, --epoch-size or --seed changed, "+
			"and the rest of its epoch is not this mixture's; start epoch %d whole with --resume-changed new-epoch, or resume with the sources and weights it was saved under",
			saved, orNone(now), startEpoch+1), 2)
	}
	if startEpoch+1 >= epochs {
		return 0, 0, nil, cli.Exit(fmt.Sprintf("--resume-changed new-epoch: the mixture changed in epoch %d, the last of --epochs %d: nothing is left to start", startEpoch, epochs), 2)
	}
	slog.Warn("the mixture of sources changed since the state was saved: starting the next epoch whole", "saved", saved, "now", orNone(now), "epoch", startEpoch+1)
	return startEpoch + 1, 0, nil, nil
}

// fingerprint is what a mixture's fingerprint looks like
// (order.Mixture.Fingerprint).
var fingerprint = regexp.MustCompile(`^[0-9a-f]{16}$`)

// orNone is a fingerprint, or "one source" for none.
func orNone(fp string) string {
	if fp == "" {
		return "one source"
	}
	return fp
}
