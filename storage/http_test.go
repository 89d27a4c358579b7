package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// rangeServer serves one object with Range, ETag and Last-Modified through
// http.ServeContent (which honours If-Match and If-Unmodified-Since), with
// faults that tests inject.
type rangeServer struct {
	*httptest.Server
	heads atomic.Int32
	gets  atomic.Int32 // GETs with a Range header other than the open probe

	mu      sync.Mutex
	data    []byte
	etag    string
	modTime time.Time
	// fault, if set, sees every request first (with n, the count of its
	// method so far) and returns true when it has answered.
	fault func(w http.ResponseWriter, r *http.Request, n int) bool
}

func newRangeServer(t *testing.T, data []byte) *rangeServer {
	t.Helper()
	s := &rangeServer{data: data, etag: `"v1"`, modTime: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func (s *rangeServer) serve(w http.ResponseWriter, r *http.Request) {
	var n int
	switch {
	case r.Method == http.MethodHead:
		n = int(s.heads.Add(1))
	case r.Header.Get("Range") != "bytes=0-0":
		n = int(s.gets.Add(1))
	}
	s.mu.Lock()
	data, etag, mod, fault := s.data, s.etag, s.modTime, s.fault
	s.mu.Unlock()
	if fault != nil && fault(w, r, n) {
		return
	}
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(w, r, "", mod, bytes.NewReader(data))
}

// replace changes the object.
func (s *rangeServer) replace(data []byte, etag string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.etag, s.modTime = data, etag, s.modTime.Add(time.Hour)
}

func (s *rangeServer) setFault(f func(w http.ResponseWriter, r *http.Request, n int) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// isRangedGet: a GET for data, not the open probe.
func isRangedGet(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("Range") != "bytes=0-0"
}

// fastHTTPOptions keeps failing tests quick: tiny backoff, small parts.
func fastHTTPOptions(log bool) (Options, *testenv.OutputBuffer) {
	l, buf := captureLogger()
	if !log {
		l = discardLogger()
	}
	return Options{
		Logger:         l,
		PartSize:       64 << 10,
		Parallel:       4,
		AttemptTimeout: 5 * time.Second,
		ReadDeadline:   30 * time.Second,
		MaxRetries:     4,
		BackoffBase:    time.Millisecond,
		BackoffMax:     10 * time.Millisecond,
	}, buf
}

func openHTTP(t *testing.T, url string, opts Options) *HTTPSource {
	t.Helper()
	src, err := OpenHTTP(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

func TestHTTPSourceRandomRanges(t *testing.T) {
	data := randomBytes(3<<20+17, 1)
	srv := newRangeServer(t, data)
	opts, _ := fastHTTPOptions(false)
	src := openHTTP(t, srv.URL+"/x.beton", opts)
	if src.Size() != int64(len(data)) || src.Name() != srv.URL+"/x.beton" || src.ETag() != `"v1"` {
		t.Fatalf("size %d name %q etag %s", src.Size(), src.Name(), src.ETag())
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 25 {
				off := rng.Int64N(int64(len(data)) + 10)
				n := 1 + rng.IntN(600<<10)
				if g == 0 {
					n = 1 + rng.IntN(100)
				}
				p := make([]byte, n)
				got, err := src.ReadAt(context.Background(), p, off)
				want := max(0, min(n, len(data)-int(off)))
				if got != want || (got < n) != (err == io.EOF) || (got == n && err != nil) ||
					got > 0 && !bytes.Equal(p[:got], data[off:off+int64(got)]) {
					t.Errorf("ReadAt(%d at %d) = %d, %v; want %d bytes", n, off, got, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	checkReadAt(t, src, data, make([]byte, len(data)), 0)
}

func TestHTTPSourceRetries503(t *testing.T) {
	data := randomBytes(1000, 2)
	srv := newRangeServer(t, data)
	srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if isRangedGet(r) && n <= 2 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	opts, logs := fastHTTPOptions(true)
	src := openHTTP(t, srv.URL, opts)
	checkReadAt(t, src, data, make([]byte, 500), 100)
	if n := srv.gets.Load(); n != 3 {
		t.Errorf("%d GETs, want 3", n)
	}
	if n := strings.Count(logs.String(), "retrying"); n != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", n, logs)
	}
}

func TestHTTPSourceRetriesConnectionResetMidBody(t *testing.T) {
	data := randomBytes(200<<10, 3)
	srv := newRangeServer(t, data)
	srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if !isRangedGet(r) || n != 1 {
			return false
		}
		// Send the headers and half the body, then reset the connection.
		var a, b int
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &a, &b)
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return true
		}
		fmt.Fprintf(bw, "HTTP/1.1 206 Partial Content\r\nETag: \"v1\"\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\n\r\n",
			a, b, len(data), b-a+1)
		bw.Write(data[a : a+(b-a+1)/2])
		bw.Flush()
		conn.(*net.TCPConn).SetLinger(0) // close with RST
		conn.Close()
		return true
	})
	opts, logs := fastHTTPOptions(true)
	opts.PartSize = 1 << 20
	src := openHTTP(t, srv.URL, opts)
	checkReadAt(t, src, data, make([]byte, 100<<10), 1000)
	if n := srv.gets.Load(); n != 2 {
		t.Errorf("%d GETs, want 2", n)
	}
	if !strings.Contains(logs.String(), "retrying") {
		t.Errorf("no retry logged:\n%s", logs)
	}
}

func TestHTTPSourceChangedObject(t *testing.T) {
	data := randomBytes(1<<20, 4)
	other := randomBytes(1<<20, 5)
	for _, tc := range []struct {
		name   string
		ignore bool // the server ignores If-Match: the response's ETag gives it away
	}{{"412", false}, {"etag", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRangeServer(t, data)
			opts, _ := fastHTTPOptions(false)
			src := openHTTP(t, srv.URL+"/x", opts)
			var served atomic.Int32
			srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
				if tc.ignore {
					r.Header.Del("If-Match")
					r.Header.Del("If-Unmodified-Since")
				}
				// The object changes after the first part was served.
				if isRangedGet(r) && served.Add(1) == 2 {
					srv.replace(other, `"v2"`)
				}
				return false
			})
			p := make([]byte, 1<<20)
			n, err := src.ReadAt(context.Background(), p, 0)
			if !errors.Is(err, ErrChanged) || n != 0 {
				t.Fatalf("ReadAt = %d, %v; want 0, ErrChanged", n, err)
			}
			t.Logf("error: %v", err)
			for _, s := range []string{srv.URL + "/x", `opened with ETag "v1"`, `now has "v2"`} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if errors.Is(err, ErrUnavailable) {
				t.Errorf("a changed object was reported as unavailable: %v", err)
			}
			// Not retried: every part was asked for once at most.
			if g := srv.gets.Load(); g > 16 {
				t.Errorf("%d GETs for 16 parts", g)
			}
			if _, err := src.ReadAt(context.Background(), p[:10], 0); !errors.Is(err, ErrChanged) {
				t.Errorf("a later read: %v, want ErrChanged", err)
			}
		})
	}
}

func TestHTTPSourceLastModifiedOnly(t *testing.T) {
	data := randomBytes(10000, 6)
	srv := newRangeServer(t, data)
	srv.replace(data, "") // no ETag: If-Unmodified-Since guards the reads
	opts, logs := fastHTTPOptions(true)
	src := openHTTP(t, srv.URL, opts)
	checkReadAt(t, src, data, make([]byte, 5000), 10)
	srv.replace(randomBytes(10000, 7), "")
	_, err := src.ReadAt(context.Background(), make([]byte, 10), 0)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "Last-Modified") {
		t.Errorf("err = %v, want ErrChanged naming Last-Modified", err)
	}
	if strings.Contains(logs.String(), "neither ETag nor Last-Modified") {
		t.Error("warned about missing validators")
	}
}

