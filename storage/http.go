package storage

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTPSource reads an object served over HTTP or HTTPS with Range
// requests. Every request carries the validator learnt at open (If-Match
// with the ETag, or If-Unmodified-Since with Last-Modified), and every
// response is checked against it, so a changed object gives ErrChanged,
// never bytes of two versions. It is safe for concurrent use.
type HTTPSource struct {
	// Immutable after OpenHTTP.
	r       *netReader
	url     string // with credentials, for requests only
	client  *http.Client
	gets    *getClient // nil: client sends the ranged GETs
	path    string     // the request line's path and query, for gets
	auth    string     // the basic authentication of url's userinfo
	etag    string     // as the server sent it; "" if none
	strong  bool       // etag is a strong validator, usable with If-Match
	lastMod string
}

var (
	_ Source         = (*HTTPSource)(nil)
	_ RequestCounter = (*HTTPSource)(nil)
)

// statusError is an unexpected HTTP response status.
type statusError struct {
	code       int
	status     string
	retryAfter time.Duration
}

func (e *statusError) Error() string {
	if e.status == "" {
		return fmt.Sprintf("HTTP %d", e.code)
	}
	return "HTTP " + e.status
}

func (e *statusError) HTTPStatusCode() int { return e.code }

func (e *statusError) RetryAfter() time.Duration { return e.retryAfter }

func newStatusError(resp *http.Response) *statusError {
	return &statusError{
		code:       resp.StatusCode,
		status:     resp.Status,
		retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// parseRetryAfter reads a Retry-After header: seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// newTransport returns the HTTP transport of an HTTP source.
func newTransport(opts *Options) *http.Transport {
	dialer := &net.Dialer{Timeout: min(opts.AttemptTimeout, 30*time.Second), KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:       http.ProxyFromEnvironment,
		DialContext: dialer.DialContext,
	}
	tuneTransport(opts)(tr)
	return tr
}

// tuneTransport returns the settings of network sources' transports: enough
// idle connections per host for every part of a few concurrent reads, no
// transparent decompression (ranges are of the stored bytes), and HTTP/1.1,
// so that parallel parts travel on separate TCP connections.
func tuneTransport(opts *Options) func(*http.Transport) {
	return func(tr *http.Transport) {
		tr.MaxIdleConns = max(100, opts.Parallel*16, opts.Concurrent)
		tr.MaxIdleConnsPerHost = max(16, opts.Parallel*4, opts.Concurrent)
		tr.MaxConnsPerHost = 0
		tr.IdleConnTimeout = 90 * time.Second
		tr.TLSHandshakeTimeout = min(opts.AttemptTimeout, 10*time.Second)
		tr.ExpectContinueTimeout = time.Second
		tr.DisableCompression = true
		tr.ForceAttemptHTTP2 = false
		tr.ReadBufferSize = 64 << 10
		tr.WriteBufferSize = 16 << 10
	}
}

func init() {
	Register(Scheme{Names: []string{"http", "https"}, Form: "http(s)://host/path", Network: true,
		Open: func(ctx context.Context, url string, opts Options) (Source, error) {
			s, err := OpenHTTP(ctx, url, opts)
			if err != nil {
				return nil, err // not a nil *HTTPSource in a non-nil Source
			}
			return s, nil
		}})
}

// OpenHTTP opens an http:// or https:// URL. A HEAD request (or, where
// HEAD is refused, a GET of the first byte) learns the size and the ETag or
// Last-Modified, and checks that the server serves byte ranges. Name is the
// URL without userinfo; userinfo, if any, is sent as basic authentication.
func OpenHTTP(ctx context.Context, rawURL string, opts Options) (*HTTPSource, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	name := redactURL(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open %s: not a valid URL", name)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("open %s: not an http:// or https:// URL", name)
	}
	s := &HTTPSource{
		r:      newNetReader(name, &opts),
		url:    rawURL,
		client: &http.Client{Transport: newTransport(&opts)},
	}
	s.r.fetch = s.fetch
	if s.gets = newGetClient(u, nil, min(opts.AttemptTimeout, 30*time.Second), max(16, opts.Parallel*4, opts.Concurrent)); s.gets != nil {
		s.path = u.RequestURI()
		if u.User != nil {
			pw, _ := u.User.Password()
			s.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))
		}
	}
	octx, cancel := s.r.withDeadline(ctx)
	defer cancel()
	if err := s.r.policy.do(octx, "open "+name, s.probe); err != nil {
		s.Close()
		return nil, err
	}
	if s.etag == "" && s.lastMod == "" {
		opts.Logger.Warn("server sends neither ETag nor Last-Modified: a change of the object during reads can only be detected by its size",
			"source", name)
	}
	return s, nil
}

