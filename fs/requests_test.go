package fs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// readLikePython reads path whole the way CPython's open() and read() do:
// open, fstat, isatty (the TCGETS ioctl), reads until one returns 0, close.
func readLikePython(t *testing.T, path string) []byte {
	t.Helper()
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	var termios [64]byte
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TCGETS, uintptr(unsafe.Pointer(&termios[0]))); errno != syscall.ENOTTY {
		t.Fatalf("isatty(%s): %v, want ENOTTY", path, errno)
	}
	var out []byte
	buf := make([]byte, 1<<20)
	for {
		n, err := syscall.Read(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

// sampleBytes returns what sample file p must hold.
func sampleBytes(t *testing.T, v *View, s int) []byte {
	t.Helper()
	img, err := v.f.Image(s, v.image)
	if err != nil {
		t.Fatal(err)
	}
	data, err := v.f.ReadData(s, v.image, nil)
	if err != nil {
		t.Fatal(err)
	}
	if img.Mode == beton.ModeRaw {
		data = append([]byte(ppmHeader(img.Width, img.Height)), data...)
	}
	return data
}

// requestsPerFile reads every sample file whole, as Python does, and
// returns the FUSE requests that took, by opcode, divided by the files.
func requestsPerFile(t *testing.T, files []string, v *View) map[string]float64 {
	t.Helper()
	before := v.requests.Map()
	for i, p := range files {
		s, _ := v.SampleOf(i)
		if got := readLikePython(t, p); !bytes.Equal(got, sampleBytes(t, v, s)) {
			t.Fatalf("%s: %d bytes differ from sample %d's", p, len(got), s)
		}
	}
	out := map[string]float64{}
	for op, n := range v.requests.Map() {
		if d := n - before[op]; d > 0 {
			out[op] = float64(d) / float64(len(files))
		}
	}
	return out
}

// By default (zero-message opens, every page cached) a file read whole
// costs the IOCTL of isatty and one READ, then the IOCTL alone: no OPEN,
// RELEASE or FLUSH, no READ at EOF, and the kernel keeps what it read.
func TestRequestsPerFile(t *testing.T) {
	path := fixture(t, "imagefolder-mixed.beton")
	mnt, v := testMountPages(t, path, Options{}, 1<<20)
	if !v.noOpen.Load() {
		t.Fatalf("the kernel (FUSE %s) offered no zero-message opens", v.protocol)
	}
	files := sampleFiles(t, mnt) // lookups, once
	n := float64(len(files))
	first := requestsPerFile(t, files, v)
	// One OPEN and one FLUSH reach the mount, to be answered ENOSYS, and
	// none after.
	if first["open"]*n > 1 || first["flush"]*n > 1 || first["release"] != 0 || first["read"] != 1 || first["ioctl"] != 1 {
		t.Errorf("first read of every file: requests per file %v, want ioctl 1, read 1, no open, release or flush", first)
	}
	// On a writable mount a READ makes the kernel forget the file's atime;
	// this one is read-only (MS_RDONLY), so the kernel keeps it, and a
	// GETATTR comes at most once, when the attributes' timeout has passed.
	// The kernel keeps what it read, all but pages it drops of its own
	// accord: some machines reclaim cold clean page cache without memory
	// pressure (seen here: up to a tenth of the files re-read a page, with
	// nothing evicted or invalidated).
	second := requestsPerFile(t, files, v)
	if second["ioctl"] != 1 || second["getattr"] > 1 || second["read"] > 0.2 || second["open"]+second["flush"]+second["release"] != 0 {
		t.Errorf("second read of every file: requests per file %v, want ioctl 1, at most a getattr, next to no read; cache %+v",
			second, v.Stats().Cache)
	}
	third := requestsPerFile(t, files, v)
	if third["ioctl"] != 1 || third["getattr"] > second["read"] || third["read"] > 0.2 || third["open"]+third["flush"]+third["release"] != 0 {
		t.Errorf("third read of every file: requests per file %v, want ioctl 1, next to nothing else", third)
	}
	st := v.Stats()
	if !st.FUSE.NoOpen || !st.FUSE.NoFlush || st.FUSE.KernelCacheBytes <= 0 {
		t.Errorf("stats.json fuse: %+v", st.FUSE)
	}

	// The cache holds every page, so an announced order keeps the copies.
	if _, err := os.ReadFile(control.Path(mnt, control.OrdersDir, "quasi-random/0/0")); err != nil {
		t.Fatal(err)
	}
	if after := requestsPerFile(t, files, v); after["ioctl"] != 1 || after["read"] > 0.2 {
		t.Errorf("after an order was announced: requests per file %v, want ioctl 1, next to no read", after)
	}
}

// mountOnePage mounts a fixture of several pages with a cache of one, and
// lists its sample files.
func mountOnePage(t *testing.T) (string, *View, []string) {
	t.Helper()
	mnt, v := testMountPages(t, fixture(t, "imagefolder-mixed.beton"), Options{}, 1)
	if v.f.NumPages() < 2 {
		t.Fatalf("the fixture has %d pages; the test needs at least 2", v.f.NumPages())
	}
	return mnt, v, sampleFiles(t, mnt)
}

// With a cache smaller than the data, an announced order first drops every
// copy the kernel holds, so that each of its reads reaches the cache and
// its plan.
func TestAnnounceDropsKernelCopies(t *testing.T) {
	mnt, v, files := mountOnePage(t)
	requestsPerFile(t, files, v)
	if v.Stats().FUSE.KernelCacheBytes <= 0 {
		t.Fatalf("the kernel holds nothing after every file was read: %+v", v.Stats().FUSE)
	}
	if _, err := os.ReadFile(control.Path(mnt, control.OrdersDir, "quasi-random/0/0")); err != nil {
		t.Fatal(err)
	}
	if st := v.Stats(); st.FUSE.KernelCacheBytes != 0 {
		t.Errorf("after an order was announced, the kernel holds %d bytes of the files, want 0", st.FUSE.KernelCacheBytes)
	}
	if held := residentBytes(t, files); held != 0 {
		t.Errorf("after an order was announced, %d bytes of the files are in the kernel's page cache (mincore), want 0", held)
	}
	if after := requestsPerFile(t, files, v); after["read"] < 1 {
		t.Errorf("after an order was announced: requests per file %v, want a read of each", after)
	}
}

// Answering OPEN (as on a kernel without zero-message opens), a file read
// whole costs OPEN, the IOCTL of isatty, READ, the READ at EOF that direct
// I/O cannot spare, and RELEASE: no FLUSH.
func TestRequestsPerFileWithOpens(t *testing.T) {
	path := fixture(t, "imagefolder-mixed.beton")
	mnt, v := testMountPages(t, path, Options{Compat: Compat{Opens: true}}, 1<<20)
	if v.noOpen.Load() {
		t.Fatal("zero-message opens in use although switched off")
	}
	files := sampleFiles(t, mnt)
	n := float64(len(files))
	got := requestsPerFile(t, files, v)
	// RELEASE is sent after close returns, so the last may not have come.
	if got["open"] != 1 || got["release"] < 1-2/n || got["release"] > 1 || got["ioctl"] != 1 || got["read"] != 2 || got["flush"]*n > 1 {
		t.Errorf("requests per file %v, want open, ioctl and release 1, read 2, no flush", got)
	}
	if st := v.Stats(); st.FUSE.NoOpen || st.FUSE.KernelCacheBytes != -1 {
		t.Errorf("stats.json fuse: %+v", st.FUSE)
	}
}

// With the kernel features switched off, as on an older kernel, the files
// read the same, at the price of more requests.
func TestRequestsWithoutKernelFeatures(t *testing.T) {
	path := fixture(t, "imagefolder-mixed.beton")
	mnt, v := testMountPages(t, path, Options{Compat: Compat{Opens: true, Flush: true, SmallReads: true}}, 1<<20)
	if v.noOpen.Load() {
		t.Fatal("zero-message opens in use although not asked for")
	}
	files := sampleFiles(t, mnt)
	n := float64(len(files))
	first := requestsPerFile(t, files, v)
	// RELEASE is sent after close returns, so the last may not have come.
	if first["open"] != 1 || first["release"] < 1-2/n || first["release"] > 1 || first["flush"] != 1 || first["read"] < 1 {
		t.Errorf("requests per file %v, want open, release and flush 1, read at least 1", first)
	}
	for _, name := range []string{"stats.json", "orders/quasi-random/0/0"} {
		if _, err := os.ReadFile(control.Path(mnt, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The kernel keeps no more of the files than the cache holds: when a page
// is evicted, the kernel's copies of its samples are dropped, and reading
// them again reads the page again, byte for byte.
func TestKernelCopiesBudget(t *testing.T) {
	_, v, files := mountOnePage(t)
	budget := v.cache.Stats().BudgetBytes
	for round := 0; round < 3; round++ {
		for i := range files {
			j := (i*7 + round) % len(files) // pages in turn, evicted and loaded again
			s, _ := v.SampleOf(j)
			if got := readLikePython(t, files[j]); !bytes.Equal(got, sampleBytes(t, v, s)) {
				t.Fatalf("round %d: %s differs from sample %d", round, files[j], s)
			}
		}
	}
	st := v.Stats()
	if st.FUSE.Invalidations == 0 {
		t.Errorf("no kernel copies invalidated after %d evictions", st.Cache.Evictions)
	}
	// What the kernel holds, measured with mincore, drops to the budget
	// once the invalidations are sent (by a goroutine of their own).
	bound := budget + int64(len(files))*int64(os.Getpagesize()) // files end mid-page
	deadline := time.Now().Add(testenv.Patience)
	for {
		held := residentBytes(t, files)
		if held <= bound && v.kcopies.Bytes() <= budget {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kernel holds %d bytes of the files (tracked %d), the cache's budget is %d", held, v.kcopies.Bytes(), budget)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// residentBytes sums the bytes of the files that are in the kernel's page
// cache, from mincore over a mapping of each.
func residentBytes(t *testing.T, files []string) int64 {
	t.Helper()
	ps := int64(os.Getpagesize())
	var total int64
	for _, p := range files {
		fd, err := syscall.Open(p, syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil || st.Size == 0 {
			syscall.Close(fd)
			continue
		}
		m, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ, syscall.MAP_SHARED)
		syscall.Close(fd)
		if err != nil {
			t.Fatalf("mapping %s: %v", p, err)
		}
		vec := make([]byte, (st.Size+ps-1)/ps)
		_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
		syscall.Munmap(m)
		if errno != 0 {
			t.Fatalf("mincore %s: %v", p, errno)
		}
		for _, b := range vec {
			if b&1 != 0 {
				total += ps
			}
		}
	}
	return total
}

// A file larger than the kernel's default read-ahead (128 KiB) is read in
// one READ: the mount raises the window to the largest READ (root only).
func TestLargeFileOneRead(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, to set the mount's read-ahead in /sys/class/bdi")
	}
	path := filepath.Join(t.TempDir(), "large.beton")
	w, err := beton.Create(path, []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}, 4, beton.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 4 {
		data := make([]byte, 300<<10+i*4321)
		for j := range data {
			data[j] = byte(rnd.Uint32())
		}
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeJPEG, Width: 1, Height: 1, Data: data}, {Int: int64(i % 2)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mnt, v := testMountPages(t, path, Options{}, 1<<20)
	files := sampleFiles(t, mnt)
	if got := requestsPerFile(t, files, v); got["read"] != 1 {
		t.Errorf("files of 300 KiB and more: requests per file %v, want read 1", got)
	}
}
