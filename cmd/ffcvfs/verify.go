package main

import (
	"fmt"
	"os"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/progress"
	"github.com/urfave/cli/v2"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "check a .beton against every rule of the format",
		ArgsUsage: "SRC",
		Description: `Checks the header, field descriptors, metadata and allocation table, then
reads every data page once: every value has its allocation inside one page,
raw images have height×width×3 bytes, every JPEG has a frame header matching
its stored size, JSON values are valid. Exits 0 when the file is sound, 1 with
the problem(s) otherwise.

Examples:
   ffcvfs verify train.beton
   ffcvfs verify --all train.beton     # list every problem, not just the first`,
		Flags: append(sourceFlags(),
			&cli.BoolFlag{Name: "all", Usage: "report every problem instead of stopping at the first"},
		),
		Action: func(c *cli.Context) error {
			if err := needArgs(c, "SRC"); err != nil {
				return err
			}
			src, err := srcArg(c.Args().First())
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			f, closer, err := openBeton(c, src)
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			defer closer.Close()
			bar := progress.New(os.Stderr, "verify", int64(f.NumPages()), "pages")
			errs := beton.Verify(f, beton.VerifyOptions{All: c.Bool("all"), Progress: func(done, _ int) { bar.Set(int64(done)) }})
			bar.Finish()
			if len(errs) == 0 {
				fmt.Printf("%s: OK: %d samples, %d fields, %s\n", src, f.NumSamples(), len(f.Fields()), pages(f.NumPages()))
				return nil
			}
			for _, e := range errs {
				fmt.Fprintln(os.Stderr, e)
			}
			return cli.Exit(fmt.Sprintf("%s: %d problem(s) found", src, len(errs)), 1)
		},
	}
}
