package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pagecache/tier"
)

func TestShortSize(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0B", 999: "999B", 1000: "1.0KiB", 1536: "1.5KiB", 10 << 20: "10MiB", 512 << 20: "512MiB",
		999 << 20: "999MiB", 1000 << 20: "1.0GiB", 2 << 30: "2GiB", 1<<40 - 1: "1.0TiB", 1 << 62: "4EiB",
	} {
		got := shortSize(n)
		if got != want {
			t.Errorf("shortSize(%d) = %q, want %q", n, got, want)
		}
		if len(got) > 6 {
			t.Errorf("shortSize(%d) = %q: longer than 6", n, got)
		}
	}
}

// TestStatsColumnsFit: the widest figures, with a disk tier, still fit in
// 79 columns, and the columns stay under their headers.
func TestStatsColumnsFit(t *testing.T) {
	var s control.Stats
	s.Cache.Tiers = &pagecache.TierStats{Tiers: []tier.Stats{{Kind: "disk"}}}
	one := 1.0
	l := statsLine{Time: time.Date(2026, 1, 2, 23, 59, 59, 0, time.UTC), ImagesPerS: 99999999, ReadMBPerS: 9999999.9,
		StorageMBPerS: 9999999.9, HitRatio: &one, DiskHitRatio: &one, RAMBytes: 999 << 30, RAMBudgetBytes: 999 << 30, InFlight: 99999999, Errors: 99999}
	head, line := statsHeader(s), l.columns(s)
	for _, x := range []string{head, line, statsTitle(strings.Repeat("/very/long/mountpoint", 5), s)} {
		if n := len([]rune(x)); n > 79 {
			t.Errorf("%d columns: %q", n, x)
		}
	}
	if len(head) != len(line) {
		t.Errorf("header and line differ in width:\n%s\n%s", head, line)
	}
}
