package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/profile"
)

// runStats is what a bench run cost the process, for telling a pipeline
// that waits from cores that slow down: allocations and GC per image,
// the CPU time against the workers' wall time, and the cores' clock.
type runStats struct {
	at      time.Time
	cpu     time.Duration
	samples []metrics.Sample
}

var runMetrics = []string{"/gc/heap/allocs:objects", "/gc/heap/allocs:bytes", "/cpu/classes/gc/total:cpu-seconds"}

func startRunStats() runStats {
	r := runStats{at: time.Now(), cpu: profile.CPUTime(), samples: make([]metrics.Sample, len(runMetrics))}
	for i, name := range runMetrics {
		r.samples[i].Name = name
	}
	metrics.Read(r.samples)
	return r
}

// line says, for images made by workers since r: allocations and bytes an
// image, GC's share of the CPU, how much of the workers' time was CPU
// (below 100 %: they waited), and the cores' mean clock where the kernel
// says it.
func (r runStats) line(images, workers int) string {
	now := make([]metrics.Sample, len(r.samples))
	copy(now, r.samples)
	metrics.Read(now)
	val := func(i int) float64 {
		a, b := r.samples[i].Value, now[i].Value
		switch a.Kind() {
		case metrics.KindUint64:
			return float64(b.Uint64() - a.Uint64())
		case metrics.KindFloat64:
			return b.Float64() - a.Float64()
		}
		return 0
	}
	n := float64(max(images, 1))
	cpu := (profile.CPUTime() - r.cpu).Seconds()
	wall := time.Since(r.at).Seconds()
	s := fmt.Sprintf("runtime: %.2f allocations, %.0f B an image; GC %.1f %% of CPU; CPU %.2f s of %d workers' %.2f s (%.0f %%)",
		val(0)/n, val(1)/n, 100*val(2)/max(cpu, 1e-9), cpu, workers, wall*float64(workers), 100*cpu/max(wall*float64(workers), 1e-9))
	if mhz := meanMHz(); mhz > 0 {
		s += fmt.Sprintf("; cores at %.0f MHz", mhz)
	}
	return s
}

// meanMHz is the mean of /proc/cpuinfo's "cpu MHz" lines, 0 where there
// are none.
func meanMHz() float64 {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	var sum float64
	var n int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) != "cpu MHz" {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil && v > 0 && v < 1e5 {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
