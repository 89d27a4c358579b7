//go:build linux

package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// writeTestFile writes size random bytes to a new file in dir, synced and
// dropped from the kernel page cache.
func writeTestFile(t testing.TB, dir string, size int, seed uint64) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i+8 <= len(data); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			data[i+j] = byte(v >> (8 * j))
		}
	}
	for i := size &^ 7; i < size; i++ {
		data[i] = byte(rng.Uint32())
	}
	f, err := os.CreateTemp(dir, "source-*.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	dropFileCache(t, f.Name())
	return f.Name(), data
}

// dropFileCache drops a file's pages from the kernel page cache.
func dropFileCache(t testing.TB, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// cachedPages returns how many of a file's pages the kernel page cache
// holds (mincore on a mapping of the file), and how many pages it has.
func cachedPages(t testing.TB, path string) (cached, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() == 0 {
		return 0, 0
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	ps := os.Getpagesize()
	vec := make([]byte, (len(mem)+ps-1)/ps)
	// x/sys/unix of this module's version has no Mincore wrapper.
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)),
		uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	for _, v := range vec {
		if v&1 != 0 {
			cached++
		}
	}
	return cached, len(vec)
}

func isTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}

// diskDir returns a folder on a real disk for test files: $FFCVFS_BENCH_DIR,
// else the temporary folder unless it is tmpfs, else the folder that holds
// the repository.
func diskDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("FFCVFS_BENCH_DIR"); d != "" {
		return d
	}
	if !isTmpfs(os.TempDir()) {
		return os.TempDir()
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Dir(dir)
		}
		if dir == filepath.Dir(dir) {
			return wd
		}
	}
}

func tempDiskDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp(diskDir(t), "ffcvfs-source-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var fileModes = []struct {
	name string
	opts Options
}{
	{"fadvise", Options{}},
	{"direct", Options{DirectIO: true}},
	{"kernel-cache", Options{KernelCache: true}},
}

// randomReads checks many reads of src against data: random offsets and
// lengths (aligned and not, small and spanning several bounce buffers, at
// and across the end), into buffers aligned and not.
func randomReads(t *testing.T, src Source, data []byte, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	size := int64(len(data))
	arena := make([]byte, 3*bounceSize+3*directAlign) // page-aligned, being large
	buf := func(n, skew int) []byte { return arena[skew : skew+n] }
	type read struct {
		off  int64
		n    int
		skew int
	}
	reads := []read{
		{0, int(size), 0},
		{0, 1, 0},
		{size - 1, 1, 0},
		{size - 1, 10, 7},
		{size, 10, 0},
		{size + 5000, 10, 0},
		{size &^ (directAlign - 1), directAlign, 0},
		{(size &^ (directAlign - 1)) - directAlign, 3 * directAlign, 0},
		{directAlign, 2 * directAlign, 0},
		{directAlign, 2 * directAlign, 1},
		{directAlign + 1, 2*directAlign - 2, 1},
		{3, bounceSize + 5, 3},
		{0, 2*bounceSize + directAlign, 0},
		{10, 0, 0},
	}
	for range 300 {
		r := read{off: rng.Int64N(size + 1), skew: rng.IntN(2) * rng.IntN(directAlign)}
		switch rng.IntN(4) {
		case 0:
			r.off &^= directAlign - 1
			r.n = (1 + rng.IntN(64)) * directAlign
		case 1:
			r.n = 1 + rng.IntN(2*directAlign)
		default:
			r.n = 1 + rng.IntN(2*bounceSize+directAlign)
		}
		reads = append(reads, r)
	}
	for _, r := range reads {
		if r.off < 0 {
			continue
		}
		if r.n > len(arena)-r.skew {
			r.n = len(arena) - r.skew
		}
		checkReadAt(t, src, data, buf(r.n, r.skew), r.off)
	}
}

