// Command ffcvfeed reads a beton (directly or through an ffcvfs mount),
// decodes and augments its images, and delivers finished batches to a
// training process of any framework through shared memory and a Unix
// socket (packages pipeline, feed and cudafeed, and the Loader of the
// Python package ffcvfs in python/ffcvfs/feed.py). Each command has a file:
// serve.go, bench.go (bench and decode-bench), version.go; flags.go and
// augment.go read the pipeline's flags, data.go opens what they name.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/clihelp"
	"github.com/ffcvfs/ffcvfs/internal/hangup"
	"github.com/ffcvfs/ffcvfs/internal/version"
	"github.com/ffcvfs/ffcvfs/storage"
)

// A feed server takes SIGHUP from its start (it re-reads a
// peers file on it, or logs that it has nothing to re-read).
var _ = hangup.ForCommand(os.Args[1:], "serve")

func main() {
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
	cli.VersionPrinter = func(*cli.Context) { fmt.Print(versionReport()) }
	app := &cli.App{
		// --data is given once per source, whole: a location may hold a
		// comma.
		DisableSliceFlagSeparator: true,
		Name:                      "ffcvfeed",
		Version:                   version.Release,
		Usage:                     "decode, augment and deliver training batches from a .beton to any framework",
		Description: `ffcvfeed serve reads a beton (` + storage.Locations() + `, or an ffcvfs mount),
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
		// The log in the mount's format: key=value text on standard error.
		Before: func(*cli.Context) error {
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
			return nil
		},
		// Every error, an exit code's too, is one line naming the program.
		ExitErrHandler: func(c *cli.Context, err error) {
			if err == nil {
				return
			}
			code := 1
			if ec, ok := err.(cli.ExitCoder); ok {
				code = ec.ExitCode()
			}
			if msg := err.Error(); msg != "" {
				fmt.Fprintln(os.Stderr, "ffcvfeed:", msg)
			}
			os.Exit(code)
		},
	}
	clihelp.Apply(app)
	if err := app.Run(os.Args); err != nil {
		app.ExitErrHandler(nil, err)
	}
}
