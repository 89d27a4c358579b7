package main

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/profile"
)

// The mount's processors (GOMAXPROCS) follow its load. A FUSE request
// costs the least CPU on one P: with more, the runtime wakes a spare
// thread for each request the netpoller hands over, and on 2 cores a
// second P slowed 2 readers' raw reads from about 4,800 to 3,200 files a
// second. But one P caps what the mount serves (about 15,000 files a
// second on a 16-core node, however many readers). So the mount starts
// on mountProcs and doubles its Ps while they are all busy, up to half the
// cores (a reader's side of a request, its system calls and the kernel's
// copy into its pages, costs about what the mount's side does), and halves
// them once its load has fitted in half of them for a while.
//
// No library does this: automaxprocs and the runtime size GOMAXPROCS by
// the CPU quota, not by the load.

const (
	procsTick = 50 * time.Millisecond
	// busyGrow: the share of its Ps' time the mount used in a tick that
	// doubles them; busyShrink, held for quietTicks, halves them.
	busyGrow   = 0.85
	busyShrink = 0.35
	quietTicks = 40
)

// procsPolicy is the rule, apart from the clock and the process.
type procsPolicy struct {
	min, max int
	quiet    int // ticks in a row below busyShrink
}

// newProcsPolicy: from base (mountProcs) up to half of cpus, never below base.
func newProcsPolicy(base, cpus int) *procsPolicy {
	return &procsPolicy{min: base, max: max(base, cpus/2)}
}

// next returns the Ps for the next tick, given the current ones and the
// CPU seconds the process used per second of the last tick.
func (p *procsPolicy) next(cur int, cpuPerSec float64) int {
	busy := cpuPerSec / float64(cur)
	switch {
	case busy >= busyGrow && cur < p.max:
		p.quiet = 0
		return min(cur*2, p.max)
	case busy < busyShrink && cur > p.min:
		p.quiet++
		if p.quiet >= quietTicks {
			p.quiet = 0
			return max(cur/2, p.min)
		}
	default:
		p.quiet = 0
	}
	return cur
}

// followLoad adjusts GOMAXPROCS, base to begin with, by the process's
// CPU time every procsTick until stop is closed.
func followLoad(base, cpus int, stop <-chan struct{}) {
	p := newProcsPolicy(base, cpus)
	if p.max == p.min {
		return
	}
	t := time.NewTicker(procsTick)
	defer t.Stop()
	cur, last, at := base, profile.CPUTime(), time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			cpu := profile.CPUTime()
			wall := now.Sub(at).Seconds()
			if wall <= 0 {
				continue
			}
			n := p.next(cur, (cpu-last).Seconds()/wall)
			last, at = cpu, now
			if n != cur {
				slog.Debug("processors follow the load", "gomaxprocs", n, "was", cur)
				runtime.GOMAXPROCS(n)
				cur = n
			}
		}
	}
}
