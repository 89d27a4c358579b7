// Package bytesize parses and prints byte counts such as "512MiB" or "8M".
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// Parse reads a byte count: a number with an optional unit (B, K/KiB, M/MiB,
// G/GiB, T/TiB for powers of 1024; KB, MB, GB, TB for powers of 1000).
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range units {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			// "8MB" must not match "B" first: units are ordered longest first.
			mult = u.mult
			t = strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a byte size (examples: 4096, 512MiB, 8M, 1.5GiB)", s)
	}
	n := v * mult
	if n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(n), nil
}

// Format prints n with a binary unit, e.g. "8 MiB" or "1.5 GiB".
func Format(n int64) string {
	const k = 1024
	if n < k {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= k
		if f < k || u == "PiB" {
			s := strconv.FormatFloat(f, 'f', 1, 64)
			return strings.TrimSuffix(s, ".0") + " " + u
		}
	}
	return ""
}
