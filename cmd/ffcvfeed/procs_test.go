package main

import (
	"runtime"
	"testing"
)

func TestProcsFor(t *testing.T) {
	for _, c := range []struct{ workers, procs, want int }{
		{2, 2, 3}, // the default on 2 cores: one to spare
		{1, 2, 2}, // already one to spare
		{8, 2, 9},
		{4, 16, 16},
	} {
		if got := procsFor(c.workers, c.procs); got != c.want {
			t.Errorf("procsFor(%d, %d) = %d, want %d", c.workers, c.procs, got, c.want)
		}
	}
}

// TestSpareProc checks that spareProc raises GOMAXPROCS above the workers
// and leaves a GOMAXPROCS the environment sets.
func TestSpareProc(t *testing.T) {
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(2)
	spareProc(2)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("2 workers, GOMAXPROCS 2: spareProc made it %d, want 3", got)
	}
	t.Setenv("GOMAXPROCS", "2")
	runtime.GOMAXPROCS(2)
	spareProc(4)
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Errorf("GOMAXPROCS=2 in the environment: spareProc made it %d, want 2", got)
	}
}
