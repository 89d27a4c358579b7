package storage_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ffcvfs/ffcvfs/storage"
)

// Open takes a path, file://, s3://bucket/key or http(s):// URL; each is a
// Source of ranged reads with a context.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "storage-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "data.bin")
	if err := os.WriteFile(path, []byte("0123456789abcdef"), 0o600); err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	src, err := storage.Open(ctx, path, storage.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	buf := make([]byte, 6)
	n, err := src.ReadAt(ctx, buf, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(src.Size(), "bytes; at 10:", string(buf[:n]))

	_, err = storage.Open(ctx, filepath.Join(dir, "missing.beton"), storage.Options{})
	fmt.Println(err != nil)
	// Output:
	// 16 bytes; at 10: abcdef
	// true
}
