// Package readfile reads files named on a command line (an id list, a .npy
// array, a secret, a peer list) with their hostile forms in mind: only
// regular files are read (a FIFO would block, /dev/zero never end), their
// size is checked against a bound before any byte is read, so that no such
// file sizes an allocation by itself.
package readfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// ErrNotRegular is returned for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// Open opens the regular file at path for reading and returns it with its
// size. A FIFO, device or socket is refused without blocking (the open does
// not wait for a FIFO's writer).
func Open(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w (%s)", path, ErrNotRegular, Kind(st.Mode()))
	}
	return f, st.Size(), nil
}

// Kind names the type of a file that is not a regular one: "a folder", "a
// FIFO", ...
func Kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return m.Type().String()
}

// Bounded reads the regular file at path whole, refusing one of more than
// limit bytes before reading it.
func Bounded(path string, limit int64) ([]byte, error) {
	f, size, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, fmt.Errorf("%s: %d bytes, larger than the %d this reads", path, size, limit)
	}
	// The file may grow while it is read: at most limit bytes are taken.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}
