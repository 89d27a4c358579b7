package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// memory describes this process's resident memory from /proc/self/status:
// "rss R MiB, peak P MiB", or "" where that file cannot be read.
func memory() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return ""
	}
	defer f.Close()
	var rss, hwm float64
	var found int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 64)
		if err != nil {
			return ""
		}
		if name == "VmRSS" {
			rss = kb / 1024
		} else {
			hwm = kb / 1024
		}
		found++
	}
	if found != 2 {
		return ""
	}
	return fmt.Sprintf("rss %.1f MiB, peak %.1f MiB", rss, hwm)
}
