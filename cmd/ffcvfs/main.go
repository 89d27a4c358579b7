// Command ffcvfs converts ImageFolder trees to .beton files, inspects and
// verifies them, and mounts them read-only as ImageFolder trees.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:  "ffcvfs",
		Usage: "FFCV .beton datasets as plain ImageFolder trees",
		Description: `ffcvfs writes, inspects and verifies .beton files, the paged dataset format of
FFCV, and mounts them read-only as ImageFolder trees that unchanged code reads.

Examples:
   ffcvfs write --max-resolution 512 ~/data/imagenet/train train.beton
   ffcvfs info train.beton
   ffcvfs verify --all train.beton
   ffcvfs mount --cache-size 1GiB s3://bucket/train.beton /mnt/train
   ffcvfs stats /mnt/train`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "log debugging detail to stderr"},
		},
		Before: func(c *cli.Context) error {
			level := slog.LevelInfo
			if c.Bool("verbose") {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
			return nil
		},
		Commands:        []*cli.Command{writeCommand(), infoCommand(), verifyCommand(), mountCommand(), umountCommand(), statsCommand(), cacheCommand()},
		HideHelpCommand: true,
		ExitErrHandler: func(c *cli.Context, err error) {
			if err == nil {
				return
			}
			if ec, ok := err.(cli.ExitCoder); ok {
				if msg := ec.Error(); msg != "" {
					fmt.Fprintln(os.Stderr, "ffcvfs:", msg)
				}
				os.Exit(ec.ExitCode())
			}
			fmt.Fprintln(os.Stderr, "ffcvfs:", err)
			os.Exit(1)
		},
	}
	if err := app.Run(os.Args); err != nil {
		app.ExitErrHandler(nil, err)
	}
}

// usageError is a mistake in how the command was called: exit status 2.
func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), 2)
}

// needArgs checks the number of positional arguments.
func needArgs(c *cli.Context, names ...string) error {
	if c.NArg() != len(names) {
		for _, a := range c.Args().Slice() {
			if strings.HasPrefix(a, "-") {
				return usageError("flags go before the arguments: %q comes after them (see ffcvfs %s --help)", a, c.Command.Name)
			}
		}
		return usageError("%s needs %d argument(s): %v, got %d (see ffcvfs %s --help)", c.Command.Name, len(names), names, c.NArg(), c.Command.Name)
	}
	return nil
}
