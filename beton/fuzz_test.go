package beton_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// Fuzz inputs describe a sparse file, so that a few kilobytes can stand for
// a complete file of 2 MiB pages:
//
//	u64 size, then segments {u64 offset, u32 length, length bytes}
//
// The file is size bytes (taken modulo maxFuzzSize+1) of zeros, overlaid by
// the segments in order. A segment's length is cut to what the input holds.
const maxFuzzSize = 16 << 20

func decodeSparse(in []byte) *sparseFile {
	if len(in) < 8 {
		return &sparseFile{}
	}
	sf := &sparseFile{size: int64(binary.LittleEndian.Uint64(in) % (maxFuzzSize + 1))}
	in = in[8:]
	for len(in) >= 12 {
		off := binary.LittleEndian.Uint64(in)
		n := min(uint64(binary.LittleEndian.Uint32(in[8:])), uint64(len(in)-12))
		if off < uint64(sf.size) {
			sf.segs = append(sf.segs, segment{int64(off), in[12 : 12+n]})
		}
		in = in[12+n:]
	}
	return sf
}

func encodeSparse(size int64, segs []segment) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(size))
	for _, s := range segs {
		out = binary.LittleEndian.AppendUint64(out, uint64(s.off))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(s.data)))
		out = append(out, s.data...)
	}
	return out
}

// nonZero returns the runs of b[lo:hi] that are not zero, as segments at
// their offsets in b; runs closer than 16 bytes are merged.
func nonZero(b []byte, lo, hi int64) []segment {
	var segs []segment
	for i := lo; i < hi; {
		if b[i] == 0 {
			i++
			continue
		}
		j, zeros := i, 0
		for ; j < hi && zeros < 16; j++ {
			if b[j] == 0 {
				zeros++
			} else {
				zeros = 0
			}
		}
		segs = append(segs, segment{i, b[i : j-int64(zeros)]})
		i = j
	}
	return segs
}

// compactSeed encodes a valid file as a fuzz input: its header, descriptors,
// metadata and allocation table, and of each allocation at most keep bytes
// (enough for a JPEG's frame header); the rest reads as zeros.
func compactSeed(t testing.TB, b []byte, keep uint64) []byte {
	t.Helper()
	f, err := beton.Open(bytes.NewReader(b), int64(len(b)), "seed")
	if err != nil {
		t.Fatal(err)
	}
	metaEnd := beton.HeaderSize + int64(len(f.Fields()))*beton.DescriptorSize + int64(f.NumSamples()*f.RecordLayout().RecordSize)
	segs := nonZero(b, 0, metaEnd)
	for _, a := range f.Allocs() {
		segs = append(segs, nonZero(b, int64(a.Ptr), int64(a.Ptr+min(a.Size, keep)))...)
	}
	segs = append(segs, nonZero(b, int64(f.Header().AllocTablePtr), int64(len(b)))...)
	return encodeSparse(int64(len(b)), segs)
}

// fuzzSeeds returns valid files as fuzz inputs: small ones built here (every
// field type, several pages, only empty values, only scalars) and every
// fixture found.
func fuzzSeeds(t testing.TB) [][]byte {
	t.Helper()
	var seeds [][]byte
	for _, b := range seedFiles(t) {
		seeds = append(seeds, compactSeed(t, b, 1<<10))
	}
	for _, p := range fixtureBetons(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, compactSeed(t, b, 320))
	}
	return seeds
}

func seedFiles(t testing.TB) [][]byte {
	t.Helper()
	var files [][]byte
	small, err := buildTestFile(6, 100)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, small)
	// The same, its ndarray field declared a torch tensor.
	tensor := bytes.Clone(small)
	tensor[beton.HeaderSize+3*beton.DescriptorSize] = byte(beton.TypeTorchTensor)
	files = append(files, tensor)
	// Samples over three pages; their blobs are zeros, so the seed stays small.
	paged, err := buildSeedFile(t, []beton.Field{{Type: beton.TypeBytes, Name: "blob"}, {Type: beton.TypeJSON, Name: "meta"}, {Type: beton.TypeInt, Name: "label"}}, 5,
		func(i int) []beton.Value {
			return []beton.Value{{Data: make([]byte, (i%3)*(900<<10))}, {Data: []byte(`{"k": [1, 2]}`)}, {Int: int64(i)}}
		})
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, paged)
	// Only empty values: no data pages.
	empty, err := buildSeedFile(t, []beton.Field{{Type: beton.TypeBytes, Name: "blob"}, {Type: beton.TypeFloat, Name: "w"}}, 4,
		func(i int) []beton.Value { return []beton.Value{{}, {Float: float64(i)}} })
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, empty)
	// Only scalars: no allocation table.
	scalars, err := buildSeedFile(t, []beton.Field{{Type: beton.TypeInt, Name: "label"}, {Type: beton.TypeFloat, Name: "w"}}, 3,
		func(i int) []beton.Value { return []beton.Value{{Int: int64(i) - 1}, {Float: float64(i) / 3}} })
	if err != nil {
		t.Fatal(err)
	}
	return append(files, scalars)
}

func buildSeedFile(t testing.TB, fields []beton.Field, n int, vals func(i int) []beton.Value) ([]byte, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seed.beton")
	w, err := beton.Create(path, fields, n, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		return nil, err
	}
	for i := range n {
		if err := w.WriteSample(vals(i)); err != nil {
			w.Abort()
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}

// FuzzOpen opens arbitrary files and uses every accessor on what opens. The
// reader must not panic, must report every problem as an error that wraps a
// sentinel and names the file, and must not allocate more than the file's
// size justifies.
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkOpen(t, decodeSparse(in))
	})
}

