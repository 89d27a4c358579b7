package main

import (
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/beton"
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
	}
}

func runQuiet(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