// probe learns size and validators: HEAD, then a GET of byte 0 if HEAD did
// not show Range support or was refused.
func (s *HTTPSource) probe(ctx context.Context, progress func()) error {
	resp, err := s.do(ctx, http.MethodHead, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	progress()
	if resp.StatusCode == http.StatusOK {
		ranges := strings.ToLower(resp.Header.Get("Accept-Ranges"))
		if resp.ContentLength >= 0 && strings.Contains(ranges, "bytes") {
			s.r.size = resp.ContentLength
			s.setValidators(resp.Header)
			return nil
		}
		if ranges == "none" {
			return permanent(errors.New("the server does not serve byte ranges (Accept-Ranges: none), which reads need: " + rangeServers))
		}
	}
	// HEAD refused, or silent about ranges or size: ask for one byte.
	h := http.Header{"Range": {"bytes=0-0"}}
	resp, err = s.do(ctx, http.MethodGet, h)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	progress()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		cr := resp.Header.Get("Content-Range")
		a, b, total, ok := parseContentRange(cr)
		if !ok || a != 0 || b != 0 || total < 0 {
			return permanent(fmt.Errorf("the server answered Range: bytes=0-0 with Content-Range %q, not bytes 0-0/<size>", cr))
		}
		s.r.size = total
	case http.StatusRequestedRangeNotSatisfiable:
		// An empty object has no byte 0.
		cr := resp.Header.Get("Content-Range")
		if cr != "bytes */0" {
			return permanent(fmt.Errorf("the server refused Range: bytes=0-0 (%s, Content-Range %q)", resp.Status, cr))
		}
		s.r.size = 0
	case http.StatusOK:
		return permanent(errors.New("the server ignores Range requests (answered 200 to Range: bytes=0-0), which reads need: " + rangeServers))
	default:
		return newStatusError(resp)
	}
	s.setValidators(resp.Header)
	return nil
}

// rangeServers names servers that serve ranges, for a server that does
// not (python3 -m http.server is the usual one).
const rangeServers = "serve the file with one that does (nginx, Caddy, Apache, an S3 server; python3 -m http.server does not)"

func (s *HTTPSource) setValidators(h http.Header) {
	s.etag = h.Get("ETag")
	s.strong = s.etag != "" && !strings.HasPrefix(s.etag, "W/")
	s.lastMod = h.Get("Last-Modified")
}

// do sends one request; transport errors come back without the URL, which
// may hold credentials.
func (s *HTTPSource) do(ctx context.Context, method string, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.url, nil)
	if err != nil {
		return nil, permanent(fmt.Errorf("cannot build request: %v", stripURLError(err)))
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return nil, fmt.Errorf("%s: %w", method, ue.Err)
		}
		return nil, err
	}
	return resp, nil
}

func stripURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// fetch is one attempt at dst = bytes [off, off+len(dst)).
func (s *HTTPSource) fetch(ctx context.Context, dst []byte, off int64, progress func()) error {
	end := off + int64(len(dst)) - 1
	var fields [6]string
	f := append(fields[:0], "Range", rangeField(off, end))
	switch {
	case s.strong:
		f = append(f, "If-Match", s.etag)
	case s.lastMod != "":
		f = append(f, "If-Unmodified-Since", s.lastMod)
	}
	if s.gets != nil {
		if s.auth != "" {
			f = append(f, "Authorization", s.auth)
		}
		resp, err := s.gets.get(ctx, s.path, f...)
		if err != nil {
			return err
		}
		defer resp.done()
		return s.ranged(resp.Response, dst, off, end, progress)
	}
	resp, err := s.do(ctx, http.MethodGet, headerOf(f))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return s.ranged(resp, dst, off, end, progress)
}

