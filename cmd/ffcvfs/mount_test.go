package main

import (
	"slices"
	"testing"

	"github.com/ffcvfs/ffcvfs/storage"
)

// TestMountProcs: one P for a file whatever the cores; for network storage
// one per 8 cores, from 1 to 8.
func TestMountProcs(t *testing.T) {
	for _, tc := range []struct {
		src  string
		cpus int
		want int
	}{
		{"/data/train.beton", 64, 1},
		{"file:///data/train.beton", 2, 1},
		{"s3://bucket/train.beton", 2, 1},
		{"s3://bucket/train.beton", 15, 1},
		{"S3://bucket/train.beton", 16, 2},
		{"https://host/train.beton", 64, 8},
		{"http://host/train.beton", 256, 8},
	} {
		if got := mountProcs(storage.IsNetwork(tc.src), tc.cpus); got != tc.want {
			t.Errorf("%s on %d cores: GOMAXPROCS %d, want %d", tc.src, tc.cpus, got, tc.want)
		}
	}
}

// TestProcsPolicy: the mount's Ps double while they are all busy, up to
// half the cores, and halve once the load fits in half of them for
// quietTicks ticks in a row, never below the base; on 2 cores a file's
// mount stays on one P whatever its load.
func TestProcsPolicy(t *testing.T) {
	p := newProcsPolicy(1, 16)
	cur := 1
	var seen []int
	for range 5 { // saturated: every P busy
		cur = p.next(cur, float64(cur))
		seen = append(seen, cur)
	}
	if want := []int{2, 4, 8, 8, 8}; !slices.Equal(seen, want) {
		t.Errorf("saturated on 16 cores: %v, want %v", seen, want)
	}
	// Busy but not saturated: kept.
	if got := p.next(8, 6); got != 8 {
		t.Errorf("6 of 8 busy: %d, want 8", got)
	}
	// Quiet: halved only after quietTicks ticks in a row; a busy tick
	// between starts the count again.
	for i := range quietTicks - 1 {
		if got := p.next(8, 1); got != 8 {
			t.Fatalf("quiet tick %d: %d, want 8 until %d ticks", i, got, quietTicks)
		}
	}
	if got := p.next(8, 5); got != 8 {
		t.Errorf("a busier tick: %d", got)
	}
	for range quietTicks - 1 {
		p.next(8, 1)
	}
	if got := p.next(8, 1); got != 4 {
		t.Errorf("after %d quiet ticks: %d, want 4", quietTicks, got)
	}
	cur = 4
	for range 10 * quietTicks {
		cur = p.next(cur, 0)
	}
	if cur != 1 {
		t.Errorf("idle: %d Ps, want the base 1", cur)
	}
	// 2 cores, a file: one P however busy.
	two := newProcsPolicy(1, 2)
	if got := two.next(1, 1.5); got != 1 {
		t.Errorf("2 cores, saturated: %d Ps, want 1", got)
	}
	// Network storage on 64 cores: base 8, up to 32, never below 8.
	net := newProcsPolicy(mountProcs(true, 64), 64)
	if got := net.next(8, 8); got != 16 {
		t.Errorf("network, saturated: %d, want 16", got)
	}
	cur = 16
	for range 10 * quietTicks {
		cur = net.next(cur, 0)
	}
	if cur != 8 {
		t.Errorf("network, idle: %d, want 8", cur)
	}
}
