// Package profile writes the profiles a process's environment asks for,
// for go tool pprof, and tells the CPU time a process has used:
//
//	FFCVFS_CPUPROFILE=FILE    where the CPU goes
//	FFCVFS_MUTEXPROFILE=FILE  the time goroutines waited for a mutex that
//	                          another held, at the Unlock that ended the wait
//	FFCVFS_BLOCKPROFILE=FILE  the time goroutines spent blocked: mutexes,
//	                          channels, selects, condition variables
//	FFCVFS_ALLOCSPROFILE=FILE where memory is allocated (every allocation
//	                          since the start, sampled as the runtime does:
//	                          one per 512 KiB)
//
// Every contention and every blocking event is recorded (fractions and
// rates of 1): the figures are totals, at the price of some speed while
// they are on. A FILE is created 0600, or written over if it is empty or
// a profile already (gzip, as pprof writes them); any other file (the
// beton being read, say), a symbolic link, a FIFO or anything else is
// refused, as is one file named by two of the variables.
package profile

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/readfile"
)

// The environment variables, by profile.
const (
	CPUEnv   = "FFCVFS_CPUPROFILE"
	MutexEnv = "FFCVFS_MUTEXPROFILE"
	BlockEnv = "FFCVFS_BLOCKPROFILE"
	// AllocsEnv: the runtime samples allocations always; the profile is
	// written at stop.
	AllocsEnv = "FFCVFS_ALLOCSPROFILE"
)

// Start starts the profiles the environment asks for; stop writes them
// and closes their files. Without any, stop does nothing.
func Start() (stop func() error, err error) {
	var files []*os.File
	fail := func(err error) (func() error, error) {
		for _, f := range files {
			f.Close()
		}
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
		return nil, err
	}
	named := map[string]string{} // env by file, for a file named twice
	open := func(env string) (*os.File, error) {
		path := os.Getenv(env)
		if path == "" {
			return nil, nil
		}
		f, err := create(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", env, err)
		}
		files = append(files, f)
		if st, err := f.Stat(); err == nil {
			id := fmt.Sprint(st.Sys().(*syscall.Stat_t).Dev, ":", st.Sys().(*syscall.Stat_t).Ino)
			if other, ok := named[id]; ok {
				return nil, fmt.Errorf("%s names the file %s names (%s): give each profile a file of its own", env, other, path)
			}
			named[id] = env
		}
		return f, nil
	}
	cpu, err := open(CPUEnv)
	if err != nil {
		return fail(err)
	}
	mutex, err := open(MutexEnv)
	if err != nil {
		return fail(err)
	}
	block, err := open(BlockEnv)
	if err != nil {
		return fail(err)
	}
	allocs, err := open(AllocsEnv)
	if err != nil {
		return fail(err)
	}
	if cpu != nil {
		if err := pprof.StartCPUProfile(cpu); err != nil {
			return fail(fmt.Errorf("%s: %w", CPUEnv, err))
		}
	}
	if mutex != nil {
		runtime.SetMutexProfileFraction(1)
	}
	if block != nil {
		runtime.SetBlockProfileRate(1)
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
		}
		for name, f := range map[string]*os.File{"mutex": mutex, "block": block, "allocs": allocs} {
			if f == nil {
				continue
			}
			if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
				errs = append(errs, fmt.Errorf("writing the %s profile: %w", name, err))
			}
		}
		for _, f := range files {
			if err := f.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}, nil
}

// create opens path for a profile: a new file (0600), or a regular file
// that is empty or a profile already, truncated; never through a symbolic
// link, never a FIFO (its open would wait) or a device, never another
// file (a beton named by mistake would be lost).
func create(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("%s is a symbolic link: give the file it points to", path)
	case errors.Is(err, syscall.ENXIO):
		return nil, fmt.Errorf("%s is a FIFO, not a regular file", path)
	case err != nil:
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s is %s, not a regular file", path, readfile.Kind(st.Mode()))
	}
	if err == nil && st.Size() > 0 {
		var magic [2]byte
		if _, rerr := f.ReadAt(magic[:], 0); rerr != nil || magic != [2]byte{0x1f, 0x8b} {
			err = fmt.Errorf("%s holds %d bytes that are not a profile (pprof's gzip); it is not written over: give a new file, or an empty one", path, st.Size())
		}
	}
	if err == nil {
		err = f.Truncate(0)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// StartLogged is Start with a stop that logs to log what it could not
// write, for a command to defer.
func StartLogged(log *slog.Logger) (stop func(), err error) {
	s, err := Start()
	if err != nil {
		return nil, err
	}
	return func() {
		if err := s(); err != nil {
			log.Warn("writing the profiles", "err", err)
		}
	}, nil
}

// CPUTime returns the CPU time the process has used, user and system.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
