package ordered

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
)

// counter yields 0..n-1, each of the given cost, and tracks the items
// taken and not yet emitted.
type counter struct {
	n, i      int
	cost      int64
	held, max atomic.Int64
}

func (c *counter) next(ctx context.Context) (int, int64, bool, error) {
	if c.i == c.n {
		return 0, 0, false, nil
	}
	c.i++
	h := c.held.Add(1)
	for m := c.max.Load(); h > m && !c.max.CompareAndSwap(m, h); m = c.max.Load() {
	}
	return c.i - 1, c.cost, true, nil
}

// TestMapOrder: results come in input order whatever the workers' pace,
// every item once; at most Window items are between next and emit.
func TestMapOrder(t *testing.T) {
	c := &counter{n: 2000}
	var got []int
	err := Map(context.Background(), Options{Workers: 4, Window: 8}, c.next,
		func(w, in int) int {
			for range rand.IntN(50) {
				runtime.Gosched()
			}
			return in * 2
		},
		func(out int) error {
			got = append(got, out)
			c.held.Add(-1)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2000 {
		t.Fatalf("%d results, want 2000", len(got))
	}
	for i, v := range got {
		if v != 2*i {
			t.Fatalf("result %d is %d, want %d: out of order", i, v, 2*i)
		}
	}
	if m := c.max.Load(); m > 8 {
		t.Errorf("%d items between next and emit at once, more than the window of 8", m)
	}
}

// TestMapCost: with MaxCost, the cost between next and emit stays within
// it, but for a single item larger than it, which still goes.
func TestMapCost(t *testing.T) {
	var heldCost, maxCost atomic.Int64
	i := 0
	costs := []int64{3, 3, 3, 10, 1, 1, 1, 1, 4, 4}
	next := func(ctx context.Context) (int, int64, bool, error) {
		if i == len(costs) {
			return 0, 0, false, nil
		}
		i++
		return i - 1, costs[i-1], true, nil
	}
	var got []int
	err := Map(context.Background(), Options{Workers: 3, Window: 10, MaxCost: 6},
		next,
		func(w, in int) int {
			h := heldCost.Add(costs[in])
			for m := maxCost.Load(); h > m && !maxCost.CompareAndSwap(m, h); m = maxCost.Load() {
			}
			return in
		},
		func(out int) error {
			heldCost.Add(-costs[out])
			got = append(got, out)
			return nil
		})
	if err != nil || len(got) != len(costs) {
		t.Fatalf("%v, %d results", err, len(got))
	}
	if m := maxCost.Load(); m > 10 {
		t.Errorf("cost %d in the workers at once: want at most 6, or one item (10)", m)
	}
}

// TestMapErrors: next's error comes after every item before it is
// emitted; emit's ends the map at once; a cancelled context ends it with
// its error.
func TestMapErrors(t *testing.T) {
	boom := errors.New("boom")
	i := 0
	var got []int
	err := Map(context.Background(), Options{Workers: 2, Window: 4},
		func(ctx context.Context) (int, int64, bool, error) {
			if i == 5 {
				return 0, 0, false, boom
			}
			i++
			return i - 1, 0, true, nil
		},
		func(w, in int) int { return in },
		func(out int) error { got = append(got, out); return nil })
	if !errors.Is(err, boom) || len(got) != 5 {
		t.Errorf("next failing after 5 items: %v, %d emitted; want boom after 5", err, len(got))
	}

	c := &counter{n: 1000}
	n := 0
	err = Map(context.Background(), Options{Workers: 2, Window: 4}, c.next,
		func(w, in int) int { return in },
		func(out int) error {
			if n++; n == 10 {
				return boom
			}
			return nil
		})
	if !errors.Is(err, boom) || n != 10 {
		t.Errorf("emit failing at 10: %v after %d", err, n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	c = &counter{n: 1 << 30}
	n = 0
	err = Map(ctx, Options{Workers: 2, Window: 4}, c.next,
		func(w, in int) int { return in },
		func(out int) error {
			if n++; n == 100 {
				cancel()
			}
			return nil
		})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled context: %v", err)
	}
}
