package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/ffcvfs/ffcvfs/internal/readfile"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/bytesize"
	"github.com/urfave/cli/v2"
)

func infoCommand() *cli.Command {
	return &cli.Command{
		Name:      "info",
		Usage:     "show a .beton's header, fields, pages and image statistics",
		ArgsUsage: "SRC",
		Description: `Reads only the header, field descriptors, metadata and allocation table
(no sample data), so it is fast even on large files.

Examples:
   ffcvfs info train.beton
   ffcvfs info --samples 5 train.beton
   ffcvfs info --json train.beton | jq .images`,
		Flags: append(sourceFlags(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON instead of text"},
			&cli.IntFlag{Name: "samples", Usage: "also show the first `N` samples' values"},
		),
		Action: func(c *cli.Context) error {
			if err := needArgs(c, "SRC"); err != nil {
				return err
			}
			if c.Int("samples") < 0 {
				return usageError("--samples must be ≥ 0, got %d", c.Int("samples"))
			}
			src, err := srcArg(c.Args().First())
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			f, closer, err := openBeton(c, src)
			if err != nil {
				return reportSchemaOnFailure(src, err)
			}
			defer closer.Close()
			s := beton.Summarize(f)
			n := min(c.Int("samples"), f.NumSamples())
			samples := make([][]beton.NamedValue, n)
			for i := range samples {
				samples[i] = f.Describe(i)
			}
			if c.Bool("json") {
				out := struct {
					beton.Summary
					Samples [][]beton.NamedValue `json:"samples,omitempty"`
				}{s, samples}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			printSummary(os.Stdout, s)
			for i, vals := range samples {
				var parts []string
				for _, v := range vals {
					b, _ := json.Marshal(v.Value)
					parts = append(parts, fmt.Sprintf("%s=%s", v.Name, b))
				}
				fmt.Printf("sample %d: %s\n", i, strings.Join(parts, " "))
			}
			return nil
		},
	}
}

// reportSchemaOnFailure prints what can still be read of a file Open
// refused (e.g. one with custom fields) and returns the error.
func reportSchemaOnFailure(src string, err error) error {
	if fh, size, ferr := readfile.Open(strings.TrimPrefix(src, "file://")); ferr == nil {
		defer fh.Close()
		if s, serr := beton.ReadSchema(fh, size, src); serr == nil {
			fmt.Fprintf(os.Stderr, "%s: version %d, %d samples, page size %s; fields:\n", src, s.Header.Version, s.Header.NumSamples, bytesize.Format(int64(s.Header.PageSize)))
			for _, fd := range s.Fields {
				fmt.Fprintf(os.Stderr, "  %-16s %s\n", fd.Name, fd.Type)
			}
		}
	}
	return cli.Exit(err.Error(), 1)
}

func printSummary(out io.Writer, s beton.Summary) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s (%s)\n", s.File, bytesize.Format(s.Size))
	fmt.Fprintf(tw, "version\t%d\n", s.Version)
	fmt.Fprintf(tw, "samples\t%d\n", s.NumSamples)
	fmt.Fprintf(tw, "page size\t%s\n", bytesize.Format(int64(s.PageSize)))
	fmt.Fprintf(tw, "pages\t%d data pages from page %d; %s of data\n", s.Pages, s.FirstPage, bytesize.Format(int64(s.DataBytes)))
	fmt.Fprintf(tw, "record size\t%d bytes\n", s.RecordSize)
	fmt.Fprintf(tw, "alloc table\t%d entries at %d\n", s.AllocEntries, s.AllocTablePtr)
	if s.NamesIndex > 0 {
		fmt.Fprintf(tw, "file names\tkept (%s index before the alloc table): the mount serves the tree it was written from\n", bytesize.Format(int64(s.NamesIndex)))
	}
	tw.Flush()
	fmt.Fprintln(out, "\nfields:")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  name\ttype\tid\toffset\targuments")
	for _, fd := range s.Fields {
		args := ""
		if fd.DType != "" {
			args = fmt.Sprintf("shape %v dtype %s", fd.Shape, fd.DType)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\n", fd.Name, fd.Type, fd.TypeID, fd.Offset, args)
	}
	tw.Flush()
	if s.Pages > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "pages:\tmin\tmedian\tmean\tmax")
		fmt.Fprintf(tw, "  bytes used\t%s\t%s\t%s\t%s\t(%.1f%% of page size on average)\n",
			bytesize.Format(int64(s.BytesPerPage.Min)), bytesize.Format(int64(s.BytesPerPage.Median)),
			bytesize.Format(int64(s.BytesPerPage.Mean)), bytesize.Format(int64(s.BytesPerPage.Max)),
			100*s.BytesPerPage.Mean/float64(s.PageSize))
		fmt.Fprintf(tw, "  samples\t%.0f\t%.0f\t%.1f\t%.0f\n", s.SamplesPerPage.Min, s.SamplesPerPage.Median, s.SamplesPerPage.Mean, s.SamplesPerPage.Max)
		tw.Flush()
	}
	for _, im := range s.Images {
		fmt.Fprintf(out, "\nimage field %q: jpg %d, raw %d", im.Field, im.Modes["jpg"], im.Modes["raw"])
		if im.Errors > 0 {
			fmt.Fprintf(out, ", %d unreadable (run ffcvfs verify)", im.Errors)
		}
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  \tmin\tmedian\tmean\tmax")
		for _, r := range []struct {
			name string
			st   beton.Stats
		}{{"width", im.Width}, {"height", im.Height}, {"bytes", im.Bytes}} {
			fmt.Fprintf(tw, "  %s\t%.0f\t%.0f\t%.1f\t%.0f\n", r.name, r.st.Min, r.st.Median, r.st.Mean, r.st.Max)
		}
		tw.Flush()
	}
}
