//go:build !linux

package storage

import (
	"errors"
	"os"
	"syscall"
)

// Without Linux, there is neither O_DIRECT nor POSIX_FADV_DONTNEED here:
// DirectIO is refused (with the usual warning) and reads go through the
// kernel page cache.
var (
	openDirect = func(string) (*os.File, error) {
		return nil, errors.New("O_DIRECT is not supported on this system")
	}
	directRead = func(syscall.RawConn, []byte, int64) (int, error) {
		return 0, syscall.EINVAL
	}
)

func dropCache(syscall.RawConn, int64, int) {}

func adviseRandom(syscall.RawConn) {}
