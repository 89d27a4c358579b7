package policy

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// layout returns samplePage for pages of perPage samples each.
func layout(pages, perPage int) []int32 {
	sp := make([]int32, pages*perPage)
	for s := range sp {
		sp[s] = int32(s / perPage)
	}
	return sp
}

func shuffled(n int, rng *rand.Rand) []uint32 {
	o := make([]uint32, n)
	for i := range o {
		o[i] = uint32(i)
	}
	rng.Shuffle(n, func(i, j int) { o[i], o[j] = o[j], o[i] })
	return o
}

// sim drives a policy as a single-threaded cache whose loads finish at
// once, and counts loads.
type sim struct {
	t       testing.TB
	p       *Policy
	loads   int
	noCheck bool
}

func (s *sim) check() {
	s.t.Helper()
	if s.noCheck {
		return
	}
	if err := s.p.Check(); err != nil {
		s.t.Fatal(err)
	}
}

// prefetch starts and finishes every prefetch the policy asks for.
func (s *sim) prefetch() {
	for {
		w, v, ok := s.p.Prefetch()
		if !ok {
			return
		}
		if v >= 0 {
			s.p.Evict(v)
		}
		s.p.Loading(w)
		s.p.Loaded(w, false)
		s.loads++
		s.check()
	}
}

// read reads sample smp as the cache does: pin (loading on a miss), record,
// unpin.
func (s *sim) read(smp int, prefetch bool) {
	dp := s.p.samplePage[smp]
	if s.p.state[dp] == absent {
		if s.p.Resident() == s.p.slots {
			v, _ := s.p.Victim()
			if v < 0 {
				s.t.Fatal("no victim in a cache with nothing pinned")
			}
			s.p.Evict(v)
		}
		s.p.Loading(dp)
		s.p.Loaded(dp, true)
		s.loads++
	} else {
		s.p.Pin(dp)
	}
	s.p.Read(smp)
	s.p.Unpin(dp)
	s.check()
	if prefetch {
		s.prefetch()
	}
}

// With one plan, demand loading and prefetching both load exactly as many
// pages as Belady's MIN, epoch after epoch.
func TestOnePlanIsBelady(t *testing.T) {
	const pages, perPage, slots = 40, 8, 6
	sp := layout(pages, perPage)
	for _, prefetch := range []bool{false, true} {
		t.Run(fmt.Sprintf("prefetch=%v", prefetch), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			s := &sim{t: t, p: New(sp, pages, slots, 1<<20)}
			for epoch := range 3 {
				// Start from an empty cache, so the optimum is comparable.
				for {
					v, _ := s.p.Victim()
					if v < 0 {
						break
					}
					s.p.Evict(v)
				}
				order := shuffled(len(sp), rng)
				if err := s.p.Announce("trainer", order, time.Now()); err != nil {
					t.Fatal(err)
				}
				s.loads = 0
				if prefetch {
					s.prefetch()
				}
				for _, smp := range order {
					s.read(int(smp), prefetch)
				}
				if opt := MinLoads(sp, order, slots); s.loads != opt {
					t.Errorf("epoch %d: %d loads, Belady's optimum %d", epoch, s.loads, opt)
				}
				if n := len(s.p.Plans()); n != 0 {
					t.Errorf("epoch %d: %d plans left after the plan was read", epoch, n)
				}
			}
		})
	}
}

// Several plans, samples read out of order and skipped, plans replaced and
// withdrawn: the invariants hold after every step and the budget is kept.
func TestManyPlansKeepInvariants(t *testing.T) {
	const pages, perPage, slots = 30, 5, 7
	sp := layout(pages, perPage)
	rng := rand.New(rand.NewPCG(3, 4))
	s := &sim{t: t, p: New(sp, pages, slots, 20)}
	ids := []string{"a", "b", "c"}
	for step := range 3000 {
		switch r := rng.IntN(100); {
		case r < 2:
			order := shuffled(len(sp), rng)[:1+rng.IntN(len(sp))]
			if err := s.p.Announce(ids[rng.IntN(len(ids))], order, time.Now()); err != nil {
				t.Fatal(err)
			}
			s.check()
		case r < 3:
			s.p.Withdraw(ids[rng.IntN(len(ids))])
			s.check()
		default:
			s.read(rng.IntN(len(sp)), rng.IntN(2) == 0)
		}
		if s.p.Resident() > slots {
			t.Fatalf("step %d: %d pages resident in %d slots", step, s.p.Resident(), slots)
		}
	}
}

