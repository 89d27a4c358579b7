// Command mkscanbeton writes a .beton with many tiny samples, for timing
// directory scans over a mount (scripts/bench.sh scan): N samples in C
// classes, sample i of class i mod C, each image the same few bytes. The
// files' contents do not matter to a scan, only their names and number.
//
//	go run ./tools/mkscanbeton -n 1281167 -classes 1000 -out scan.beton
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/imagefolder"
	"github.com/ffcvfs/ffcvfs/jpeg"
)

func main() {
	n := flag.Int("n", 1281167, "samples")
	classes := flag.Int("classes", 1000, "classes")
	out := flag.String("out", "", "the .beton to write")
	flag.Parse()
	if *out == "" || *n <= 0 || *classes <= 0 {
		fmt.Fprintln(os.Stderr, "usage: mkscanbeton -n N -classes C -out FILE")
		os.Exit(2)
	}
	if err := write(*out, *n, *classes); err != nil {
		fmt.Fprintln(os.Stderr, "mkscanbeton:", err)
		os.Exit(1)
	}
}

func write(out string, n, classes int) error {
	w, err := beton.Create(out, imagefolder.Fields(false), n, beton.WriterOptions{})
	if err != nil {
		return err
	}
	// Enough for a name and a size.
	img := jpeg.Stub()
	for i := range n {
		err := w.WriteSample([]beton.Value{
			{Mode: beton.ModeJPEG, Width: 1, Height: 1, Data: img},
			{Int: int64(i % classes)},
		})
		if err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}
