package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock drives a retryPolicy without waiting: sleeps advance it and
// are recorded; jitter is the identity, so waits are the backoff steps.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	waits []time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.waits = append(c.waits, d)
	return ctx.Err()
}

func testPolicy(t *testing.T, maxRetries int) (*retryPolicy, *fakeClock) {
	t.Helper()
	opts := Options{
		MaxRetries:     maxRetries,
		BackoffBase:    100 * time.Millisecond,
		BackoffMax:     time.Second,
		AttemptTimeout: time.Minute,
		Logger:         discardLogger(),
	}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	p := newRetryPolicy(&opts)
	c := &fakeClock{t: time.Now()}
	p.now, p.sleep = c.now, c.sleep
	p.jitter = func(d time.Duration) time.Duration { return d }
	return p, c
}

// failing returns an attempt that fails with errs[i] on attempt i, then
// succeeds, and counts attempts.
func failing(n *int, errs ...error) attemptFunc {
	return func(context.Context, func()) error {
		*n++
		if *n <= len(errs) {
			return errs[*n-1]
		}
		return nil
	}
}

func TestRetryBackoffIsExponentialAndCapped(t *testing.T) {
	p, c := testPolicy(t, 8)
	boom := errors.New("connection reset")
	var n int
	err := p.do(context.Background(), "x", failing(&n, boom, boom, boom, boom, boom, boom))
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 {
		t.Errorf("attempts = %d, want 7", n)
	}
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second}
	if fmt.Sprint(c.waits) != fmt.Sprint(want) {
		t.Errorf("waits = %v, want %v", c.waits, want)
	}
}

func TestFullJitterStaysInRange(t *testing.T) {
	d := 10 * time.Millisecond
	var low, high bool
	for range 10000 {
		j := fullJitter(d)
		if j < 0 || j > d {
			t.Fatalf("fullJitter(%v) = %v", d, j)
		}
		low = low || j < d/4
		high = high || j > 3*d/4
	}
	if !low || !high {
		t.Errorf("10000 draws never went below a quarter (%v) or above three quarters (%v)", !low, !high)
	}
	if fullJitter(0) != 0 {
		t.Error("fullJitter(0) != 0")
	}
}

func TestRetryGivesUpAfterMaxRetries(t *testing.T) {
	p, c := testPolicy(t, 3)
	var n int
	boom := errors.New("boom")
	err := p.do(context.Background(), "s3://b/k: bytes 0-9", failing(&n, boom, boom, boom, boom, boom))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n != 4 || len(c.waits) != 3 {
		t.Errorf("attempts = %d, waits = %d; want 4 and 3", n, len(c.waits))
	}
	for _, s := range []string{"s3://b/k: bytes 0-9", "storage unavailable", "4 attempts over 700ms", "last error: boom"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
}

func TestRetryNegativeMaxRetriesMeansOneAttempt(t *testing.T) {
	p, _ := testPolicy(t, -1)
	var n int
	err := p.do(context.Background(), "x", failing(&n, errors.New("boom")))
	if !errors.Is(err, ErrUnavailable) || n != 1 {
		t.Errorf("err = %v after %d attempts; want ErrUnavailable after 1", err, n)
	}
}

func TestRetryClassification(t *testing.T) {
	for _, tc := range []struct {
		err   error
		retry bool
	}{
		{&statusError{code: 500}, true},
		{&statusError{code: 502}, true},
		{&statusError{code: 503}, true},
		{&statusError{code: 408}, true},
		{&statusError{code: 429}, true},
		{&statusError{code: 400}, false},
		{&statusError{code: 403}, false},
		{&statusError{code: 404}, false},
		{&statusError{code: 416}, false},
		{&statusError{code: 0}, true}, // no response at all (the SDK's send errors)
		{fmt.Errorf("get: %w", &statusError{code: 503}), true},
		{fmt.Errorf("%w: etag", ErrChanged), false},
		{permanent(errors.New("bad range")), false},
		{fmt.Errorf("x: %w", permanent(&statusError{code: 503})), false},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("%w: nothing received", errStalled), true},
		{errors.New("read: connection reset by peer"), true},
	} {
		if got := retryable(tc.err); got != tc.retry {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.retry)
		}
		p, _ := testPolicy(t, 5)
		var n int
		err := p.do(context.Background(), "x", failing(&n, tc.err))
		switch {
		case tc.retry && (err != nil || n != 2):
			t.Errorf("%v: err %v after %d attempts, want success after 2", tc.err, err, n)
		case !tc.retry && (err == nil || n != 1 || errors.Is(err, ErrUnavailable)):
			t.Errorf("%v: err %v after %d attempts, want the error itself after 1", tc.err, err, n)
		}
	}
}

