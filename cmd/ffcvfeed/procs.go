package main

import (
	"os"
	"runtime"
)

// spareProc gives the Go scheduler one P (GOMAXPROCS) more than the
// workers that decode, unless the environment sets GOMAXPROCS.
//
// A worker spends almost all its time in one cgo call per image (hundreds
// of microseconds). The runtime counts a cgo call as a system call: when
// no P is idle, sysmon takes the P of a goroutine that has been in C for
// over 20 µs and hands it to another thread, and the worker, back from C,
// waits for a P. With as many Ps as workers that happened for nearly every
// image: on 2 cores with 2 workers both ffcvfeed bench and decode-bench
// kept the cores 75–90 % busy and spent the rest waking and parking
// threads. With a P to spare sysmon leaves them be (runtime.retake).
func spareProc(workers int) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(procsFor(workers, runtime.GOMAXPROCS(0)))
}

// procsFor is the GOMAXPROCS for workers decoding goroutines when it
// would otherwise be procs.
func procsFor(workers, procs int) int {
	return max(procs, workers+1)
}