const fuzzName = "fuzz.beton"

func checkOpen(t *testing.T, sf *sparseFile) {
	size := uint64(sf.size)
	var ms0, ms1, ms2 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var f *beton.File
	var err error
	noPanic(t, "Open", func() { f, err = beton.Open(sf, sf.size, fuzzName) })
	runtime.ReadMemStats(&ms1)
	// The metadata and allocation tables are read whole; per sample and
	// per allocation Open keeps a few words more.
	if used := ms1.TotalAlloc - ms0.TotalAlloc; used > 4*size+1<<20 {
		t.Fatalf("Open of a %d-byte file allocated %d bytes", size, used)
	}
	if err != nil {
		if !errors.Is(err, beton.ErrCorrupt) && !errors.Is(err, beton.ErrVersion) && !errors.Is(err, beton.ErrNotBeton) && !errors.Is(err, beton.ErrUnsupported) {
			t.Fatalf("Open: error wraps no sentinel: %v", err)
		}
		if !strings.HasPrefix(err.Error(), fuzzName+": ") {
			t.Fatalf("Open: error does not begin with the file name: %v", err)
		}
		return
	}
	exercise(t, f)
	if f.HasNames() {
		var names []string
		noPanic(t, "Names", func() { names, err = f.Names() })
		if err == nil && len(names) != f.NumSamples() {
			t.Fatalf("Names: %d names for %d samples", len(names), f.NumSamples())
		}
		if err != nil && (!errors.Is(err, beton.ErrCorrupt) || !strings.HasPrefix(err.Error(), fuzzName+": ")) {
			t.Fatalf("Names: %v", err)
		}
	}
	var errs []error
	noPanic(t, "Verify", func() { errs = beton.Verify(f, beton.VerifyOptions{All: true}) })
	for _, err := range errs {
		checkSampleErr(t, f, err)
	}
	runtime.ReadMemStats(&ms2)
	// A page buffer, and an error message or two per value.
	values := uint64(f.NumSamples()) * uint64(len(f.Fields()))
	if used := ms2.TotalAlloc - ms1.TotalAlloc; used > 2*size+4<<10*values+1<<20 {
		t.Fatalf("accessors and Verify on a %d-byte file of %d samples allocated %d bytes", size, f.NumSamples(), used)
	}
}

// TestFuzzOpenLong runs the fuzz target for a while (60 s, or
// $FFCVFS_FUZZTIME). New crashers land in testdata/fuzz, to be fixed
// and committed.
func TestFuzzOpenLong(t *testing.T) {
	if os.Getenv("FFCVFS_FUZZ") != "1" {
		t.Skip("long fuzz run: set FFCVFS_FUZZ=1 (not part of CI)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	for _, run := range []struct{ target, time string }{{"FuzzOpen", "60s"}} {
		if d := os.Getenv("FFCVFS_FUZZTIME"); d != "" {
			run.time = d
		}
		// Each exec reads 2 MiB pages: minimizing a new input for the default
		// minute would stall the run.
		cmd := exec.Command(goTool, "test", "-run", "^$", "-fuzz", "^"+run.target+"$", "-fuzztime", run.time, "-fuzzminimizetime", "10s", ".")
		out, err := cmd.CombinedOutput()
		t.Logf("%s:\n%s", run.target, out)
		if err != nil {
			t.Errorf("%s: %v", run.target, err)
		}
	}
}

// The fuzz encoding of a file, with its allocations kept whole, reads back as
// the file; with them cut, it still opens and, for the files built here,
// verifies (their values fit in what is kept).
func TestFuzzEncoding(t *testing.T) {
	for i, b := range seedFiles(t) {
		sf := decodeSparse(compactSeed(t, b, 1<<62))
		if got := sf.bytesAt(0, int(sf.size)); !bytes.Equal(got, b) {
			t.Errorf("seed file %d: decoded file differs at %d (%d bytes, want %d)", i, firstDiff(got, b), len(got), len(b))
		}
		in := compactSeed(t, b, 1<<10)
		f, err := beton.Open(decodeSparse(in), int64(len(b)), "seed")
		if err != nil {
			t.Fatalf("seed file %d: %v", i, err)
		}
		if errs := beton.Verify(f, beton.VerifyOptions{All: true}); len(errs) > 0 {
			t.Errorf("seed file %d: %v", i, errs)
		}
		t.Logf("seed file %d: %d bytes, %d pages, fuzz input %d bytes", i, len(b), f.NumPages(), len(in))
	}
	for _, p := range fixtureBetons(t) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeSparse(compactSeed(t, b, 1<<62)).bytesAt(0, len(b)); !bytes.Equal(got, b) {
			t.Errorf("%s: decoded file differs at %d", p, firstDiff(got, b))
		}
		in := compactSeed(t, b, 320)
		f, err := beton.Open(decodeSparse(in), int64(len(b)), "seed")
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		// The JPEG frame headers are kept: only raw images and other values
		// longer than what is kept may fail to verify.
		for _, err := range beton.Verify(f, beton.VerifyOptions{All: true}) {
			if strings.Contains(err.Error(), "JPEG") {
				t.Errorf("%s: %v", p, err)
			}
		}
		t.Logf("%s: fuzz input %d bytes", filepath.Base(p), len(in))
	}
}
