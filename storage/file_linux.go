package storage

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Hooks that tests replace to make a filesystem refuse O_DIRECT.
var (
	openDirect = func(path string) (*os.File, error) {
		return os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	}
	directRead = pread
)

// pread is one pread(2) on rc's descriptor, repeated on EINTR.
func pread(rc syscall.RawConn, b []byte, off int64) (int, error) {
	var (
		n   int
		err error
	)
	if cerr := rc.Control(func(fd uintptr) {
		for {
			n, err = unix.Pread(int(fd), b, off)
			if err != unix.EINTR {
				return
			}
		}
	}); cerr != nil {
		return 0, os.ErrClosed // the only reason Control fails
	}
	if n < 0 {
		n = 0
	}
	return n, err
}

// dropCache drops the pages of [off, off+n) from the kernel page cache,
// rounded out to whole pages. Advice: failures are ignored.
func dropCache(rc syscall.RawConn, off int64, n int) {
	if n <= 0 {
		return
	}
	ps := int64(os.Getpagesize())
	start := off &^ (ps - 1)
	end := (off + int64(n) + ps - 1) &^ (ps - 1)
	_ = rc.Control(func(fd uintptr) {
		_ = unix.Fadvise(int(fd), start, end-start, unix.FADV_DONTNEED)
	})
}

// adviseRandom turns off the kernel's readahead on rc's descriptor: reads
// come in whole pages in the Cache's order, and readahead past them would
// only leave pages behind that no read drops.
func adviseRandom(rc syscall.RawConn) {
	_ = rc.Control(func(fd uintptr) {
		_ = unix.Fadvise(int(fd), 0, 0, unix.FADV_RANDOM)
	})
}
