package fs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/pagecache"
)

// errorLog logs each distinct cause once, so a failing storage backend does
// not flood the log with one line per read.
type errorLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]int
}

// toErrno maps an error of a lower layer to the errno of the one FUSE call
// that failed, logging the cause first (once per distinct message). It is
// the only place where errors become errnos.
func (l *errorLog) toErrno(what string, err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, errNotFound):
		return syscall.ENOENT
	case errors.Is(err, errBadInput):
		l.logOnce(what, err)
		return syscall.EINVAL
	case errors.Is(err, pagecache.ErrClosed):
		return syscall.EIO
	case errors.Is(err, beton.ErrCorrupt), errors.Is(err, pagecache.ErrUnavailable), errors.Is(err, pagecache.ErrChanged):
		l.logOnce(what, err)
		return syscall.EIO
	}
	l.logOnce(what, err)
	return syscall.EIO
}

func (l *errorLog) logOnce(what string, err error) {
	msg := err.Error()
	l.mu.Lock()
	l.seen[msg]++
	n := l.seen[msg]
	l.mu.Unlock()
	if n == 1 {
		l.log.Error(what+" failed", "err", msg)
	}
}

var (
	errNotFound = errors.New("no such file")
	errBadInput = errors.New("bad input")
)