func TestFileSourceMatchesFile(t *testing.T) {
	dir := tempDiskDir(t)
	for _, size := range []int{5<<20 + 123, 4 << 20, 1000} {
		path, data := writeTestFile(t, dir, size, uint64(size))
		for _, m := range fileModes {
			t.Run(fmt.Sprintf("%s/%d", m.name, size), func(t *testing.T) {
				log, logs := captureLogger()
				opts := m.opts
				opts.Logger = log
				src, err := OpenFile(path, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer src.Close()
				if src.Size() != int64(size) || src.Name() != path {
					t.Fatalf("size %d name %q", src.Size(), src.Name())
				}
				if src.Mode() != m.name {
					// Only a filesystem that refuses O_DIRECT may change the mode.
					if m.name != "direct" || !strings.Contains(logs.String(), "refuses O_DIRECT") {
						t.Fatalf("mode %q, want %q", src.Mode(), m.name)
					}
					t.Logf("%s refuses O_DIRECT", dir)
				}
				randomReads(t, src, data, uint64(size))
			})
		}
	}
}

func TestFileSourceConcurrentReads(t *testing.T) {
	path, data := writeTestFile(t, tempDiskDir(t), 3<<20+77, 9)
	for _, m := range fileModes {
		t.Run(m.name, func(t *testing.T) {
			opts := m.opts
			opts.Logger = discardLogger()
			src, err := OpenFile(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 3))
					p := make([]byte, 300<<10)
					for range 50 {
						off := rng.Int64N(int64(len(data)))
						n, err := src.ReadAt(context.Background(), p, off)
						if err != nil && err != io.EOF || !bytes.Equal(p[:n], data[off:off+int64(n)]) {
							errs <- fmt.Errorf("read at %d: %d, %v", off, n, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// TestFileSourcePageCacheResidue checks what each mode leaves in the kernel
// page cache after reading a whole file: nothing for fadvise and direct,
// the file for kernel-cache.
func TestFileSourcePageCacheResidue(t *testing.T) {
	dir := tempDiskDir(t)
	if isTmpfs(dir) {
		testenv.Missing(t, "a disk-backed folder: %s is tmpfs, whose pages are its storage; set FFCVFS_BENCH_DIR", dir)
	}
	for _, m := range fileModes {
		t.Run(m.name, func(t *testing.T) {
			path, data := writeTestFile(t, dir, 16<<20, 4)
			if c, _ := cachedPages(t, path); c != 0 {
				t.Logf("%d pages cached before reading, after POSIX_FADV_DONTNEED", c)
			}
			opts := m.opts
			opts.Logger = discardLogger()
			src, err := OpenFile(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			p := make([]byte, 1<<20)
			for off := int64(0); off < int64(len(data)); off += int64(len(p)) {
				checkReadAt(t, src, data, p, off)
			}
			cached, total := cachedPages(t, path)
			switch m.name {
			case "kernel-cache":
				if cached < total/2 {
					t.Errorf("%d of %d pages cached after a kernel-cache read, want most", cached, total)
				}
			default:
				if src.Mode() != m.name {
					testenv.Missing(t, "a filesystem that takes O_DIRECT: %s refuses it", dir)
				}
				if cached > total/100 {
					t.Errorf("%d of %d pages cached after a %s read, want none", cached, total, m.name)
				}
			}
		})
	}
}

// TestFileSourceDirectIOOnTmpfs: tmpfs may refuse O_DIRECT (older kernels)
// or accept it (Linux 6.6 and later); either way the bytes are right.
func TestFileSourceDirectIOOnTmpfs(t *testing.T) {
	if !isTmpfs("/dev/shm") {
		// Nothing to test; the refusals are tested below on any filesystem.
		t.Log("/dev/shm is not tmpfs here")
		return
	}
	dir, err := os.MkdirTemp("/dev/shm", "ffcvfs-source-test-")
	if err != nil {
		t.Fatalf("/dev/shm is tmpfs but not writable: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path, data := writeTestFile(t, dir, 3<<20+5, 5)
	log, logs := captureLogger()
	src, err := OpenFile(path, Options{DirectIO: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	randomReads(t, src, data, 5)
	refused := strings.Contains(logs.String(), "refuses O_DIRECT")
	if refused != (src.Mode() == "fadvise") {
		t.Errorf("mode %s, but refusal logged: %v", src.Mode(), refused)
	}
	t.Logf("tmpfs with O_DIRECT: mode %s", src.Mode())
}

// TestFileSourceDirectIORefusedAtOpen: a filesystem that refuses to open
// with O_DIRECT gives the fadvise mode and one warning.
func TestFileSourceDirectIORefusedAtOpen(t *testing.T) {
	path, data := writeTestFile(t, t.TempDir(), 1<<20+3, 6)
	saved := openDirect
	t.Cleanup(func() { openDirect = saved })
	openDirect = func(path string) (*os.File, error) {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EINVAL}
	}
	log, logs := captureLogger()
	src, err := OpenFile(path, Options{DirectIO: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Mode() != "fadvise" {
		t.Errorf("mode %s, want fadvise", src.Mode())
	}
	randomReads(t, src, data, 6)
	if n := strings.Count(logs.String(), "refuses O_DIRECT"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs)
	}
}

// TestFileSourceDirectIORefusedAtRead: a filesystem that opens with O_DIRECT
// but refuses the reads (EINVAL) is read the fadvise way from the first
// refusal on, with one warning.
func TestFileSourceDirectIORefusedAtRead(t *testing.T) {
	path, data := writeTestFile(t, t.TempDir(), 1<<20+3, 7)
	saved := directRead
	t.Cleanup(func() { directRead = saved })
	var calls int
	var mu sync.Mutex
	directRead = func(rc syscall.RawConn, b []byte, off int64) (int, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		return 0, syscall.EINVAL
	}
	log, logs := captureLogger()
	src, err := OpenFile(path, Options{DirectIO: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Mode() != "direct" {
		t.Fatalf("mode %s before any read, want direct", src.Mode())
	}
	randomReads(t, src, data, 7)
	if src.Mode() != "fadvise" {
		t.Errorf("mode %s after a refused read, want fadvise", src.Mode())
	}
	if calls != 1 {
		t.Errorf("%d O_DIRECT reads tried, want 1", calls)
	}
	if n := strings.Count(logs.String(), "refuses O_DIRECT"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs)
	}
}

func TestFileSourceErrors(t *testing.T) {
	path, _ := writeTestFile(t, t.TempDir(), 10000, 8)
	for _, m := range fileModes {
		opts := m.opts
		opts.Logger = discardLogger()
		src, err := OpenFile(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.ReadAt(context.Background(), make([]byte, 10), -1); err == nil {
			t.Errorf("%s: read at a negative offset succeeded", m.name)
		}
		if err := src.Close(); err != nil {
			t.Errorf("%s: close: %v", m.name, err)
		}
		_, err = src.ReadAt(context.Background(), make([]byte, 10), 0)
		if !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: read after close: %v, want os.ErrClosed naming the file", m.name, err)
		}
	}
}

// BenchmarkFileSource reads a 256 MiB file in 8 MiB pages, from a cold
// kernel page cache each time, in file order and in a shuffled order (as
// the Cache reads along a random plan), with one reader and with four (as
// the Cache's prefetching goroutines do), and reports throughput and how
// much of the file the kernel page cache holds afterwards (%cached, by
// mincore): plain pread (KernelCache), pread + POSIX_FADV_DONTNEED (the
// default), and O_DIRECT, into aligned buffers and, through bounce buffers,
// into unaligned ones. The file lives in $FFCVFS_BENCH_DIR, or the
// temporary folder unless it is tmpfs, or the folder holding the
// repository.
func BenchmarkFileSource(b *testing.B) {
	const size, page = 256 << 20, 8 << 20
	dir, err := os.MkdirTemp(diskDir(b), "ffcvfs-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	path, _ := writeTestFile(b, dir, size, 1)
	sequential := make([]int, size/page)
	for i := range sequential {
		sequential[i] = i
	}
	shuffled := rand.New(rand.NewPCG(1, 1)).Perm(size / page)
	for _, bc := range []struct {
		name string
		opts Options
		skew int
	}{
		{"plain", Options{KernelCache: true}, 0},
		{"fadvise", Options{}, 0},
		{"direct", Options{DirectIO: true}, 0},
		{"direct-unaligned", Options{DirectIO: true}, 8},
	} {
		for _, order := range []struct {
			name  string
			pages []int
		}{{"sequential", sequential}, {"shuffled", shuffled}} {
			for _, readers := range []int{1, 4} {
				b.Run(fmt.Sprintf("%s/%s/readers=%d", bc.name, order.name, readers), func(b *testing.B) {
					bc.opts.Logger = discardLogger()
					src, err := OpenFile(path, bc.opts)
					if err != nil {
						b.Fatal(err)
					}
					defer src.Close()
					if bc.opts.DirectIO && src.Mode() != "direct" {
						b.Logf("%s refuses O_DIRECT: mode %s", dir, src.Mode())
					}
					bufs := make([][]byte, readers)
					for i := range bufs {
						bufs[i] = make([]byte, page+directAlign)[bc.skew : bc.skew+page]
					}
					b.SetBytes(size)
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						dropFileCache(b, path)
						b.StartTimer()
						var next atomic.Int32
						var wg sync.WaitGroup
						errs := make(chan error, readers)
						for r := range readers {
							wg.Add(1)
							go func() {
								defer wg.Done()
								for {
									i := int(next.Add(1) - 1)
									if i >= len(order.pages) {
										return
									}
									if _, err := src.ReadAt(context.Background(), bufs[r], int64(order.pages[i])*page); err != nil {
										errs <- err
										return
									}
								}
							}()
						}
						wg.Wait()
						close(errs)
						if err := <-errs; err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					cached, total := cachedPages(b, path)
					b.ReportMetric(100*float64(cached)/float64(total), "%cached")
				})
			}
		}
	}
}
