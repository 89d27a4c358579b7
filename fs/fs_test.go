package fs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/beton/rewrite"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/fs/orders"
	"github.com/ffcvfs/ffcvfs/fs/transport"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// testMount mounts the beton at path in this process and returns the
// mountpoint and the view; the mount is undone at cleanup.
func testMount(t *testing.T, path string, opts Options) (string, *View) {
	t.Helper()
	return testMountPages(t, path, opts, 2)
}

// testMountPages is testMount with a cache of the given number of pages.
func testMountPages(t *testing.T, path string, opts Options, pages int64) (string, *View) {
	t.Helper()
	if err := transport.CheckFUSE(); err != nil {
		testenv.Missing(t, "FUSE: %v", err)
	}
	v, err := testView(t, path, opts, pages)
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	srv, err := Mount(mnt, v, MountOptions{FsName: path, SourcePath: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		v.Close()
	})
	return mnt, v
}

// testView builds the view of the beton at path over a cache of the given
// number of pages; the source and the cache are closed when the test
// ends, the view by the caller.
func testView(t *testing.T, path string, opts Options, pages int64) (*View, error) {
	t.Helper()
	src, f, err := pagecache.OpenBeton(t.Context(), path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	c, err := pagecache.New(src, f, pagecache.Options{Budget: pages * f.PageSize(), Readers: 2, Debug: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return NewView(c, opts)
}

func fixture(t *testing.T, name string) string {
	return testenv.Fixture(t, "beton", name)
}

// sampleFiles lists every sample file of the mount, sorted as ImageFolder
// sorts them.
func sampleFiles(t *testing.T, mnt string) []string {
	t.Helper()
	var out []string
	classes, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range classes {
		files, err := os.ReadDir(filepath.Join(mnt, c.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			out = append(out, filepath.Join(mnt, c.Name(), f.Name()))
		}
	}
	return out
}

func TestTreeMatchesBeton(t *testing.T) {
	path := fixture(t, "imagefolder-mixed.beton")
	mnt, v := testMount(t, path, Options{})
	f := v.f
	files := sampleFiles(t, mnt)
	if len(files) != f.NumSamples() {
		t.Fatalf("%d files, %d samples", len(files), f.NumSamples())
	}
	for i, p := range files {
		s, ok := v.SampleOf(i)
		if !ok || filepath.Base(p) != v.SampleName(s) {
			t.Fatalf("ImageFolder index %d is %s, want sample %d", i, p, s)
		}
		if want := fmt.Sprintf("%d", f.Int(s, v.label)); filepath.Base(filepath.Dir(p)) != want {
			t.Errorf("%s: label %s", p, want)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		img, _ := f.Image(s, v.image)
		data, _ := f.ReadData(s, v.image, nil)
		if img.Mode == beton.ModeRaw {
			data = append([]byte(ppmHeader(img.Width, img.Height)), data...)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes differ from the beton's", p, len(got))
		}
		// The block size is a local disk's: CPython sizes its buffers by it.
		st, _ := os.Stat(p)
		if blk := st.Sys().(*syscall.Stat_t).Blksize; st.Size() != int64(len(data)) || st.Mode().Perm() != 0o444 || blk != fileBlksize {
			t.Errorf("%s: stat size %d mode %v blksize %d", p, st.Size(), st.Mode(), blk)
		}
	}
	whole, err := os.ReadFile(control.Path(mnt, control.DatasetFile))
	src, _ := os.ReadFile(path)
	if err != nil || !bytes.Equal(whole, src) {
		t.Errorf("dataset.beton differs from the file (%v)", err)
	}
}

// The control folder can be found but is never listed.
func TestControlFolderHidden(t *testing.T) {
	mnt, _ := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	ents, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("root lists %q", e.Name())
		}
	}
	if st, err := os.Stat(control.Path(mnt)); err != nil || !st.IsDir() {
		t.Fatalf(".ffcvfs: %v", err)
	}
	// announce is a symlink to a socket of the owner's alone: 0600, in a
	// 0700 folder.
	target, err := os.Readlink(control.Path(mnt, control.AnnounceFile))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(target)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("announce socket %s: %v %v, want a socket of mode 0600", target, st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Dir(target)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the announce socket's folder: %v %v, want 0700", st.Mode(), err)
	}
}

func TestAnnounceAndOrders(t *testing.T) {
	mnt, v := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	ctl := control.Path(mnt)
	if err := control.Announce(t.Context(), mnt, []uint32{3, 1, 2}, true); err != nil {
		t.Fatal(err)
	}
	order, err := os.ReadFile(filepath.Join(ctl, "orders", "quasi-random", "7", "0"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(order))
	if len(lines) != v.f.NumSamples() {
		t.Fatalf("order of %d lines for %d samples", len(lines), v.f.NumSamples())
	}
	again, _ := os.ReadFile(filepath.Join(ctl, "orders", "quasi-random", "7", "0"))
	if !bytes.Equal(order, again) {
		t.Error("the same order file read twice differs")
	}
	sorted := append([]string(nil), lines...)
	sort.Slice(sorted, func(i, j int) bool {
		return len(sorted[i]) < len(sorted[j]) || len(sorted[i]) == len(sorted[j]) && sorted[i] < sorted[j]
	})
	for i, s := range sorted {
		if s != fmt.Sprint(i) {
			t.Fatalf("order is not a permutation of ImageFolder indices: %v", sorted[:10])
		}
	}
	r0, err0 := os.ReadFile(filepath.Join(ctl, "orders", "quasi-random", "7", "0-of-2", "1"))
	r1, err1 := os.ReadFile(filepath.Join(ctl, "orders", "quasi-random", "7", "1-of-2", "1"))
	if err0 != nil || err1 != nil || len(strings.Fields(string(r0))) != len(strings.Fields(string(r1))) {
		t.Errorf("ranks: %v %v, %d and %d lines", err0, err1, len(strings.Fields(string(r0))), len(strings.Fields(string(r1))))
	}
	for _, bad := range []string{"orders/nope/1/0", "orders/quasi-random/x/0", "orders/quasi-random/1/2-of-2/0"} {
		if _, err := os.Stat(filepath.Join(ctl, bad)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	var st control.Stats
	b, err := os.ReadFile(filepath.Join(ctl, "stats.json"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("stats.json: %v\n%s", err, b)
	}
	ids := map[string]bool{}
	for _, p := range st.Cache.Plans {
		ids[strings.SplitN(p.ID, ":", 2)[0]] = true
	}
	if !ids["announce"] || !ids["order"] || st.Samples != v.f.NumSamples() {
		t.Errorf("stats.json: plans %v, %d samples", st.Cache.Plans, st.Samples)
	}
}

func TestReadOnly(t *testing.T) {
	mnt, _ := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	files := sampleFiles(t, mnt)
	before, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	// Without OPEN the kernel lets root (who passes every permission
	// check) open a file for writing, but nothing can be written.
	writeFails(t, files[0])
	if after, err := os.ReadFile(files[0]); err != nil || !bytes.Equal(after, before) {
		t.Errorf("%s changed after a write (%v)", files[0], err)
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(files[0]), "new.jpg"), []byte("x"), 0o644); err == nil {
		t.Error("a file created in a class folder")
	}
	if err := os.Remove(files[0]); err == nil {
		t.Error("a sample removed")
	}
	if err := os.Mkdir(filepath.Join(mnt, "newclass"), 0o755); err == nil {
		t.Error("a folder created")
	}
	if err := os.Rename(files[0], files[0]+".bak"); err == nil {
		t.Error("a sample renamed")
	}
	if err := os.Chmod(files[0], 0o777); err == nil {
		t.Error("a sample's mode changed")
	}
	if err := os.Truncate(files[0], 0); err == nil {
		t.Error("a sample truncated")
	}
	if err := os.Remove(filepath.Dir(files[0])); err == nil {
		t.Error("a class folder removed")
	}
	if got := len(sampleFiles(t, mnt)); got != len(files) {
		t.Errorf("%d files after the attempts, %d before", got, len(files))
	}
	writeFails(t, control.Path(mnt, control.DatasetFile))
}

// writeFails checks that path cannot be written: it cannot be opened for
// writing (EACCES, or EROFS when the mount answers OPEN), or a write fails
// with EROFS.
func writeFails(t *testing.T, path string) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		if !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EROFS) {
			t.Errorf("opening %s for writing: %v, want EACCES or EROFS", path, err)
		}
		return
	}
	defer fh.Close()
	if _, err := fh.Write([]byte("x")); !errors.Is(err, syscall.EROFS) {
		t.Errorf("writing %s: %v, want EROFS", path, err)
	}
}

// A sample whose metadata is corrupt fails alone with EIO; the rest of the
// mount keeps working.
func TestCorruptSampleIsEIO(t *testing.T) {
	data, f := fixtureCopy(t, "imagefolder-jpg.beton")
	const bad = 5
	recStart := beton.HeaderSize + beton.DescriptorSize*len(f.Fields()) + bad*f.RecordLayout().RecordSize
	binary.LittleEndian.PutUint64(data[recStart+f.RecordLayout().Offsets[0]+5:], 12345) // image pointer
	path := filepath.Join(t.TempDir(), "corrupt.beton")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt, v := testMount(t, path, Options{})
	files := sampleFiles(t, mnt)
	ok := 0
	for _, p := range files {
		_, err := os.ReadFile(p)
		if filepath.Base(p) == v.SampleName(bad) {
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("corrupt sample %s: %v, want EIO", p, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		ok++
	}
	if ok != f.NumSamples()-1 {
		t.Errorf("%d good samples read", ok)
	}
	if st := v.Stats(); st.Reads.Errors == 0 {
		t.Error("the failed read was not counted")
	}
}

// Read-only analogues of go-fuse's posixtest cases: those create their
// files by writing, which a read-only mount refuses.
func TestPosixReadOnly(t *testing.T) {
	mnt, _ := testMount(t, fixture(t, "imagefolder-mixed.beton"), Options{})
	files := sampleFiles(t, mnt)
	class := filepath.Dir(files[0])

	t.Run("ReadDirConsistency", func(t *testing.T) {
		for _, dir := range []string{mnt, class} {
			a, _ := os.ReadDir(dir)
			b, _ := os.ReadDir(dir)
			if len(a) == 0 || !reflect.DeepEqual(names(a), names(b)) {
				t.Errorf("%s: %d then %d entries", dir, len(a), len(b))
			}
		}
	})
	t.Run("DirSeek", func(t *testing.T) {
		d, err := os.Open(class)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		first, err := d.ReadDir(3)
		if err != nil {
			t.Fatal(err)
		}
		rest, _ := d.ReadDir(-1)
		if _, err := d.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		all, _ := d.ReadDir(-1)
		if !reflect.DeepEqual(names(all), append(names(first), names(rest)...)) {
			t.Errorf("listing after a seek differs")
		}
	})
	t.Run("ParallelFileOpen", func(t *testing.T) {
		want, _ := os.ReadFile(files[1])
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := os.ReadFile(files[1])
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("parallel read: %v", err)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("FdLeak", func(t *testing.T) {
		before := countFds(t)
		for i := 0; i < 100; i++ {
			if _, err := os.ReadFile(files[i%len(files)]); err != nil {
				t.Fatal(err)
			}
		}
		if after := countFds(t); after > before {
			t.Errorf("%d open descriptors after 100 reads, %d before", after, before)
		}
	})
	t.Run("DirectIO", func(t *testing.T) {
		fd, err := syscall.Open(files[2], syscall.O_RDONLY|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		buf := alignedBuf(1 << 20)
		n, err := syscall.Read(fd, buf)
		want, _ := os.ReadFile(files[2])
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Errorf("O_DIRECT read: %d bytes, %v", n, err)
		}
	})
	t.Run("LseekEnd", func(t *testing.T) {
		fh, err := os.Open(files[3])
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		st, _ := fh.Stat()
		if end, err := fh.Seek(0, io.SeekEnd); err != nil || end != st.Size() {
			t.Errorf("seek to end: %d, %v; size %d", end, err, st.Size())
		}
	})
	t.Run("FileLarge", func(t *testing.T) {
		p := control.Path(mnt, control.DatasetFile)
		fh, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		st, _ := fh.Stat()
		buf := make([]byte, 100000)
		for _, off := range []int64{0, st.Size() / 3, st.Size() - int64(len(buf)), st.Size() - 10} {
			n, err := fh.ReadAt(buf, off)
			if (err != nil && err != io.EOF) || int64(n) != min(int64(len(buf)), st.Size()-off) {
				t.Errorf("ReadAt(%d): %d, %v", off, n, err)
			}
		}
	})
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func countFds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := int(4096 - uintptr(unsafe.Pointer(&b[0]))%4096)
	return b[off : off+n]
}

func TestClassNames(t *testing.T) {
	path := fixture(t, "imagefolder-jpg.beton")
	classNames := []string{"ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay"}
	mnt, _ := testMount(t, path, Options{Classes: classNames})
	ents, _ := os.ReadDir(mnt)
	if got := names(ents); !reflect.DeepEqual(got, classNames) {
		t.Errorf("classes %v", got)
	}
	src, f, err := pagecache.OpenBeton(t.Context(), path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c, _ := pagecache.New(src, f, pagecache.Options{Budget: f.PageSize()})
	defer c.Close()
	unsorted := append([]string{"zebra"}, classNames[1:]...)
	if _, err := NewView(c, Options{Classes: unsorted}); err == nil || !strings.Contains(err.Error(), "sort") {
		t.Errorf("unsorted names: %v", err)
	}
	if _, err := NewView(c, Options{Classes: classNames[:3]}); err == nil {
		t.Error("too few class names accepted")
	}
	// More names than labels: another beton's list, or one whose last
	// classes have no samples here; used, and said.
	var logged bytes.Buffer
	more := append(slices.Clone(classNames), "kite", "lynx", "mole", "newt", "owl")
	if _, err := NewView(c, Options{Classes: more, Logger: slog.New(slog.NewTextHandler(&logged, nil))}); err != nil {
		t.Errorf("15 names for 10 labels: %v", err)
	}
	if !strings.Contains(logged.String(), "15 class names given, but the labels of") || !strings.Contains(logged.String(), "the first 10 names are used") {
		t.Errorf("15 names for 10 labels, said: %q", logged.String())
	}
	if _, err := NewView(c, Options{LabelField: "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing label field: %v", err)
	}
}

func TestMountpointChecks(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
	if err := transport.CheckMountpoint(dir); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty: %v", err)
	}
	if err := transport.CheckMountpoint(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing: %v", err)
	}
	if err := transport.CheckMountpoint(filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("file: %v", err)
	}
	mnt, _ := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	if err := transport.CheckMountpoint(mnt); err == nil || !strings.Contains(err.Error(), "already a mountpoint") {
		t.Errorf("mounted: %v", err)
	}
}

// Root opened an image O_RDWR and wrote
// through a MAP_SHARED mapping; later readers got the written bytes. The
// superblock is read-only, so the kernel refuses the open, and with it the
// mapping, whoever asks.
func TestWritableMappingRefused(t *testing.T) {
	mnt, _ := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	files := sampleFiles(t, mnt)
	before, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if fd, err := syscall.Open(files[1], syscall.O_RDWR, 0); err == nil {
		if m, err := syscall.Mmap(fd, 0, 2, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); err == nil {
			copy(m, "XX")
			syscall.Munmap(m)
			t.Error("a writable shared mapping of a sample was made")
		}
		syscall.Close(fd)
		t.Error("a sample opened O_RDWR")
	} else if !errors.Is(err, syscall.EROFS) {
		t.Errorf("opening a sample O_RDWR: %v, want EROFS", err)
	}
	// A private writable mapping of a read-only open is allowed; its
	// writes stay the mapper's.
	if fd, err := syscall.Open(files[1], syscall.O_RDONLY, 0); err == nil {
		if m, err := syscall.Mmap(fd, 0, 2, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE); err == nil {
			copy(m, "XX")
			syscall.Munmap(m)
		}
		syscall.Close(fd)
	}
	after, err := os.ReadFile(files[1])
	if err != nil || !bytes.Equal(after, before) {
		t.Errorf("%s reads %q... after the attempts, %q before (%v)", files[1], after[:4], before[:4], err)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); err != nil || sfs.Flags&0x1 == 0 { // ST_RDONLY
		t.Errorf("statfs: flags %#x (%v), want ST_RDONLY", sfs.Flags, err)
	}
}

// Findings 7 and 13: a huge line without a newline cost the mount time and
// memory growing with its square, and the writer of a bad order saw only
// EIO. Announcing is bounded per line and per order, and the writer gets
// the mount's sentence.
func TestAnnounceErrors(t *testing.T) {
	mnt, v := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	n := v.f.NumSamples()
	for _, tc := range []struct {
		name, input, want string
	}{
		{"garbage", "hello\n", `line 1: "hello" is not a number`},
		{"negative", "1\n-1\n", "line 2: sample -1 out of range"},
		{"2^64", "18446744073709551616\n", "is not a number"},
		{"out of range", fmt.Sprintf("%d\n", n), fmt.Sprintf("sample %d out of range [0, %d)", n, n)},
		{"imagefolder out of range", "imagefolder\n0\n99999\n", "line 3: ImageFolder index 99999 out of range"},
		{"long line", "1\n" + strings.Repeat(" ", 65) + "2\n", "line 2 is longer than 64 bytes"},
		{"too long", strings.Repeat("0\n", orders.MaxAnnounceFactor*n+1), fmt.Sprintf("line %d: an order may hold at most %d samples", orders.MaxAnnounceFactor*n+1, orders.MaxAnnounceFactor*n)},
		{"ok", "imagefolder\n0\n1\n\n2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply := testenv.Announce(t, control.Path(mnt, control.AnnounceFile), func(w io.Writer) { io.WriteString(w, tc.input) })
			if tc.want == "" {
				if reply != "ok 3\n" {
					t.Errorf("reply %q, want ok 3", reply)
				}
				return
			}
			if !strings.HasPrefix(reply, "error: ") || !strings.Contains(reply, tc.want) {
				t.Errorf("reply %q, want an error saying %q", reply, tc.want)
			}
		})
	}
	// 100 MB of spaces without a newline: refused at the first 64 KiB,
	// however much follows; the connection is closed, so the writer stops.
	t.Run("100MB of spaces", func(t *testing.T) {
		var sent int
		reply := testenv.Announce(t, control.Path(mnt, control.AnnounceFile), func(w io.Writer) {
			chunk := bytes.Repeat([]byte(" "), 1<<20)
			for range 100 {
				k, err := w.Write(chunk)
				sent += k
				if err != nil {
					return
				}
			}
		})
		if !strings.Contains(reply, "longer than 64 bytes") {
			t.Errorf("reply %q", reply)
		}
		if sent >= 100<<20 {
			t.Errorf("the mount took all %d bytes of a line it had refused", sent)
		}
	})
	if got := v.announcer.Announced(); got != 1 {
		t.Errorf("%d orders announced, want 1 (the good one)", got)
	}
	// The Go client returns the mount's sentence, also when the mount
	// refused the order before it was all sent.
	err := control.Announce(t.Context(), mnt, []uint32{uint32(n)}, false)
	if err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("Announce of a sample out of range: %v", err)
	}
	err = control.Announce(t.Context(), mnt, make([]uint32, 1<<20), false)
	if err == nil || !strings.Contains(err.Error(), "an order may hold at most") {
		t.Errorf("Announce of 2^20 samples: %v", err)
	}
}

// An allocation-table entry of size 0
// was served as an empty .jpg. Its file is EIO; the others read.
func TestEmptyImageIsEIO(t *testing.T) {
	data, err := os.ReadFile(fixture(t, "imagefolder-jpg.beton"))
	if err != nil {
		t.Fatal(err)
	}
	at := binary.LittleEndian.Uint64(data[16:])
	bad := int(binary.LittleEndian.Uint64(data[at:])) // the first entry's sample
	binary.LittleEndian.PutUint64(data[at+16:], 0)
	path := filepath.Join(t.TempDir(), "empty.beton")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mnt, v := testMount(t, path, Options{})
	files := sampleFiles(t, mnt)
	if len(files) != v.f.NumSamples() {
		t.Fatalf("%d files listed for %d samples", len(files), v.f.NumSamples())
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if filepath.Base(p) == v.SampleName(bad) {
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("empty sample %s: %d bytes, %v, want EIO", p, len(b), err)
			}
		} else if err != nil || len(b) == 0 {
			t.Errorf("%s: %d bytes, %v", p, len(b), err)
		}
	}
}

// An order file of world size
// 99999999999 made the mount allocate a counter per rank until it died.
// World sizes are bounded before use; the mount stays up.
func TestOrderWorldSizeBounded(t *testing.T) {
	mnt, _ := testMount(t, fixture(t, "imagefolder-jpg.beton"), Options{})
	for _, name := range []string{"0-of-99999999999", "0-of-1048577", "0-of-184467440737095516160"} {
		_, err := os.ReadFile(control.Path(mnt, control.OrdersDir, "random", "0", name, "0"))
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("orders/random/0/%s/0: %v, want EINVAL", name, err)
		}
	}
	if b, err := os.ReadFile(control.Path(mnt, control.OrdersDir, "random", "0", "0")); err != nil || len(b) == 0 {
		t.Errorf("the mount after the attempts: %v", err)
	}
}

// One sample labelled 2^24 in a 6 MB
// beton took 14 s and 3.1 GB to mount (a slice and a name per label up to
// the largest). Only labels that samples have make folders; the work grows
// with the samples.
func TestLargeLabelMakesOneFolder(t *testing.T) {
	data, f := fixtureCopy(t, "imagefolder-jpg.beton")
	label := f.FieldIndex("label")
	const s = 7
	rec := beton.HeaderSize + beton.DescriptorSize*len(f.Fields()) + s*f.RecordLayout().RecordSize + f.RecordLayout().Offsets[label]
	binary.LittleEndian.PutUint64(data[rec:], 1<<24)
	path := filepath.Join(t.TempDir(), "label.beton")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	mnt, v := testMount(t, path, Options{})
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("mounting allocated %d MiB", grew>>20)
	}
	classes := v.Classes()
	if len(classes) != 11 || classes[10] != "16777216" || classes[0] != "00000000" {
		t.Errorf("classes %v, want 00000000…00000009 and 16777216", classes)
	}
	ents, err := os.ReadDir(filepath.Join(mnt, "16777216"))
	if err != nil || len(ents) != 1 || ents[0].Name() != v.SampleName(s) {
		t.Errorf("folder 16777216: %v, %v", names(ents), err)
	}
	// Beyond the bound, a clear refusal.
	binary.LittleEndian.PutUint64(data[rec:], 1<<24+1)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src, bf, err := pagecache.OpenBeton(t.Context(), path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	c, err := pagecache.New(src, bf, pagecache.Options{Budget: 2 * bf.PageSize()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := NewView(c, Options{}); err == nil || !strings.Contains(err.Error(), "sample 7 has label 16777217") {
		t.Errorf("NewView with label 2^24+1: %v", err)
	}
}

// fixtureCopy returns the bytes of a fixture beton, the test's to change,
// and the beton they hold.
func fixtureCopy(t *testing.T, name string) ([]byte, *beton.File) {
	t.Helper()
	path := fixture(t, name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := beton.Open(bytes.NewReader(data), int64(len(data)), path)
	if err != nil {
		t.Fatal(err)
	}
	return data, f
}

// TestRestartCounts: stats.json counts the JPEG files read from their
// start and those whose JPEG has restart markers: none in a beton FFCV
// wrote, every one once rewritten with them.
func TestRestartCounts(t *testing.T) {
	src := fixture(t, "imagefolder-mixed.beton") // JPEG and raw images
	rewritten := filepath.Join(t.TempDir(), "restarts.beton")
	f, err := beton.OpenFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := beton.NewFileDestination(rewritten)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rewrite.Rewrite(t.Context(), f, dst, rewrite.Options{Workers: 2})
	f.Close()
	if err != nil || res.Transcoded == 0 {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, path := range []string{src, rewritten} {
		mnt, v := testMount(t, path, Options{})
		files := sampleFiles(t, mnt)
		jpgs := 0
		for _, p := range files {
			if _, err := os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(p, ".jpg") {
				jpgs++
			}
		}
		st := v.Stats()
		want := uint64(0)
		if path == rewritten {
			want = uint64(jpgs)
		}
		if jpgs != res.JPEG || st.Reads.JPGImages != uint64(jpgs) || st.Reads.JPGRestarts != want {
			t.Errorf("%s: %d JPEG files read: stats say %d, %d with restart markers (want %d)", path, jpgs, st.Reads.JPGImages, st.Reads.JPGRestarts, want)
		}
	}
}
