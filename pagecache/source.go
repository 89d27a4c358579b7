package pagecache

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ffcvfs/ffcvfs/storage"
)

// sourceLevel is the chain's last level: storage (package storage's
// Source). It counts the requests and bytes that reach it.
type sourceLevel struct {
	src       storage.Source
	pageSize  int64
	firstPage int64

	reqs, bytes atomic.Uint64
}

func (s *sourceLevel) read(ctx context.Context, dp int32, lo int64, p []byte) error {
	n, err := s.readAt(ctx, p, (int64(dp)+s.firstPage)*s.pageSize+lo)
	if err == nil && n != len(p) {
		err = fmt.Errorf("short read of %d bytes", n)
	}
	return err
}

// keepsWhole: storage keeps nothing for the levels above.
func (s *sourceLevel) keepsWhole(int32) bool { return false }

// readAt reads any bytes of the beton (its header and tables too),
// counted.
func (s *sourceLevel) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := s.src.ReadAt(ctx, p, off)
	s.reqs.Add(1)
	s.bytes.Add(uint64(n))
	return n, err
}
