package beton_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/ffcvfs/ffcvfs/beton"
)

// A beton of three samples, each a label and a blob of bytes, written and
// read back.
func ExampleCreate() {
	dir, err := os.MkdirTemp("", "beton-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tiny.beton")

	fields := []beton.Field{{Type: beton.TypeInt, Name: "label"}, {Type: beton.TypeBytes, Name: "blob"}}
	w, err := beton.Create(path, fields, 3, beton.WriterOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for i, s := range []string{"zero", "one", "two"} {
		if err := w.WriteSample([]beton.Value{{Int: int64(10 * i)}, {Data: []byte(s)}}); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	f, err := beton.OpenFile(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	fmt.Println(f.NumSamples(), "samples:", f.FieldNames())
	for i := range f.NumSamples() {
		blob, err := f.ReadData(i, 1, nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(f.Int(i, 0), string(blob))
	}
	// Output:
	// 3 samples: label, blob
	// 0 zero
	// 10 one
	// 20 two
}

// Open reads a beton from any io.ReaderAt: here one held in memory, as
// pagecache.OpenBeton does from a storage.Source.
func ExampleOpen() {
	gz, err := os.Open("../testdata/beton/imagefolder-jpg.beton.gz")
	if err != nil {
		log.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		log.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		log.Fatal(err)
	}

	f, err := beton.Open(bytes.NewReader(data), int64(len(data)), "imagefolder-jpg.beton")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(f.NumSamples(), "samples in", f.NumPages(), "pages:", f.FieldNames())
	img, err := f.Image(0, f.ImageField(""))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sample 0: label %d, a %dx%d image (%v)\n", f.Int(0, f.FieldIndex("label")), img.Width, img.Height, img.Mode)
	// Output:
	// 200 samples in 2 pages: image, label
	// sample 0: label 0, a 320x257 image (jpg)
}
