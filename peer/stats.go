// What a node's tier did, and why a read went to storage.

package peer

import (
	"context"
	"sync/atomic"
)

// Stats are what a node's tier did.
type Stats struct {
	Corrupt        uint64 `json:"corrupt"`         // values from peers that failed their check
	PeerLoads      int64  `json:"peer_loads"`      // values peers served
	PeerErrors     int64  `json:"peer_errors"`     // requests to peers that failed
	ServerRequests int64  `json:"server_requests"` // requests peers sent this node
	// Members is how many nodes the pages are placed on now;
	// MemberChanges how often that set changed (peers file, DNS);
	// PagesMoved how many of the beton's pages changed owner at the last
	// change.
	Members       int    `json:"members"`
	MemberChanges uint64 `json:"member_changes"`
	PagesMoved    int64  `json:"pages_moved"`
	// PagesOwned is how many of the beton's pages this node owns now, and
	// PagesLimit the most any node may own (bounded loads).
	PagesOwned int64 `json:"pages_owned"`
	PagesLimit int64 `json:"pages_limit"`
}

// Why a read went to storage (Error.Reason; the page cache counts its
// storage reads by them).
const (
	// ReasonOwned: this node owns the page; the cluster's one read of it.
	ReasonOwned = "owned"
	// ReasonOwnerTimeout: the owner did not answer in Options.Timeout.
	ReasonOwnerTimeout = "owner_timeout"
	// ReasonOwnerGone: the owner could not be reached (refused, reset, no
	// route), or failed within downHold and was not asked.
	ReasonOwnerGone = "owner_gone"
	// ReasonOwnerError: the owner answered with an error (its own storage
	// read failed, or it refused this node's request).
	ReasonOwnerError = "owner_error"
	// ReasonCorrupt: a value failed its check (tag, length).
	ReasonCorrupt = "corrupt_value"
)

// reasons are the Reason* names, indexed by reason.
var reasons = [...]string{ReasonOwned, ReasonOwnerTimeout, ReasonOwnerGone, ReasonOwnerError, ReasonCorrupt}

// reason indexes reasons.
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
