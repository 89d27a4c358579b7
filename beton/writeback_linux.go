package beton

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing n bytes at off of f to
// disk, without waiting (sync_file_range with SYNC_FILE_RANGE_WRITE). A
// refusal is no matter: the final sync writes them.
func startWriteback(f *os.File, off, n int64) {
	unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
