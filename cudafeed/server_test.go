package cudafeed

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

func testServer(t *testing.T, slots, perEpoch, epochs int) (*Ring, *Server) {
	t.Helper()
	l := testSpec()
	l.Slots = slots
	r := testRing(t, l)
	s, err := NewServer(r, Options{
		SocketPath:      testenv.Socket(t, "feed.sock"),
		BatchesPerEpoch: perEpoch, Epochs: epochs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return r, s
}

type testClient struct {
	t    *testing.T
	conn net.Conn
	rd   *bufio.Reader
}

func dial(t *testing.T, s *Server) *testClient {
	t.Helper()
	c, err := net.Dial("unix", s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &testClient{t: t, conn: c, rd: bufio.NewReader(c)}
}

func (c *testClient) read() map[string]any {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(testenv.Patience))
	line, err := c.rd.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("reading from server: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		c.t.Fatalf("server sent %q: %v", line, err)
	}
	return m
}

func (c *testClient) release(slot int) {
	c.t.Helper()
	if _, err := c.conn.Write([]byte(`{"release":` + itoa(slot) + "}\n")); err != nil {
		c.t.Fatal(err)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func acquire(t *testing.T, s *Server) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	i, err := s.AcquireSlot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// acquireBlocks checks that AcquireSlot is still blocked after a short wait.
func acquireBlocks(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if i, err := s.AcquireSlot(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AcquireSlot = %d, %v; want it to block", i, err)
	}
}

func num(m map[string]any, k string) int {
	f, _ := m[k].(float64)
	return int(f)
}

func TestServerHello(t *testing.T) {
	r, s := testServer(t, 3, 4, 2)
	fi, err := os.Stat(s.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	h := dial(t, s).read()
	if num(h, "hello") != 1 || h["shm"] != r.Path() || num(h, "slots") != 3 ||
		num(h, "slot_bytes") != 896 || num(h, "batches_per_epoch") != 4 || num(h, "epochs") != 2 {
		t.Errorf("hello %v", h)
	}
	fields, _ := h["fields"].([]any)
	if len(fields) != 3 {
		t.Fatalf("hello fields %v", h["fields"])
	}
	f1 := fields[1].(map[string]any)
	if f1["name"] != "labels" || f1["dtype"] != "int64" || num(f1, "offset") != 768 || num(f1, "bytes") != 40 {
		t.Errorf("field 1: %v", f1)
	}
	if sh, _ := f1["shape"].([]any); len(sh) != 1 || sh[0].(float64) != 5 {
		t.Errorf("field 1 shape %v", f1["shape"])
	}
}

func TestServerFlow(t *testing.T) {
	_, s := testServer(t, 2, 2, 2)
	c := dial(t, s)
	c.read() // hello
	// Fill both slots; the third acquire blocks until the consumer releases.
	a, b := acquire(t, s), acquire(t, s)
	if err := s.Publish(a, 0, 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(b, 0, 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(b, 0, 1, 3); err == nil {
		t.Error("publishing a slot twice succeeded")
	}
	m := c.read()
	if num(m, "slot") != a || num(m, "epoch") != 0 || num(m, "batch") != 0 || num(m, "size") != 5 {
		t.Errorf("first batch %v", m)
	}
	m = c.read()
	if num(m, "slot") != b || num(m, "batch") != 1 || num(m, "size") != 3 {
		t.Errorf("second batch %v", m)
	}
	acquireBlocks(t, s)
	got := make(chan int)
	go func() {
		i, _ := s.AcquireSlot(context.Background())
		got <- i
	}()
	time.Sleep(20 * time.Millisecond)
	c.release(a)
	select {
	case i := <-got:
		if i != a {
			t.Errorf("acquired %d after releasing %d", i, a)
		}
	case <-time.After(testenv.Patience):
		t.Fatal("AcquireSlot did not unblock after a release")
	}
	if err := s.Publish(a, 1, 0, 5); err != nil {
		t.Fatal(err)
	}
	c.release(b)
	i := acquire(t, s)
	if err := s.Publish(i, 1, 1, 2); err != nil {
		t.Fatal(err)
	}
	if m := c.read(); num(m, "epoch") != 1 || num(m, "batch") != 0 {
		t.Errorf("third batch %v", m)
	}
	if m := c.read(); num(m, "epoch") != 1 || num(m, "batch") != 1 || num(m, "size") != 2 {
		t.Errorf("fourth batch %v", m)
	}
	if m := c.read(); m["end"] != true {
		t.Errorf("after the last batch: %v, want end", m)
	}
	c.release(a)
	if err := s.Publish(acquire(t, s), 2, 0, 1); err == nil {
		t.Error("Publish after the end succeeded")
	}
}

func TestServerNoConsumerBlocksProducer(t *testing.T) {
	_, s := testServer(t, 2, 10, 1)
	for b := 0; b < 2; b++ {
		if err := s.Publish(acquire(t, s), 0, b, 5); err != nil {
			t.Fatal(err)
		}
	}
	acquireBlocks(t, s)
	c := dial(t, s)
	c.read()
	m := c.read()
	if num(m, "batch") != 0 {
		t.Errorf("first queued batch %v", m)
	}
	c.release(num(m, "slot"))
	acquire(t, s)
}

func TestServerDisconnectFreesSlots(t *testing.T) {
	_, s := testServer(t, 2, 10, 1)
	c := dial(t, s)
	c.read()
	for b := 0; b < 2; b++ {
		if err := s.Publish(acquire(t, s), 0, b, 5); err != nil {
			t.Fatal(err)
		}
	}
	c.read()
	c.read()
	acquireBlocks(t, s)
	// A second consumer is turned away while the first is connected.
	c2 := dial(t, s)
	if m := c2.read(); m["error"] == nil {
		t.Errorf("second consumer got %v, want an error", m)
	}
	c.conn.Close()
	x, y := acquire(t, s), acquire(t, s)
	if x == y {
		t.Fatalf("acquired slot %d twice", x)
	}
	// The next consumer resumes with the next published batch.
	if err := s.Publish(x, 0, 2, 4); err != nil {
		t.Fatal(err)
	}
	var c3 *testClient
	deadline := time.Now().Add(testenv.Patience)
	for {
		c3 = dial(t, s)
		if m := c3.read(); m["hello"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("reconnecting kept being refused")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m := c3.read(); num(m, "batch") != 2 || num(m, "slot") != x || num(m, "size") != 4 {
		t.Errorf("after reconnect: %v", m)
	}
	c3.release(x)
	acquire(t, s)
}

func TestServerGarbageClosesOnlyThatConnection(t *testing.T) {
	for _, msg := range []string{
		"not json\n", `{"release":"x"}` + "\n", `{"release":7}` + "\n", `{"release":0}` + "\n",
		`{}` + "\n", string(make([]byte, 2*maxMessage)) + "\n",
	} {
		_, s := testServer(t, 2, 10, 1)
		c := dial(t, s)
		c.read()
		if err := s.Publish(acquire(t, s), 0, 0, 5); err != nil {
			t.Fatal(err)
		}
		m := c.read()
		c.release(num(m, "slot")) // the valid release works
		c.conn.Write([]byte(msg))
		c.conn.SetReadDeadline(time.Now().Add(testenv.Patience))
		if _, err := c.rd.ReadBytes('\n'); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("after %.20q: read %v, want the connection closed", msg, err)
		}
		// The server is still up and takes the next consumer.
		var ok bool
		for range 100 {
			if m := dial(t, s).read(); m["hello"] != nil {
				ok = true
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !ok {
			t.Errorf("after %.20q: no new consumer accepted", msg)
		}
		s.Close()
	}
}

func TestServerSocketPath(t *testing.T) {
	_, s := testServer(t, 1, 1, 1)
	r2 := testRing(t, RingSpec{Slots: 1, Fields: []FieldSpec{{Name: "x", DType: "uint8", Shape: []int{1}}}})
	opts := Options{SocketPath: s.SocketPath(), BatchesPerEpoch: 1}
	if _, err := NewServer(r2, opts); !errors.Is(err, ErrLiveSocket) {
		t.Fatalf("second server on a live socket: %v", err)
	}
	// A stale socket (nobody listening) is replaced.
	stale := testenv.Socket(t, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	opts.SocketPath = stale
	s2, err := NewServer(r2, opts)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	s2.Close()
	// A regular file is never replaced.
	plain := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(plain, nil, 0o600)
	opts.SocketPath = plain
	if _, err := NewServer(r2, opts); err == nil {
		t.Fatal("server replaced a regular file")
	}
}

func TestServerCloseUnblocksAcquire(t *testing.T) {
	_, s := testServer(t, 1, 1, 0)
	acquire(t, s)
	done := make(chan error)
	go func() { _, err := s.AcquireSlot(context.Background()); done <- err }()
	time.Sleep(20 * time.Millisecond)
	s.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("AcquireSlot after Close: %v", err)
	}
}

func TestPublishAllocs(t *testing.T) {
	_, s := testServer(t, 1, 1<<30, 0)
	if n := publishAllocs(t, s); n > 0 {
		t.Errorf("AcquireSlot+Publish allocate %v times per batch", n)
	}
}

// publishAllocs returns the allocations of one AcquireSlot+Publish on s, a
// server of one slot, with a consumer that releases every batch.
func publishAllocs(t *testing.T, s *Server) float64 {
	t.Helper()
	c := dial(t, s)
	c.read()
	go func() {
		// One slot, so every batch is slot 0; read and release without allocating.
		buf := make([]byte, 512)
		release := []byte(`{"release": 0}` + "\n")
		for {
			n, err := c.rd.Read(buf)
			if err != nil {
				return
			}
			for _, ch := range buf[:n] {
				if ch == '\n' {
					c.conn.Write(release)
				}
			}
		}
	}()
	ctx := context.Background()
	b := 0
	return testing.AllocsPerRun(200, func() {
		i, _ := s.AcquireSlot(ctx)
		s.Publish(i, 0, b, 1)
		b++
	})
}
