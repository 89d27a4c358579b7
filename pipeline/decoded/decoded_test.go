package decoded

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ffcvfs/ffcvfs/jpeg"
)

// planes returns a grayscale layout of n bytes and its data.
func planes(n int, fill byte) (jpeg.Planes, []byte) {
	return jpeg.Planes{W: n, H: 1, Comps: 1, PW: [3]int{n}, PH: [3]int{1}, HR: [3]int{1}, VR: [3]int{1}},
		bytes.Repeat([]byte{fill}, n)
}

func TestOptionsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{RAM: -1}, "must be 0 to"},
		{Options{RAM: MaxSize + 1}, "must be 0 to"},
		{Options{Disk: -5, Dir: t.TempDir()}, "must be 0 to"},
		{Options{Samples: -1}, "samples"},
		{Options{Disk: 1 << 20}, "needs a folder"},
		{Options{Disk: 1 << 20, Dir: filepath.Join(t.TempDir(), "missing")}, "no such file"},
		{Options{Disk: 1 << 20, Dir: file}, "is not a folder"},
	} {
		tier, err := New(c.o)
		if err == nil {
			tier.Close()
			t.Errorf("%+v: no error", c.o)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %q, want one line with %q", c.o, err, c.want)
		}
	}
}

// TestBounded: the tier never holds more than its sizes: an entry the size
// of the RAM fits, the next goes to disk until it is full, then none; ids
// out of range are refused; held entries read back as put.
func TestBounded(t *testing.T) {
	const n = 3000
	tier, err := New(Options{RAM: n, Disk: 2 * n, Dir: t.TempDir(), Samples: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	p, data := planes(n, 7)
	if tier.Full(3 * n) {
		t.Error("an empty tier of 3 entries' room says it is full")
	}
	for s, want := range []bool{true, true, true, false} {
		if got := tier.Put(s, p, data); got != want {
			t.Errorf("put %d: %v, want %v", s, got, want)
		}
	}
	if !tier.Full(1) {
		t.Error("a tier without room says it is not full")
	}
	big, bigData := planes(n+1, 1)
	if tier.Put(5, big, bigData) || tier.Room(n+1) {
		t.Error("an entry larger than any room was taken")
	}
	for _, s := range []int{-1, 10, 1 << 40} {
		if tier.Put(s, p, data) || tier.Held(s) {
			t.Errorf("sample %d out of range taken", s)
		}
		var buf []byte
		if _, _, ok := tier.Get(s, &buf); ok {
			t.Errorf("sample %d out of range read", s)
		}
	}
	st := tier.Stats()
	if st.RAMBytes != n || st.RAMImages != 1 || st.DiskBytes != 2*n || st.DiskImages != 2 || st.NotHeld != 2 {
		t.Errorf("%+v", st)
	}
	var buf []byte
	for s := range 3 {
		got, b, ok := tier.Get(s, &buf)
		if !ok || got != p || !bytes.Equal(b, data) {
			t.Errorf("sample %d: %v, %d bytes", s, ok, len(b))
		}
	}
}

// TestDiskDamage: an entry whose bytes on disk changed is a miss, counted
// and logged once, and is decoded from its JPEG from then on.
func TestDiskDamage(t *testing.T) {
	var log bytes.Buffer
	tier, err := New(Options{Disk: 1 << 20, Dir: t.TempDir(), Samples: 2, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	p, data := planes(4096, 9)
	if !tier.Put(1, p, data) {
		t.Fatal("not held")
	}
	if _, err := tier.disk.WriteAt([]byte{0}, 100); err != nil {
		t.Fatal(err)
	}
	var buf []byte
	for range 2 {
		if _, _, ok := tier.Get(1, &buf); ok {
			t.Fatal("a damaged entry was served")
		}
	}
	if st := tier.Stats(); st.Corrupt != 1 || st.DiskImages != 0 || st.Misses != 2 {
		t.Errorf("%+v", st)
	}
	if c := strings.Count(log.String(), "damaged"); c != 1 {
		t.Errorf("logged %d times:\n%s", c, log.String())
	}
}

// TestFullDisk: a disk that takes no more (a write fails) stops the disk
// tier's filling, said once; RAM and what was held stay.
func TestFullDisk(t *testing.T) {
	var log bytes.Buffer
	tier, err := New(Options{Disk: 1 << 20, Dir: t.TempDir(), Samples: 4, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tier.disk.Close()
	tier.disk = full
	p, data := planes(100, 1)
	for s := range 3 {
		if tier.Put(s, p, data) {
			t.Errorf("sample %d held on a full disk", s)
		}
	}
	if c := strings.Count(log.String(), "takes no more"); c != 1 {
		t.Errorf("logged %d times:\n%s", c, log.String())
	}
	if st := tier.Stats(); st.NotHeld != 3 || st.DiskImages != 0 {
		t.Errorf("%+v", st)
	}
}

// TestPacked: a RAM size of exactly the entries' bytes holds every entry,
// whatever their sizes and order: the size is reserved at once, and the
// entries packed without gaps.
func TestPacked(t *testing.T) {
	sizes := []int{300 << 10, 5, 70 << 20, 4096, 123457, 1 << 20, 33}
	total := 0
	for _, n := range sizes {
		total += n
	}
	tier, err := New(Options{RAM: int64(total), Samples: len(sizes)})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	for s, n := range sizes {
		p, data := planes(n, byte(s))
		if !tier.Put(s, p, data) {
			t.Fatalf("entry %d of %d bytes not held in a size of %d", s, n, total)
		}
	}
	var buf []byte
	for s, n := range sizes {
		_, b, ok := tier.Get(s, &buf)
		if !ok || len(b) != n || b[0] != byte(s) || b[n-1] != byte(s) {
			t.Errorf("entry %d: %v, %d bytes", s, ok, len(b))
		}
	}
	if !tier.Full(1) {
		t.Error("a tier packed to its size says it is not full")
	}
	if st := tier.Stats(); st.RAMBytes != int64(total) || st.RAMImages != int64(len(sizes)) {
		t.Errorf("%+v", st)
	}
}

// TestConcurrent: goroutines putting and getting the same samples at once
// (run with -race) hold each sample once, its bytes whole when read.
func TestConcurrent(t *testing.T) {
	const samples, n = 64, 5000
	tier, err := New(Options{RAM: samples / 2 * n, Disk: samples / 2 * n, Dir: t.TempDir(), Samples: samples,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for i := range 4 * samples {
				s := (i*7 + g) % samples
				p, data := planes(n, byte(s))
				tier.Put(s, p, data)
				if _, b, ok := tier.Get(s, &buf); ok && (len(b) != n || b[0] != byte(s) || b[n-1] != byte(s)) {
					t.Errorf("sample %d read back wrong", s)
					return
				}
			}
		}()
	}
	wg.Wait()
	if st := tier.Stats(); st.Filled != samples || st.RAMImages+st.DiskImages != samples {
		t.Errorf("%+v: want each of %d samples held once", st, samples)
	}
}
