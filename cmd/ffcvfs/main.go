// Command ffcvfs converts ImageFolder trees to .beton files, inspects and
// verifies them, and mounts them read-only as ImageFolder trees.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/clihelp"
	"github.com/ffcvfs/ffcvfs/internal/hangup"
	"github.com/ffcvfs/ffcvfs/internal/version"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/resize"
)

// A mount takes SIGHUP from its start (it re-reads a peers
// file on it, or logs that it has nothing to re-read), so that one sent
// before it is set up does not end it and leave a dead mountpoint.
var _ = hangup.ForCommand(os.Args[1:], "mount")

func main() {
	setVersionFlag("ffcvfs")
	app := &cli.App{
		Name:    "ffcvfs",
		Version: version.Release,
		Usage:   "FFCV .beton datasets as plain ImageFolder trees",
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
			slog.SetDefault(slog.New(slog.NewTextHandler(logOutput, &slog.HandlerOptions{Level: level})))
			return nil
		},
		Commands:        []*cli.Command{writeCommand(), infoCommand(), verifyCommand(), mountCommand(), umountCommand(), statsCommand(), cacheCommand(), versionCommand("ffcvfs")},
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
	clihelp.Apply(app)
	if err := app.Run(os.Args); err != nil {
		app.ExitErrHandler(nil, err)
	}
}

// setVersionFlag makes --version print the whole version report (the
// release, the commit, the toolchain) and take no -v, which is --verbose.
func setVersionFlag(program string) {
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version and exit"}
	cli.VersionPrinter = func(*cli.Context) { fmt.Print(versionReport(program)) }
}

// versionReport is version.String with the paths the C code of ffcvfs
// write takes on this CPU.
func versionReport(program string) string {
	return version.String(program, fmt.Sprintf("on this CPU: jpeg %s, resize %s", jpeg.CPUPath(), resize.CPUPath()))
}

// versionCommand is `PROGRAM version`, which --version does too.
func versionCommand(program string) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, the commit, the Go toolchain of this build and the paths its C code takes on this CPU",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError("version takes no arguments")
			}
			fmt.Print(versionReport(program))
			return nil
		},
	}
}

// logOutput is where the log goes: standard error, unless a mount's
// --log-file sends it elsewhere (see mountLog).
var logOutput = &switchWriter{w: os.Stderr}

// switchWriter writes to a writer that may be replaced while loggers that
// hold it write.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// set makes w the writer.
func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
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