func TestHTTPSourceStallIsRetriedThenUnavailable(t *testing.T) {
	data := randomBytes(100<<10, 8)
	srv := newRangeServer(t, data)
	release := make(chan struct{})
	defer close(release)
	srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if !isRangedGet(r) {
			return false
		}
		select { // never answers
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})
	opts, logs := fastHTTPOptions(true)
	opts.AttemptTimeout = 200 * time.Millisecond
	opts.MaxRetries = 2
	src := openHTTP(t, srv.URL+"/x", opts)
	_, err := src.ReadAt(context.Background(), make([]byte, 1000), 0)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	t.Logf("error: %v", err)
	for _, s := range []string{srv.URL + "/x: bytes 0-999", "3 attempts", "no retries left", "stalled: nothing received for 200ms"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if n := srv.gets.Load(); n != 3 {
		t.Errorf("%d GETs, want 3", n)
	}
	if n := strings.Count(logs.String(), "retrying"); n != 2 {
		t.Errorf("%d retries logged, want 2", n)
	}
}

func TestHTTPSourceStallMidBodyIsRetried(t *testing.T) {
	data := randomBytes(100<<10, 9)
	srv := newRangeServer(t, data)
	release := make(chan struct{})
	defer close(release)
	srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if !isRangedGet(r) || n != 1 {
			return false
		}
		var a, b int
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &a, &b)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", a, b, len(data)))
		w.Header().Set("Content-Length", fmt.Sprint(b-a+1))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(data[a : a+10])
		w.(http.Flusher).Flush()
		select { // then stalls
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})
	opts, _ := fastHTTPOptions(false)
	opts.AttemptTimeout = 200 * time.Millisecond
	src := openHTTP(t, srv.URL, opts)
	checkReadAt(t, src, data, make([]byte, 50000), 7)
	if n := srv.gets.Load(); n != 2 {
		t.Errorf("%d GETs, want 2", n)
	}
}

