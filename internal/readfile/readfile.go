// Package readfile reads small files whole with a bound on their size, so
// that a file named on a command line (an id list, a .npy array, a secret,
// a peer list) never sizes an allocation by itself.
package readfile

import (
	"fmt"
	"io"
	"os"
)

// Bounded reads the file at path, refusing one of more than limit bytes.
func Bounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return b, nil
}
