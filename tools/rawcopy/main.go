// Command rawcopy is the limit of `scripts/bench.sh cifar`: the least work
// any loader of a beton of fixed-size raw images must do. It reads the
// beton into memory (from the OS page cache) and, epoch after epoch, copies
// every image in a random order into uint8 batches, mirroring half of them,
// with plain loops on -workers goroutines, and prints images/s per epoch
// as ffcvfeed bench does.
//
//	go run ./tools/rawcopy -data cifar.beton [-workers 2] [-batch-size 512] [-epochs 3]
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
)

func main() {
	data := flag.String("data", "", "beton of raw images of one size")
	workers := flag.Int("workers", 2, "goroutines")
	batch := flag.Int("batch-size", 512, "images per batch")
	epochs := flag.Int("epochs", 3, "epochs")
	flag.Parse()
	if err := run(*data, *workers, *batch, *epochs); err != nil {
		fmt.Fprintln(os.Stderr, "rawcopy:", err)
		os.Exit(1)
	}
}

func run(path string, workers, batch, epochs int) error {
	if workers < 1 || batch < 1 || epochs < 1 {
		return fmt.Errorf("-workers, -batch-size and -epochs must be positive")
	}
	f, err := beton.OpenFile(path)
	if err != nil {
		return err
	}
	defer f.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	n := f.NumSamples()
	offs := make([]uint64, n)
	var w, h int
	for s := range n {
		img, err := f.Image(s, 0)
		if err != nil {
			return err
		}
		if img.Mode != beton.ModeRaw || s > 0 && (img.Width != w || img.Height != h) {
			return fmt.Errorf("sample %d: want raw images of one size", s)
		}
		w, h, offs[s] = img.Width, img.Height, img.Ptr
	}
	per, row := w*h*3, w*3
	for e := range epochs {
		rng := rand.New(rand.NewPCG(1, uint64(e)))
		order := rng.Perm(n)
		start := time.Now()
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, batch*per)
				r := rand.New(rand.NewPCG(2, uint64(e)))
				for b := range next {
					for j, s := range order[b:min(n, b+batch)] {
						src, dst := raw[offs[s]:offs[s]+uint64(per)], buf[j*per:(j+1)*per]
						if r.IntN(2) == 0 {
							copy(dst, src)
							continue
						}
						for y := range h {
							for x := range w {
								copy(dst[y*row+3*x:y*row+3*x+3], src[y*row+3*(w-1-x):])
							}
						}
					}
				}
			}()
		}
		for b := 0; b < n; b += batch {
			next <- b
		}
		close(next)
		wg.Wait()
		el := time.Since(start).Seconds()
		fmt.Printf("epoch %d: rawcopy: %d images in %.2f s: %.0f images/s\n", e, n, el, float64(n)/el)
	}
	return nil
}
