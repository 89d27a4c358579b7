package storage

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
)

// RequestStats counts the failed attempts of a network source's requests
// by cause: those retried, and those that failed the read they were part
// of (no retries left, an error not worth retrying, the deadline). Causes
// are a small fixed set, fit for metric labels: see ErrorClass.
type RequestStats struct {
	Retries  map[string]uint64 `json:"retries"`
	Failures map[string]uint64 `json:"failures"`
}

// RequestCounter is a Source that counts its failed attempts (HTTPSource
// and S3Source).
type RequestCounter interface {
	RequestStats() RequestStats
}

// ErrorClass sorts a failed attempt into one of a few causes: "stalled"
// (nothing received for the attempt timeout), "deadline" (the read
// deadline or the caller's passed), "throttled" (HTTP 429, 503),
// "server_error" (other 5xx), "client_error" (other 4xx, 408 aside),
// "changed" (the object changed since it was opened), "tls", "closed"
// (the source was closed) or "connection" (anything else: refused, reset,
// cut short, timed out).
func ErrorClass(err error) string {
	var sc interface{ HTTPStatusCode() int }
	var cve *tls.CertificateVerificationError
	switch {
	case errors.Is(err, ErrChanged):
		return "changed"
	case errors.Is(err, errStalled):
		return "stalled"
	case errors.Is(err, errReadDeadline), errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, errSourceClosed):
		return "closed"
	case errors.As(err, &cve):
		return "tls"
	case errors.As(err, &sc) && sc.HTTPStatusCode() > 0:
		switch c := sc.HTTPStatusCode(); {
		case c == 429 || c == 503:
			return "throttled"
		case c >= 500:
			return "server_error"
		case c == 408:
			return "connection"
		default:
			return "client_error"
		}
	}
	return "connection"
}

// requestCounts is a RequestStats under a mutex: failed attempts are rare
// next to requests, so a lock costs nothing that matters.
type requestCounts struct {
	mu                sync.Mutex
	retries, failures map[string]uint64
}

func (c *requestCounts) add(retried bool, err error) {
	class := ErrorClass(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &c.failures
	if retried {
		m = &c.retries
	}
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[class]++
}

func (c *requestCounts) stats() RequestStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := RequestStats{Retries: map[string]uint64{}, Failures: map[string]uint64{}}
	for k, v := range c.retries {
		s.Retries[k] = v
	}
	for k, v := range c.failures {
		s.Failures[k] = v
	}
	return s
}
