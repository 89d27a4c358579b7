// Package ordered is the parallel map in input order that the writers
// share (beton/imagefolder, beton/stream, beton/rewrite): items come one
// at a time from a producer, workers turn them into results, and the
// results are consumed in the order the items came, with a bounded number
// of items (and, optionally, of their cost in bytes) between the producer
// and the consumer, so that memory stays bounded however slow one item is.
//
// Written here because the standard library has no ordered pool and
// errgroup's SetLimit bounds goroutines, not the items held between an
// item's start and its turn to be consumed.
package ordered

import (
	"context"
	"sync"
)

// Options bounds a Map.
type Options struct {
	// Workers run work, at least 1.
	Workers int
	// Window bounds the items taken from next and not yet given to emit,
	// at least 1.
	Window int
	// MaxCost, when positive, bounds the cost (next's) of those items:
	// an item is handed on only while the cost in flight and its own stay
	// within it, or when nothing else is in flight.
	MaxCost int64
}

// Map calls next for items until it reports that none is left (ok
// false) or fails, has work turn each into a result on one of Workers
// goroutines (worker is its index, for scratch of its own), and calls
// emit with the results in the order next gave the items, on the calling
// goroutine.
//
// next runs on a goroutine of its own, one call at a time; it is given a
// context that ends when Map does. An error of next's ends the taking:
// the items taken before it are worked and emitted, then Map returns it
// (unless emit failed first). An error of emit's ends Map at once with
// it; so does ctx, with its error. Map returns once every goroutine it
// started has returned (a next blocked on something else than its
// context keeps it waiting).
func Map[In, Out any](ctx context.Context, o Options, next func(ctx context.Context) (in In, cost int64, ok bool, err error),
	work func(worker int, in In) Out, emit func(Out) error) error {
	o.Workers, o.Window = max(o.Workers, 1), max(o.Window, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type item struct {
		seq  int64
		in   In
		cost int64
	}
	type result struct {
		seq  int64
		out  Out
		cost int64
	}
	jobs := make(chan item)
	results := make(chan result, o.Window)
	slots := make(chan struct{}, o.Window) // a token per item in flight
	b := &budget{max: o.MaxCost}
	// taken is sent the producer's count of items and its error once it
	// has stopped taking.
	type end struct {
		n   int64
		err error
	}
	taken := make(chan end, 1)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(jobs)
		var seq int64
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				taken <- end{seq, nil}
				return
			}
			in, cost, ok, err := next(ctx)
			if err != nil || !ok {
				<-slots
				taken <- end{seq, err}
				return
			}
			if !b.acquire(ctx, cost) {
				taken <- end{seq, nil}
				return
			}
			select {
			case jobs <- item{seq, in, cost}:
				seq++
			case <-ctx.Done():
				taken <- end{seq, nil}
				return
			}
		}
	}()
	for w := range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range jobs {
				r := result{it.seq, work(w, it.in), it.cost}
				select {
				case results <- r:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	defer func() {
		cancel()
		b.wake()
		wg.Wait()
	}()

	pending := map[int64]result{}
	var emitted int64
	total := int64(-1) // known once the producer has stopped
	var nextErr error
	for total < 0 || emitted < total {
		select {
		case r := <-results:
			pending[r.seq] = r
			for {
				r, ok := pending[emitted]
				if !ok {
					break
				}
				delete(pending, emitted)
				emitted++
				if err := emit(r.out); err != nil {
					return err
				}
				b.release(r.cost)
				<-slots
			}
		case e := <-taken:
			total, nextErr = e.n, e.err
			taken = nil // received once
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if nextErr == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nextErr
}

// budget is the cost in flight, bounded by max (none when max ≤ 0): an
// acquire waits until the cost and its own fit, or nothing is in flight.
type budget struct {
	max int64

	mu       sync.Mutex
	inflight int64
	changed  chan struct{} // closed and replaced when inflight falls
}

func (b *budget) acquire(ctx context.Context, cost int64) bool {
	for {
		b.mu.Lock()
		if b.max <= 0 || b.inflight == 0 || b.inflight+cost <= b.max {
			b.inflight += cost
			b.mu.Unlock()
			return true
		}
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *budget) release(cost int64) {
	b.mu.Lock()
	b.inflight -= cost
	b.wakeLocked()
	b.mu.Unlock()
}

func (b *budget) wake() {
	b.mu.Lock()
	b.wakeLocked()
	b.mu.Unlock()
}

func (b *budget) wakeLocked() {
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}