func TestHTTPSourceServerGoneIsUnavailableWithinDeadline(t *testing.T) {
	data := randomBytes(300<<10, 10)
	srv := newRangeServer(t, data)
	opts, _ := fastHTTPOptions(false)
	opts.ReadDeadline = time.Second
	opts.MaxRetries = 1000
	src := openHTTP(t, srv.URL+"/x", opts)
	srv.Close()
	n, err := src.ReadAt(context.Background(), make([]byte, 300<<10), 0)
	if !errors.Is(err, ErrUnavailable) || n != 0 {
		t.Fatalf("ReadAt = %d, %v; want 0, ErrUnavailable", n, err)
	}
	if !strings.Contains(err.Error(), srv.URL+"/x: bytes") || !strings.Contains(err.Error(), "read deadline of 1s") {
		t.Errorf("error %q does not name the URL and the deadline", err)
	}
	checkGaveUpEarly(t, err, 1000)
}

func TestHTTPSourceNeverRetriesClientErrors(t *testing.T) {
	data := randomBytes(1000, 11)
	srv := newRangeServer(t, data)
	srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if isRangedGet(r) {
			http.Error(w, "no", http.StatusForbidden)
			return true
		}
		return false
	})
	opts, _ := fastHTTPOptions(false)
	src := openHTTP(t, srv.URL, opts)
	_, err := src.ReadAt(context.Background(), make([]byte, 10), 0)
	if err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "403 Forbidden") {
		t.Errorf("err = %v, want the 403", err)
	}
	if n := srv.gets.Load(); n != 1 {
		t.Errorf("%d GETs, want 1", n)
	}
}

func TestHTTPSourceOpen(t *testing.T) {
	data := randomBytes(5000, 12)
	t.Run("HEAD refused", func(t *testing.T) {
		srv := newRangeServer(t, data)
		srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
			if r.Method == http.MethodHead {
				http.Error(w, "no HEAD", http.StatusMethodNotAllowed)
				return true
			}
			return false
		})
		opts, _ := fastHTTPOptions(false)
		src := openHTTP(t, srv.URL, opts)
		if src.Size() != 5000 || src.ETag() != `"v1"` {
			t.Errorf("size %d etag %s", src.Size(), src.ETag())
		}
		checkReadAt(t, src, data, make([]byte, 5000), 0)
	})
	t.Run("no ranges", func(t *testing.T) {
		srv := newRangeServer(t, data)
		srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
			w.Write(data) // 200, whole object, whatever was asked
			return true
		})
		opts, _ := fastHTTPOptions(false)
		_, err := OpenHTTP(context.Background(), srv.URL+"/x", opts)
		if err == nil || !strings.Contains(err.Error(), "ignores Range") || !strings.Contains(err.Error(), "python3 -m http.server does not") || !strings.Contains(err.Error(), srv.URL+"/x") {
			t.Errorf("err = %v, want one saying the server ignores Range", err)
		}
	})
	t.Run("404", func(t *testing.T) {
		srv := newRangeServer(t, data)
		srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
			http.NotFound(w, r)
			return true
		})
		opts, logs := fastHTTPOptions(true)
		_, err := OpenHTTP(context.Background(), srv.URL+"/missing", opts)
		if err == nil || !strings.Contains(err.Error(), "404 Not Found") || !strings.Contains(err.Error(), srv.URL+"/missing") {
			t.Errorf("err = %v, want a 404 naming the URL", err)
		}
		if strings.Contains(logs.String(), "retrying") {
			t.Errorf("a 404 was retried:\n%s", logs)
		}
	})
	t.Run("empty", func(t *testing.T) {
		srv := newRangeServer(t, nil)
		opts, _ := fastHTTPOptions(false)
		src := openHTTP(t, srv.URL, opts)
		if n, err := src.ReadAt(context.Background(), make([]byte, 10), 0); src.Size() != 0 || n != 0 || err != io.EOF {
			t.Errorf("size %d, read %d, %v", src.Size(), n, err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		srv := newRangeServer(t, data)
		srv.Close()
		opts, _ := fastHTTPOptions(false)
		opts.ReadDeadline = 500 * time.Millisecond
		_, err := OpenHTTP(context.Background(), srv.URL+"/x", opts)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "open "+srv.URL+"/x") {
			t.Errorf("err = %v, want ErrUnavailable naming the URL", err)
		}
	})
}

