package rewrite_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/rewrite"
)

// discard is a Destination that keeps the head and the bytes written, for
// an output to check.
type discard struct {
	head, body bytes.Buffer
}

func (d *discard) Reserve(n int64) error       { return nil }
func (d *discard) Write(p []byte) (int, error) { return d.body.Write(p) }
func (d *discard) Commit(head []byte) error    { d.head.Write(head); return nil }
func (d *discard) Abort() error                { return nil }
func (d *discard) Name() string                { return "discard" }
func (d *discard) bytes() []byte               { return append(d.head.Bytes(), d.body.Bytes()...) }

// FuzzRewrite patches a small beton anywhere (its header, descriptors,
// metadata, allocation table, names index or pages: patches of
// {u32 offset, u8 length, bytes}) and rewrites what opens: no panic, no
// hang, and an output that opens and verifies whenever the rewrite
// succeeds.
func FuzzRewrite(f *testing.F) {
	// A small beton of every kind the rewrite handles: 6 samples of 2 MiB
	// pages (JPEG and raw images, ints, floats, names, JSON, bytes).
	base, err := os.ReadFile(source(f, 6, beton.MinPageSize, []int{5, 0, 1, 4, 2, 3}, func(i int) bool { return i == 4 }))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{})
	f.Add(binary.LittleEndian.AppendUint32(nil, 8) /* the header's sample count */)
	f.Add(append(binary.LittleEndian.AppendUint32(nil, uint32(len(base)-24)), 8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F))
	f.Add(append(binary.LittleEndian.AppendUint32(nil, uint32(beton.MinPageSize+100)), 4, 0, 0, 0, 0))
	f.Add(append(binary.LittleEndian.AppendUint32(nil, 100), 16, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF))
	f.Fuzz(func(t *testing.T, patches []byte) {
		b := bytes.Clone(base)
		for len(patches) >= 5 {
			off := int(binary.LittleEndian.Uint32(patches) % uint32(len(b)))
			n := min(int(patches[4]), len(patches)-5)
			copy(b[off:], patches[5:5+n])
			patches = patches[5+n:]
		}
		src, err := beton.Open(bytes.NewReader(b), int64(len(b)), "fuzz.beton")
		if err != nil {
			return
		}
		var d discard
		if _, err := rewrite.Rewrite(context.Background(), src, &d, rewrite.Options{Workers: 2}); err != nil {
			return
		}
		out := d.bytes()
		g, err := beton.Open(bytes.NewReader(out), int64(len(out)), "rewritten.beton")
		if err != nil {
			t.Fatalf("the rewrite of an opened beton does not open: %v", err)
		}
		if errs := beton.Verify(g, beton.VerifyOptions{}); len(errs) > 0 {
			// A source that verifies must give an output that does.
			if len(beton.Verify(src, beton.VerifyOptions{})) == 0 {
				t.Fatalf("a verified source rewrote to a beton that does not verify: %v", errs)
			}
		}
	})
}
