package pagecache

import (
	"fmt"
	"syscall"
)

// arenaFlags are the mapping's flags; benchmarks that never touch most of
// their slots add MAP_NORESERVE.
var arenaFlags = syscall.MAP_PRIVATE | syscall.MAP_ANON

// newArena returns n×size bytes of zeroed memory mapped outside the Go heap.
//
// The slots are most of a process's memory. On the Go heap, they would set
// the garbage collector's target: with GOGC=100 a 512 MiB cache lets up to
// another 512 MiB of garbage pile up between collections, and the resident
// size climbs epoch after epoch. Mapped apart, the heap holds only what the
// program uses, and collections keep it small. Untouched slots take no RAM.
func newArena(n int, size int64) ([]byte, error) {
	total := int64(n) * size
	if total <= 0 {
		return nil, fmt.Errorf("cannot reserve %d slots of %d bytes", n, size)
	}
	b, err := syscall.Mmap(-1, 0, int(total), syscall.PROT_READ|syscall.PROT_WRITE, arenaFlags)
	if err != nil {
		return nil, fmt.Errorf("cannot reserve %d bytes for %d slots: %w", total, n, err)
	}
	return b, nil
}

// freeArena returns an arena's memory to the system. Nothing may use it
// afterwards.
func freeArena(b []byte) error {
	if b == nil {
		return nil
	}
	if err := syscall.Munmap(b); err != nil {
		return fmt.Errorf("cannot unmap the page cache's memory: %w", err)
	}
	return nil
}
