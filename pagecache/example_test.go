package pagecache_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// A cache of at most two pages in front of a beton: each sample's bytes
// are read pinned, from the page (or the range of it) that holds them.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "pagecache-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tiny.beton")
	w, err := beton.Create(path, []beton.Field{{Type: beton.TypeBytes, Name: "text"}}, 3, beton.WriterOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range []string{"alpha", "beta", "gamma"} {
		if err := w.WriteSample([]beton.Value{{Data: []byte(s)}}); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	// Any location storage.Open takes: a path, s3://, http(s)://.
	src, f, err := pagecache.OpenBeton(ctx, path, storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	c, err := pagecache.New(src, f, pagecache.Options{Budget: 2 * f.PageSize()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, i := range []int{2, 0} {
		p, err := c.AcquireSample(ctx, i)
		if err != nil {
			log.Fatal(err)
		}
		ptr, size := f.Pointer(i, 0)
		fmt.Printf("sample %d: %s\n", i, p.Data[int64(ptr)-p.Off:][:size])
		p.Release()
	}
	// Output:
	// sample 2: gamma
	// sample 0: alpha
}
