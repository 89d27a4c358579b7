package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/fs"
	"github.com/ffcvfs/ffcvfs/fs/transport"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/internal/metrics"
	"github.com/ffcvfs/ffcvfs/internal/profile"
	"github.com/ffcvfs/ffcvfs/internal/readfile"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
	"github.com/urfave/cli/v2"
)

func mountCommand() *cli.Command {
	return &cli.Command{
		Name:      "mount",
		Usage:     "mount a .beton read-only as an ImageFolder tree",
		ArgsUsage: "SRC MOUNTPOINT",
		Description: `Serves SRC (` + storage.Locations() + `) at MOUNTPOINT as
<class>/<sample>.jpg (or .ppm for raw images), read-only, in the foreground
until Ctrl-C, SIGTERM or 'ffcvfs umount MOUNTPOINT' (with --background, it
returns once mounted and the mount runs on). At Ctrl-C or SIGTERM, files
still open are served until they are closed, up to --stop-grace. Any program
reads it; for torchvision:

   ImageFolder("MOUNTPOINT")

The beton is read into a cache of --cache-size bytes. Give the cache the
order you will read in, and it fetches ahead what that order needs: use
QuasiRandomSampler (each page read from storage about once per epoch) or
RandomSampler (a uniform shuffle, as shuffle=True) of the Python package
ffcvfs (pip install ./python in this repository), read an order from
MOUNTPOINT/.ffcvfs/orders/KIND/SEED/EPOCH, or send your own to the socket
MOUNTPOINT/.ffcvfs/announce (one sample id a line; the mount answers
"ok N" or "error: ..."). MOUNTPOINT/.ffcvfs/stats.json shows what
the cache does ('ffcvfs stats MOUNTPOINT' shows it live, --metrics-addr
serves it to Prometheus); MOUNTPOINT/.ffcvfs/dataset.beton is the whole file.

A miss reads the sample's whole page when the page's other samples will be
read while it stays cached (an announced quasi-random or sequential order,
or reads that keep to pages), and only the sample's bytes otherwise (a
random order): pages and such ranges share --cache-size. Along an announced
order, random included, up to --readers requests prefetch what the order
reads next, as far ahead as --cache-size allows. stats.json counts the
requests (per epoch too), pages and ranges.

--disk-cache DIR keeps the pages read from storage on a local disk as well,
within --disk-cache-size: later epochs, and later mounts of the same object,
read them from there. --compress-ram stores most of --cache-size compressed,
which holds about twice the pages of raw pixels (not of JPEG).

Failed storage requests are retried until --read-deadline. A read that
still fails returns EIO to its reader alone, is counted in stats.json
(reads.errors) and logged once per cause; the mount stays up.

The mount runs its Go code on as few cores as its load needs (GOMAXPROCS,
unless set in the environment): a FUSE request costs the least CPU on
one, and the cores are left to the programs reading the mount. It starts
on one for a file, and for S3 and HTTP(S) on one per 8 cores (from 1 to
8): random reads from network storage cost a GET per image. While they
are all busy it doubles them, up to half the machine's cores, and halves
them again once its load fits in half for 2 seconds; stats.json says how
many it runs on (fuse.gomaxprocs).

FFCVFS_CPUPROFILE=FILE writes a CPU profile of the mount to FILE (for go
tool pprof) when it ends; FFCVFS_MUTEXPROFILE=FILE and FFCVFS_BLOCKPROFILE=FILE
the time its goroutines waited for locks, and were blocked.

SRC '-' reads SRC from the first line of standard input, so that a URL
holding a secret (a presigned one) appears in no command line, which every
local user can read: ffcvfs mount - /mnt/train < url.txt

S3 credentials, region and endpoint come from the usual AWS environment
variables and files (AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_REGION,
AWS_ENDPOINT_URL, ~/.aws/config) unless given below.

Examples:
   ffcvfs mount train.beton /mnt/train
   ffcvfs mount --background --classes classes.txt s3://bucket/train.beton /mnt/train
   ffcvfs mount --s3-endpoint http://127.0.0.1:7070 s3://bucket/train.beton /mnt/train`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "cache-size", Value: "512MiB", Usage: "RAM for cached pages, rounded down to whole pages (e.g. 256MiB, 2GiB)", Category: "cache"},
			&cli.IntFlag{Name: "readers", Value: pagecache.DefaultReaders, Usage: "the most requests in flight ahead of the readers (pages, or ranges of samples); the link's bandwidth × its latency over the size of a sample is about what fills it", Category: "cache"},
			&cli.StringFlag{Name: "inflight", Usage: "the most bytes of requests in flight ahead of the readers (default: 4 pages, at least 8MiB); about twice the link's bandwidth × latency fills it", Category: "cache"},
			&cli.BoolFlag{Name: "pages-only", Usage: "read whole pages on every miss, never the bytes of single samples (ranges); by default ranges serve random orders that pages would not", Category: "cache"},
			&cli.DurationFlag{Name: "plan-lease", Value: 10 * time.Minute, Usage: "withdraw an announced order when none of its samples was read for this long (its reader stalled); an order is also withdrawn as soon as the process that announced it exits", Category: "cache"},
			&cli.BoolFlag{Name: "kernel-cache", Usage: "let the kernel keep what it read of the files as long as it likes (RAM beyond --cache-size); by default its copies are dropped with the cache's pages", Category: "cache"},
			&cli.StringFlag{Name: "classes", Usage: "class folder names, one per line in label order, from `FILE` (e.g. from ffcvfs write --classes-out)", Category: "view"},
			&cli.BoolFlag{Name: "no-file-names", Usage: "name files <class>/<sample id>.jpg even when the beton keeps its files' paths (ffcvfs write --keep-names);\n\tby default such a beton mounts as the tree it was written from, folders and names", Category: "view"},
			&cli.StringFlag{Name: "image-field", Usage: "the RGB image field to serve (default: the first one)", Category: "view"},
			&cli.StringFlag{Name: "label-field", Value: "label", Usage: "the int field that makes the classes", Category: "view"},
			&cli.IntFlag{Name: "order-batch-size", Value: 256, Usage: "batch size that sets the window of quasi-random orders under .ffcvfs/orders", Category: "view"},
			&cli.StringFlag{Name: "metrics-addr", Usage: metrics.FlagUsage, Category: "monitoring"},
			&cli.BoolFlag{Name: "background", Usage: "return once mounted, and serve the mount from a process in the background; it logs to this standard error\n\tuntil mounted, then to --log-file (or nowhere), so that it holds no terminal or pipe of the shell; stop it with ffcvfs umount", Category: "mount"},
			&cli.StringFlag{Name: "log-file", Usage: "append the mount's log to `FILE` (created 0600; not a symbolic link) instead of standard error", Category: "mount"},
			&cli.BoolFlag{Name: "allow-other", Usage: "let other users read the mount (needs user_allow_other in /etc/fuse.conf)", Category: "mount"},
			&cli.BoolFlag{Name: "debug-fuse", Usage: "log every FUSE request", Category: "mount"},
			&cli.DurationFlag{Name: "stop-grace", Value: 30 * time.Second, Usage: "at Ctrl-C or SIGTERM, serve the files programs still have open until they close them, for at most this long; then their reads fail (ENOTCONN)", Category: "mount"},
			&cli.StringFlag{Name: "fuse-compat", Usage: "do without kernel features, as on an older kernel; comma-separated: opens (answer OPEN, read files with direct I/O, instead of zero-message opens), flush (answer FLUSH at every close), small-reads (READs of 128 KiB, not 1 MiB); for kernels without these features and for comparisons", Category: "mount"},
		}, append(append(cacheflags.Flags("cache"), cacheflags.PeerFlags("peers")...), sourceFlags()...)...),
		Action: runMount,
	}
}

