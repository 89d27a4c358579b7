// Package sockpath keeps the paths of the Unix sockets the programs make
// within the bytes the kernel takes for one (sun_path: 108, the last a
// NUL), whatever $TMPDIR is: a socket's folder goes in the first of the
// usual places where the whole path fits, and a path given that does not
// fit is refused with a sentence that says what to do.
package sockpath

import (
	"fmt"
	"os"
)

// Max is the longest path a Unix socket may have on Linux.
const Max = 107

// Fits says whether a socket may be made or reached at path.
func Fits(path string) bool { return len(path) <= Max }

// Check returns nil for a path that fits, else an error that names the
// socket (what) and its length and says how to make it shorter.
func Check(what, path string) error {
	if Fits(path) {
		return nil
	}
	return fmt.Errorf("%s %s is %d bytes long, more than the %d a Unix socket's path may have: give a shorter path (under /tmp, say), or set TMPDIR to a shorter folder",
		what, path, len(path), Max)
}

// Parent returns the folder to make a socket's folder in, such that a
// path of extra more bytes in it fits: the first of candidates that is a
// folder, then $XDG_RUNTIME_DIR, the temporary folder ($TMPDIR) and /tmp.
// It fails only when none of them exists or is short enough.
func Parent(extra int, candidates ...string) (string, error) {
	candidates = append(candidates, os.Getenv("XDG_RUNTIME_DIR"), os.TempDir(), "/tmp")
	for _, c := range candidates {
		if c == "" || len(c)+extra > Max {
			continue
		}
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("no folder for a socket: $XDG_RUNTIME_DIR, $TMPDIR (%s) and /tmp are missing, or too long for a socket path of %d more bytes in %d", os.TempDir(), extra, Max)
}