func TestRetryHonoursShortRetryAfter(t *testing.T) {
	p, c := testPolicy(t, 5)
	var n int
	err := p.do(context.Background(), "x", failing(&n,
		&statusError{code: 503, retryAfter: 700 * time.Millisecond}, // short: honoured
		&statusError{code: 429, retryAfter: time.Hour},              // long: backoff instead
	))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{700 * time.Millisecond, 200 * time.Millisecond}
	if fmt.Sprint(c.waits) != fmt.Sprint(want) {
		t.Errorf("waits = %v, want %v", c.waits, want)
	}
}

func TestRetryStopsBeforeTheDeadlineWouldPass(t *testing.T) {
	p, c := testPolicy(t, 100)
	p.deadline = 2 * time.Second
	ctx, cancel := context.WithDeadline(context.Background(), c.now().Add(p.deadline))
	defer cancel()
	var n int
	boom := errors.New("connection refused")
	err := p.do(ctx, "x", failing(&n, boom, boom, boom, boom, boom, boom, boom, boom))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	// Waits 100+200+400+800 ms = 1.5 s; the next (1 s) would pass 2 s.
	if n != 5 {
		t.Errorf("attempts = %d, want 5", n)
	}
	if !strings.Contains(err.Error(), "read deadline of 2s would pass") {
		t.Errorf("error %q does not name the deadline", err)
	}
}

func TestRetryStallIsCancelledAndRetried(t *testing.T) {
	p, _ := testPolicy(t, 2)
	p.attemptTimeout = 50 * time.Millisecond
	var n atomic.Int32
	err := p.do(context.Background(), "x", func(ctx context.Context, _ func()) error {
		n.Add(1)
		<-ctx.Done() // a server that never answers
		return ctx.Err()
	})
	if !errors.Is(err, ErrUnavailable) || n.Load() != 3 {
		t.Fatalf("err = %v after %d attempts, want ErrUnavailable after 3", err, n.Load())
	}
	if !strings.Contains(err.Error(), "stalled: nothing received for 50ms") {
		t.Errorf("error %q does not say the request stalled", err)
	}
}

func TestRetryProgressKeepsASlowAttemptAlive(t *testing.T) {
	p, _ := testPolicy(t, 0)
	p.attemptTimeout = 400 * time.Millisecond
	var n int
	err := p.do(context.Background(), "x", func(ctx context.Context, progress func()) error {
		n++
		// 600 ms in all, longer than the attempt timeout, but never
		// 400 ms without progress.
		for range 60 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
				progress()
			}
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Errorf("err = %v after %d attempts, want success after 1", err, n)
	}
}

func TestRetryReadDeadlineEndsAStall(t *testing.T) {
	p, _ := testPolicy(t, 5)
	p.attemptTimeout = time.Hour
	p.deadline = 100 * time.Millisecond
	r := &netReader{name: "x", policy: p, ctx: context.Background()}
	ctx, cancel := r.withDeadline(context.Background())
	defer cancel()
	err := p.do(ctx, "x", func(ctx context.Context, _ func()) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "the read deadline of 100ms passed") {
		t.Errorf("err = %v, want ErrUnavailable naming the deadline", err)
	}
}

// memFetch serves parts from data, recording the parts and the most
// requests in flight at once.
type memFetch struct {
	data     []byte
	inflight atomic.Int32
	most     atomic.Int32
	mu       sync.Mutex
	parts    [][2]int64
	fail     func(off int64) error
}

func (m *memFetch) fetch(ctx context.Context, dst []byte, off int64, progress func()) error {
	now := m.inflight.Add(1)
	defer m.inflight.Add(-1)
	for {
		most := m.most.Load()
		if now <= most || m.most.CompareAndSwap(most, now) {
			break
		}
	}
	m.mu.Lock()
	m.parts = append(m.parts, [2]int64{off, int64(len(dst))})
	m.mu.Unlock()
	if m.fail != nil {
		if err := m.fail(off); err != nil {
			return err
		}
	}
	time.Sleep(time.Millisecond) // let the parts overlap
	progress()
	copy(dst, m.data[off:])
	return nil
}

