// Package progress draws a one-line progress bar for long operations on a
// terminal, and stays silent when its output is not one.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// Bar is a progress bar. Its methods are safe for concurrent use.
type Bar struct {
	out   io.Writer
	label string
	unit  string
	total int64
	start time.Time

	mu    sync.Mutex
	done  int64
	drawn time.Time
}

// ForceEnv, set to 1, draws bars on out whatever it is: for a parent
// process that passes a child's standard error on to its terminal (the
// Python DatasetWriter sets it for ffcvfs write when its own standard
// error is one). Any other value is as if unset.
const ForceEnv = "FFCVFS_PROGRESS"

// New returns a bar for total units of work, drawn on out when out is a
// terminal (or ForceEnv says so); otherwise the bar does nothing.
func New(out *os.File, label string, total int64, unit string) *Bar {
	b := &Bar{label: label, unit: unit, total: total, start: time.Now()}
	if out != nil && (term.IsTerminal(int(out.Fd())) || os.Getenv(ForceEnv) == "1") {
		b.out = out
	}
	return b
}

// Add records n more units done.
func (b *Bar) Add(n int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += n
	if b.out != nil && (time.Since(b.drawn) > 100*time.Millisecond || b.done == b.total) {
		b.draw(false)
	}
}

// Set records that done units are done in all.
func (b *Bar) Set(done int64) {
	if b == nil {
		return
	}
	b.mu.Lock()
	d := done - b.done
	b.mu.Unlock()
	b.Add(d)
}

// draw draws the bar, and its rate from its second line on (100 ms or
// more after the first), and in its final one: at its first, work done
// ahead (samples already queued) would read as millions a second.
func (b *Bar) draw(final bool) {
	first := b.drawn.IsZero()
	b.drawn = time.Now()
	el := time.Since(b.start).Seconds()
	rate := 0.0
	if el > 0 && (!first || final) {
		rate = float64(b.done) / el
	}
	frac := 0.0
	if b.total > 0 {
		frac = float64(b.done) / float64(b.total)
	}
	const width = 30
	n := int(frac * width)
	eta := ""
	if rate > 0 && b.done < b.total {
		eta = fmt.Sprintf(" ETA %s", time.Duration(float64(b.total-b.done)/rate*float64(time.Second)).Round(time.Second))
	}
	speed := "…"
	if rate > 0 {
		speed = fmt.Sprintf("%.0f %s/s", rate, b.unit)
	}
	fmt.Fprintf(b.out, "\r%s [%s%s] %d/%d %s (%s)%s\x1b[K", b.label,
		strings.Repeat("=", n), strings.Repeat(" ", width-n), b.done, b.total, b.unit, speed, eta)
}

// Finish draws the final state and ends the line.
func (b *Bar) Finish() {
	if b == nil || b.out == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw(true)
	fmt.Fprintln(b.out)
}
