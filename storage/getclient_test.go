package storage

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// getTestServer serves GETs with handler and counts the connections it
// accepts.
func getTestServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *getClient, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(handler)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/obj")
	c := newGetClient(u, nil, DefaultAttemptTimeout, 4)
	if c == nil {
		t.Fatal("newGetClient refused a loopback http:// URL")
	}
	t.Cleanup(c.close)
	return srv, c, &conns
}

func getBody(t *testing.T, c *getClient, ctx context.Context, fields ...string) (int, string, error) {
	t.Helper()
	resp, err := c.get(ctx, "/obj", fields...)
	if err != nil {
		return 0, "", err
	}
	defer resp.done()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestGetClientKeepsConnections: sequential GETs share one connection, a
// pooled connection the server closed is replaced without an error, and
// the request's fields reach the server.
func TestGetClientKeepsConnections(t *testing.T) {
	srv, c, conns := getTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Range")+" "+r.Host)
	})
	host := strings.TrimPrefix(srv.URL, "http://")
	for i := range 20 {
		code, body, err := getBody(t, c, context.Background(), "Range", rangeField(int64(i), 99))
		if err != nil || code != 200 {
			t.Fatalf("GET %d: %d %q %v", i, code, body, err)
		}
		if body != "bytes="+strconv.Itoa(i)+"-99 "+host {
			t.Fatalf("GET %d: body %q, want the Range and Host sent", i, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 GETs opened %d connections, want 1", n)
	}
	srv.CloseClientConnections()
	if _, _, err := getBody(t, c, context.Background()); err != nil {
		t.Fatalf("GET after the server closed the idle connection: %v", err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2 (one new after the server closed the first)", n)
	}
}

// TestGetClientCancel: cancelling the context of a GET waiting for its
// response ends it with the cancellation's cause, and the connection is
// not reused.
func TestGetClientCancel(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	_, c, conns := getTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hang") != "" {
			close(started)
			<-release
			return
		}
		io.WriteString(w, "ok")
	})
	defer close(release)
	cause := errors.New("the test gave up")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { <-started; cancel(cause) }()
	if _, _, err := getBody(t, c, ctx, "X-Hang", "1"); !errors.Is(err, cause) {
		t.Fatalf("err = %v, want the cancellation's cause", err)
	}
	if _, body, err := getBody(t, c, context.Background()); err != nil || body != "ok" {
		t.Fatalf("GET after a cancelled one: %q %v", body, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2 (the cancelled one is not reused)", n)
	}
}

// TestGetClientErrorBodies: an error status with a chunked body is read
// whole and its connection reused; Connection: close is honoured.
func TestGetClientErrorBodies(t *testing.T) {
	_, c, conns := getTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Close") != "" {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "<Error><Code>SlowDown</Code>")
		w.(http.Flusher).Flush() // chunked
		io.WriteString(w, "<Message>Reduce your request rate.</Message></Error>")
	})
	resp, err := c.get(context.Background(), "/obj")
	if err != nil {
		t.Fatal(err)
	}
	err = s3StatusError(resp.Response)
	resp.done()
	if want := "HTTP 503 Service Unavailable: SlowDown: Reduce your request rate."; err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if _, body, err := getBody(t, c, context.Background(), "X-Close", "1"); err != nil || body != "bye" {
		t.Fatalf("GET: %q %v", body, err)
	}
	if _, _, err := getBody(t, c, context.Background(), "X-Close", "1"); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2: one reused after the 503, none after Connection: close", n)
	}
}
