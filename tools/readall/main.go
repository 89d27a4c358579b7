// Command readall reads every file under a folder with N parallel readers
// and prints files/s and MB/s: the baseline and the measurement of
// scripts/bench.sh mount.
//
//	go run ./tools/readall -j 4 DIR
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	jobs := flag.Int("j", 1, "parallel readers")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: readall [-j N] DIR\nReads every regular file under DIR (in sorted order, split among N readers) and prints files/s and MB/s.")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *jobs < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var files []string
	err := filepath.WalkDir(flag.Arg(0), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "readall:", err)
		os.Exit(1)
	}
	sort.Strings(files)
	var next, bytes atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Bool
	start := time.Now()
	for range *jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for {
				i := next.Add(1) - 1
				if i >= int64(len(files)) {
					return
				}
				f, err := os.Open(files[i])
				if err != nil {
					fmt.Fprintln(os.Stderr, "readall:", err)
					failed.Store(true)
					continue
				}
				for {
					n, err := f.Read(buf)
					bytes.Add(int64(n))
					if err != nil {
						break
					}
				}
				f.Close()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	fmt.Printf("%d files %d bytes %.0f files/s %.1f MB/s\n", len(files), bytes.Load(), float64(len(files))/el, float64(bytes.Load())/1e6/el)
	if failed.Load() {
		os.Exit(1)
	}
}