// Without a plan, pages whose samples were all read this epoch go first,
// then the least recently used.
func TestNoPlanEvictsFullyReadFirst(t *testing.T) {
	sp := layout(4, 2)
	s := &sim{t: t, p: New(sp, 4, 3, 100)}
	s.read(0, false) // page 0, half read
	s.read(2, false) // page 1
	s.read(3, false) // page 1, fully read
	s.read(4, false) // page 2, half read
	if v, d := s.p.Victim(); v != 1 || d != Never {
		t.Fatalf("victim %d at %d, want the fully read page 1", v, d)
	}
	s.read(5, false) // page 2, fully read, more recent than page 1
	if v, _ := s.p.Victim(); v != 1 {
		t.Fatalf("victim %d, want page 1, the least recently used fully read", v)
	}
}

// A plan is withdrawn by WithdrawIdle once a call sees no reads since the
// one before and idle has passed; reads keep it.
func TestWithdrawIdle(t *testing.T) {
	sp := layout(4, 2)
	p := New(sp, 4, 4, 100)
	t0 := time.Now()
	if err := p.Announce("x", []uint32{0, 1, 2, 3, 4, 5, 6, 7}, t0); err != nil {
		t.Fatal(err)
	}
	if ids := p.WithdrawIdle(t0.Add(time.Second), 2*time.Second); len(ids) != 0 {
		t.Fatalf("withdrew %v before the lease", ids)
	}
	p.Loading(0)
	p.Loaded(0, true)
	p.Read(0)
	p.Unpin(0)
	if ids := p.WithdrawIdle(t0.Add(3*time.Second), 2*time.Second); len(ids) != 0 {
		t.Fatalf("withdrew %v although a position was read", ids)
	}
	if ids := p.WithdrawIdle(t0.Add(4*time.Second), 2*time.Second); len(ids) != 0 {
		t.Fatalf("withdrew %v one second after the read was seen", ids)
	}
	if ids := p.WithdrawIdle(t0.Add(5*time.Second), 2*time.Second); len(ids) != 1 || ids[0] != "x" {
		t.Fatalf("withdrew %v, want [x]", ids)
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
}

// A consumer that skips ahead farther than the window abandons what it
// left behind: the pages there are no longer kept for it.
func TestSkipAbandons(t *testing.T) {
	sp := layout(10, 1)
	p := New(sp, 10, 10, 2)
	order := []uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	if err := p.Announce("x", order, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, dp := range []int32{0, 1, 2} {
		p.Loading(dp)
		p.Loaded(dp, false)
	}
	p.Loading(8)
	p.Loaded(8, true)
	p.Read(8)
	p.Unpin(8)
	if st := p.Plans(); st[0].Pos != 6 {
		t.Fatalf("plan at %d after a read at 8 with window 2, want 6", st[0].Pos)
	}
	for dp := range int32(3) {
		if d := p.dist(dp); d != Never || !p.lru[1].has(dp) {
			t.Errorf("page %d, left behind, is next used at %d (in the LRU: %v)", dp, d, p.lru[1].has(dp))
		}
	}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestAnnounceRejectsUnknownSamples(t *testing.T) {
	p := New(layout(2, 2), 2, 2, 10)
	if err := p.Announce("x", []uint32{0, 4}, time.Now()); err == nil {
		t.Fatal("an order naming sample 4 of 4 was accepted")
	}
}

// BenchmarkRead is the policy's cost per sample read along a plan, with
// prefetches into a tenth of the pages, without a cache around it.
func BenchmarkRead(b *testing.B) {
	for _, pages := range []int{64, 1024, 16384} {
		b.Run(fmt.Sprintf("pages=%d", pages), func(b *testing.B) {
			sp := layout(pages, 76)
			rng := rand.New(rand.NewPCG(5, 6))
			s := &sim{t: b, p: New(sp, pages, max(1, pages/10), 8192), noCheck: true}
			orders := [][]uint32{shuffled(len(sp), rng), shuffled(len(sp), rng)}
			i, e := len(sp), 0
			b.ResetTimer()
			for range b.N {
				if i == len(sp) {
					s.p.Announce("x", orders[e%2], time.Now())
					i, e = 0, e+1
				}
				s.read(int(orders[(e+1)%2][i]), true)
				i++
			}
		})
	}
}
