package cudafeed

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func testSpec() RingSpec {
	return RingSpec{Slots: 3, Fields: []FieldSpec{
		{Name: "images", DType: "uint8", Shape: []int{5, 7, 7, 3}}, // 735 bytes
		{Name: "labels", DType: "int64", Shape: []int{5}},          // 40 bytes
		{Name: "weights", DType: "float16", Shape: []int{5, 3}},    // 30 bytes
	}}
}

// testRing creates a ring with a name unique to the test and closes it at cleanup.
func testRing(t *testing.T, l RingSpec) *Ring {
	t.Helper()
	name := fmt.Sprintf("cudafeed-test-%d-%d-%s", os.Getpid(), ringSeq.Add(1), t.Name())
	name = sanitize(name)
	r, err := CreateRing(name, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

var ringSeq atomic.Int64

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '/' {
			b[i] = '_'
		}
	}
	return string(b)
}

func TestRingSpec(t *testing.T) {
	r := testRing(t, testSpec())
	want := []struct{ off, n int }{{0, 735}, {768, 40}, {832, 30}}
	for i, f := range r.Fields() {
		if f.Offset != want[i].off || f.Bytes != want[i].n || f.Offset%Alignment != 0 {
			t.Errorf("field %s: offset %d bytes %d, want %d %d", f.Name, f.Offset, f.Bytes, want[i].off, want[i].n)
		}
	}
	if r.SlotBytes() != 896 || r.BatchSize() != 5 || r.Slots() != 3 {
		t.Errorf("slot bytes %d batch %d slots %d, want 896 5 3", r.SlotBytes(), r.BatchSize(), r.Slots())
	}
	fi, err := os.Stat(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if fi.Size() != 3*896 {
		t.Errorf("size %d, want %d", fi.Size(), 3*896)
	}
	// Writes through Slot land at slot*SlotBytes+Offset of the file.
	for i := 0; i < r.Slots(); i++ {
		for f, b := range r.Slot(i) {
			if len(b) != r.Fields()[f].Bytes {
				t.Fatalf("slot %d field %d: len %d", i, f, len(b))
			}
			b[0] = byte(10*i + f + 1)
		}
	}
	data, err := os.ReadFile(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < r.Slots(); i++ {
		for f, fi := range r.Fields() {
			if got := data[i*r.SlotBytes()+fi.Offset]; got != byte(10*i+f+1) {
				t.Errorf("slot %d field %d: file byte %d", i, f, got)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.Slot(1) }); n != 0 {
		t.Errorf("Slot allocates %v times", n)
	}
}

func TestRingExistsAndUnlink(t *testing.T) {
	r := testRing(t, testSpec())
	name := r.Path()[len(ShmDir)+1:]
	if _, err := CreateRing(name, testSpec()); !errors.Is(err, ErrExists) {
		t.Fatalf("second CreateRing: %v, want ErrExists", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close: stat %v, want not exist", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRingBadLayout(t *testing.T) {
	for _, l := range []RingSpec{
		{Slots: 0, Fields: testSpec().Fields},
		{Slots: 1},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "int24", Shape: []int{2}}}},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: nil}}},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: []int{2, 0}}}},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: []int{2}}, {Name: "x", DType: "uint8", Shape: []int{2}}}},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: []int{2}}, {Name: "y", DType: "uint8", Shape: []int{3}}}},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: []int{2, 8}, Ends: "x.ends"}}},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: []int{2}, Ends: "x.ends"}, {Name: "x.ends", DType: "int64", Shape: []int{2}}}},
		{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: []int{2, 8}, Ends: "x.ends"}, {Name: "x.ends", DType: "int32", Shape: []int{2}}}},
	} {
		if _, err := CreateRing("cudafeed-test-bad", l); err == nil {
			t.Errorf("layout %+v accepted", l)
		}
	}
	if _, err := CreateRing("a/b", testSpec()); err == nil {
		t.Error("name with a slash accepted")
	}
}

// The ring was always
// /dev/shm/ffcvfeed-PID, so a file planted under that name stopped the
// server, and a killed server's ring stayed forever. Server rings have
// unguessable names, and CleanStaleRings removes those of dead servers of
// this user alone.
func TestServerRingNamesAndStaleRings(t *testing.T) {
	planted := fmt.Sprintf("%s/ffcvfeed-%d", ShmDir, os.Getpid())
	if err := os.WriteFile(planted, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(planted)
	r1, err := CreateServerRing(testSpec())
	if err != nil {
		t.Fatalf("with %s planted: %v", planted, err)
	}
	defer r1.Close()
	r2, err := CreateServerRing(testSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	prefix := fmt.Sprintf("%s/ffcvfeed-%d-", ShmDir, os.Getpid())
	if r1.Path() == r2.Path() || !strings.HasPrefix(r1.Path(), prefix) || len(r1.Path()) != len(prefix)+32 {
		t.Errorf("ring names %s and %s, want %s and 32 random hex digits", r1.Path(), r2.Path(), prefix)
	}
	if st, err := os.Stat(r1.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("ring %v %v, want mode 0600", st.Mode(), err)
	}

	// A dead server's rings: the pid of a process that has exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	stale := []string{fmt.Sprintf("%s/ffcvfeed-%d-0123abcd", ShmDir, dead), fmt.Sprintf("%s/ffcvfeed-%d", ShmDir, dead)}
	for _, p := range stale {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
	}
	others := fmt.Sprintf("%s/ffcvfeed-%d-ffff", ShmDir, dead)
	if os.Getuid() == 0 {
		if err := os.WriteFile(others, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(others)
		if err := os.Chown(others, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := CleanStaleRings()
	if err != nil {
		t.Fatal(err)
	}
	// Rings that earlier killed servers left may go too.
	for _, p := range stale {
		if !slices.Contains(removed, p) {
			t.Errorf("removed %v, not %s", removed, p)
		}
	}
	for _, p := range []string{r1.Path(), r2.Path(), planted} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s, of a live process, is gone: %v", p, err)
		}
	}
	if os.Getuid() == 0 {
		if _, err := os.Stat(others); err != nil {
			t.Errorf("another user's ring was removed: %v", err)
		}
	}
}