func newMemReader(t *testing.T, size int, partSize int64, parallel int) (*netReader, *memFetch) {
	t.Helper()
	opts := Options{PartSize: partSize, Parallel: parallel, Logger: discardLogger(),
		BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, MaxRetries: 2}
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	m := &memFetch{data: make([]byte, size)}
	for i := range m.data {
		m.data[i] = byte(rand.Uint32())
	}
	r := newNetReader("mem://x", &opts)
	r.size = int64(size)
	r.fetch = m.fetch
	return r, m
}

func TestNetReaderSplitsIntoParallelParts(t *testing.T) {
	r, m := newMemReader(t, 1000, 64, 3)
	p := make([]byte, 700)
	n, err := r.readAt(context.Background(), p, 250)
	if n != 700 || err != nil {
		t.Fatalf("readAt = %d, %v", n, err)
	}
	if !bytes.Equal(p, m.data[250:950]) {
		t.Error("bytes differ")
	}
	if len(m.parts) != 11 {
		t.Errorf("%d parts, want 11", len(m.parts))
	}
	covered := make([]bool, 1000)
	for _, pt := range m.parts {
		if pt[1] > 64 {
			t.Errorf("part %v longer than 64", pt)
		}
		for i := pt[0]; i < pt[0]+pt[1]; i++ {
			if covered[i] {
				t.Errorf("byte %d fetched twice", i)
			}
			covered[i] = true
		}
	}
	if most := m.most.Load(); most > 3 {
		t.Errorf("%d requests in flight, want at most 3", most)
	}
}

func TestNetReaderEOF(t *testing.T) {
	r, m := newMemReader(t, 1000, 64, 3)
	p := make([]byte, 100)
	if n, err := r.readAt(context.Background(), p, 950); n != 50 || err != io.EOF || !bytes.Equal(p[:50], m.data[950:]) {
		t.Errorf("read across the end = %d, %v", n, err)
	}
	if n, err := r.readAt(context.Background(), p, 1000); n != 0 || err != io.EOF {
		t.Errorf("read at the end = %d, %v", n, err)
	}
	if n, err := r.readAt(context.Background(), p[:0], 10); n != 0 || err != nil {
		t.Errorf("empty read = %d, %v", n, err)
	}
	if _, err := r.readAt(context.Background(), p, -1); err == nil {
		t.Error("read at a negative offset succeeded")
	}
	if len(m.parts) != 1 {
		t.Errorf("%d fetches, want 1", len(m.parts))
	}
}

func TestNetReaderFirstErrorWins(t *testing.T) {
	r, m := newMemReader(t, 1000, 64, 3)
	m.fail = func(off int64) error {
		if off == 320 {
			return fmt.Errorf("%w: etag", ErrChanged)
		}
		return nil
	}
	_, err := r.readAt(context.Background(), make([]byte, 1000), 0)
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "mem://x: bytes 320-383") {
		t.Errorf("err = %v, want ErrChanged for bytes 320-383", err)
	}
}

func TestNetReaderClosed(t *testing.T) {
	r, _ := newMemReader(t, 1000, 64, 3)
	r.close()
	if _, err := r.readAt(context.Background(), make([]byte, 10), 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("read after close: %v, want os.ErrClosed", err)
	}
}

func TestRetryParentDeadlineIsUnavailable(t *testing.T) {
	p, _ := testPolicy(t, 100)
	r := &netReader{name: "x", policy: p, ctx: context.Background()}
	parent, cancelParent := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelParent()
	ctx, cancel := r.withDeadline(parent)
	defer cancel()
	err := p.do(ctx, "open x", func(ctx context.Context, _ func()) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "the caller's deadline passed") {
		t.Errorf("err = %v, want ErrUnavailable naming the caller's deadline", err)
	}
}

var attemptsRE = regexp.MustCompile(`(\d+) attempts? over`)

// checkGaveUpEarly checks that err says storage was given up on after
// fewer attempts than maxRetries allowed: the read deadline, not the retry
// count, ended the read.
func checkGaveUpEarly(t *testing.T, err error, maxRetries int) {
	t.Helper()
	m := attemptsRE.FindStringSubmatch(err.Error())
	if m == nil {
		t.Errorf("error %q does not say how many attempts were made", err)
		return
	}
	if n, _ := strconv.Atoi(m[1]); n < 1 || n >= maxRetries {
		t.Errorf("gave up after %d attempts; the deadline should end it well before %d", n, maxRetries)
	}
}
