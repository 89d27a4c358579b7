package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/s3test"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/internal/toxitest"
)

// The storage tests mount a beton from a real S3 server (versitygw) and
// break the way to it with toxiproxy, a gate that answers 503, or by
// stopping the server, replacing the object or sending SIGTERM. Faults are
// turned on and off on events (a retry in the mount's log), never after a
// wait; the time limits below only bound a test that hangs.

const storageBucket = "datasets"

// sampleFile is a file of a mount, with the bytes of the image it was
// written from.
type sampleFile struct {
	rel  string // class/sample.jpg
	page int64
	want []byte
}

// storageRig is a beton in a real S3 server, a toxiproxy to put in front of
// the server, and what each file of a mount of the beton must hold.
type storageRig struct {
	srv     *s3test.Server
	tp      *toxitest.Server
	key     string
	data    []byte // the beton
	classes string // its classes file
	files   []sampleFile
	byPage  map[int64][]sampleFile
	pages   []int64 // the data pages, in order
}

// newStorageRig writes the ImageFolder tree src into a beton of pageSize
// pages, stores it in a fresh versitygw under key and starts toxiproxy.
func newStorageRig(t *testing.T, src, key, pageSize string) *storageRig {
	t.Helper()
	needFUSE(t)
	dir := t.TempDir()
	out, classes := filepath.Join(dir, "data.beton"), filepath.Join(dir, "classes.txt")
	// The JPEGs as they are: reads are checked against the source files.
	run(t, 0, binary(t, "ffcvfs"), "write", "--restart-interval", "0", "--page-size", pageSize, "--classes-out", classes, src, out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f, err := beton.Open(bytes.NewReader(data), int64(len(data)), out)
	if err != nil {
		t.Fatal(err)
	}
	r := &storageRig{key: key, data: data, classes: classes, byPage: map[int64][]sampleFile{}}
	r.files = expectedFiles(t, src, classes, f)
	for _, sf := range r.files {
		if r.byPage[sf.page] == nil {
			r.pages = append(r.pages, sf.page)
		}
		r.byPage[sf.page] = append(r.byPage[sf.page], sf)
	}
	sort.Slice(r.pages, func(i, j int) bool { return r.pages[i] < r.pages[j] })
	r.srv = s3test.Start(t)
	r.srv.CreateBucket(t, storageBucket)
	r.srv.PutObject(t, storageBucket, key, data)
	r.tp = toxitest.Start(t)
	return r
}

// expectedFiles lists the files that a mount of f with the classes file
// serves, each with the bytes of its source image: the n-th sample of a
// label is the n-th image, in name order, of that class's folder in src.
func expectedFiles(t *testing.T, src, classesFile string, f *beton.File) []sampleFile {
	t.Helper()
	b, err := os.ReadFile(classesFile)
	if err != nil {
		t.Fatal(err)
	}
	classes := strings.Fields(string(b))
	field := f.FieldIndex("label")
	if field < 0 {
		t.Fatalf("%s has no label field", f.Name())
	}
	byLabel := map[int64][]int{}
	for i := range f.NumSamples() {
		l := f.Int(i, field)
		byLabel[l] = append(byLabel[l], i)
	}
	idWidth := len(strconv.Itoa(f.NumSamples() - 1))
	var files []sampleFile
	for label, class := range classes {
		ents, err := os.ReadDir(filepath.Join(src, class))
		if err != nil {
			t.Fatal(err)
		}
		ids := byLabel[int64(label)]
		if len(ids) != len(ents) {
			t.Fatalf("class %s: %d samples in the beton, %d images in %s", class, len(ids), len(ents), src)
		}
		for k, id := range ids { // ReadDir sorts by name
			want, err := os.ReadFile(filepath.Join(src, class, ents[k].Name()))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, sampleFile{
				rel:  filepath.Join(class, fmt.Sprintf("%0*d.jpg", idWidth, id)),
				page: f.SamplePage(id),
				want: want,
			})
		}
	}
	return files
}

