package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/version"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/pipeline"
	"github.com/ffcvfs/ffcvfs/resize"
)

// versionCommand is `ffcvfeed version`, which --version does too.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit, the Go toolchain of this build and the paths its C code takes on this CPU",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("version takes no arguments", 2)
			}
			fmt.Print(versionReport())
			return nil
		},
	}
}

// versionReport is version.String with the paths the C code takes on
// this CPU (decoding, resizing, converting to batches).
func versionReport() string {
	return version.String("ffcvfeed", fmt.Sprintf("on this CPU: jpeg %s, resize %s, convert %s",
		jpeg.CPUPath(), resize.CPUPath(), pipeline.CPUPath()))
}
