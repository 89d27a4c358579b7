package beton_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
)

// values reads every field of sample s back as Values for the writer.
func values(t *testing.T, f *beton.File, s int) []beton.Value {
	t.Helper()
	vals := make([]beton.Value, len(f.Fields()))
	for fi, fd := range f.Fields() {
		v := &vals[fi]
		switch fd.Type {
		case beton.TypeInt:
			v.Int = f.Int(s, fi)
		case beton.TypeFloat:
			v.Float = f.Float(s, fi)
		default:
			data, err := f.ReadData(s, fi, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fd.Type == beton.TypeJSON {
				data = data[:len(data)-1]
			}
			v.Data = data
			if fd.Type == beton.TypeRGBImage {
				img, _ := f.Image(s, fi)
				v.Mode, v.Width, v.Height = img.Mode, img.Width, img.Height
			}
		}
	}
	return vals
}

// rewrite writes f's samples, in id order, to a new file and returns its path.
func rewrite(t *testing.T, f *beton.File, pageSize int64) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.beton")
	w, err := beton.Create(out, f.Fields(), f.NumSamples(), beton.WriterOptions{PageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < f.NumSamples(); s++ {
		if err := w.WriteSample(values(t, f, s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameSamples fails t unless g holds f's samples, every value equal.
func sameSamples(t *testing.T, f, g *beton.File) {
	t.Helper()
	for s := range f.NumSamples() {
		a, b := values(t, f, s), values(t, g, s)
		for i := range a {
			if a[i].Int != b[i].Int || a[i].Float != b[i].Float || a[i].Mode != b[i].Mode ||
				a[i].Width != b[i].Width || a[i].Height != b[i].Height || !bytes.Equal(a[i].Data, b[i].Data) {
				t.Fatalf("sample %d field %d differs after rewrite", s, i)
			}
		}
	}
}

// sequential reports whether the reference writer laid f out as one worker
// does: samples in id order, packed page after page.
func sequential(f *beton.File) bool {
	var last uint64
	for s := 0; s < f.NumSamples(); s++ {
		for fi, fd := range f.Fields() {
			if !fd.Type.Variable() {
				continue
			}
			a, err := f.Data(s, fi)
			if err != nil || a.Ptr < last {
				return false
			}
			last = a.Ptr
		}
	}
	return true
}

// TestRewriteFixtures writes every fixture's values again. Where the
// reference wrote samples in id order (one worker), the bytes must be
// identical; otherwise every value must read back the same.
func TestRewriteFixtures(t *testing.T) {
	for _, path := range fixtureBetons(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := beton.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			out := rewrite(t, f, f.PageSize())
			if sequential(f) {
				want, _ := os.ReadFile(path)
				got, _ := os.ReadFile(out)
				if !bytes.Equal(got, want) {
					t.Fatalf("rewrite of a sequentially written fixture differs: %d bytes vs %d, first difference at %d", len(got), len(want), firstDiff(got, want))
				}
				t.Logf("byte-identical to the reference")
			}
			g, err := beton.OpenFile(out)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			m := readManifest(t, path)
			if h := g.Header(); h.Version != m.Header.Version || g.NumSamples() != m.NumSamples || g.RecordLayout().RecordSize != m.ItemSize {
				t.Errorf("rewritten header %+v", h)
			}
			sameSamples(t, f, g)
			if errs := beton.Verify(g, beton.VerifyOptions{All: true}); len(errs) > 0 {
				t.Errorf("Verify: %v", errs)
			}
		})
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestWriterPageRules(t *testing.T) {
	fields := []beton.Field{{Type: beton.TypeBytes, Name: "blob"}, {Type: beton.TypeInt, Name: "label"}}
	const ps = beton.MinPageSize
	sizes := []int{ps / 2, ps / 2, 1, ps, 0, 3} // the third must open a new page; the fourth fills one alone
	out := filepath.Join(t.TempDir(), "p.beton")
	w, err := beton.Create(out, fields, len(sizes), beton.WriterOptions{PageSize: ps})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if err := w.WriteSample([]beton.Value{{Data: bytes.Repeat([]byte{byte(i + 1)}, n)}, {Int: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first := f.FirstPage()
	wantPages := []int64{first, first, first + 1, first + 2, beton.NoPage, first + 3}
	for s, want := range wantPages {
		if got := f.SamplePage(s); got != want {
			t.Errorf("sample %d in page %d, want %d", s, got, want)
		}
		data, err := f.ReadData(s, 0, nil)
		if err != nil || len(data) != sizes[s] || (len(data) > 0 && data[0] != byte(s+1)) {
			t.Errorf("sample %d data: %d bytes, err %v", s, len(data), err)
		}
	}
	if f.NumPages() != 4 || f.Size() != (first+4)*ps+int64(len(f.Allocs()))*beton.AllocEntrySize {
		t.Errorf("%d pages, %d bytes", f.NumPages(), f.Size())
	}
	// A sample larger than a page is refused with a clear error.
	w, err = beton.Create(filepath.Join(t.TempDir(), "big.beton"), fields, 1, beton.WriterOptions{PageSize: ps})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSample([]beton.Value{{Data: make([]byte, ps+1)}, {}}); err == nil {
		t.Fatal("a sample larger than a page was accepted")
	}
	w.Abort()
	for _, bad := range []int64{3 << 20, 1 << 20, 1 << 32} {
		if _, err := beton.Create(filepath.Join(t.TempDir(), "x.beton"), fields, 1, beton.WriterOptions{PageSize: bad}); err == nil {
			t.Errorf("page size %d accepted", bad)
		}
	}
}

// An unfinished write leaves nothing under the destination name.
func TestWriterAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "x.beton")
	w, err := beton.Create(out, []beton.Field{{Type: beton.TypeInt, Name: "label"}}, 2, beton.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSample([]beton.Value{{Int: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close with 1 of 2 samples succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

// TestNamesIndex: names written with SetNames come back from Names, in
// sample order; the per-sample values of the field hold them too; a
// damaged index is an error naming the file, never wrong names.
func TestNamesIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "names.beton")
	fields := []beton.Field{{Type: beton.TypeInt, Name: "label"}, {Type: beton.TypeBytes, Name: beton.PathField}}
	w, err := beton.Create(path, fields, 3, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"b/x.jpg", "a/é y.jpg", "a/sub/z.JPEG"}
	if err := w.SetNames(1, names); err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if err := w.WriteSample([]beton.Value{{Int: int64(i)}, {Data: []byte(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Names()
	if err != nil || !slices.Equal(got, names) || f.NumPages() != 1 {
		t.Fatalf("Names: %q, %v (%d pages); want %q", got, err, f.NumPages(), names)
	}
	for i, n := range names {
		if b, err := f.ReadData(i, 1, nil); err != nil || string(b) != n {
			t.Errorf("sample %d's path value: %q, %v", i, b, err)
		}
	}
	f.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	end := int(binary.LittleEndian.Uint64(raw[16:])) // the allocation table: the index ends there
	damaged := bytes.Clone(raw)
	damaged[end-3] ^= 0xff // a byte of the last name
	if f, err := beton.Open(bytes.NewReader(damaged), int64(len(damaged)), "damaged.beton"); err != nil {
		t.Fatal(err)
	} else if _, err := f.Names(); err == nil || !errors.Is(err, beton.ErrCorrupt) || !strings.Contains(err.Error(), "damaged.beton") {
		t.Errorf("a damaged names index: %v", err)
	}
	moved := bytes.Clone(raw)
	arg := 24 + beton.DescriptorSize + 1 + beton.NameSize + 16 // the path field's index offset
	binary.LittleEndian.PutUint64(moved[arg:], 99)
	if _, err := beton.Open(bytes.NewReader(moved), int64(len(moved)), "moved.beton"); err == nil || !errors.Is(err, beton.ErrCorrupt) {
		t.Errorf("a names index that is not before the allocation table: %v", err)
	}
}

// TestFileDestinationBareName: a bare output name is written beside
// itself, in the current folder, never in $TMPDIR (a tmpfs on many
// systems, or another filesystem, where the final rename fails with
// EXDEV after the whole write).
func TestFileDestinationBareName(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			beton.NamedTemps(named)
			defer beton.NamedTemps(false)
			tmp, here := t.TempDir(), t.TempDir()
			t.Setenv("TMPDIR", tmp)
			t.Chdir(here)
			w, err := beton.Create("train.beton", []beton.Field{{Type: beton.TypeInt, Name: "label"}}, 1, beton.WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WriteSample([]beton.Value{{Int: 7}}); err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
				t.Errorf("$TMPDIR holds %v during the write", names(ents))
			}
			if ents, _ := os.ReadDir(here); named != (len(ents) == 1) {
				t.Errorf("the folder holds %v during the write", names(ents))
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(here); len(ents) != 1 || ents[0].Name() != "train.beton" {
				t.Errorf("the folder holds %v after the write", names(ents))
			}
			f, err := beton.OpenFile(filepath.Join(here, "train.beton"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.NumSamples() != 1 || f.Int(0, 0) != 7 {
				t.Errorf("read back %d samples", f.NumSamples())
			}
		})
	}
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestFileDestinationRefusesSpecialFiles: a beton replaces a regular file
// or takes a new name, never a device, a FIFO or a folder (as root, a
// write to /dev/null replaced /dev/null).
func TestFileDestinationRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	null := filepath.Join(dir, "null")
	if err := os.Symlink("/dev/null", null); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "folder")
	if err := os.Mkdir(folder, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "it is a FIFO, not a regular file", null: "it is a character device", folder: "it is a folder"} {
		_, err := beton.Create(path, []beton.Field{{Type: beton.TypeInt, Name: "label"}}, 1, beton.WriterOptions{})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v; want one naming it with %q", path, err, want)
		}
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is now %v (%v)", st.Mode(), err)
	}
	if st, err := os.Lstat(null); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link to /dev/null is now %v (%v)", st.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("the folder holds %v", names(ents))
	}
}

// killedWriterEnv names the folder a child process writes x.beton in
// until it is killed (TestFileDestinationKilled); killedNamedEnv makes its
// temporary file a named one.
const (
	killedWriterEnv = "BETON_TEST_KILLED_WRITER"
	killedNamedEnv  = "BETON_TEST_KILLED_NAMED"
)

// TestFileDestinationKilled: a writer killed with SIGKILL mid-write leaves
// no file for ever: none at all where the temporary file has no name
// (O_TMPFILE); where it has one, the next write to the same path removes
// it, and leaves one that a live writer holds.
func TestFileDestinationKilled(t *testing.T) {
	if dir := os.Getenv(killedWriterEnv); dir != "" {
		beton.NamedTemps(os.Getenv(killedNamedEnv) == "1")
		w, err := beton.Create(filepath.Join(dir, "x.beton"), []beton.Field{{Type: beton.TypeBytes, Name: "b"}}, 2, beton.WriterOptions{})
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		w.WriteSample([]beton.Value{{Data: bytes.Repeat([]byte{1}, 3<<20)}})
		w.WriteSample([]beton.Value{{Data: bytes.Repeat([]byte{2}, 3<<20)}}) // writes the first page
		fmt.Println("writing")
		select {}
	}
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFileDestinationKilled$")
			cmd.Env = append(os.Environ(), killedWriterEnv+"="+dir, killedNamedEnv+"="+map[bool]string{true: "1"}[named])
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(out).ReadString('\n')
			if line != "writing\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the writer said %q", line)
			}
			// A live writer's named file stays.
			live := beton.NamedTemps
			live(true)
			defer live(false)
			other, err := beton.NewFileDestination(filepath.Join(dir, "x.beton"))
			if err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(dir)
			if want := map[bool]int{false: 1, true: 2}[named]; len(ents) != want {
				t.Errorf("beside a live writer the folder holds %v; want %d files", names(ents), want)
			}
			other.Abort()
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			ents, _ = os.ReadDir(dir)
			if want := map[bool]int{false: 0, true: 1}[named]; len(ents) != want {
				t.Errorf("after SIGKILL the folder holds %v; want %d files", names(ents), want)
			}
			// The next write removes what the dead writer left.
			next, err := beton.NewFileDestination(filepath.Join(dir, "x.beton"))
			if err != nil {
				t.Fatal(err)
			}
			next.Abort()
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("after the next write the folder holds %v", names(ents))
			}
		})
	}
}

// TestWriteSampleAtPageOrder writes every fixture's samples in the order
// of its pages, as a rewrite of a beton does: every value reads back the
// same, and each sample's page neighbours are the fixture's.
func TestWriteSampleAtPageOrder(t *testing.T) {
	for _, path := range fixtureBetons(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := beton.OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			out := filepath.Join(t.TempDir(), "out.beton")
			w, err := beton.Create(out, f.Fields(), f.NumSamples(), beton.WriterOptions{PageSize: f.PageSize()})
			if err != nil {
				t.Fatal(err)
			}
			done := make([]bool, f.NumSamples())
			for dp := range f.NumPages() {
				for _, s := range f.PageSamples(f.FirstPage() + int64(dp)) {
					if err := w.WriteSampleAt(int(s), values(t, f, int(s))); err != nil {
						t.Fatal(err)
					}
					done[s] = true
				}
			}
			for s := range done {
				if !done[s] {
					if err := w.WriteSampleAt(s, values(t, f, s)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			g, err := beton.OpenFile(out)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			sameSamples(t, f, g)
			for dp := range f.NumPages() {
				if a, b := f.PageSamples(f.FirstPage()+int64(dp)), g.PageSamples(g.FirstPage()+int64(dp)); !slices.Equal(a, b) {
					t.Fatalf("page %d holds samples %v, the fixture's %v", dp, b, a)
				}
			}
			if errs := beton.Verify(g, beton.VerifyOptions{All: true}); len(errs) > 0 {
				t.Errorf("Verify: %v", errs)
			}
		})
	}
}

// A sample written twice is refused, in order or not, and one never
// written fails Close.
func TestWriteSampleAtTwiceAndMissing(t *testing.T) {
	fields := []beton.Field{{Type: beton.TypeBytes, Name: "blob"}, {Type: beton.TypeInt, Name: "label"}}
	val := func(i int) []beton.Value { return []beton.Value{{Data: []byte{byte(i)}}, {Int: int64(i)}} }
	dir := t.TempDir()
	w, err := beton.Create(filepath.Join(dir, "a.beton"), fields, 4, beton.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{0, 1} {
		if err := w.WriteSampleAt(id, val(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteSampleAt(1, val(1)); err == nil || !strings.Contains(err.Error(), "sample 1: written twice") {
		t.Fatalf("sample 1 again, in order: %v", err)
	}
	if err := w.WriteSampleAt(3, val(3)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{0, 3} {
		if err := w.WriteSampleAt(id, val(id)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("sample %d: written twice", id)) {
			t.Fatalf("sample %d again, out of order: %v", id, err)
		}
	}
	for _, id := range []int{-1, 4} {
		if err := w.WriteSampleAt(id, val(0)); err == nil {
			t.Fatalf("sample %d of 4 accepted", id)
		}
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "3 of 4 samples written") {
		t.Fatalf("Close with sample 2 missing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.beton")); !os.IsNotExist(err) {
		t.Fatalf("a beton missing a sample appeared: %v", err)
	}
}

// TestStaleTempsOfOtherMachines: a write removes the temporary files of
// its path whose writer is gone, and only those: another machine's (its
// lock unseen where locks are per mount, its process id meaningless here)
// once left unchanged for a day; this machine's once its process has
// ended. Any unlocked one was removed, a live writer's on another node
// included.
func TestStaleTempsOfOtherMachines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.beton")
	mine := ".x.beton.tmp-" + beton.HostToken() + "-"
	files := map[string]bool{ // name: removed
		".x.beton.tmp-0123456789ab-1-fresh":        false, // another machine's, live
		".x.beton.tmp-0123456789ab-1-old":          true,  // another machine's, left a day
		mine + strconv.Itoa(os.Getpid()) + "-live": false, // this process's
		mine + strconv.Itoa(deadPid(t)) + "-dead":  true,  // an ended process's
		".x.beton.tmp-noowner":                     false, // a name without a machine, fresh
		".x.beton.tmp-noowner-old":                 true,
	}
	for name := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "old") {
			old := time.Now().Add(-25 * time.Hour)
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	d, err := beton.NewFileDestination(path)
	if err != nil {
		t.Fatal(err)
	}
	d.Abort()
	for name, removed := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if gone := os.IsNotExist(err); gone != removed {
			t.Errorf("%s: removed %v, want %v", name, gone, removed)
		}
	}
}

// deadPid returns the id of a process that has ended.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}
