package policy

import (
	"math/rand/v2"
	"testing"
	"time"
)

// sizedPolicy is a policy over pages of perPage samples of equal size.
func sizedPolicy(pages, perPage, slots int) *Policy {
	p := New(layout(pages, perPage), pages, slots, 1<<20)
	sb := make([]uint32, pages*perPage)
	for i := range sb {
		sb[i] = 1000
	}
	pb := make([]uint32, pages)
	for i := range pb {
		pb[i] = uint32(1000 * perPage)
	}
	p.SetSizes(sb, pb)
	return p
}

// The granularity of a plan's positions: a random order over a budget of
// a tenth of the pages is read as ranges, a sequential or quasi-random one
// as pages; a budget that holds every page reads pages.
func TestPlanGranularity(t *testing.T) {
	const pages, perPage = 100, 50
	rng := rand.New(rand.NewPCG(1, 1))
	seq := make([]uint32, pages*perPage)
	for i := range seq {
		seq[i] = uint32(i)
	}
	// Quasi-random: pages in random order, samples shuffled within
	// windows of 4 pages.
	var quasi []uint32
	perm := rng.Perm(pages)
	for w := 0; w < pages; w += 4 {
		var win []uint32
		for _, pg := range perm[w:min(pages, w+4)] {
			for k := range perPage {
				win = append(win, uint32(pg*perPage+k))
			}
		}
		rng.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
		quasi = append(quasi, win...)
	}
	for _, c := range []struct {
		name   string
		order  []uint32
		slots  int
		lo, hi float64 // share of positions read as ranges
	}{
		{"random, 10 %", shuffled(pages*perPage, rng), pages / 10, 0.98, 1},
		{"random, 5 %", shuffled(pages*perPage, rng), pages / 20, 0.99, 1},
		{"sequential, 10 %", seq, pages / 10, 0, 0},
		{"quasi-random, 10 %", quasi, pages / 10, 0, 0.01},
		{"random, all pages", shuffled(pages*perPage, rng), pages, 0, 0},
	} {
		p := sizedPolicy(pages, perPage, c.slots)
		pl, err := p.Prepare("x", c.order)
		if err != nil {
			t.Fatal(err)
		}
		share := float64(pl.Ranges()) / float64(len(c.order))
		t.Logf("%s: %.3f of positions read as ranges", c.name, share)
		if share < c.lo || share > c.hi {
			t.Errorf("%s: %.3f of positions read as ranges, want [%v, %v]", c.name, share, c.lo, c.hi)
		}
		p.Install(pl, time.Now())
		if s := int(c.order[0]); p.RangeRead(s) != (pl.dpage[0] < 0) {
			t.Errorf("%s: RangeRead(%d) disagrees with the plan", c.name, s)
		}
		// The range search walks the range positions in order.
		n, last := 0, -1
		for {
			q, i, s, ok := p.NextRange()
			if !ok {
				break
			}
			if q != pl || i <= last || int(c.order[i]) != s || pl.dpage[i] >= 0 {
				t.Fatalf("%s: NextRange = %d (sample %d) after %d", c.name, i, s, last)
			}
			last = i
			n++
			p.SkipRange(q)
		}
		if n != pl.Ranges() {
			t.Errorf("%s: the range search found %d positions of %d", c.name, n, pl.Ranges())
		}
	}
}

// Without a plan, the detector reads random orders by ranges and
// sequential ones by pages.
func TestDetector(t *testing.T) {
	const pages, perPage = 100, 50
	p := sizedPolicy(pages, perPage, 10)
	rng := rand.New(rand.NewPCG(2, 2))
	for _, s := range shuffled(pages*perPage, rng)[:500] {
		p.Read(int(s))
	}
	if !p.RangeRead(0) {
		t.Errorf("random reads: served by pages")
	}
	for s := range 10 * perPage {
		p.Read(s)
	}
	if p.RangeRead(10 * perPage) {
		t.Errorf("sequential reads: served by ranges")
	}
	for _, s := range shuffled(pages*perPage, rng)[:100] {
		p.Read(int(s))
	}
	if !p.RangeRead(0) {
		t.Errorf("random reads again: served by pages")
	}
}
