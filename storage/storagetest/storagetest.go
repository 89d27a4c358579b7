// Package storagetest provides a storage.Source for tests: bytes in
// memory, with faults to inject (errors, latency, reads that hang until
// their context ends) and a count of the reads it served.
package storagetest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/ffcvfs/ffcvfs/storage"
)

// Source serves bytes from memory. Its faults may be changed while it is
// read.
type Source struct {
	name string
	data []byte

	mu    sync.Mutex
	reads map[int64]int // reads served, by offset
	bytes int64
	fault func(off int64, n int) error
	delay time.Duration
	hang  chan struct{} // closed when reads stop hanging; nil: no hang
	// Cancelled counts reads that ended because their context did.
	cancelled int
}

var _ storage.Source = (*Source)(nil)

// New returns a source named name holding data.
func New(name string, data []byte) *Source {
	return &Source{name: name, data: data, reads: map[int64]int{}}
}

// ReadAt reads len(p) bytes at off, after the delay and unless a fault
// says otherwise. Hanging or delayed reads end when ctx does.
func (s *Source) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	s.mu.Lock()
	fault, delay, hang := s.fault, s.delay, s.hang
	s.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return 0, s.cancel(ctx, p, off)
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, s.cancel(ctx, p, off)
		}
	}
	if fault != nil {
		if err := fault(off, len(p)); err != nil {
			return 0, err
		}
	}
	if off < 0 {
		return 0, fmt.Errorf("%s: read at negative offset %d", s.name, off)
	}
	if off >= int64(len(s.data)) {
		return 0, io.EOF
	}
	n := copy(p, s.data[off:])
	s.mu.Lock()
	s.reads[off]++
	s.bytes += int64(n)
	s.mu.Unlock()
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *Source) cancel(ctx context.Context, p []byte, off int64) error {
	s.mu.Lock()
	s.cancelled++
	s.mu.Unlock()
	return fmt.Errorf("%s: read of %d bytes at %d: %w", s.name, len(p), off, context.Cause(ctx))
}

// Size returns the length of the data.
func (s *Source) Size() int64 { return int64(len(s.data)) }

// Name returns the source's name.
func (s *Source) Name() string { return s.name }

// Close does nothing.
func (s *Source) Close() error { return nil }

// Fault makes every read first call fn with its offset and length; a
// non-nil result is the read's error. nil removes the fault.
func (s *Source) Fault(fn func(off int64, n int) error) {
	s.mu.Lock()
	s.fault = fn
	s.mu.Unlock()
}

// Fail makes every read fail with err, wrapped in storage.ErrUnavailable
// as network sources report storage that keeps failing; nil stops it.
func (s *Source) Fail(err error) {
	if err == nil {
		s.Fault(nil)
		return
	}
	s.Fault(func(off int64, n int) error {
		return fmt.Errorf("%s: read of %d bytes at %d: %w: %w", s.name, n, off, storage.ErrUnavailable, err)
	})
}

// Delay makes every read take d more.
func (s *Source) Delay(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

// Hang makes reads wait until their context ends or Hang(false) is
// called, which lets the waiting reads go on.
func (s *Source) Hang(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case on && s.hang == nil:
		s.hang = make(chan struct{})
	case !on && s.hang != nil:
		close(s.hang)
		s.hang = nil
	}
}

// Cancelled returns how many reads ended because their context did.
func (s *Source) Cancelled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cancelled
}

// Reads returns how many reads were served at each offset since New or
// the last Reset.
func (s *Source) Reads() map[int64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.reads)
}

// BytesRead returns the bytes served since New or the last Reset.
func (s *Source) BytesRead() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Reset clears the counts.
func (s *Source) Reset() {
	s.mu.Lock()
	clear(s.reads)
	s.bytes = 0
	s.mu.Unlock()
}
