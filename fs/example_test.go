package fs_test

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/ffcvfs/ffcvfs/fs"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// A beton mounted as an ImageFolder tree in a folder of one's own, read as
// any program reads it, and unmounted: what ffcvfs mount does, in a Go
// program. Mounting needs FUSE (/dev/fuse, and fusermount3 unless root).
func ExampleMount() {
	dir, err := os.MkdirTemp("", "fs-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := unpack(dir, "imagefolder-jpg.beton")

	ctx := context.Background()
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
	v, err := fs.NewView(c, fs.Options{Classes: []string{"ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay"}})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		log.Fatal(err)
	}
	srv, err := fs.Mount(mnt, v, fs.MountOptions{FsName: path, SourcePath: path})
	if err != nil {
		log.Fatal(err)
	}

	classes, _ := os.ReadDir(mnt)
	files, _ := os.ReadDir(filepath.Join(mnt, "bee"))
	jpeg, err := os.ReadFile(filepath.Join(mnt, "bee", files[0].Name()))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(classes), "classes; bee holds", len(files), "files; the first,", files[0].Name()+",", "starts with", fmt.Sprintf("% x", jpeg[:3]))
	if err := srv.Unmount(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 10 classes; bee holds 20 files; the first, 020.jpg, starts with ff d8 ff
}

// unpack unpacks testdata/beton/NAME.gz into dir.
func unpack(dir, name string) string {
	in, err := os.Open(filepath.Join("..", "testdata", "beton", name+".gz"))
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		log.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		log.Fatal(err)
	}
	if err := out.Close(); err != nil {
		log.Fatal(err)
	}
	return filepath.Join(dir, name)
}
