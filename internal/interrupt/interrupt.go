// Package interrupt ends a command's work on Ctrl-C (SIGINT) or SIGTERM
// and lets the command say what became of it. signal.NotifyContext's stop,
// deferred as usual, gives the signals back to Go's default before the
// command's last word is printed (urfave/cli prints an exit error after
// the action returns): a second signal then, as the Python DatasetWriter
// sends SIGTERM after the terminal's SIGINT, killed the process silently.
// Context keeps both signals caught until the process exits.
package interrupt

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Context returns a context canceled by the first SIGINT or SIGTERM. Both
// stay caught, and later ones ignored, for the rest of the process's life,
// so that a command always ends by its own return.
func Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			cancel(&Error{Signal: s})
		case <-parent.Done():
		}
		for range ch {
		}
	}()
	return ctx
}

// Error is the cause of a context ended by a signal.
type Error struct{ Signal os.Signal }

func (e *Error) Error() string { return "interrupted by " + e.Signal.String() }
