package tier

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// testPage returns a page of ps bytes cut into: smooth pixels (w wide),
// random bytes, text, a run of zeros; and its layout.
func testPage(ps int, seed uint64) ([]byte, []Chunk) {
	r := rand.New(rand.NewPCG(seed, 1))
	page := make([]byte, 0, ps)
	var layout []Chunk
	w, h := 61, 40
	for y := range h {
		for x := range w {
			for ch := range 3 {
				page = append(page, byte(x*3+y*2+ch*40+r.IntN(6)))
			}
		}
	}
	layout = append(layout, Chunk{Len: uint32(w * h * 3), Width: uint16(w)})
	n := 5000
	for range n {
		page = append(page, byte(r.Uint32()))
	}
	layout = append(layout, Chunk{Len: uint32(n)})
	text := bytes.Repeat([]byte(`{"label": 3, "name": "a photo"} `), 200)
	page = append(page, text...)
	layout = append(layout, Chunk{Len: uint32(len(text))})
	layout = append(layout, Chunk{Len: uint32(ps - len(page))})
	page = page[:ps]
	return page, layout
}

// testPages returns n pages of testPage (seeds seed, seed+1, ...) by data
// page, their layouts, and the Geometry of a source made of them.
func testPages(ps, n int, seed uint64) (map[int32][]byte, [][]Chunk, Geometry) {
	pages := map[int32][]byte{}
	var layouts [][]Chunk
	for i := range n {
		p, l := testPage(ps, seed+uint64(i))
		pages[int32(i)] = p
		layouts = append(layouts, l)
	}
	return pages, layouts, Geometry{PageSize: int64(ps), NumPages: n, Layout: func(dp int32) []Chunk { return layouts[dp] }}
}

func TestEntryRoundTrip(t *testing.T) {
	const ps = 64 << 10
	page, layout := testPage(ps, 1)
	for _, compress := range []bool{false, true} {
		enc, err := encodeEntry(nil, page, 7, 42, layout, compress)
		if err != nil {
			t.Fatal(err)
		}
		if compress && len(enc) > ps/2 {
			t.Errorf("compressed entry of %d bytes for a page of %d", len(enc), ps)
		}
		if !compress && len(enc) != ps+headerSize+indexEntry*len(layout) {
			t.Errorf("raw entry of %d bytes", len(enc))
		}
		ix, err := parseIndex(enc, 7, ps, 42, int64(len(enc)))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int{{0, ps}, {0, 1}, {100, 9000}, {7320, 7330}, {ps - 10, ps}, {7000, 20000}} {
			lo, hi := r[0], r[1]
			first, last := ix.span(int64(lo), int64(hi))
			got := make([]byte, hi-lo)
			from := ix.chunks[first].storedOff
			if err := ix.decodeSpan(got, int64(lo), first, last, enc[from:]); err != nil {
				t.Fatalf("compress %v, bytes %d to %d: %v", compress, lo, hi, err)
			}
			if !bytes.Equal(got, page[lo:hi]) {
				t.Fatalf("compress %v, bytes %d to %d differ", compress, lo, hi)
			}
		}
		if _, err := parseIndex(enc, 8, ps, 42, int64(len(enc))); err == nil {
			t.Error("an entry of page 7 passed for page 8")
		}
		if _, err := parseIndex(enc, 7, ps, 43, int64(len(enc))); err == nil {
			t.Error("an entry of another source passed")
		}
	}
}