// mountProcs is the mount's GOMAXPROCS unless the environment sets one:
// 1 for a file, and for network storage one per 8 cores, from 1 to 8.
// With more than one P the runtime wakes a spare thread for the requests
// the netpoller hands over (transport.Server), more thread switches per request:
// a file's FUSE requests cost least on one. Random reads from network
// storage cost about a GET of CPU per image, so one core caps them at a
// few thousand images a second; a node with many cores can feed more, and
// spends a small share of them doing so.
func mountProcs(network bool, cpus int) int {
	if !network {
		return 1
	}
	return min(max(cpus/8, 1), 8)
}

func runMount(c *cli.Context) error {
	if err := needArgs(c, "SRC", "MOUNTPOINT"); err != nil {
		return err
	}
	src, err := srcArg(c.Args().Get(0))
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if c.Bool("background") && os.Getenv(readyFDEnv) == "" {
		return startBackground(src, c.Args().Get(0) == storage.StdinLocation)
	}
	mnt := c.Args().Get(1)
	logFile, err := mountLog(c.String("log-file"))
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if logFile != nil {
		defer logFile.Close()
	}
	if os.Getenv("GOMAXPROCS") == "" {
		base := mountProcs(storage.IsNetwork(src), runtime.NumCPU())
		runtime.GOMAXPROCS(base)
		stop := make(chan struct{})
		defer close(stop)
		go followLoad(base, runtime.NumCPU(), stop)
	}
	// Profiles of the whole mount, for go tool pprof, when asked for.
	stopProfiles, err := profile.StartLogged(slog.Default())
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer stopProfiles()
	metricsAddr := c.String("metrics-addr")
	if metricsAddr != "" {
		if _, err := metrics.ListenAddr(metricsAddr); err != nil {
			return usageError("%v", err)
		}
	}
	if err := transport.CheckFUSE(); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if err := transport.CheckMountpoint(mnt); err != nil {
		return cli.Exit(err.Error(), 1)
	}
	compat, err := fs.ParseCompat(c.String("fuse-compat"))
	if err != nil {
		return usageError("--fuse-compat: %v", err)
	}
	var classes []string
	if p := c.String("classes"); p != "" {
		if classes, err = readLines(p); err != nil {
			return cli.Exit(err.Error(), 1)
		}
	}
	var inflight int64
	if v := c.String("inflight"); v != "" {
		if inflight, err = bytesize.Parse(v); err != nil || inflight <= 0 {
			return usageError("--inflight: want a positive size such as 8MiB, got %q", v)
		}
	}
	data, err := cacheflags.Open(c, src, pagecache.Options{Readers: c.Int("readers"), InflightBytes: inflight, PagesOnly: c.Bool("pages-only")})
	if err != nil {
		return err
	}
	defer data.Close()
	source, f, cache := data.Source, data.File, data.Cache
	opts := fs.Options{
		ImageField: c.String("image-field"), LabelField: c.String("label-field"),
		Classes: classes, NoFileNames: c.Bool("no-file-names"), KernelCache: c.Bool("kernel-cache"), OrderBatchSize: c.Int("order-batch-size"),
		Compat: compat, PlanLease: c.Duration("plan-lease"), RequestTimes: metricsAddr != "",
	}
	localPath := ""
	if !strings.Contains(src, "://") || strings.HasPrefix(src, "file://") {
		localPath = strings.TrimPrefix(src, "file://")
		if st, err := os.Stat(localPath); err == nil {
			opts.Mtime = st.ModTime()
		}
	}
	view, err := fs.NewView(cache, opts)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	defer view.Close()
	// Metrics first: once the mount is visible, it can be scraped.
	if metricsAddr != "" {
		reg, err := metrics.NewRegistry(append(view.Collectors(), metrics.Cache("ffcvfs", cache, source))...)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		ms, err := metrics.Serve(metricsAddr, reg, slog.Default())
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		defer ms.Close()
		slog.Info("serving metrics", "url", "http://"+ms.Addr()+"/metrics")
	}
	// The handler goes in before the mount is visible: a signal the moment
	// it serves must unmount it, not kill the process with it mounted. One
	// that comes sooner waits in sigs for the mount to be up.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	srv, err := fs.Mount(mnt, view, fs.MountOptions{FsName: source.Name(), AllowOther: c.Bool("allow-other"), Debug: c.Bool("debug-fuse"), SourcePath: localPath})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	st := cache.Stats()
	slog.Info("mounted", "source", source.Name(), "mountpoint", mnt, "pid", os.Getpid(), "samples", f.NumSamples(), "classes", len(view.Classes()),
		"pages", f.NumPages(), "cache_pages", st.Slots, "cache", bytesize.Format(st.BudgetBytes))
	if signalReady() {
		// Started by --background, whose parent has returned: let go of
		// its standard error, which may be a pipe that a shell waits on.
		if err := detachStderr(logFile); err != nil {
			slog.Warn("the mount keeps the standard error it was started with", "err", err)
		}
	}
	go stopOnSignal(sigs, srv, source, mnt, c.Duration("stop-grace"))
	srv.Wait()
	slog.Info("unmounted", "mountpoint", mnt)
	return nil
}

