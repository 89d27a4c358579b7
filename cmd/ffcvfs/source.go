package main

import (
	"context"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/cacheflags"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// openBeton opens SRC (any location storage.Open takes) for a command
// that only reads it. The caller closes the returned file.
func openBeton(c *cli.Context, src string) (*beton.File, io.Closer, error) {
	ctx, cancel := context.WithTimeout(c.Context, cacheflags.OpenTimeout)
	defer cancel()
	source, f, err := pagecache.OpenBeton(ctx, src, cacheflags.SourceOptions(c))
	if err != nil {
		return nil, nil, err
	}
	return f, source, nil
}

// sourceFlags are the flags that say how to reach a source, in the
// category every command of ffcvfs lists them under.
func sourceFlags() []cli.Flag { return cacheflags.SourceFlags("storage") }

// srcArg returns the SRC argument, read from standard input when it is
// "-" (storage.StdinLocation), so that a presigned URL need not appear on
// the command line.
func srcArg(src string) (string, error) {
	if src != storage.StdinLocation {
		return src, nil
	}
	return storage.ReadLocation(os.Stdin)
}
