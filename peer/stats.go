// What a node's tier did, and why a read went to storage (their names:
// package peerstats).

package peer

import (
	"context"
	"sync/atomic"
)

// reason indexes peerstats.Reasons, why a read went to storage.
type reason int

const (
	owned reason = iota
	ownerTimeout
	ownerGone
	ownerError
	corruptValue
)

// trail carries, in a read's context, why its owner failed it: the
// transport records it, and the storage read that follows counts it.
type trail struct{ why atomic.Int32 } // reason+1; 0: none

type trailKey struct{}

func withTrail(ctx context.Context) (context.Context, *trail) {
	t := new(trail)
	return context.WithValue(ctx, trailKey{}, t), t
}

// noteFailure records why a request to an owner failed, in its context's
// trail, unless an earlier failure is there: the first is the cause (a
// range's page asked next of the same owner, held down by then, is not).
func noteFailure(ctx context.Context, r reason) {
	if t, ok := ctx.Value(trailKey{}).(*trail); ok {
		t.why.CompareAndSwap(0, int32(r)+1)
	}
}

// failure returns the reason a trail holds, and whether it holds one.
func (t *trail) failure() (reason, bool) {
	if t == nil {
		return 0, false
	}
	w := t.why.Load()
	return reason(w - 1), w > 0
}
