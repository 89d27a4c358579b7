package storage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

func refused(port int) error {
	return fmt.Errorf("operation error S3: GetObject, request send failed, Get \"http://127.0.0.1:%d/b/k\": %w",
		port, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
}

func TestCauseIsTheSameForOneCause(t *testing.T) {
	p, _ := testPolicy(t, 2)
	var n1, n2 int
	e1 := p.do(context.Background(), "s3://b/k: bytes 0-9", failing(&n1, refused(1), refused(2), refused(3)))
	p, _ = testPolicy(t, 5)
	e2 := p.do(context.Background(), "s3://b/k: bytes 2097152-4194303", failing(&n2, refused(4), refused(5), refused(6), refused(7), refused(8), refused(9)))
	if !errors.Is(e1, ErrUnavailable) || !errors.Is(e2, ErrUnavailable) {
		t.Fatalf("errors %v and %v, want ErrUnavailable", e1, e2)
	}
	if errors.Is(e1, syscall.ECONNREFUSED) {
		t.Errorf("%v is taken for the last attempt's ECONNREFUSED, not for ErrUnavailable alone", e1)
	}
	c1, c2 := Cause(e1), Cause(e2)
	if c1 != c2 || c1 != "storage unavailable: connection refused" {
		t.Errorf("causes %q and %q, want both %q", c1, c2, "storage unavailable: connection refused")
	}
	if e1.Error() == e2.Error() {
		t.Errorf("the errors themselves should differ: %v", e1)
	}

	stalled := p.do(context.Background(), "x", failing(new(int), fmt.Errorf("%w: nothing received for 1s", errStalled),
		fmt.Errorf("%w: nothing received for 1s", errStalled), fmt.Errorf("%w: nothing received for 1s", errStalled),
		fmt.Errorf("%w: nothing received for 1s", errStalled), fmt.Errorf("%w: nothing received for 1s", errStalled),
		fmt.Errorf("%w: nothing received for 1s", errStalled)))
	if c := Cause(stalled); c != "storage unavailable: request stalled" {
		t.Errorf("cause of %v: %q", stalled, c)
	}

	for _, tc := range []struct {
		a, b error
		want string
	}{
		{fmt.Errorf("s3://b/k: reading page 3: %w: opened with ETag \"a\"", ErrChanged),
			fmt.Errorf("s3://b/k: reading page 7: %w: the range is past the object's end now", ErrChanged),
			ErrChanged.Error()},
		{errors.New("page 3: short read of 12 bytes"), errors.New("page 12: short read of 7 bytes"), "page N: short read of N bytes"},
	} {
		if ca, cb := Cause(tc.a), Cause(tc.b); ca != tc.want || cb != tc.want {
			t.Errorf("Cause(%v) = %q, Cause(%v) = %q; want %q", tc.a, ca, tc.b, cb, tc.want)
		}
	}
	if Cause(nil) != "" {
		t.Error("Cause(nil) is not empty")
	}
}

// TestRetryWarnsOncePerCause: while requests keep failing, the first
// failure of each cause is a warning and later ones are debug lines; a
// success is logged and makes the next failure a warning again.
func TestRetryWarnsOncePerCause(t *testing.T) {
	p, _ := testPolicy(t, 8)
	var buf *testenv.OutputBuffer
	p.log.log, buf = captureLogger()
	reset := errors.New("connection reset by peer")
	busy := &statusError{code: 503, status: "503 Service Unavailable"}
	warnings := func() int { return strings.Count(buf.String(), "level=WARN") }

	if err := p.do(context.Background(), "a", failing(new(int), refused(1), refused(2), reset, refused(3), busy, reset)); err != nil {
		t.Fatal(err)
	}
	if w, d := warnings(), strings.Count(buf.String(), "level=DEBUG msg=\"storage request failed; retrying\""); w != 3 || d != 3 {
		t.Errorf("%d warnings and %d debug lines for 6 failures of 3 causes, want 3 and 3:\n%s", w, d, buf)
	}
	if n := strings.Count(buf.String(), "succeed again"); n != 1 {
		t.Errorf("the success after failures logged %d times, want once:\n%s", n, buf)
	}
	// After the success, a failure of a cause warned of before warns again.
	if err := p.do(context.Background(), "b", failing(new(int), reset)); err != nil {
		t.Fatal(err)
	}
	if w := warnings(); w != 4 {
		t.Errorf("%d warnings after a new failure that followed a success, want 4:\n%s", w, buf)
	}
	if err := p.do(context.Background(), "c", func(context.Context, func()) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "succeed again"); n != 2 {
		t.Errorf("successes after failures logged %d times, want 2:\n%s", n, buf)
	}
	if err := p.do(context.Background(), "d", func(context.Context, func()) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "succeed again"); n != 2 {
		t.Errorf("a success after successes was logged:\n%s", buf)
	}
}