// TestHTTPSourceHidesCredentials: userinfo is sent as basic authentication
// but appears in no name, error or log line.
func TestHTTPSourceHidesCredentials(t *testing.T) {
	data := randomBytes(5000, 13)
	srv := newRangeServer(t, data)
	srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if u, p, ok := r.BasicAuth(); !ok || u != "reader" || p != "hunter2" {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return true
		}
		if isRangedGet(r) && n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	opts, logs := fastHTTPOptions(true)
	opts.ReadDeadline = 500 * time.Millisecond
	url := strings.Replace(srv.URL, "http://", "http://reader:hunter2@", 1) + "/x?token=hunter2"
	src := openHTTP(t, url, opts)
	if strings.Contains(src.Name(), "hunter2") || strings.Contains(src.Name(), "reader") {
		t.Errorf("Name() = %q shows credentials", src.Name())
	}
	checkReadAt(t, src, data, make([]byte, 5000), 0)
	srv.Close()
	_, err := src.ReadAt(context.Background(), make([]byte, 10), 0)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("err = %v, want ErrUnavailable", err)
	}
	for what, s := range map[string]string{"error": err.Error(), "log": logs.String()} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("the %s shows the password:\n%s", what, s)
		}
	}
}

func TestHTTPSourceClose(t *testing.T) {
	data := randomBytes(100<<10, 14)
	srv := newRangeServer(t, data)
	started := make(chan struct{}, 16)
	srv.setFault(func(w http.ResponseWriter, r *http.Request, n int) bool {
		if !isRangedGet(r) {
			return false
		}
		started <- struct{}{}
		<-r.Context().Done()
		return true
	})
	opts, _ := fastHTTPOptions(false)
	src := openHTTP(t, srv.URL, opts)
	errc := make(chan error, 1)
	go func() {
		_, err := src.ReadAt(context.Background(), make([]byte, 1000), 0)
		errc <- err
	}()
	<-started
	src.Close()
	if err := <-errc; !errors.Is(err, os.ErrClosed) {
		t.Errorf("read in flight at Close: %v, want os.ErrClosed", err)
	}
	if _, err := src.ReadAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("read after Close: %v, want os.ErrClosed", err)
	}
}

func TestParseContentRange(t *testing.T) {
	for in, want := range map[string][4]int64{
		"bytes 0-0/10":    {0, 0, 10, 1},
		"bytes 5-9/10":    {5, 9, 10, 1},
		"bytes 5-9/*":     {5, 9, -1, 1},
		"bytes */10":      {0, 0, 0, 0},
		"bytes 9-5/10":    {0, 0, 0, 0},
		"items 0-1/2":     {0, 0, 0, 0},
		"bytes 0-1":       {0, 0, 0, 0},
		"bytes x-1/2":     {0, 0, 0, 0},
		"":                {0, 0, 0, 0},
		"bytes -1-5/10":   {0, 0, 0, 0},
		"bytes 0-99/1000": {0, 99, 1000, 1},
	} {
		a, b, total, ok := parseContentRange(in)
		got := [4]int64{a, b, total, 0}
		if ok {
			got[3] = 1
		}
		if got != want {
			t.Errorf("parseContentRange(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"3":                             3 * time.Second,
		" 0 ":                           0,
		"-1":                            0,
		"soon":                          0,
		"Mon, 01 Jan 2024 00:00:10 GMT": 10 * time.Second,
		"Sun, 31 Dec 2023 00:00:10 GMT": 0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}
