package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/storage"
)

// openBeton opens SRC (a path, file://, s3:// or http(s)://) for a command
// that only reads it. The caller closes the returned file.
func openBeton(c *cli.Context, src string) (*beton.File, io.Closer, error) {
	source, f, err := openSource(c.Context, c, src)
	if err != nil {
		return nil, nil, err
	}
	return f, source, nil
}

// sourceFlags are the flags that say how to reach a source.
func sourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "s3-endpoint", Usage: "S3 endpoint `URL` (default: AWS, or $AWS_ENDPOINT_URL)", Category: "storage"},
		&cli.StringFlag{Name: "s3-region", Usage: "S3 region (default: $AWS_REGION or the AWS config)", Category: "storage"},
		&cli.BoolFlag{Name: "s3-path-style", Usage: "address S3 buckets by path (most servers other than AWS need it)", Category: "storage"},
		&cli.DurationFlag{Name: "attempt-timeout", Value: storage.DefaultAttemptTimeout, Usage: "S3, HTTP: cancel and retry a request that receives nothing for this long", Category: "storage"},
		&cli.DurationFlag{Name: "read-deadline", Value: storage.DefaultReadDeadline, Usage: "S3, HTTP: give up a read of the storage, retries included, after this long (a mount answers EIO)", Category: "storage"},
	}
}

// sourceOptions turns the flags of sourceFlags into Options.
func sourceOptions(c *cli.Context) storage.Options {
	o := storage.Options{
		Logger:   slog.Default(),
		Endpoint: c.String("s3-endpoint"), Region: c.String("s3-region"), PathStyle: c.Bool("s3-path-style"),
		AttemptTimeout: c.Duration("attempt-timeout"), ReadDeadline: c.Duration("read-deadline"),
	}
	if r := c.Int("readers"); r > 0 {
		o.Concurrent = r + 16 // the prefetches, and demand reads
	}
	return o
}

// srcArg returns the SRC argument, read from standard input when it is
// "-" (storage.StdinLocation), so that a presigned URL need not appear on
// the command line.
func srcArg(src string) (string, error) {
	if src != storage.StdinLocation {
		return src, nil
	}
	return storage.ReadLocation(os.Stdin)
}