// mount mounts the beton from S3 through endpoint.
func (r *storageRig) mount(t *testing.T, endpoint, key string, args ...string) *mountProc {
	t.Helper()
	args = append([]string{"--classes", r.classes, "--s3-endpoint", endpoint, "--s3-path-style"}, args...)
	return startMount(t, r.srv.Env(), "s3://"+storageBucket+"/"+key, args...)
}

// serverAddr is the S3 server's host:port.
func (r *storageRig) serverAddr() string { return strings.TrimPrefix(r.srv.Endpoint(), "http://") }

// checkRead reads a file of the mount and compares it with its source
// image.
func checkRead(mnt string, sf sampleFile) error {
	got, err := os.ReadFile(filepath.Join(mnt, sf.rel))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, sf.want) {
		return fmt.Errorf("%s: read %d bytes that differ from the source image (%d bytes)", sf.rel, len(got), len(sf.want))
	}
	return nil
}

// readAll reads every file with each of n goroutines, each in an order of
// its own, and returns the errors.
func readAll(mnt string, files []sampleFile, n int) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for _, i := range rng.Perm(len(files)) {
				if err := checkRead(mnt, files[i]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// checkReadsAll fails the test unless every file reads right from n
// goroutines at once.
func checkReadsAll(t *testing.T, mnt string, files []sampleFile, n int) {
	t.Helper()
	if errs := readAll(mnt, files, n); len(errs) > 0 {
		t.Errorf("%d of %d reads failed, first: %v", len(errs), n*len(files), errs[0])
	}
}

func readStorageStats(mnt string) (control.Stats, error) { return control.ReadStats(mnt) }

func mustStorageStats(t *testing.T, mnt string) control.Stats {
	t.Helper()
	s, err := readStorageStats(mnt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// logCount counts substr in the mount's log.
func logCount(p *mountProc, substr string) int { return strings.Count(p.stderr.String(), substr) }

// waitLog waits until the mount's log holds substr n times, woken by each
// write to it.
func waitLog(t *testing.T, p *mountProc, substr string, n int) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		written := p.stderr.Written()
		if strings.Count(p.stderr.String(), substr) >= n {
			return
		}
		select {
		case <-written:
		case <-p.exited:
			t.Fatalf("the mount exited (%s) while waiting for %q in its log:\n%s", p.cmd.ProcessState, substr, p.stderr)
		case <-deadline:
			t.Fatalf("%q not %d times in the mount's log after a minute:\n%s", substr, n, p.stderr)
		}
	}
}

// waitRead waits for the result of a read started in a goroutine.
func waitRead(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: no result after 2 minutes", what)
		return nil
	}
}

// logLine is a line of a mount's log (slog's text format).
type logLine struct {
	level, msg, cause, text string
}

var logAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`)

func parseLog(s string) []logLine {
	var lines []logLine
	for _, text := range strings.Split(s, "\n") {
		l := logLine{text: text}
		for _, m := range logAttr.FindAllStringSubmatch(text, -1) {
			v := m[2]
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			switch m[1] {
			case "level":
				l.level = v
			case "msg":
				l.msg = v
			case "cause":
				l.cause = v
			}
		}
		if l.level != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// checkLoggedOnce checks the mount's log from byte since on, written while
// a fault lasts: at least one error, each cause in one error line at most,
// and at most one retry warning per cause. It returns the causes of the
// errors.
func checkLoggedOnce(t *testing.T, p *mountProc, since int) []string {
	t.Helper()
	var causes []string
	errs := map[string]int{}
	warns := map[string]int{}
	for _, l := range parseLog(p.stderr.String()[since:]) {
		switch {
		case l.level == "ERROR":
			if l.cause == "" {
				t.Errorf("an error line names no cause: %s", l.text)
			}
			if errs[l.cause]++; errs[l.cause] == 2 {
				t.Errorf("cause %q logged again: %s", l.cause, l.text)
			}
			causes = append(causes, l.cause)
		case l.level == "WARN" && strings.Contains(l.msg, "retrying"):
			if warns[l.cause]++; warns[l.cause] == 2 {
				t.Errorf("retries of cause %q warned of again: %s", l.cause, l.text)
			}
		}
	}
	if len(errs) == 0 {
		t.Errorf("no error in the mount's log since the fault:\n%s", p.stderr)
	}
	return causes
}

// checkAlive fails the test if the mount process has exited.
func checkAlive(t *testing.T, p *mountProc) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("the mount exited: %s\n%s", p.cmd.ProcessState, p.stderr)
	default:
	}
}

// stallToxic lets no request through to the server, and keeps the
// connection open: the server never answers. (Upstream, as downstream the
// server's closing of a connection would close it; and not a huge latency,
// as toxiproxy cannot remove that while a connection waits in it.)
var stallToxic = toxitest.Toxic{Name: "stall", Type: "timeout", Stream: "upstream"}

// storageFault is a way to the S3 server (endpoint) that a test breaks with
// on and mends with off.
type storageFault struct {
	endpoint string
	on, off  func(t *testing.T)
}

// toxicFault puts a proxy with toxic x between the mount and the server.
func (r *storageRig) toxicFault(t *testing.T, x toxitest.Toxic) storageFault {
	px := r.tp.Proxy(t, strings.ReplaceAll(t.Name(), "/", "-"), r.serverAddr())
	return storageFault{
		endpoint: "http://" + px.Addr(),
		on:       func(t *testing.T) { px.AddToxic(t, x) },
		off:      func(t *testing.T) { px.RemoveToxic(t, x.Name) },
	}
}

// downFault puts a proxy between the mount and the server that on
// disables: connections are closed and refused.
func (r *storageRig) downFault(t *testing.T) storageFault {
	px := r.tp.Proxy(t, strings.ReplaceAll(t.Name(), "/", "-"), r.serverAddr())
	return storageFault{
		endpoint: "http://" + px.Addr(),
		on:       func(t *testing.T) { px.Disable(t) },
		off:      func(t *testing.T) { px.Enable(t) },
	}
}

// stoppedFault stops the S3 server itself and starts it again.
func (r *storageRig) stoppedFault(t *testing.T) storageFault {
	stopped := false
	t.Cleanup(func() {
		if stopped {
			r.srv.Restart(t)
		}
	})
	return storageFault{
		endpoint: r.srv.Endpoint(),
		on:       func(t *testing.T) { r.srv.Stop(); stopped = true },
		off:      func(t *testing.T) { r.srv.Restart(t); stopped = false },
	}
}

// unavailableGate is a reverse proxy in front of the S3 server that answers
// 503 SlowDown to reads (ranged GETs): the next failFirst of them, and all
// while down is set.
type unavailableGate struct {
	failFirst atomic.Int64
	down      atomic.Bool
}

func (r *storageRig) gate(t *testing.T) (*unavailableGate, string) {
	g := &unavailableGate{}
	up, err := url.Parse(r.srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	// Host stays the gate's: the client signed its requests for it.
	rp := httputil.NewSingleHostReverseProxy(up)
	tr := &http.Transport{}
	rp.Transport = tr
	t.Cleanup(tr.CloseIdleConnections)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && req.Header.Get("Range") != "" && (g.down.Load() || g.failFirst.Add(-1) >= 0) {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return g, srv.URL
}

func (r *storageRig) unavailableFault(t *testing.T) storageFault {
	g, endpoint := r.gate(t)
	return storageFault{
		endpoint: endpoint,
		on:       func(*testing.T) { g.down.Store(true) },
		off:      func(*testing.T) { g.down.Store(false) },
	}
}

// TestStorageFaults: with S3 behind faults that go away, reads retry and
// return the right bytes; with faults that last past the read deadline, a
// read returns EIO to its reader alone, is counted in stats.json and logged
// once per cause, and the mount stays up and reads everything once the
// fault is gone; a replaced object gives EIO, never bytes of the new
// version.
func TestStorageFaults(t *testing.T) {
	t.Parallel() // mostly waiting on faults: beside the other tests, with servers of its own
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "small/train.beton", "2MiB")
	if len(r.pages) < 3 {
		t.Fatalf("the beton has %d data pages; these tests need at least 3", len(r.pages))
	}

	t.Run("transient", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			fault func(t *testing.T) storageFault
		}{
			{"reset-peer", func(t *testing.T) storageFault {
				return r.toxicFault(t, toxitest.Toxic{Name: "reset", Type: "reset_peer"})
			}},
			{"limit-data", func(t *testing.T) storageFault {
				// Connections close after 64 KiB: every page read breaks
				// off in its body.
				return r.toxicFault(t, toxitest.Toxic{Name: "limit", Type: "limit_data", Attributes: map[string]int64{"bytes": 64 << 10}})
			}},
			{"stall", func(t *testing.T) storageFault {
				return r.toxicFault(t, stallToxic)
			}},
			{"server-stopped", r.stoppedFault},
			{"503", func(t *testing.T) storageFault {
				// The next three reads are refused; then the gate passes
				// them on.
				g, endpoint := r.gate(t)
				return storageFault{endpoint: endpoint, on: func(*testing.T) { g.failFirst.Store(3) }, off: func(*testing.T) {}}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := tc.fault(t)
				checkTransientFault(t, r, f)
			})
		}
	})

	t.Run("lasting", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			fault func(t *testing.T) storageFault
		}{
			{"reset-peer", func(t *testing.T) storageFault {
				return r.toxicFault(t, toxitest.Toxic{Name: "reset", Type: "reset_peer"})
			}},
			{"stall", func(t *testing.T) storageFault {
				return r.toxicFault(t, stallToxic)
			}},
			{"server-down", r.downFault},
			{"503", r.unavailableFault},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // each on a way of its own to the server
				f := tc.fault(t)
				checkLastingFault(t, r, f)
			})
		}
	})

	t.Run("object-replaced", func(t *testing.T) { checkObjectReplaced(t, r) })
	t.Run("random-order-by-ranges", func(t *testing.T) { checkRandomOrderByRanges(t, r) })
}

// checkTransientFault: a read that meets the fault retries until the fault
// is gone, then returns the right bytes; nothing counts as an error.
func checkTransientFault(t *testing.T, r *storageRig, f storageFault) {
	p := r.mount(t, f.endpoint, r.key, "--cache-size", "4MiB", "--attempt-timeout", "500ms", "--read-deadline", "1m")
	sf := r.byPage[r.pages[1]][0]
	retries := logCount(p, "retrying")
	f.on(t)
	done := make(chan error, 1)
	go func() { done <- checkRead(p.mnt, sf) }()
	waitLog(t, p, "retrying", retries+1) // the read met the fault
	f.off(t)
	if err := waitRead(t, done, "the read during the fault"); err != nil {
		t.Errorf("the read during the fault: %v\n%s", err, p.stderr)
	}
	checkReadsAll(t, p.mnt, r.files, 4)
	st := mustStorageStats(t, p.mnt)
	if st.Reads.Errors != 0 || st.Cache.ReadErrors != 0 {
		t.Errorf("stats.json counts %d read errors, %d page read errors; want none:\n%s", st.Reads.Errors, st.Cache.ReadErrors, p.stderr)
	}
	checkAlive(t, p)
}

// checkLastingFault: while the fault lasts, reads of pages not cached fail
// with EIO after the read deadline, and files of a cached page read fine at
// the same time; the failures are counted and logged once per cause; once
// the fault is gone every file reads right.
func checkLastingFault(t *testing.T, r *storageRig, f storageFault) {
	// A cache of 2 pages: the first stays, the other is for the failing
	// loads.
	p := r.mount(t, f.endpoint, r.key, "--cache-size", "4MiB", "--attempt-timeout", "1s", "--read-deadline", "3s")
	cached := r.byPage[r.pages[0]]
	checkReadsAll(t, p.mnt, cached, 1)

	retries, logStart := logCount(p, "retrying"), len(p.stderr.String())
	f.on(t)
	done := make(chan error, 1)
	go func() { done <- checkRead(p.mnt, r.byPage[r.pages[1]][0]) }()
	waitLog(t, p, "retrying", retries+1) // that read is failing now
	checkReadsAll(t, p.mnt, cached, 2)
	failed := 0
	err := waitRead(t, done, "the read during the fault")
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("the read during the fault: %v, want EIO", err)
	}
	failed++
	for _, pg := range r.pages[1:3] {
		sf := r.byPage[pg][1]
		if err := checkRead(p.mnt, sf); !errors.Is(err, syscall.EIO) {
			t.Errorf("%s: %v, want EIO", sf.rel, err)
		}
		failed++
	}
	st := mustStorageStats(t, p.mnt)
	if st.Reads.Errors < uint64(failed) || st.Cache.ReadErrors < 1 {
		t.Errorf("after %d failed reads stats.json counts %d read errors and %d page read errors", failed, st.Reads.Errors, st.Cache.ReadErrors)
	}
	causes := checkLoggedOnce(t, p, logStart)
	t.Logf("%d failed reads; causes logged: %q", failed, causes)
	checkAlive(t, p)

	f.off(t)
	checkReadsAll(t, p.mnt, r.files, 4)
	checkAlive(t, p)
}

// checkObjectReplaced: once the object is replaced (same size, other
// bytes), reads of pages not cached fail with EIO; no read returns bytes of
// the new object: those that succeed, from pages cached before, return the
// old ones.
func checkObjectReplaced(t *testing.T, r *storageRig) {
	const key = "small/replaced.beton"
	r.srv.PutObject(t, storageBucket, key, r.data)
	p := r.mount(t, r.srv.Endpoint(), key, "--cache-size", "4MiB")
	checkReadsAll(t, p.mnt, r.byPage[r.pages[0]], 1)

	other := bytes.Clone(r.data)
	for i := range other {
		other[i] ^= 0xA5
	}
	r.srv.PutObject(t, storageBucket, key, other)

	var eio, good atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for _, i := range rng.Perm(len(r.files)) {
				sf := r.files[i]
				switch err := checkRead(p.mnt, sf); {
				case err == nil:
					good.Add(1)
				case errors.Is(err, syscall.EIO):
					eio.Add(1)
				default:
					t.Errorf("after the object was replaced: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("after the object was replaced: %d reads right, %d EIO", good.Load(), eio.Load())
	if eio.Load() == 0 {
		t.Error("no read failed after the object was replaced")
	}
	st := mustStorageStats(t, p.mnt)
	if st.Reads.Errors < uint64(eio.Load()) {
		t.Errorf("stats.json counts %d read errors, the readers saw %d", st.Reads.Errors, eio.Load())
	}
	causes := checkLoggedOnce(t, p, 0)
	if len(causes) != 1 || !strings.Contains(causes[0], "object changed") {
		t.Errorf("causes logged %q, want the object's change only", causes)
	}
	checkAlive(t, p)
}

// checkRandomOrderByRanges: the mount's random order, announced, read with
// a cache of one page, is served by ranges: every file right, about the
// bytes read fetched, in no more requests than files. When the object is
// replaced halfway, the rest of the epoch reads the old bytes (ranges
// fetched before) or fails with EIO, never bytes of the new object.
func checkRandomOrderByRanges(t *testing.T, r *storageRig) {
	const key = "small/ranges.beton"
	r.srv.PutObject(t, storageBucket, key, r.data)
	p := r.mount(t, r.srv.Endpoint(), key, "--cache-size", "2MiB")
	rel := mountedFiles(t, p.mnt) // ImageFolder's order: the indices of orders
	byRel := map[string]sampleFile{}
	for _, sf := range r.files {
		byRel[sf.rel] = sf
	}
	text, err := os.ReadFile(control.Path(p.mnt, control.OrdersDir, "random", "0", "0"))
	if err != nil {
		t.Fatal(err)
	}
	var order []sampleFile
	for _, f := range strings.Fields(string(text)) {
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 || i >= len(rel) {
			t.Fatalf("order line %q: %v", f, err)
		}
		order = append(order, byRel[rel[i]])
	}
	// readFrom reads order[from:to] with 4 workers taking positions in
	// turn, as a DataLoader does.
	readFrom := func(from, to int, each func(sf sampleFile, err error)) {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < int64(to); i = next.Add(1) - 1 {
					each(order[i], checkRead(p.mnt, order[i]))
				}
			}()
		}
		wg.Wait()
	}
	half := len(order) / 2
	var read atomic.Int64
	readFrom(0, half, func(sf sampleFile, err error) {
		if err != nil {
			t.Error(err)
		}
		read.Add(int64(len(sf.want)))
	})
	st := mustStorageStats(t, p.mnt)
	t.Logf("first half: %d files, %d bytes; fetched %d bytes in %d requests (%d pages, %d ranges)", half, read.Load(), st.Cache.BytesRead, st.Cache.Requests, st.Cache.PagesRead, st.Cache.RangesRead)
	// What was read, and what is prefetched for the second half: at most
	// the budget.
	if st.Cache.RangesRead == 0 || float64(st.Cache.BytesRead) > 1.1*float64(read.Load())+float64(st.Cache.BudgetBytes) {
		t.Errorf("fetched %d bytes (%d ranges) to read %d", st.Cache.BytesRead, st.Cache.RangesRead, read.Load())
	}
	if st.Cache.Requests > uint64(half)+uint64(st.Cache.BudgetBytes)/uint64(read.Load()/int64(half)) {
		t.Errorf("%d requests to read %d files", st.Cache.Requests, half)
	}

	other := bytes.Clone(r.data)
	for i := range other {
		other[i] ^= 0xA5
	}
	r.srv.PutObject(t, storageBucket, key, other)
	var eio, good atomic.Int64
	readFrom(half, len(order), func(sf sampleFile, err error) {
		switch {
		case err == nil:
			good.Add(1)
		case errors.Is(err, syscall.EIO):
			eio.Add(1)
		default:
			t.Errorf("after the object was replaced: %v", err)
		}
	})
	t.Logf("second half, after the object was replaced: %d reads right (prefetched before), %d EIO", good.Load(), eio.Load())
	if eio.Load() == 0 {
		t.Error("no read failed after the object was replaced")
	}
	checkAlive(t, p)
}

// writeJPEGFolder writes classes×perClass JPEGs of about size bytes into
// dir/cNN/iNNNN.jpg: a few small encoded images, each made unique and large
// by comment segments of random bytes, which decoders skip. It is quick
// where encoding large images would not be.
func writeJPEGFolder(t *testing.T, dir string, classes, perClass, size int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var bases [][]byte
	for b := range 8 {
		img := image.NewRGBA(image.Rect(0, 0, 64+8*b, 64))
		for i := range img.Pix {
			img.Pix[i] = uint8(rng.IntN(256))
		}
		img.Set(0, 0, color.RGBA{A: 255})
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
			t.Fatal(err)
		}
		bases = append(bases, buf.Bytes())
	}
	fill := rand.NewChaCha8([32]byte{1})
	pad := make([]byte, size*5/4)
	for c := range classes {
		cd := filepath.Join(dir, fmt.Sprintf("c%02d", c))
		if err := os.MkdirAll(cd, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range perClass {
			base := bases[(c*perClass+i)%len(bases)]
			var out bytes.Buffer
			out.Write(base[:2]) // SOI
			rest := pad[:size*3/4+rng.IntN(size/2)]
			fill.Read(rest)
			for len(rest) > 0 {
				n := min(len(rest), 65533)
				out.Write([]byte{0xFF, 0xFE, byte((n + 2) >> 8), byte(n + 2)}) // COM and its length
				out.Write(rest[:n])
				rest = rest[n:]
			}
			out.Write(base[2:])
			if err := os.WriteFile(filepath.Join(cd, fmt.Sprintf("i%04d.jpg", i)), out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestStorageLoad: eight readers, each reading every file of an S3 mount in
// an order of its own, and ffcvfeed bench decoding two epochs through the
// same mount, on a cache of 64 MiB for a beton larger than that: every
// byte read is right, the cache never holds more than its budget, and
// everything finishes (a deadlock fails the test after 3 minutes).
func TestStorageLoad(t *testing.T) {
	const budget = 64 << 20
	src := filepath.Join(t.TempDir(), "tree")
	writeJPEGFolder(t, src, 10, 60, 150<<10)
	r := newStorageRig(t, src, "large/train.beton", "2MiB")
	if len(r.data) <= budget {
		t.Fatalf("the beton has %d bytes, not more than the budget of %d", len(r.data), budget)
	}
	ffcvfeed := binary(t, "ffcvfeed")
	p := r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "64MiB")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Watch stats.json while the load runs.
	var (
		watchDone = make(chan struct{})
		samples   int
		peak      int
		watchErrs []string
	)
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			st, err := readStorageStats(p.mnt)
			if err != nil {
				watchErrs = append(watchErrs, err.Error())
				continue
			}
			samples++
			held := st.Cache.Resident + st.Cache.Loading
			peak = max(peak, held)
			if st.Cache.BudgetBytes > budget || int64(st.Cache.Slots)*st.PageSize > budget || held > st.Cache.Slots {
				watchErrs = append(watchErrs, fmt.Sprintf("budget %d bytes, %d slots of %d bytes, %d pages resident and %d loading",
					st.Cache.BudgetBytes, st.Cache.Slots, st.PageSize, st.Cache.Resident, st.Cache.Loading))
			}
		}
	}()

	var wg sync.WaitGroup
	var readErrs []error
	var mu sync.Mutex
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for _, i := range rng.Perm(len(r.files)) {
				if ctx.Err() != nil {
					return
				}
				if err := checkRead(p.mnt, r.files[i]); err != nil {
					mu.Lock()
					readErrs = append(readErrs, err)
					mu.Unlock()
				}
			}
		}()
	}
	bench := exec.CommandContext(ctx, ffcvfeed, "bench", "--data", p.mnt, "--epochs", "2",
		"--batch-size", "32", "--resolution", "64", "--workers", "2", "--cache-size", "16MiB", "--on-error", "fail")
	benchOut, benchErr := bench.CombinedOutput()
	readersDone := make(chan struct{})
	go func() { wg.Wait(); close(readersDone) }()
	select {
	case <-readersDone:
	case <-ctx.Done():
	}
	close(stopWatch)
	<-watchDone
	if ctx.Err() != nil {
		_ = p.cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, into its log
		select {
		case <-p.exited:
		case <-time.After(testenv.Patience):
		}
		t.Fatalf("the load did not finish within 3 minutes (a deadlock?):\nffcvfeed bench: %s\nmount:\n%s", benchOut, p.stderr)
	}

	if benchErr != nil {
		t.Errorf("ffcvfeed bench: %v\n%s", benchErr, benchOut)
	} else if want := fmt.Sprintf("total: ffcvfeed bench: %d images", 2*len(r.files)); !strings.Contains(string(benchOut), want) ||
		!strings.Contains(string(benchOut), "(errors 0)") {
		t.Errorf("ffcvfeed bench does not say %q and (errors 0):\n%s", want, benchOut)
	}
	if len(readErrs) > 0 {
		t.Errorf("%d of %d reads failed or differ from the source, first: %v", len(readErrs), 8*len(r.files), readErrs[0])
	}
	for _, e := range watchErrs[:min(len(watchErrs), 5)] {
		t.Errorf("stats.json during the load: %s", e)
	}
	st := mustStorageStats(t, p.mnt)
	t.Logf("%d stats.json samples: at most %d of %d slots held; %d pages read from S3 (%d data pages), %d JPEG reads; ffcvfeed bench: %s",
		samples, peak, st.Cache.Slots, st.Cache.PagesRead, len(r.pages), st.Reads.JPG, lastLine(string(benchOut)))
	if samples == 0 {
		t.Error("stats.json could not be read during the load")
	}
	if st.Reads.Errors != 0 || st.Cache.ReadErrors != 0 {
		t.Errorf("stats.json counts %d read errors and %d page read errors", st.Reads.Errors, st.Cache.ReadErrors)
	}
	if st.Cache.PagesRead <= uint64(len(r.pages)) {
		t.Errorf("%d pages read from S3 for %d data pages: the budget did not make the cache evict", st.Cache.PagesRead, len(r.pages))
	}
	// The budget holds for the whole process too: its peak resident
	// memory is the cache's plus what any Go program with an S3 client
	// and a FUSE server needs (about 40 MiB).
	const allowance = 96 << 20
	hwm, err := peakRSS(p.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("mount process: %v", err)
	}
	t.Logf("mount process: peak resident memory %d MiB", hwm>>20)
	if hwm > budget+allowance {
		t.Errorf("mount process: peak resident memory %d MiB, more than the cache's %d MiB and %d MiB besides",
			hwm>>20, budget>>20, allowance>>20)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// peakRSS returns a process's peak resident memory (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM")
}

// TestStorageSIGTERMWhileReading: SIGTERM ends an S3 mount within 5 s
// while several readers keep it busy, also when their reads wait on a
// storage that has stopped answering, and leaves no mount behind.
func TestStorageSIGTERMWhileReading(t *testing.T) {
	t.Parallel() // mostly waiting on a stalled server: beside the other tests, with servers of its own
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "small/train.beton", "2MiB")
	for _, stalled := range []bool{false, true} {
		name := "busy"
		if stalled {
			name = "stalled"
		}
		t.Run(name, func(t *testing.T) {
			px := r.tp.Proxy(t, "sigterm-"+name, r.serverAddr())
			// A one-page cache: most reads go to S3.
			p := r.mount(t, "http://"+px.Addr(), r.key, "--cache-size", "2MiB", "--attempt-timeout", "1s")
			var (
				stop          = make(chan struct{})
				wg            sync.WaitGroup
				reads, failed atomic.Int64
			)
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 5))
					for {
						for _, i := range rng.Perm(len(r.files)) {
							select {
							case <-stop:
								return
							default:
							}
							// Errors are expected once the mount goes away.
							if checkRead(p.mnt, r.files[i]) != nil {
								failed.Add(1)
							} else {
								reads.Add(1)
							}
						}
					}
				}()
			}
			defer func() { close(stop); wg.Wait() }()
			// Let the readers get going: as many reads as files.
			deadline := time.Now().Add(time.Minute)
			for reads.Load() < int64(len(r.files)) {
				checkAlive(t, p)
				if failed.Load() > 0 || time.Now().After(deadline) {
					t.Fatalf("%d reads, %d failed before SIGTERM:\n%s", reads.Load(), failed.Load(), p.stderr)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if stalled {
				retries := logCount(p, "retrying")
				px.AddToxic(t, stallToxic)
				waitLog(t, p, "retrying", retries+1) // a read waits on the stalled storage
			}
			if f := failed.Load(); f != 0 {
				t.Errorf("%d reads failed before SIGTERM", f)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.exited:
			case <-time.After(testenv.Patience):
				t.Errorf("still running 5 s after SIGTERM (%d reads, %d failed):\n%s", reads.Load(), failed.Load(), p.stderr)
				_ = p.cmd.Process.Signal(syscall.SIGQUIT)
				<-p.exited
			}
			t.Logf("%d reads, %d failed; %s", reads.Load(), failed.Load(), p.cmd.ProcessState)
			if !p.cmd.ProcessState.Success() {
				t.Errorf("exit after SIGTERM: %s\n%s", p.cmd.ProcessState, p.stderr)
			}
			checkUnmounted(t, p.mnt)
		})
	}
}
