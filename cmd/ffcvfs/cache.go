package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/ffcvfs/ffcvfs/pagecache/tier"
)

func cacheCommand() *cli.Command {
	return &cli.Command{
		Name:  "cache",
		Usage: "list or clear a --disk-cache folder",
		Description: `A --disk-cache folder holds one subfolder per version of each object mounted
with it (a new ETag, or a new size or modification time, is a new version;
a mount removes the older versions of its object that no process uses).

Examples:
   ffcvfs cache ls /nvme/ffcvfs-cache
   ffcvfs cache rm /nvme/ffcvfs-cache            # every version not in use
   ffcvfs cache rm --id 3f2a9c0d1e4b5a67 /nvme/ffcvfs-cache`,
		Subcommands: []*cli.Command{
			{
				Name:      "ls",
				Usage:     "list what a disk cache folder holds",
				ArgsUsage: "DIR",
				Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
				Action: func(c *cli.Context) error {
					if err := needArgs(c, "DIR"); err != nil {
						return err
					}
					fs, err := tier.List(c.Args().First())
					if err != nil {
						return cli.Exit(err.Error(), 1)
					}
					if c.Bool("json") {
						enc := json.NewEncoder(os.Stdout)
						enc.SetIndent("", "  ")
						return enc.Encode(fs)
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
					fmt.Fprintln(w, "ID\tSOURCE\tPAGES\tSIZE\tWRITTEN\tIN USE")
					var total int64
					for _, f := range fs {
						use := ""
						if f.InUse {
							use = "yes"
						}
						fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\t%s\n", f.ID, f.Source, f.Entries, f.Pages, bytesize.Format(f.Bytes), f.Modified.Format("2006-01-02 15:04"), use)
						total += f.Bytes
					}
					w.Flush()
					fmt.Printf("%d versions, %s\n", len(fs), bytesize.Format(total))
					return nil
				},
			},
			{
				Name:      "rm",
				Usage:     "remove cached pages (every version no mount uses, or --id)",
				ArgsUsage: "DIR",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "id", Usage: "remove only the version `ID` (from ffcvfs cache ls)"}},
				Action: func(c *cli.Context) error {
					if err := needArgs(c, "DIR"); err != nil {
						return err
					}
					n, err := tier.Remove(c.Args().First(), c.String("id"))
					fmt.Printf("freed %s\n", bytesize.Format(n))
					if err != nil {
						return cli.Exit(err.Error(), 1)
					}
					return nil
				},
			},
		},
	}
}
