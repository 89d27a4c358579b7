package fs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/fs/transport"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// FuzzMountedBeton mounts mutated betons and reads them whole: every
// class folder, every sample file, dataset.beton and stats.json. A mutant
// may be refused (at open, or by the view), and a read may fail with EIO
// for its own sample; nothing may panic or hang, and every read that
// succeeds returns exactly the bytes the beton holds for that sample, as
// an independent reading of the mutant (beton.Open) finds them.
//
// The seed corpus (run by every go test) mutates each region of the
// format: header, field descriptors, the metadata table, the allocation
// table, and data. go test -fuzz FuzzMountedBeton ./fs explores further.
func FuzzMountedBeton(f *testing.F) {
	base, err := os.ReadFile(testenv.Fixture(f, "beton", "imagefolder-mixed.beton"))
	if err != nil {
		f.Fatal(err)
	}
	bf, err := beton.Open(bytes.NewReader(base), int64(len(base)), "base")
	if err != nil {
		f.Fatal(err)
	}
	meta := beton.HeaderSize + beton.DescriptorSize*len(bf.Fields())
	alloc := int(binary.LittleEndian.Uint64(base[16:]))
	rec := bf.RecordLayout().RecordSize
	seeds := []struct {
		off   int
		val   uint64
		width uint8
	}{
		{0, 1, 1}, {8, 0, 8}, {8, 1 << 40, 8}, {16, 0, 8}, {16, uint64(len(base)) + 7, 8}, {24, 1, 8}, {32, 3, 8},
		{beton.HeaderSize, 0xff, 1}, {beton.HeaderSize + 1, 0, 1}, {beton.HeaderSize + beton.DescriptorSize - 1, 0xff, 1},
		{meta, 0xff, 1}, {meta + 1, 0xffff, 2}, {meta + 3, 0, 2}, {meta + 5, 12345, 8}, {meta + 5 + rec*9, 1 << 62, 8},
		{meta + rec*17 + rec - 8, 1 << 24, 8}, {meta + rec*33 + rec - 8, 1<<63 + 5, 8}, {meta + rec*50, 0, 8},
		{alloc, 199, 8}, {alloc + 8, 0, 8}, {alloc + 16, 0, 8}, {alloc + 16, 1 << 30, 8}, {alloc + 24*7 + 8, uint64(alloc), 8},
		{alloc + 24*12, 1 << 33, 8}, {alloc + 24*100 + 16, 3, 8}, {len(base) - 1, 0x55, 1},
		{1 << 21, 0, 8}, {1<<21 + 2, 0xffff, 2}, {1<<21 + 4096, 0xdeadbeef, 4}, {3 << 20, 0, 8},
	}
	for _, s := range seeds {
		f.Add(uint32(s.off), s.val, s.width)
	}
	f.Fuzz(func(t *testing.T, off uint32, val uint64, width uint8) {
		data := bytes.Clone(base)
		o := int(off) % len(data)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], val)
		copy(data[o:], b[:int(width%8)+1])
		mountAndReadAll(t, data)
	})
}

// mountAndReadAll mounts data as a beton in this process, unless it is
// refused, and reads it whole, checking what FuzzMountedBeton promises.
func mountAndReadAll(t *testing.T, data []byte) {
	t.Helper()
	if err := transport.CheckFUSE(); err != nil {
		testenv.Missing(t, "FUSE: %v", err)
	}
	path := filepath.Join(t.TempDir(), "mutant.beton")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src, bf, err := pagecache.OpenBeton(t.Context(), path, storage.Options{})
	if err != nil {
		return // refused at open
	}
	defer src.Close()
	c, err := pagecache.New(src, bf, pagecache.Options{Budget: 2 * bf.PageSize(), Readers: 2})
	if err != nil {
		return
	}
	defer c.Close()
	v, err := NewView(c, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return // refused by the view: no image field, bad labels, …
	}
	defer v.Close()
	mnt := t.TempDir()
	srv, err := Mount(mnt, v, MountOptions{FsName: path, SourcePath: path})
	if err != nil {
		t.Fatalf("mounting a beton the view took: %v", err)
	}
	defer func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	// The oracle: the mutant read independently of the mount.
	of, err := beton.Open(bytes.NewReader(data), int64(len(data)), path)
	if err != nil {
		t.Fatalf("the mount took a beton that beton.Open refuses: %v", err)
	}
	classes, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatalf("listing the mount: %v", err)
	}
	files := 0
	for _, cl := range classes {
		ents, err := os.ReadDir(filepath.Join(mnt, cl.Name()))
		if err != nil {
			t.Fatalf("listing %s: %v", cl.Name(), err)
		}
		for _, e := range ents {
			files++
			p := filepath.Join(mnt, cl.Name(), e.Name())
			got, err := os.ReadFile(p)
			if err != nil {
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("%s: %v, want the bytes or EIO", p, err)
				}
				continue
			}
			if want := mutantSample(t, of, v.image, e.Name()); !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes served, the beton holds %d others", p, len(got), len(want))
			}
		}
	}
	if files != of.NumSamples() {
		t.Errorf("%d files for %d samples", files, of.NumSamples())
	}
	if got, err := os.ReadFile(control.Path(mnt, control.DatasetFile)); err == nil && !bytes.Equal(got, data) {
		t.Errorf("dataset.beton: %d bytes, differ from the file's %d", len(got), len(data))
	} else if err != nil && !errors.Is(err, syscall.EIO) {
		t.Errorf("dataset.beton: %v", err)
	}
	if _, err := os.ReadFile(control.Path(mnt, control.StatsFile)); err != nil {
		t.Errorf("stats.json: %v", err)
	}
}

// mutantSample returns the content of the sample file named name (ID.jpg
// or ID.ppm) as f holds it.
func mutantSample(t *testing.T, f *beton.File, field int, name string) []byte {
	t.Helper()
	id, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSuffix(name, ".jpg"), ".ppm"))
	if err != nil {
		t.Fatalf("file name %q", name)
	}
	img, err := f.Image(id, field)
	if err != nil {
		t.Fatalf("%s was served, but its image is an error: %v", name, err)
	}
	b, err := f.ReadData(id, field, nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if img.Mode == beton.ModeRaw {
		return append([]byte(fmt.Sprintf("P6\n%d %d\n255\n", img.Width, img.Height)), b...)
	}
	return b
}
