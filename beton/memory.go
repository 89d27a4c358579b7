package beton

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// tableMemory is what Open holds for a file's tables: the metadata table
// (metaBytes), the allocation table as read and as parsed, and a page
// index entry per sample.
func tableMemory(samples, metaBytes, allocs uint64) uint64 {
	return satAdd(metaBytes, satAdd(satMul(allocs, AllocEntrySize+uint64(unsafe.Sizeof(Alloc{}))), satMul(samples, 4)))
}

func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// maxTableMemory bounds tableMemory: half of the memory this machine (or
// its cgroup) has free when first asked; unbounded where that cannot be
// read.
var maxTableMemory = sync.OnceValue(func() uint64 {
	free := uint64(math.MaxUint64)
	if kb, ok := meminfo("MemAvailable:"); ok {
		free = kb << 10
	}
	if limit, ok := cgroupFile("memory.max"); ok {
		if used, ok := cgroupFile("memory.current"); ok && used < limit {
			free = min(free, limit-used)
		}
	}
	return free / 2
})

// meminfo returns a /proc/meminfo field, in kB.
func meminfo(field string) (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// cgroupFile returns a number of this process's cgroup (v2), false where
// there is none or it says "max".
func cgroupFile(name string) (uint64, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	_, path, ok := strings.Cut(strings.TrimSpace(string(b)), "0::")
	if !ok {
		return 0, false
	}
	v, err := os.ReadFile("/sys/fs/cgroup" + path + "/" + name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(v)), 10, 64)
	return n, err == nil
}
