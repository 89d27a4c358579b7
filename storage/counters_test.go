package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"testing"
)

func TestErrorClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&statusError{code: 503}, "throttled"},
		{&statusError{code: 429}, "throttled"},
		{fmt.Errorf("part 3: %w", &statusError{code: 500}), "server_error"},
		{&statusError{code: 404}, "client_error"},
		{&statusError{code: 408}, "connection"},
		{fmt.Errorf("x: %w", ErrChanged), "changed"},
		{fmt.Errorf("%w: nothing received", errStalled), "stalled"},
		{context.DeadlineExceeded, "deadline"},
		{errReadDeadline, "deadline"},
		{errSourceClosed, "closed"},
		{io.ErrUnexpectedEOF, "connection"},
	} {
		if got := ErrorClass(c.err); got != c.want {
			t.Errorf("ErrorClass(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestRetryCounts: each failed attempt is counted once, by cause: as a
// retry when another attempt follows, as a failure when none does.
func TestRetryCounts(t *testing.T) {
	p, _ := testPolicy(t, 2)
	var n int
	if err := p.do(context.Background(), "r", failing(&n, &statusError{code: 503}, io.ErrUnexpectedEOF)); err != nil {
		t.Fatal(err)
	}
	n = 0
	if err := p.do(context.Background(), "r", failing(&n, &statusError{code: 500}, &statusError{code: 500}, &statusError{code: 500})); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	n = 0
	if err := p.do(context.Background(), "r", failing(&n, &statusError{code: 404})); err == nil {
		t.Fatal("a 404 succeeded")
	}
	got := p.counts.stats()
	if want := map[string]uint64{"throttled": 1, "connection": 1, "server_error": 2}; !maps.Equal(got.Retries, want) {
		t.Errorf("retries %v, want %v", got.Retries, want)
	}
	if want := map[string]uint64{"server_error": 1, "client_error": 1}; !maps.Equal(got.Failures, want) {
		t.Errorf("failures %v, want %v", got.Failures, want)
	}
}