// A JPEG-like page (random bytes) is stored as it is.
func TestEntryIncompressible(t *testing.T) {
	const ps = 64 << 10
	page := make([]byte, ps)
	r := rand.New(rand.NewPCG(3, 3))
	for i := range page {
		page[i] = byte(r.Uint32())
	}
	layout := []Chunk{{Len: 30000}, {Len: 30000}, {Len: ps - 60000}}
	enc, err := encodeEntry(nil, page, 0, 1, layout, true)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := parseIndex(enc, 0, ps, 1, int64(len(enc)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ix.chunks {
		if c.codec != codecRaw {
			t.Errorf("chunk of random bytes stored with codec %d", c.codec)
		}
	}
}

// Every flipped byte of an entry makes the read fail (or, in bytes the
// read does not need, changes nothing): never wrong bytes.
func TestEntryFlippedBytes(t *testing.T) {
	const ps = 16 << 10
	page, _ := testPage(ps, 2)
	layout := []Chunk{{Len: 61 * 40 * 3, Width: 61}, {Len: ps - 61*40*3}}
	enc, err := encodeEntry(nil, page, 1, 9, layout, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range enc {
		bad := bytes.Clone(enc)
		bad[i] ^= 0x10
		ix, err := parseIndex(bad, 1, ps, 9, int64(len(bad)))
		if err != nil {
			continue
		}
		got := make([]byte, ps)
		if err := ix.decodeSpan(got, 0, 0, len(ix.chunks)-1, bad[ix.chunks[0].storedOff:]); err == nil && !bytes.Equal(got, page) {
			t.Fatalf("byte %d flipped: wrong bytes served", i)
		}
	}
}

func TestMEDFilter(t *testing.T) {
	page, _ := testPage(64<<10, 4)
	px := page[:61*40*3]
	res := make([]byte, len(px))
	medFilter(res, px, 61*3)
	medUnfilter(res, 61*3)
	if !bytes.Equal(res, px) {
		t.Fatal("MED filter does not invert")
	}
}

func FuzzEntry(f *testing.F) {
	const ps = 16 << 10
	page, _ := testPage(ps, 5)
	layout := []Chunk{{Len: 61 * 40 * 3, Width: 61}, {Len: 3000}, {Len: ps - 61*40*3 - 3000}}
	for _, c := range []bool{false, true} {
		enc, _ := encodeEntry(nil, page, 0, 0, layout, c)
		f.Add(enc)
	}
	// Any bytes: an error or the page, never a panic. (Other bytes that
	// pass every checksum would need CRC-32C collisions.)
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := parseIndex(b, 0, ps, 0, int64(len(b)))
		if err != nil {
			return
		}
		got := make([]byte, ps)
		ix.decodeSpan(got, 0, 0, len(ix.chunks)-1, b[ix.chunks[0].storedOff:])
	})
}

func TestDiskStore(t *testing.T) {
	const ps = 64 << 10
	dir := filepath.Join(t.TempDir(), "cache")
	pages, layouts, geom := testPages(ps, 8, 10)
	src := Object{Name: "s3://b/k", Identity: "s3://b/k etag=1"}
	// Room for 3 compressed pages.
	enc, _ := encodeEntry(nil, pages[0], 0, 0, layouts[0], true)
	s, err := OpenDisk(dir, src, geom, Options{Budget: 3*blocks(int64(len(enc))) + 2048, Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	put := func(s *Store, dp int32) {
		done := make(chan struct{})
		if !s.Put(dp, pages[dp], func() { close(done) }) {
			t.Fatalf("page %d not taken", dp)
		}
		<-done
	}
	for dp := range int32(8) {
		put(s, dp)
	}
	s.Close()
	st := s.Stats()
	if st.Bytes > st.BudgetBytes || st.Entries == 0 || st.Entries > 3 || st.Evictions == 0 {
		t.Fatalf("stats %+v: want within budget, 1 to 3 entries, evictions", st)
	}
	// A second open starts warm; entries read back byte for byte.
	s, err = OpenDisk(dir, src, geom, Options{Budget: 1 << 20, Compress: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := make([]byte, 1000)
	hits := 0
	for dp := range int32(8) {
		if s.Read(dp, 5000, got) {
			hits++
			if !bytes.Equal(got, pages[dp][5000:6000]) {
				t.Fatalf("page %d: wrong bytes", dp)
			}
		}
	}
	if hits != st.Entries {
		t.Fatalf("%d hits after reopening, want %d", hits, st.Entries)
	}
	// Permissions.
	for _, p := range []string{dir, s.dir} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", p, fi.Mode().Perm())
		}
	}
	des, _ := os.ReadDir(s.dir)
	for _, de := range des {
		if fi, _ := de.Info(); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", de.Name(), fi.Mode().Perm())
		}
	}
	// Another version of the source: old entries never served, and
	// removed once nobody holds them.
	s.Close()
	s2, err := OpenDisk(dir, Object{Name: src.Name, Identity: "s3://b/k etag=2"}, geom, Options{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for dp := range int32(8) {
		if s2.Read(dp, 0, got) {
			t.Fatalf("page %d of the old version served", dp)
		}
	}
	if fs, _ := List(dir); len(fs) != 1 || fs[0].Identity != "s3://b/k etag=2" {
		t.Fatalf("folders after a new version: %+v", fs)
	}
}

// A --disk-cache folder of mode 0777
// was accepted and left so, and a version folder planted there by another
// user stopped every later mount. The folder is tightened (it is ours),
// and a planted version folder is moved aside, never used.
func TestDiskFolderOpenToOthers(t *testing.T) {
	const ps = 64 << 10
	dir := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	_, l := testPage(ps, 1)
	geom := Geometry{PageSize: ps, NumPages: 1, Layout: func(int32) []Chunk { return l }}
	src := Object{Name: "s3://b/k", Identity: "s3://b/k etag=1"}
	_, hexID := idOf(src.Identity)
	planted := filepath.Join(dir, hexID)
	if os.Getuid() == 0 {
		// Another user's version folder, planted while the folder was open.
		if err := os.Mkdir(planted, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(planted, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	s, err := OpenDisk(dir, src, geom, Options{Budget: 1 << 20})
	if err != nil {
		t.Fatalf("OpenDisk: %v", err)
	}
	defer s.Close()
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm()&0o022 != 0 || st.Mode()&os.ModeSticky != 0 {
		t.Errorf("cache folder %v after OpenDisk, want no write for group and others", st.Mode())
	}
	st, err = os.Stat(planted)
	if err != nil || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Getuid()) {
		t.Errorf("version folder %v (%v), want this user's, 0700", st.Mode(), err)
	}
	if os.Getuid() == 0 {
		aside, _ := filepath.Glob(filepath.Join(dir, ".foreign-"+hexID+"-*"))
		if len(aside) != 1 {
			t.Errorf("the planted folder was not moved aside: %v", aside)
		}
	}
	// A folder of another user is refused with a sentence.
	if os.Getuid() == 0 {
		other := filepath.Join(t.TempDir(), "other")
		os.Mkdir(other, 0o777)
		os.Chown(other, 65534, 65534)
		if _, err := OpenDisk(other, src, geom, Options{Budget: 1 << 20}); err == nil || !strings.Contains(err.Error(), "belongs to user 65534") {
			t.Errorf("OpenDisk of another user's folder: %v", err)
		}
	}
}

// TestPendingPages: a page taken is read from the buffer offered until it
// is stored; Put does not wait for a full queue, PutWait does, until its
// context ends.
func TestPendingPages(t *testing.T) {
	const ps = 64 << 10
	pages, layouts, geom := testPages(ps, 8, 30)
	stored := make(chan struct{}, 16)
	enc, _ := encodeEntry(nil, pages[0], 0, 0, layouts[0], false)
	s := NewMem(geom, Options{Budget: blocks(int64(len(enc))), Stored: func() { stored <- struct{}{} }})
	defer s.Close()
	if !s.Put(0, pages[0], func() {}) {
		t.Fatal("page 0 not taken")
	}
	<-stored
	// The writer, making room for page 1, waits in the rank function.
	ranking, gate := make(chan struct{}, 1), make(chan struct{})
	s.SetRank(func(int32) int {
		select {
		case ranking <- struct{}{}:
		default:
		}
		<-gate
		return Never
	})
	var done1 atomic.Bool
	if !s.Put(1, pages[1], func() { done1.Store(true) }) {
		t.Fatal("page 1 not taken")
	}
	<-ranking
	got := make([]byte, 5000)
	if !s.Read(1, 7000, got) || !bytes.Equal(got, pages[1][7000:12000]) {
		t.Fatal("page 1, taken and not stored, was not read from its buffer")
	}
	if s.Wants(1) || done1.Load() {
		t.Fatalf("page 1 pending: wanted %v, done %v", s.Wants(1), done1.Load())
	}
	for dp := int32(2); dp < 2+queueLen; dp++ {
		if !s.Put(dp, pages[dp], func() {}) {
			t.Fatalf("page %d not taken with room in the queue", dp)
		}
	}
	if s.Put(6, pages[6], func() {}) {
		t.Fatal("page 6 taken with the queue full")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s.PutWait(ctx, 6, pages[6], func() {}) {
		t.Fatal("PutWait took page 6 with the queue full and its context ended")
	}
	if s.Put(6, make([]byte, ps-1), func() {}) {
		t.Fatal("a short page was taken")
	}
	waited := make(chan bool)
	go func() { waited <- s.PutWait(context.Background(), 6, pages[6], func() {}) }()
	close(gate)
	if !<-waited {
		t.Fatal("PutWait did not take page 6 once the queue had room")
	}
	for range 5 {
		<-stored
	}
	if !done1.Load() {
		t.Error("page 1's done not called after it was stored")
	}
	if st := s.Stats(); st.Skipped != 2 {
		t.Errorf("skipped %d, want 2 (Put and PutWait with its context ended)", st.Skipped)
	}
}

// TestKeptPages: the pages SetKeep names displace the others, even with
// more of them than an eviction ranks at once and every page needed now;
// they go when no other is left and they are named no more, or, when all
// the room is theirs, for another named page (the least recently used
// goes: a share larger than the budget is read once a pass, where it was
// refused and read again for every read of it).
func TestKeptPages(t *testing.T) {
	const ps = 16 << 10
	const n = 32
	pages := map[int32][]byte{}
	for i := range int32(n) {
		r := rand.NewChaCha8([32]byte{byte(i)})
		pages[i] = make([]byte, ps)
		r.Read(pages[i])
	}
	layout := []Chunk{{Len: ps}}
	geom := Geometry{PageSize: ps, NumPages: n, Layout: func(int32) []Chunk { return layout }}
	stored := make(chan struct{}, n)
	enc, _ := encodeEntry(nil, pages[0], 0, 0, layout, false)
	s := NewMem(geom, Options{Budget: 20 * blocks(int64(len(enc))), Stored: func() { stored <- struct{}{} }})
	defer s.Close()
	s.SetRank(func(int32) int { return 0 }) // every page needed now
	var keepBelow atomic.Int32
	keepBelow.Store(18)
	s.SetKeep(func(dp int32) bool { return dp < keepBelow.Load() || dp == 20 || dp == 22 || dp == 23 || dp == 24 })
	put := func(dp int32) {
		t.Helper()
		if !s.Put(dp, pages[dp], func() {}) {
			t.Fatalf("page %d not taken", dp)
		}
		<-stored
	}
	held := func(dp int32) bool {
		got := make([]byte, 100)
		return s.Read(dp, 50, got) && bytes.Equal(got, pages[dp][50:150])
	}
	for dp := range int32(20) { // 18 kept pages, then 2 others: full
		put(dp)
	}
	put(20) // kept: displaces one of the others
	put(21) // not kept, needed no later than the other left: refused
	put(22) // kept: displaces the last other
	put(23) // kept, and only kept pages left: displaces the least recently used, 0
	for dp := range int32(n) {
		want := dp > 0 && dp < 18 || dp == 20 || dp == 22 || dp == 23
		if held(dp) != want {
			t.Errorf("page %d held %v, want %v", dp, !want, want)
		}
	}
	keepBelow.Store(10) // pages 10 to 17 are named no more
	put(24)
	if !held(24) || s.Stats().Entries != 20 {
		t.Errorf("page 24 held %v, %d entries: want it in place of a page named no more", held(24), s.Stats().Entries)
	}
	for dp := int32(1); dp < 10; dp++ {
		if !held(dp) {
			t.Errorf("page %d, still named, gone", dp)
		}
	}
}
