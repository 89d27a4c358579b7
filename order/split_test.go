package order

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// splitUnitsByScan is splitUnits as it was first written, one scan for the
// largest unit per split (O(W²) for W ranks): the reference that
// splitUnits must equal.
func splitUnitsByScan(units []unit, worldSize int) []unit {
	units = slices.Clone(units)
	for len(units) > 0 && len(units) < worldSize {
		big := 0
		for i, u := range units {
			if len(u.samples) > len(units[big].samples) {
				big = i
			}
		}
		u := units[big]
		if len(u.samples) < 2 {
			break
		}
		h := len(u.samples) / 2
		units[big] = unit{page: u.page, samples: u.samples[:h:h]}
		units = slices.Insert(units, big+1, unit{page: u.page, samples: u.samples[h:]})
	}
	return units
}

// TestSplitUnitsMatchesScan: the heap's splits are the scan's, unit for
// unit, on random rests and world sizes; and dealAll deals as assign does,
// rank by rank.
func TestSplitUnitsMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	trials := 2000
	if testing.Short() {
		trials = 200
	}
	for trial := range trials {
		var units []unit
		next := uint32(0)
		for range rng.IntN(12) {
			k := rng.IntN(40) + 1
			if rng.IntN(5) == 0 {
				k = 1
			}
			s := make([]uint32, k)
			for i := range s {
				s[i] = next
				next++
			}
			units = append(units, unit{page: int64(len(units)), samples: s})
		}
		w := rng.IntN(300) + 1
		got, want := splitUnits(units, w), splitUnitsByScan(units, w)
		if len(got) != len(want) {
			t.Fatalf("trial %d: %d units for %d ranks: %d pieces, want %d", trial, len(units), w, len(got), len(want))
		}
		for i := range got {
			if got[i].page != want[i].page || !slices.Equal(got[i].samples, want[i].samples) {
				t.Fatalf("trial %d: piece %d: page %d %v, want page %d %v", trial, i, got[i].page, got[i].samples, want[i].page, want[i].samples)
			}
		}
		byRank, lo, hi := dealAll(got, w)
		for r := range w {
			mine, l, h := assign(got, w, r)
			if l != lo || h != hi || !slices.Equal(mine, byRank[r]) && (len(mine) > 0 || len(byRank[r]) > 0) {
				t.Fatalf("trial %d: rank %d of %d: dealAll %v (%d, %d), assign %v (%d, %d)", trial, r, w, byRank[r], lo, hi, mine, l, h)
			}
		}
	}
}
