package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitWithParentEnv, set to 1, ends the server when the process that
// started it exits, however it exits: the Python Loader that owns a server
// sets it, so that no server outlives its training process.
const exitWithParentEnv = "FFCVFEED_EXIT_WITH_PARENT"

// exitWithParent returns a context canceled when the parent process exits
// (a pidfd of the parent turns readable), and a function that reports
// whether it has. Called first thing, so that the parent is the one that
// started the server: one that is gone already (the server was reparented,
// to init or a subreaper) cancels the context at once. A parent that
// cannot be watched leaves the context alone, with a warning.
func exitWithParent(ctx context.Context) (context.Context, func() bool) {
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
		slog.Warn("cannot watch the parent process; the server will not end with it", "ppid", ppid, "err", err)
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
				slog.Info("the parent process exited: ending the stream", "ppid", ppid)
				end()
				return
			}
		}
	}()
	return ctx, gone.Load
}

// ownedFolderEnv names the folder that the process which started the
// server made for it (the Python Loader's, holding the socket and the
// server's log), for the server to remove when it outlives that process,
// which can then no longer do so.
const ownedFolderEnv = "FFCVFEED_OWNED_FOLDER"

// removeOwnedFolder removes the folder of ownedFolderEnv if the parent is
// gone and the folder is the socket's own: the socket's parent folder, a
// real folder (not a link) of this user's, mode 0700, holding no folder.
// Anything else is left as it is, with a warning.
func removeOwnedFolder(parentGone func() bool, socket string) {
	dir := os.Getenv(ownedFolderEnv)
	if dir == "" || !parentGone() {
		return
	}
	if err := checkOwnedFolder(dir, socket); err != nil {
		slog.Warn("leaving the folder of a parent that is gone", "folder", dir, "err", err)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		slog.Warn("removing the folder of a parent that is gone", "folder", dir, "err", err)
	}
}

// checkOwnedFolder says why dir is not the socket's private folder, if it
// is not.
func checkOwnedFolder(dir, socket string) error {
	if filepath.Clean(dir) != filepath.Dir(filepath.Clean(socket)) {
		return fmt.Errorf("it is not the folder of the socket %s", socket)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return fmt.Errorf("not a folder (%s)", st.Mode().Type())
	case !ok || sys.Uid != uint32(os.Getuid()):
		return fmt.Errorf("not this user's")
	case st.Mode().Perm() != 0o700:
		return fmt.Errorf("mode %v, not 0700", st.Mode().Perm())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			return fmt.Errorf("it holds a folder, %s", e.Name())
		}
	}
	return nil
}
