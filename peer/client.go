// The node's side as a client: asking a page's owner, and the node next
// on the ring when the owner fails.

package peer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/peerstats"
)

// Error is why Read did not return the bytes asked for; the cache reads
// them from storage then, and counts the read by Reason.
type Error struct {
	// Reason is one of peerstats.Reasons.
	Reason string
	Err    error
	// Fill says that this node fills the page for the cluster while its
	// owner is down (it is next on the ring without it): it should read
	// the whole page, once, and keep it, as the pages it owns.
	Fill bool
}

func (e *Error) Error() string { return "peer tier: " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// StorageReason returns Reason: why the bytes must come from storage.
func (e *Error) StorageReason() string { return e.Reason }

// FillsForCluster returns Fill.
func (e *Error) FillsForCluster() bool { return e.Fill }

// errFill marks a failure after which this node fills the page itself.
var errFill = errors.New("this node is next on the ring")

// Read copies bytes [off, off+len(b)) of page p (absolute) from the node
// that owns it, or, when that node fails, from the node next on the ring
// without it (the same for every node, which reads the page from storage
// once for the cluster). A value is checked (its tag, its length) before a
// byte of it reaches b. It returns an *Error when neither could serve the
// bytes, or when this node owns the page (Reason owned): the caller
// reads storage. It returns ctx's error when ctx ends.
func (o *Object) Read(ctx context.Context, p, off int64, b []byte) error {
	n := int64(len(b))
	if p < 0 || p >= o.pages || off < 0 || n <= 0 || n > o.pageLen(p)-off {
		return &Error{Reason: peerstats.ReasonOwnerError, Err: fmt.Errorf("%s: bytes %d to %d of page %d are not in the object", o.info.Name, off, off+n, p)}
	}
	owner, ok := o.owner(p)
	if !ok {
		return &Error{Reason: peerstats.ReasonOwnerError, Err: fmt.Errorf("%s: no page %d", o.info.Name, p)}
	}
	nd := o.node
	if owner == nd.opts.Self {
		return &Error{Reason: peerstats.ReasonOwned, Err: fmt.Errorf("%s: page %d is this node's", o.info.Name, p)}
	}
	key, group := pageKey(o.prefix, p), pagesGroup
	if off != 0 || n != o.pageLen(p) {
		key, group = rangeKey(o.prefix, p, off, n), rangesGroup
	}
	tctx, tr := withTrail(ctx)
	v, err := nd.get(tctx, owner, group, key)
	if err == nil {
		if got, ok := strip(v); ok && len(got) == len(b) {
			copy(b, got)
			o.peerLoads.Add(1)
			return nil
		}
		o.corrupt.Add(1)
		return &Error{Reason: peerstats.ReasonCorrupt, Err: fmt.Errorf("the value of %s/%s from %s is %d bytes, want %d", group, key, owner, len(v), n+tagLen)}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	o.peerErrors.Add(1)
	why, failed := tr.failure()
	if !failed {
		why = ownerError
	}
	return &Error{Reason: peerstats.Reasons[why], Err: err, Fill: errors.Is(err, errFill)}
}

// get returns the value of key in group from owner, or, when owner fails,
// from the node that owns key among the nodes that have not failed lately,
// unless that is this node (which then reads storage); at most maxAsked
// nodes in all, each that fails left alone for a while.
func (n *Node) get(ctx context.Context, owner, group, key string) ([]byte, error) {
	v, err := n.askNode(ctx, owner, group, key)
	asked := []string{owner}
	for err != nil && ctx.Err() == nil {
		alt := n.members.successor(key, n.isDown)
		switch {
		case alt == n.opts.Self:
			return nil, fmt.Errorf("%w: %w", errFill, err)
		case slices.Contains(asked, alt) || len(asked) == maxAsked:
			return nil, err
		}
		asked = append(asked, alt)
		v, err = n.askNode(ctx, alt, group, key)
	}
	return v, err
}

// askNode asks the node at base (SCHEME://HOST:PORT) for the value of key
// in group; the answer's tag is checked as it arrives (fetch).
func (n *Node) askNode(ctx context.Context, base, group, key string) ([]byte, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, base+basePath+url.QueryEscape(group)+"/"+url.QueryEscape(key), nil)
	if err != nil {
		return nil, err
	}
	status, v, err := n.ask(r)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("peer %s answered %d %s", r.URL.Host, status, http.StatusText(status))
	}
	return v, nil
}

