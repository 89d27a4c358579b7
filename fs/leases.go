package fs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// leaseCheck is how often planLeases looks for plans whose reader has gone.
const leaseCheck = time.Second

// planLeases withdraws announced orders whose reader has gone, so that a
// killed job's order does not steer prefetch and eviction until the mount
// restarts. A plan is withdrawn when the process that announced it has
// exited (checked every leaseCheck, by pid and start time, so a recycled
// pid does not keep it), when that process announces another order the
// same way (an order file read replaces the orders it read before, a write
// to announce the orders it wrote), or when none of its samples was read
// for the lease
// (Options.PlanLease): a reader that stalls that long is as good as gone.
type planLeases struct {
	v *View

	mu     sync.Mutex
	owners map[string]owner // plan id → the process that announced it
	stop   chan struct{}
	done   chan struct{}
}

// owner is a process: its pid and its start time, in clock ticks since
// boot (/proc/PID/stat), which tells it from a later process of the same
// pid.
type owner struct {
	pid   uint32
	start uint64
}

func newPlanLeases(v *View) *planLeases {
	l := &planLeases{v: v, owners: map[string]owner{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// announced records that the process of thread tid (FUSE names the
// calling thread) announced plan id, and withdraws the plans that process
// announced before the same way (by order file, or by writing announce).
func (l *planLeases) announced(id string, tid uint32) {
	pid, ok := processOf(tid)
	if !ok {
		return
	}
	start, ok := processStart(pid)
	if !ok {
		return // gone already, or not a process of this namespace
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	kind, _, _ := strings.Cut(id, ":")
	for other, o := range l.owners {
		if o.pid == pid && other != id && strings.HasPrefix(other, kind+":") {
			l.v.cache.Withdraw(other)
			delete(l.owners, other)
		}
	}
	l.owners[id] = owner{pid, start}
}

// Owners returns the pid that announced each live plan.
func (l *planLeases) Owners() map[string]uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]uint32, len(l.owners))
	for id, o := range l.owners {
		m[id] = o.pid
	}
	return m
}

func (l *planLeases) run() {
	defer close(l.done)
	t := time.NewTicker(leaseCheck)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.expire()
	}
}

// expire withdraws the plans whose owner has exited and those idle for
// the lease.
func (l *planLeases) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, o := range l.owners {
		if start, ok := processStart(o.pid); !ok || start != o.start {
			l.v.cache.Withdraw(id)
			delete(l.owners, id)
		}
	}
	for _, id := range l.v.cache.WithdrawIdle(l.v.opts.PlanLease) {
		delete(l.owners, id)
	}
}

func (l *planLeases) close() {
	close(l.stop)
	<-l.done
}

// Bounds of the plans users announce, which the cache keeps in memory
// (about 30 bytes a sample of an order): per user, and over all users, in
// samples (a multiple of the beton's) and in number. A job of many ranks
// announces an order of its share per rank, the beton's samples once in
// all; a process's new order file replaces its last.
const (
	maxUserPlanFactor = 8
	maxPlanFactor     = 32
	maxUserPlans      = 64
	maxPlans          = 256
)

// errPlanLimit marks an order refused by the bounds above.
var errPlanLimit = errors.New("too many announced orders")

// admit reports whether uid may announce plan id of n samples from thread
// tid, counting the live plans but id itself and those the announcement
// replaces (the same process's of the same kind), as an error with a
// sentence when not.
func (l *planLeases) admit(uid, tid uint32, id string, n int) error {
	replaced := map[string]bool{id: true}
	if pid, ok := processOf(tid); ok {
		kind, _, _ := strings.Cut(id, ":")
		l.mu.Lock()
		for other, o := range l.owners {
			if o.pid == pid && strings.HasPrefix(other, kind+":") {
				replaced[other] = true
			}
		}
		l.mu.Unlock()
	}
	samples := max(l.v.f.NumSamples(), 1)
	userN, userPlans, allN, allPlans := n, 1, n, 1
	for _, pl := range l.v.cache.Plans() {
		if replaced[pl.ID] {
			continue
		}
		allN += pl.Len
		allPlans++
		if u, ok := planUser(pl.ID); ok && u == uid {
			userN += pl.Len
			userPlans++
		}
	}
	switch {
	case userPlans > maxUserPlans || userN > maxUserPlanFactor*samples:
		return fmt.Errorf("uid %d would have %d announced orders of %d samples in all; at most %d orders and %d× the beton's %d samples per user: end the readers of orders no longer used, or wait for their lease (--plan-lease): %w",
			uid, userPlans, userN, maxUserPlans, maxUserPlanFactor, samples, errPlanLimit)
	case allPlans > maxPlans || allN > maxPlanFactor*samples:
		return fmt.Errorf("the mount would hold %d announced orders of %d samples in all; at most %d orders and %d× the beton's %d samples: %w",
			allPlans, allN, maxPlans, maxPlanFactor, samples, errPlanLimit)
	}
	return nil
}

// planUser returns the uid a plan id names: order:uid-U:... or
// announce:uid-U:....
func planUser(id string) (uint32, bool) {
	_, rest, _ := strings.Cut(id, ":uid-")
	num, _, _ := strings.Cut(rest, ":")
	u, err := strconv.ParseUint(num, 10, 32)
	return uint32(u), err == nil
}

// processOf returns the process (thread group) of thread tid.
func processOf(tid uint32) (uint32, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0, false
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			pid, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 32)
			return uint32(pid), err == nil
		}
	}
	return 0, false
}

// processStart returns the start time of process pid, and false if there
// is no such process or it has exited (a zombie).
func processStart(pid uint32) (uint64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ... starttime is field 22; comm may hold
	// spaces and parentheses, so count from the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || f[0][0] == 'Z' || f[0][0] == 'X' {
		return 0, false
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	return start, err == nil
}
