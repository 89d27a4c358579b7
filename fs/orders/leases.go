package orders

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ffcvfs/ffcvfs/pagecache/policy"
)

// LeaseCheck is how often Leases looks for plans whose reader has gone.
const LeaseCheck = time.Second

// Cache is where plans go: package pagecache's Cache.
type Cache interface {
	Announce(id string, order []uint32) error
	Withdraw(id string)
	WithdrawIdle(idle time.Duration) []string
	Plans() []policy.PlanStats
}

// Options configure Leases and the Announcer.
type Options struct {
	// Owner is the mount's user, who alone (with root) may use the
	// announce socket.
	Owner uint32
	// Lease withdraws a plan none of whose samples was read for this long.
	Lease time.Duration
	// Samples is the number of samples of the beton: the bounds of plans
	// are multiples of it.
	Samples int
	// BeforeAnnounce, if set, runs before an order becomes a plan (the
	// view drops the kernel's copies of the files, so that the plan sees
	// every read).
	BeforeAnnounce func()
	Logger         *slog.Logger
}

// Leases withdraws announced orders whose reader has gone, so that a
// killed job's order does not steer prefetch and eviction until the mount
// restarts. A plan is withdrawn when the process that announced it has
// exited (checked every LeaseCheck, by pid and start time, so a recycled
// pid does not keep it), when that process announces another order the
// same way (an order file read replaces the orders it read before, a write
// to announce the orders it wrote), or when none of its samples was read
// for the lease
// (Options.Lease): a reader that stalls that long is as good as gone.
type Leases struct {
	c    Cache
	opts Options

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

// NewLeases starts watching the plans of c.
func NewLeases(c Cache, opts Options) *Leases {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Leases{c: c, opts: opts, owners: map[string]owner{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// Announce makes order the plan id of user uid, announced by thread tid:
// within the bounds (admit), before which Options.BeforeAnnounce runs, and
// replacing the plans that process announced before the same way.
func (l *Leases) Announce(uid, tid uint32, id string, order []uint32) error {
	if err := l.admit(uid, tid, id, len(order)); err != nil {
		return err
	}
	if l.opts.BeforeAnnounce != nil {
		l.opts.BeforeAnnounce()
	}
	if err := l.c.Announce(id, order); err != nil {
		return err
	}
	l.announced(id, tid)
	return nil
}

// announced records that the process of thread tid (FUSE names the
// calling thread) announced plan id, and withdraws the plans that process
// announced before the same way (by order file, or by writing announce).
func (l *Leases) announced(id string, tid uint32) {
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
			l.c.Withdraw(other)
			delete(l.owners, other)
		}
	}
	l.owners[id] = owner{pid, start}
}

// Owners returns the pid that announced each live plan.
func (l *Leases) Owners() map[string]uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]uint32, len(l.owners))
	for id, o := range l.owners {
		m[id] = o.pid
	}
	return m
}

func (l *Leases) run() {
	defer close(l.done)
	t := time.NewTicker(LeaseCheck)
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
func (l *Leases) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, o := range l.owners {
		if start, ok := processStart(o.pid); !ok || start != o.start {
			l.c.Withdraw(id)
			delete(l.owners, id)
		}
	}
	for _, id := range l.c.WithdrawIdle(l.opts.Lease) {
		delete(l.owners, id)
	}
}

// Close stops watching.
func (l *Leases) Close() {
	close(l.stop)
	<-l.done
}

// Bounds of the plans users announce, which the cache keeps in memory
// (about 30 bytes a sample of an order): per user, and over all users, in
// samples (a multiple of the beton's) and in number. A job of many ranks
// announces an order of its share per rank, the beton's samples once in
// all; a process's new order file replaces its last.
const (
	MaxUserPlanFactor = 8
	MaxPlanFactor     = 32
	MaxUserPlans      = 64
	MaxPlans          = 256
)

// ErrPlanLimit marks an order refused by the bounds above.
var ErrPlanLimit = errors.New("too many announced orders")

// admit reports whether uid may announce plan id of n samples from thread
// tid, counting the live plans but id itself and those the announcement
// replaces (the same process's of the same kind), as an error with a
// sentence when not.
func (l *Leases) admit(uid, tid uint32, id string, n int) error {
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
	samples := max(l.opts.Samples, 1)
	userN, userPlans, allN, allPlans := n, 1, n, 1
	for _, pl := range l.c.Plans() {
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
	case userPlans > MaxUserPlans || userN > MaxUserPlanFactor*samples:
		return fmt.Errorf("uid %d would have %d announced orders of %d samples in all; at most %d orders and %d× the beton's %d samples per user: end the readers of orders no longer used, or wait for their lease (--plan-lease): %w",
			uid, userPlans, userN, MaxUserPlans, MaxUserPlanFactor, samples, ErrPlanLimit)
	case allPlans > MaxPlans || allN > MaxPlanFactor*samples:
		return fmt.Errorf("the mount would hold %d announced orders of %d samples in all; at most %d orders and %d× the beton's %d samples: %w",
			allPlans, allN, MaxPlans, MaxPlanFactor, samples, ErrPlanLimit)
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
