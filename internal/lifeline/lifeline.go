// Package lifeline ends a program with the process that started it: the
// Python package starts ffcvfeed serve and ffcvfs write for a training or
// writing script, and neither may outlive it, however it ends (a SIGKILL
// included, which the child is not told of otherwise).
package lifeline

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// WithParent returns a context canceled when the parent process exits
// (a pidfd of the parent turns readable), and a function that reports
// whether it has. Called first thing, so that the parent is the one that
// started the process: one that is gone already (the server was reparented,
// to init or a subreaper) cancels the context at once. A parent that
// cannot be watched leaves the context alone, with a warning.
func WithParent(ctx context.Context) (context.Context, func() bool) {
	var gone atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	end := func() {
		gone.Store(true)
		cancel()
	}
	ppid := os.Getppid()
	if ppid == 1 {
		end()
		return ctx, gone.Load
	}
	fd, err := unix.PidfdOpen(ppid, 0)
	if err != nil {
		slog.Warn("cannot watch the parent process; this process will not end with it", "ppid", ppid, "err", err)
		return ctx, gone.Load
	}
	if os.Getppid() != ppid {
		// Reparented between the two calls: the parent is gone.
		unix.Close(fd)
		end()
		return ctx, gone.Load
	}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if n > 0 || err != nil {
				slog.Info("the parent process exited: stopping", "ppid", ppid)
				end()
				return
			}
		}
	}()
	return ctx, gone.Load
}