func readLines(path string) ([]string, error) {
	fh, _, err := readfile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading class names: %w", err)
	}
	defer fh.Close()
	var out []string
	sc := bufio.NewScanner(fh) // a line of at most 64 KiB
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), "\r"); line != "" {
			if len(out) > maxClassNames {
				return nil, fmt.Errorf("%s: more than %d class names; labels go up to %d at most", path, maxClassNames, maxClassNames-1)
			}
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading class names from %s: %w", path, err)
	}
	return out, nil
}

// maxClassNames bounds a --classes file: a name per label, and labels are
// at most 2^24.
const maxClassNames = 1<<24 + 1

func umountCommand() *cli.Command {
	return &cli.Command{
		Name:      "umount",
		Usage:     "unmount a mount made by ffcvfs mount",
		ArgsUsage: "MOUNTPOINT",
		Description: `Unmounts MOUNTPOINT. While programs hold files or folders of it, the
unmount fails and names them; --lazy then detaches the mount at once (no new
path resolves) and it goes once they are closed. This also clears a mount
whose process was killed.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "lazy", Aliases: []string{"z"}, Usage: "detach now, even while files are open (fusermount3 -u -z)"},
		},
		Action: func(c *cli.Context) error {
			if err := needArgs(c, "MOUNTPOINT"); err != nil {
				return err
			}
			unmount := transport.Unmount
			if c.Bool("lazy") {
				unmount = transport.UnmountLazy
			}
			if err := unmount(c.Args().First()); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			return nil
		},
	}
}

// stopOnSignal unmounts at the first signal. While programs have files of
// the mount open, the unmount fails (EBUSY): the mount is then detached,
// so that no new path resolves, and the files still open are served, from
// the cache and from storage, until they are closed, for at most grace.
// Then the connection is aborted: their reads fail with ENOTCONN, and the
// server ends. A second signal ends the process at once.
func stopOnSignal(sigs <-chan os.Signal, srv *transport.Server, source storage.Source, mnt string, grace time.Duration) {
	sig := <-sigs
	slog.Info("unmounting", "signal", sig.String(), "mountpoint", mnt)
	err := srv.Unmount()
	if err == nil {
		return
	}
	slog.Warn("files of the mount are still open: detached it, and serving them until they are closed", "grace", grace, "err", err)
	if err := transport.UnmountLazy(mnt); err != nil {
		slog.Error("detaching the mount failed", "err", err)
	}
	served := make(chan struct{})
	go func() { srv.Wait(); close(served) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-served:
	case <-t.C:
		slog.Warn("--stop-grace is over: aborting the mount; reads of the files still open fail with ENOTCONN", "grace", grace)
		srv.Abort()
		// A read waiting on storage would hold the server up until its
		// deadline.
		source.Close()
	case sig = <-sigs:
		slog.Warn("second signal: exiting with files still open", "signal", sig.String())
		os.Exit(1)
	}
}
