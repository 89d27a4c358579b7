// Package hangup takes SIGHUP for the processes that reload on it (a
// mount, a feed server): Go's default for SIGHUP ends the process, and a
// mount ended so leaves its mountpoint dead (ENOTCONN). Catch, called
// while the program initializes, holds a SIGHUP that comes before the
// program knows what it reloads; Handle then runs a function for it and
// for every later one. Before Catch (the Go runtime's start and the
// packages' initialization, a few milliseconds), early.c keeps SIGHUP
// ignored for the commands "mount" and "serve", from the process's first
// instruction.
package hangup

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

var (
	mu      sync.Mutex
	ch      chan os.Signal // nil before Catch
	handled bool
)

// Catch takes SIGHUP from now on: one is held until Handle, others in
// between are merged with it, and none ends the process.
func Catch() {
	mu.Lock()
	defer mu.Unlock()
	if ch == nil {
		ch = make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGHUP)
	}
}

// Handle runs f, on a goroutine of its own, for the SIGHUP held since
// Catch (which it calls if nobody did) and for every later one. Only the
// first call counts.
func Handle(f func()) {
	Catch()
	mu.Lock()
	defer mu.Unlock()
	if handled {
		return
	}
	handled = true
	go func() {
		for range ch {
			f()
		}
	}()
}

// Caught reports whether Catch was called.
func Caught() bool {
	mu.Lock()
	defer mu.Unlock()
	return ch != nil
}

// ForCommand calls Catch when the first argument of args that is not a
// flag (the subcommand) is one of commands, and reports whether it did:
// for a program's package-level variable, initialized before its main.
func ForCommand(args []string, commands ...string) bool {
	for _, a := range args {
		if len(a) > 0 && a[0] == '-' {
			continue
		}
		for _, c := range commands {
			if a == c {
				Catch()
				return true
			}
		}
		return false
	}
	return false
}
