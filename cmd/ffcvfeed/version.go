package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/version"
)

// versionCommand is `ffcvfeed version`, which --version does too.
func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit and the Go toolchain of this build",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit("version takes no arguments", 2)
			}
			fmt.Print(version.String("ffcvfeed"))
			return nil
		},
	}
}
