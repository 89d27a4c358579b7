package beton

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// openUnnamed opens a file without a name in dir (O_TMPFILE), which
// linkUnnamed names later; it fails where the filesystem or kernel has no
// O_TMPFILE, or where /proc, which linkUnnamed needs, is missing.
func openUnnamed(dir string) (*os.File, error) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, "(unnamed)")), nil
}

// linkUnnamed gives fh, opened by openUnnamed, a temporary name in dir
// and returns it.
func linkUnnamed(fh *os.File, dir, base string) (string, error) {
	proc := "/proc/self/fd/" + strconv.Itoa(int(fh.Fd()))
	for range 100 {
		var r [6]byte
		rand.Read(r[:])
		name := filepath.Join(dir, tempOwner(base)+hex.EncodeToString(r[:]))
		err := unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("naming the written file in %s: %w", dir, err)
		}
	}
	return "", fmt.Errorf("naming the written file in %s: every name tried exists", dir)
}

// lock holds fh's file locked until fh is closed, so that removeStaleTemps
// leaves it. A filesystem without locks is no matter: its stale files
// stay.
func lock(fh *os.File) { unix.Flock(int(fh.Fd()), unix.LOCK_EX) }

// tryLock reports whether fh's file could be locked: no process holds it.
func tryLock(fh *os.File) bool { return unix.Flock(int(fh.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil }
