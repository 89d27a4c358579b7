package storagetest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/storage"
)

func TestSource(t *testing.T) {
	ctx := context.Background()
	s := New("mem://x", []byte("hello, world"))
	p := make([]byte, 5)
	if n, err := s.ReadAt(ctx, p, 7); n != 5 || err != nil || string(p) != "world" {
		t.Fatalf("ReadAt = %d, %v, %q", n, err, p)
	}
	if n, err := s.ReadAt(ctx, p, 10); n != 2 || err != io.EOF {
		t.Fatalf("ReadAt across the end = %d, %v", n, err)
	}
	boom := errors.New("boom")
	s.Fail(boom)
	if _, err := s.ReadAt(ctx, p, 0); !errors.Is(err, boom) || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("failing read: %v", err)
	}
	s.Fail(nil)
	s.Hang(true)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := s.ReadAt(cctx, p, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hanging read: %v", err)
	}
	s.Hang(false)
	if s.Cancelled() != 1 {
		t.Fatalf("%d reads cancelled, want 1", s.Cancelled())
	}
	s.Hang(true)
	done := make(chan error)
	go func() {
		_, err := s.ReadAt(ctx, make([]byte, 1), 0)
		done <- err
	}()
	s.Hang(false)
	if err := <-done; err != nil {
		t.Fatalf("a read let go by Hang(false): %v", err)
	}
	s.Reset()
	s.ReadAt(ctx, p, 7)
	s.ReadAt(ctx, p, 10)
	if got := s.Reads(); got[7] != 1 || got[10] != 1 || len(got) != 2 || s.BytesRead() != 7 {
		t.Fatalf("reads %v, %d bytes", got, s.BytesRead())
	}
	s.Reset()
	if len(s.Reads()) != 0 || s.BytesRead() != 0 {
		t.Fatal("Reset left counts")
	}
}