// isDown reports whether a node (its base URL) failed lately.
func (n *Node) isDown(base string) bool {
	until, ok := n.down.Load(base)
	return ok && time.Now().Before(until.(time.Time))
}

// ask sends r to its node, unless that node failed lately, and notes why
// it failed in r's trail; a node that fails is not asked for downHold. It
// returns fetch's status and value.
func (n *Node) ask(r *http.Request) (int, []byte, error) {
	base := r.URL.Scheme + "://" + r.URL.Host
	if until, ok := n.down.Load(base); ok && time.Now().Before(until.(time.Time)) {
		noteFailure(r.Context(), ownerGone)
		return 0, nil, fmt.Errorf("peer %s failed lately; not asked until %s", r.URL.Host, until.(time.Time).Format(time.TimeOnly))
	}
	// The owner says at once that it works on the answer (102
	// Processing, written by authorize); from then on it may be reading
	// the page from storage, and is given fillWait times as long: an
	// asker that gave up sooner would read the page from storage too.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	timer := time.AfterFunc(n.opts.Timeout, cancel)
	defer timer.Stop()
	var working bool // the first 102 sets the deadline; others do not move it
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			if code == http.StatusProcessing && !working {
				working = true
				timer.Reset(fillWait * n.opts.Timeout)
			}
			return nil
		},
	})
	status, v, err := n.fetch(ctx, r)
	if err == nil && status != http.StatusOK {
		noteFailure(r.Context(), ownerError)
	}
	if err != nil {
		var refused *refusedError
		switch {
		case errors.As(err, &refused):
			noteFailure(r.Context(), ownerError)
			// Another secret or a clock far off: said once, for the
			// peer and the cause; it is asked again after downHold.
			n.holdDown(base)
			if n.warned.first("refusing " + refused.cause + " " + base) {
				n.opts.Logger.Warn("peer tier: a peer refuses this node's requests; its pages are read from storage", "peer", redact(base), "why", refused.Error())
			}
			return 0, nil, err
		case errors.Is(err, errCorruptValue):
			noteFailure(r.Context(), corruptValue)
		case ctx.Err() != nil && r.Context().Err() == nil:
			noteFailure(r.Context(), ownerTimeout)
		default:
			noteFailure(r.Context(), ownerGone)
		}
		if r.Context().Err() == nil {
			// Down, silent, slow, or sending what fails its check:
			// its pages go elsewhere for a while, without a wait per
			// read.
			hold := n.holdDown(base)
			if more, ok := n.warns.allow(time.Now()); ok {
				args := []any{"peer", r.URL.Host, "for", hold, "err", err}
				if more > 0 {
					args = append(args, "more_failed_meanwhile", more)
				}
				n.opts.Logger.Warn("peer tier: a peer failed; its pages are asked of the next node, or read from storage, for a while", args...)
			}
		}
		return 0, nil, err
	}
	n.down.Delete(base)
	n.fails.Delete(base)
	return status, v, nil
}

// holdDown leaves the node at base alone for downHold, twice as long for
// each failure in a row before, up to maxDownHold; it returns how long.
func (n *Node) holdDown(base string) time.Duration {
	c, _ := n.fails.LoadOrStore(base, new(atomic.Int32))
	k := c.(*atomic.Int32).Add(1)
	hold := downHold << min(max(k-1, 0), 6)
	hold = min(hold, maxDownHold)
	n.down.Store(base, time.Now().Add(hold))
	return hold
}

// warnLimit lets through failedWarnings warnings a minute and counts the
// others.
type warnLimit struct {
	mu         sync.Mutex
	start      time.Time
	n, dropped int
}

// allow reports whether a warning may be logged now, and how many were not
// since the last one.
func (w *warnLimit) allow(now time.Time) (dropped int, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now.Sub(w.start) > time.Minute {
		w.start, w.n = now, 0
	}
	if w.n >= failedWarnings {
		w.dropped++
		return 0, false
	}
	w.n++
	dropped, w.dropped = w.dropped, 0
	return dropped, true
}