// ranged checks the answer to a ranged GET of bytes [off, end] and reads
// its body into dst.
func (s *HTTPSource) ranged(resp *http.Response, dst []byte, off, end int64, progress func()) error {
	progress()
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusPreconditionFailed:
		return s.changed(resp.Header, "the server answered 412 Precondition Failed")
	case http.StatusRequestedRangeNotSatisfiable:
		return s.changed(resp.Header, fmt.Sprintf("the range is past its end now (Content-Range %q)", resp.Header.Get("Content-Range")))
	case http.StatusOK:
		return permanent(errors.New("the server ignored the Range header (status 200)"))
	default:
		return newStatusError(resp)
	}
	if err := s.checkValidators(resp.Header); err != nil {
		return err
	}
	changed := func(why string) error { return s.changed(resp.Header, why) }
	if err := s.r.checkContentRange(resp.Header.Get("Content-Range"), off, end, "the server", changed); err != nil {
		return err
	}
	if resp.ContentLength >= 0 && resp.ContentLength != int64(len(dst)) {
		return permanent(fmt.Errorf("Content-Length %d for a range of %d bytes", resp.ContentLength, len(dst)))
	}
	return readFull(resp.Body, dst, progress)
}

// checkValidators compares a response's ETag and Last-Modified with those
// seen at open.
func (s *HTTPSource) checkValidators(h http.Header) error {
	if et := h.Get("ETag"); et != "" && s.etag != "" && strings.TrimPrefix(et, "W/") != strings.TrimPrefix(s.etag, "W/") {
		return s.changed(h, "a response carries another ETag")
	}
	if s.etag == "" && s.lastMod != "" {
		if lm := h.Get("Last-Modified"); lm != "" && lm != s.lastMod {
			return fmt.Errorf("%w: opened with Last-Modified %s, the server now has %s", ErrChanged, s.lastMod, lm)
		}
	}
	return nil
}

func (s *HTTPSource) changed(h http.Header, why string) error {
	switch {
	case s.etag != "":
		now := h.Get("ETag")
		if now == "" {
			now = "(not sent)"
		}
		return fmt.Errorf("%w: %s; opened with ETag %s, the server now has %s", ErrChanged, why, s.etag, now)
	case s.lastMod != "":
		now := h.Get("Last-Modified")
		if now == "" {
			now = "(not sent)"
		}
		return fmt.Errorf("%w: %s; opened with Last-Modified %s, the server now has %s", ErrChanged, why, s.lastMod, now)
	}
	return fmt.Errorf("%w: %s", ErrChanged, why)
}

// parseContentRange parses "bytes a-b/total"; total is -1 for "*".
func parseContentRange(v string) (a, b, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	as, bs, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	a, err1 = strconv.ParseInt(as, 10, 64)
	b, err2 = strconv.ParseInt(bs, 10, 64)
	if tot == "*" {
		total = -1
	} else {
		total, err3 = strconv.ParseInt(tot, 10, 64)
	}
	if err1 != nil || err2 != nil || err3 != nil || a < 0 || b < a {
		return 0, 0, 0, false
	}
	return a, b, total, true
}

// ReadAt reads len(p) bytes at off; see Source. A read larger than
// PartSize is fetched in parts, in parallel.
func (s *HTTPSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return s.r.readAt(ctx, p, off)
}

// Size returns the object's size, as learnt at open.
func (s *HTTPSource) Size() int64 { return s.r.size }

// Name returns the URL without userinfo and with any query elided.
func (s *HTTPSource) Name() string { return s.r.name }

// Identity returns the URL (without credentials or query) with the ETag,
// or the Last-Modified date, learnt at open; "" if the server sent
// neither.
func (s *HTTPSource) Identity() string {
	switch {
	case s.etag != "":
		return fmt.Sprintf("%s etag=%s size=%d", s.r.name, s.etag, s.r.size)
	case s.lastMod != "":
		return fmt.Sprintf("%s last-modified=%s size=%d", s.r.name, s.lastMod, s.r.size)
	}
	return ""
}

// ETag returns the ETag learnt at open, or "".
func (s *HTTPSource) ETag() string { return s.etag }

// Close cancels reads in flight and releases idle connections. Later reads
// fail with an error matching os.ErrClosed.
func (s *HTTPSource) Close() error {
	s.r.close()
	s.client.CloseIdleConnections()
	if s.gets != nil {
		s.gets.close()
	}
	return nil
}

// RequestStats returns the failed attempts of the source's requests.
func (s *HTTPSource) RequestStats() RequestStats { return s.r.policy.counts.stats() }
