package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/internal/bytesize"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "watch a mount live: images/s, MB/s from storage, hit ratio, RAM, errors",
		ArgsUsage: "MOUNTPOINT",
		Description: `Reads MOUNTPOINT/.ffcvfs/stats.json every --interval and prints a line of
what happened in that interval, until Ctrl-C (like vmstat or juicefs stats):

   images/s   sample files read through the mount per second
   read MB/s  bytes of files read per second (decimal MB)
   stor MB/s  bytes read from storage per second (pages, ranges)
   hit%       reads of samples served by the RAM cache without loading
   RAM/budget the page cache's bytes in use / its budget (--cache-size)
   disk       with --disk-cache: its hit% in the interval
   inflight   requests to storage (or the disk cache) under way now
   err        reads answered with an error (EIO) in the interval

--once prints one line (two readings --interval apart) and exits; with
--json it prints that line as a JSON object, for scripts:

   ffcvfs stats --once --json /mnt/train | jq .images_per_s

For dashboards, mount with --metrics-addr and scrape it with Prometheus.`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "interval", Value: time.Second, Usage: "time between readings"},
			&cli.BoolFlag{Name: "once", Usage: "print one interval and exit"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON objects, one per line, instead of columns"},
		},
		Action: runStats,
	}
}

// statsLine is one interval of ffcvfs stats: its --json form.
type statsLine struct {
	Time          time.Time `json:"time"`
	Seconds       float64   `json:"seconds"`
	ImagesPerS    float64   `json:"images_per_s"`
	ReadMBPerS    float64   `json:"read_mb_per_s"`
	StorageMBPerS float64   `json:"storage_mb_per_s"`
	// HitRatio is of the RAM cache's reads in the interval; null
	// without reads.
	HitRatio       *float64 `json:"hit_ratio"`
	DiskHitRatio   *float64 `json:"disk_hit_ratio,omitempty"`
	RAMBytes       int64    `json:"ram_bytes"`
	RAMBudgetBytes int64    `json:"ram_budget_bytes"`
	InFlight       int      `json:"in_flight"`
	Errors         uint64   `json:"errors"`
	ErrorsTotal    uint64   `json:"errors_total"`
	Plans          int      `json:"plans"`
}

func runStats(c *cli.Context) error {
	if err := needArgs(c, "MOUNTPOINT"); err != nil {
		return err
	}
	interval := c.Duration("interval")
	if interval < 10*time.Millisecond {
		return usageError("--interval %v: want at least 10ms", interval)
	}
	path := control.Path(c.Args().First(), control.StatsFile)
	prev, err := readStats(path)
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	out := os.Stdout
	if !c.Bool("json") {
		fmt.Fprintln(out, statsTitle(c.Args().First(), prev.Stats))
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-tick.C:
		case <-sigs:
			return nil
		}
		cur, err := readStats(path)
		if err != nil {
			return cli.Exit(err.Error(), 1)
		}
		line := statsDelta(prev, cur)
		prev = cur
		if c.Bool("json") {
			b, err := json.Marshal(line)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%s\n", b)
		} else {
			if n%20 == 0 {
				fmt.Fprintln(out, statsHeader(cur.Stats))
			}
			fmt.Fprintln(out, line.columns(cur.Stats))
		}
		if c.Bool("once") {
			return nil
		}
	}
}

// reading is stats.json at a time.
type reading struct {
	control.Stats
	at time.Time
}

// readStats reads a mount's stats.json, with an error that says what is
// wrong with the mount.
func readStats(path string) (reading, error) {
	mnt := filepath.Dir(filepath.Dir(path))
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, syscall.ENOTCONN):
		return reading{}, fmt.Errorf("%s: the mount's process is gone (unmount it with: ffcvfs umount %s)", mnt, mnt)
	case errors.Is(err, os.ErrNotExist):
		if _, serr := os.Stat(mnt); serr != nil {
			return reading{}, fmt.Errorf("%s: %v", mnt, serr)
		}
		return reading{}, fmt.Errorf("%s is not an ffcvfs mount (it has no %s/%s); mount one with: ffcvfs mount SRC %s", mnt, control.Dir, control.StatsFile, mnt)
	case err != nil:
		return reading{}, fmt.Errorf("reading %s: %v", path, err)
	}
	r := reading{at: time.Now()}
	if err := json.Unmarshal(b, &r.Stats); err != nil {
		return reading{}, fmt.Errorf("%s: not the stats of an ffcvfs mount: %v", path, err)
	}
	return r, nil
}

// diskTier returns the stats of the disk tier, if any.
func diskTier(s control.Stats) (hits, misses uint64, ok bool) {
	if s.Cache.Tiers == nil {
		return 0, 0, false
	}
	for _, t := range s.Cache.Tiers.Tiers {
		if t.Kind == "disk" {
			return t.Hits, t.Misses, true
		}
	}
	return 0, 0, false
}

