package fs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/fs/orders"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/storage"
)

// errorLog logs each distinct cause once, so a failing storage backend does
// not flood the log with one line per read. Causes are those of
// storage.Cause, the same for every read that fails for one reason
// whatever its sample, page, attempt count or duration; bad input is told
// apart by its whole message.
type errorLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]int // by cause: failures
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
		l.logOnce(what, err.Error(), err)
		return syscall.EINVAL
	case errors.Is(err, orders.ErrPlanLimit):
		l.logOnce(what, orders.ErrPlanLimit.Error(), err)
		return syscall.EBUSY
	case errors.Is(err, pagecache.ErrClosed):
		return syscall.EIO
	case errors.Is(err, beton.ErrCorrupt), errors.Is(err, storage.ErrUnavailable), errors.Is(err, storage.ErrChanged):
		l.logOnce(what, storage.Cause(err), err)
		return syscall.EIO
	}
	l.logOnce(what, storage.Cause(err), err)
	return syscall.EIO
}

// readError is toErrno for a lookup or read of the dataset, which it
// counts in reads.errors, unless it was interrupted: the kernel restarts an
// interrupted call, and its caller sees nothing of it.
func (v *View) readError(what string, err error) syscall.Errno {
	errno := v.errs.toErrno(what, err)
	if errno != syscall.EINTR {
		v.reads.errors.Add(1)
	}
	return errno
}

// logOnce logs err the first time its cause is seen.
func (l *errorLog) logOnce(what, cause string, err error) {
	l.mu.Lock()
	l.seen[cause]++
	n := l.seen[cause]
	l.mu.Unlock()
	if n == 1 {
		l.log.Error(what+" failed", "err", err.Error(), "cause", cause,
			"repeats", "counted in "+control.Dir+"/"+control.StatsFile+" (reads.errors), not logged")
	}
}

var (
	errNotFound = errors.New("no such file")
	errBadInput = errors.New("bad input")
)
