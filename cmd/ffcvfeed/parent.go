package main

import (
	"context"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
)

// exitWithParentEnv, set to 1, ends the stream when the process that
// started the server exits, however it exits: the Python Loader that owns
// a server sets it, so that no server outlives its training process.
const exitWithParentEnv = "FFCVFEED_EXIT_WITH_PARENT"

// exitWithParent returns a context canceled when the parent process exits
// (a pidfd of the parent turns readable). If the parent is gone already,
// or cannot be watched, the context is canceled at once or not at all,
// with a warning.
func exitWithParent(ctx context.Context) context.Context {
	ppid := os.Getppid()
	fd, err := unix.PidfdOpen(ppid, 0)
	if err != nil {
		slog.Warn("cannot watch the parent process; the server will not end with it", "ppid", ppid, "err", err)
		return ctx
	}
	ctx, cancel := context.WithCancel(ctx)
	if os.Getppid() != ppid {
		// Reparented between the two calls: the parent is gone.
		unix.Close(fd)
		cancel()
		return ctx
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
				slog.Info("the parent process exited: ending the stream", "ppid", ppid)
				cancel()
				return
			}
		}
	}()
	return ctx
}
