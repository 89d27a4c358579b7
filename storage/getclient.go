package storage

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// getClient sends the ranged GETs of network sources over HTTP/1.1
// keep-alive connections, in the calling goroutine.
//
// It is written here rather than left to net/http because of what a small
// request costs through http.Transport: each connection has a goroutine
// that writes requests and one that reads responses, and a request passes
// from the caller to the writer, to the reader and back through channels,
// so a 27 KB range takes four goroutine switches and their wake-ups, each a
// futex or epoll system call on a mount that runs on one thread. Measured
// with a profile of the mount reading random images from S3, the two
// goroutines and the scheduling between them were 40 % of its CPU. Here the
// caller writes the request and reads the response on a pooled connection
// itself, waiting in the netpoller; the response is parsed by net/http
// (http.ReadResponse), so only connection handling is hand-written: a pool
// of idle connections, cancellation by deadline, and one fresh connection
// when a pooled one turns out to be closed before it answered, as net/http
// does for idempotent requests. Sources fall back to net/http where a proxy
// applies.
type getClient struct {
	addr   string      // host:port to dial
	host   string      // the Host header
	tls    *tls.Config // nil: plain HTTP
	dialer net.Dialer

	maxIdle     int
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   []*getConn // most recently used last
	closed bool
}

// getConn is a connection with its reader and a buffer for requests.
type getConn struct {
	conn net.Conn
	br   *bufio.Reader
	wbuf []byte
	used time.Time // when it last went back to the pool
}

// newGetClient returns a client for the origin of u, or nil where net/http
// must be used: a scheme other than http and https, or a proxy for u.
// base is the TLS configuration to start from (nil: the default).
func newGetClient(u *url.URL, base *tls.Config, dialTimeout time.Duration, maxIdle int) *getClient {
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil
	}
	c := &getClient{
		addr:        u.Host,
		host:        u.Host,
		dialer:      net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second},
		maxIdle:     max(maxIdle, 1),
		idleTimeout: 90 * time.Second,
	}
	if u.Port() == "" {
		c.addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	if u.Scheme == "https" {
		if base != nil {
			c.tls = base.Clone()
		} else {
			c.tls = &tls.Config{}
		}
		if c.tls.ServerName == "" {
			c.tls.ServerName = u.Hostname()
		}
		c.tls.NextProtos = []string{"http/1.1"}
	}
	return c
}

// getResponse is a response whose body is read from its connection; done
// must be called once the caller is through with it.
type getResponse struct {
	*http.Response
	c    *getClient
	gc   *getConn
	stop func() bool // stops the cancellation of the request
}

// get sends GET path with the header fields (name, value pairs) and
// returns the response once its header has arrived. ctx cancels the
// request at any point, by a deadline on its connection.
func (c *getClient) get(ctx context.Context, path string, fields ...string) (*getResponse, error) {
	for fresh := false; ; fresh = true {
		gc, reused, err := c.conn(ctx, fresh)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { gc.conn.SetDeadline(time.Unix(1, 0)) })
		resp, err := c.roundTrip(gc, path, fields)
		if err == nil {
			return &getResponse{Response: resp, c: c, gc: gc, stop: stop}, nil
		}
		stop()
		gc.conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("GET: %w", context.Cause(ctx))
		}
		// A pooled connection the server closed while it was idle fails
		// before any byte of a response: once more on a new one.
		if !reused || !errors.Is(err, errNoResponse) {
			return nil, fmt.Errorf("GET: %w", err)
		}
	}
}

// errNoResponse wraps the error of a request that received no byte.
var errNoResponse = errors.New("no response")

func (c *getClient) roundTrip(gc *getConn, path string, fields []string) (*http.Response, error) {
	b := append(gc.wbuf[:0], "GET "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.host...)
	b = append(b, "\r\nUser-Agent: ffcvfs\r\n"...)
	for i := 0; i+1 < len(fields); i += 2 {
		b = append(b, fields[i]...)
		b = append(b, ": "...)
		b = append(b, fields[i+1]...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	gc.wbuf = b
	if _, err := gc.conn.Write(b); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoResponse, err)
	}
	if _, err := gc.br.Peek(1); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoResponse, err)
	}
	resp, err := http.ReadResponse(gc.br, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the response: %w", err)
	}
	return resp, nil
}

// conn returns a pooled connection (unless fresh) or a new one, and
// whether it was pooled.
func (c *getClient) conn(ctx context.Context, fresh bool) (*getConn, bool, error) {
	if !fresh {
		c.mu.Lock()
		for len(c.idle) > 0 {
			gc := c.idle[len(c.idle)-1]
			c.idle = c.idle[:len(c.idle)-1]
			if time.Since(gc.used) < c.idleTimeout {
				c.mu.Unlock()
				return gc, true, nil
			}
			gc.conn.Close()
		}
		c.mu.Unlock()
	}
	conn, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, fmt.Errorf("GET: %w", err)
	}
	conn = rawTCP(conn)
	if c.tls != nil {
		tc := tls.Client(conn, c.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, false, fmt.Errorf("GET: TLS handshake with %s: %w", c.addr, err)
		}
		conn = tc
	}
	return &getConn{conn: conn, br: bufio.NewReaderSize(conn, 64<<10), wbuf: make([]byte, 0, 1024)}, false, nil
}

// done ends the use of the response: its connection goes back to the pool
// if its body was read to the end (or ends within 4 KiB), the server keeps
// it open, and the request was not cancelled; else it is closed.
func (r *getResponse) done() {
	gc := r.gc
	if gc == nil {
		return
	}
	r.gc = nil
	ok := r.stop() && !r.Close
	if ok {
		_, err := io.CopyN(io.Discard, r.Body, 4<<10)
		ok = err == io.EOF
	}
	if ok {
		ok = r.c.put(gc)
	}
	if !ok {
		gc.conn.Close()
	}
}

// put returns gc to the pool; false if the pool is full or closed.
func (c *getClient) put(gc *getConn) bool {
	gc.used = time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle) >= c.maxIdle {
		return false
	}
	c.idle = append(c.idle, gc)
	return true
}

// close closes the idle connections; connections in use close when done.
func (c *getClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, gc := range c.idle {
		gc.conn.Close()
	}
	c.idle = nil
}

// headerOf returns the header fields (name, value pairs) of a request
// that getClient would send, for sending it through net/http instead.
func headerOf(fields []string) http.Header {
	h := make(http.Header, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		h.Set(fields[i], fields[i+1])
	}
	return h
}

// rangeField returns the Range header value of bytes [off, end].
func rangeField(off, end int64) string {
	b := make([]byte, 0, 48)
	b = append(b, "bytes="...)
	b = strconv.AppendInt(b, off, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, end, 10)
	return string(b)
}