// storedBytes is what the mount had read from storage.
func storedBytes(r reading) uint64 {
	_, b := r.Cache.Storage()
	return b
}

// ratio is a/(a+b), or nil when both are 0.
func ratio(a, b uint64) *float64 {
	if a+b == 0 {
		return nil
	}
	r := float64(a) / float64(a+b)
	return &r
}

// statsDelta is the interval from a to b.
func statsDelta(a, b reading) statsLine {
	dt := b.at.Sub(a.at).Seconds()
	per := func(x, y uint64) float64 {
		if y < x || dt <= 0 {
			return 0 // a new mount at the same path
		}
		return float64(y-x) / dt
	}
	ac, bc := a.Cache, b.Cache
	l := statsLine{
		Time: b.at.Round(time.Millisecond), Seconds: math.Round(dt*1000) / 1000,
		ImagesPerS:     per(a.Reads.Images, b.Reads.Images),
		ReadMBPerS:     per(a.Reads.JPGBytes+a.Reads.PPMBytes+a.Reads.BetonBytes, b.Reads.JPGBytes+b.Reads.PPMBytes+b.Reads.BetonBytes) / 1e6,
		StorageMBPerS:  per(storedBytes(a), storedBytes(b)) / 1e6,
		RAMBytes:       int64(bc.Resident)*b.PageSize + bc.RangeBytes,
		RAMBudgetBytes: bc.BudgetBytes,
		InFlight:       bc.InFlight,
		ErrorsTotal:    b.Reads.Errors,
		Plans:          len(bc.Plans),
	}
	if bc.Hits >= ac.Hits && bc.Misses >= ac.Misses {
		l.HitRatio = ratio(bc.Hits-ac.Hits, bc.Misses-ac.Misses)
	}
	if b.Reads.Errors >= a.Reads.Errors {
		l.Errors = b.Reads.Errors - a.Reads.Errors
	}
	ah, am, _ := diskTier(a.Stats)
	if bh, bm, ok := diskTier(b.Stats); ok && bh >= ah && bm >= am {
		l.DiskHitRatio = ratio(bh-ah, bm-am)
	}
	return l
}

// statsTitle is the first line: what is mounted, in 79 columns (a long
// mountpoint is cut at its start).
func statsTitle(mnt string, s control.Stats) string {
	what := fmt.Sprintf(": %d samples in %d classes, %s of %s, cache %s",
		s.Samples, s.Classes, pages(s.Pages), bytesize.Format(s.PageSize), bytesize.Format(s.Cache.BudgetBytes))
	if r := []rune(mnt); len(r)+len(what) > 79 {
		keep := max(8, 79-len(what)-1)
		if keep < len(r) {
			mnt = "…" + string(r[len(r)-keep:])
		}
	}
	return mnt + what
}

// statsCols are the columns, 72 characters wide; with a disk tier,
// statsDiskCol follows the RAM column (78).
const (
	statsCols    = "%-8s %8s %9s %9s %5s %13s%s %8s %5s"
	statsDiskCol = " %5s"
)

func statsHeader(s control.Stats) string {
	disk := ""
	if _, _, ok := diskTier(s); ok {
		disk = fmt.Sprintf(statsDiskCol, "disk%")
	}
	return fmt.Sprintf(statsCols, "time", "images/s", "read MB/s", "stor MB/s", "hit%", "RAM/budget", disk, "inflight", "err")
}

func (l statsLine) columns(s control.Stats) string {
	pct := func(r *float64) string {
		if r == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", 100**r)
	}
	disk := ""
	if _, _, ok := diskTier(s); ok {
		disk = fmt.Sprintf(statsDiskCol, pct(l.DiskHitRatio))
	}
	return fmt.Sprintf(statsCols, l.Time.Format("15:04:05"),
		fmt.Sprintf("%.0f", l.ImagesPerS), fmt.Sprintf("%.1f", l.ReadMBPerS), fmt.Sprintf("%.1f", l.StorageMBPerS),
		pct(l.HitRatio), shortSize(l.RAMBytes)+"/"+shortSize(l.RAMBudgetBytes), disk,
		fmt.Sprint(l.InFlight), fmt.Sprint(l.Errors))
}

// shortSize writes n bytes in at most 6 characters: 512MiB, 1.9GiB, 999B.
func shortSize(n int64) string {
	v, units := float64(n), []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := 0
	for math.Round(v) >= 1000 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i > 0 && v < 9.95 && v != math.Trunc(v) {
		return fmt.Sprintf("%.1f%s", v, units[i])
	}
	return fmt.Sprintf("%.0f%s", v, units[i])
}
