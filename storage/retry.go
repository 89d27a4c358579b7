package storage

// The read policy that HTTPSource and S3Source share: a ReadAt is split into
// parts fetched by a few goroutines in parallel; every part is retried with
// exponential backoff and full jitter; an attempt that receives nothing for
// AttemptTimeout is cancelled, and the whole ReadAt has ReadDeadline.
//
// A netReader is immutable after construction, and each ReadAt keeps its
// own state on its goroutines' stacks. The one shared mutable state is the
// retryLog's set of causes reported, under its own mutex, which is never
// held while anything else is locked or during I/O.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// errStalled is the cause of an attempt cancelled for receiving nothing
	// for AttemptTimeout.
	errStalled = errors.New("request stalled")
	// errReadDeadline is the cause of a ReadAt cancelled at ReadDeadline.
	errReadDeadline = errors.New("read deadline passed")
	// errSourceClosed is the cause of reads cancelled by Close; it matches
	// os.ErrClosed.
	errSourceClosed error = closedError{}
)

type closedError struct{}

func (closedError) Error() string        { return "source closed" }
func (closedError) Is(target error) bool { return target == os.ErrClosed }

// unavailableError is ErrUnavailable with the last attempt's error, kept
// for Cause but out of the chain that errors.Is and errors.As follow, so
// that the error is taken for ErrUnavailable, not for what the last attempt
// ran into.
type unavailableError struct {
	msg  string
	last error
}

func (e *unavailableError) Error() string        { return e.msg }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// permanent marks err as not worth retrying.
func permanent(err error) error { return &permanentError{err} }

// retryable reports whether a failed attempt is worth another: timeouts,
// stalls, broken connections, 408, 429 and 5xx responses are; changed
// objects, other HTTP statuses, certificate errors and errors marked
// permanent are not. Errors not recognised are taken for transport
// trouble and retried.
func retryable(err error) bool {
	var pe *permanentError
	var cve *tls.CertificateVerificationError
	var sc interface{ HTTPStatusCode() int }
	switch {
	case errors.Is(err, ErrChanged), errors.As(err, &pe), errors.As(err, &cve):
		return false
	case errors.Is(err, errStalled):
		return true
	case errors.As(err, &sc) && sc.HTTPStatusCode() > 0: // 0: no response
		c := sc.HTTPStatusCode()
		return c == 408 || c == 429 || c >= 500
	}
	return true
}

// retryPolicy holds the retry settings of Options, and hooks that
// tests replace.
type retryPolicy struct {
	attemptTimeout time.Duration
	deadline       time.Duration
	deadlineName   string // "read deadline", or what else deadline bounds
	maxRetries     int    // < 0: none
	backoffBase    time.Duration
	backoffMax     time.Duration
	log            *retryLog
	counts         requestCounts

	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	jitter func(d time.Duration) time.Duration // uniform in [0, d]
}

func newRetryPolicy(o *Options) *retryPolicy {
	return &retryPolicy{
		attemptTimeout: o.AttemptTimeout,
		deadline:       o.ReadDeadline,
		deadlineName:   "read deadline",
		maxRetries:     o.MaxRetries,
		backoffBase:    o.BackoffBase,
		backoffMax:     o.BackoffMax,
		log:            &retryLog{log: o.Logger, seen: map[string]bool{}},
		now:            time.Now,
		sleep:          sleepCtx,
		jitter:         fullJitter,
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func fullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// attemptFunc makes one attempt. ctx is cancelled when the attempt stalls;
// the attempt calls progress whenever it receives something.
type attemptFunc func(ctx context.Context, progress func()) error

// retryAfterer is an error that carries the server's Retry-After.
type retryAfterer interface{ RetryAfter() time.Duration }

// do runs attempt until it succeeds, fails for good, runs out of retries,
// or ctx ends. Failures are wrapped with what (the object and range); an
// exhausted budget gives an error wrapping ErrUnavailable that says how many
// attempts were made over how long, and the last cause.
func (p *retryPolicy) do(ctx context.Context, what string, attempt attemptFunc) error {
	return p.run(ctx, func() string { return what }, attempt)
}

// run is do with what made only for an error or a log line: a read's
// name is formatted per request otherwise.
func (p *retryPolicy) run(ctx context.Context, what func() string, attempt attemptFunc) error {
	start := p.now()
	var last error
	for n := 1; ; n++ {
		err := p.try(ctx, attempt)
		if err == nil {
			p.log.succeeded(what)
			return nil
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			if cause := context.Cause(ctx); errors.Is(cause, errReadDeadline) || errors.Is(cause, context.DeadlineExceeded) {
				p.counts.add(false, cause)
			}
			return p.stopped(ctx, what(), n, start, last)
		}
		last = err
		if !retryable(err) {
			p.counts.add(false, err)
			return fmt.Errorf("%s: %w", what(), err)
		}
		if n > max(p.maxRetries, 0) {
			p.counts.add(false, err)
			return p.unavailable(what(), n, start, err, "no retries left")
		}
		wait := p.backoff(n, err)
		if dl, ok := ctx.Deadline(); ok && p.now().Add(wait).After(dl) {
			p.counts.add(false, err)
			return p.unavailable(what(), n, start, err,
				fmt.Sprintf("the %s of %v would pass before another", p.deadlineName, p.deadline))
		}
		p.counts.add(true, err)
		p.log.failed(what(), n, wait, err)
		if p.sleep(ctx, wait) != nil {
			return p.stopped(ctx, what(), n, start, err)
		}
	}
}

// try makes one attempt with its stall timer.
func (p *retryPolicy) try(ctx context.Context, attempt attemptFunc) error {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(p.attemptTimeout, func() { cancel(errStalled) })
	defer stall.Stop()
	err := attempt(actx, func() { stall.Reset(p.attemptTimeout) })
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errStalled) {
		return fmt.Errorf("%w: nothing received for %v", errStalled, p.attemptTimeout)
	}
	return err
}

// backoff returns the wait before retry n (1-based): the server's
// Retry-After when it is short, else full jitter over the exponential step.
func (p *retryPolicy) backoff(n int, err error) time.Duration {
	var ra retryAfterer
	if errors.As(err, &ra) {
		if d := ra.RetryAfter(); d > 0 && d <= p.backoffMax {
			return d
		}
	}
	step := p.backoffMax
	if n-1 < 62 {
		if e := p.backoffBase << (n - 1); e > 0 && e < step {
			step = e
		}
	}
	return p.jitter(step)
}

// stopped is the error for a ctx that ended after n attempts.
func (p *retryPolicy) stopped(ctx context.Context, what string, n int, start time.Time, last error) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errReadDeadline):
		return p.unavailable(what, n, start, last, fmt.Sprintf("the %s of %v passed", p.deadlineName, p.deadline))
	case errors.Is(cause, context.DeadlineExceeded):
		return p.unavailable(what, n, start, last, "the caller's deadline passed")
	default:
		return fmt.Errorf("%s: %w", what, cause)
	}
}

func (p *retryPolicy) unavailable(what string, n int, start time.Time, last error, why string) error {
	attempts := "attempts"
	if n == 1 {
		attempts = "attempt"
	}
	return &unavailableError{
		msg: fmt.Sprintf("%s: %v: %d %s over %v, %s; last error: %v",
			what, ErrUnavailable, n, attempts, p.now().Sub(start).Round(time.Millisecond), why, last),
		last: last,
	}
}

// retryLog reports failed attempts without flooding the log while storage
// is down: the first failure of each cause (see attemptCause) at Warn,
// later ones of a cause already reported at Debug, until a request
// succeeds. That success is logged if anything was reported, and starts
// afresh.
type retryLog struct {
	log *slog.Logger

	mu   sync.Mutex
	seen map[string]bool // guarded by mu: causes reported since the last success
}

func (l *retryLog) failed(what string, n int, wait time.Duration, err error) {
	cause := attemptCause(err)
	l.mu.Lock()
	first := !l.seen[cause]
	l.seen[cause] = true
	l.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	l.log.Log(context.Background(), level, "storage request failed; retrying",
		"request", what, "attempt", n, "wait", wait.Round(time.Millisecond), "err", err.Error(), "cause", cause)
}

func (l *retryLog) succeeded(what func() string) {
	l.mu.Lock()
	n := len(l.seen)
	clear(l.seen)
	l.mu.Unlock()
	if n > 0 {
		l.log.Info("storage requests succeed again", "request", what())
	}
}

// fetchFunc makes one attempt at reading exactly len(dst) bytes at off into
// dst, calling progress as bytes arrive.
type fetchFunc func(ctx context.Context, dst []byte, off int64, progress func()) error

// netReader implements ReadAt for network sources on top of a fetchFunc.
type netReader struct {
	// Immutable after construction.
	name     string
	size     int64
	partSize int64
	parallel int
	policy   *retryPolicy
	fetch    fetchFunc
	ctx      context.Context // cancelled by close
	cancel   context.CancelCauseFunc
}

func newNetReader(name string, opts *Options) *netReader {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &netReader{
		name:     name,
		partSize: opts.PartSize,
		parallel: opts.Parallel,
		policy:   newRetryPolicy(opts),
		ctx:      ctx,
		cancel:   cancel,
	}
}

// withDeadline returns a context that ends at the read deadline, when the
// source is closed, or when parent ends (with parent's cause).
func (r *netReader) withDeadline(parent context.Context) (context.Context, context.CancelFunc) {
	dctx, cancelDeadline := context.WithTimeoutCause(r.ctx, r.policy.deadline, errReadDeadline)
	ctx, cancel := context.WithCancelCause(dctx)
	stop := context.AfterFunc(parent, func() { cancel(context.Cause(parent)) })
	return ctx, func() { stop(); cancel(nil); cancelDeadline() }
}

func (r *netReader) close() { r.cancel(errSourceClosed) }

func (r *netReader) readAt(parent context.Context, p []byte, off int64) (int, error) {
	switch {
	case off < 0:
		return 0, fmt.Errorf("%s: read at negative offset %d", r.name, off)
	case r.ctx.Err() != nil:
		return 0, fmt.Errorf("%s: %w", r.name, errSourceClosed)
	case len(p) == 0:
		return 0, nil
	case off >= r.size:
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > r.size-off {
		p = p[:r.size-off]
	}
	ctx, cancel := r.withDeadline(parent)
	defer cancel()
	if err := r.fetchParts(ctx, p, off); err != nil {
		return 0, err
	}
	if len(p) < want {
		return len(p), io.EOF
	}
	return want, nil
}

// fetchParts fills p from off, in parts of at most partSize fetched by up
// to parallel goroutines. The first failure cancels the other parts and is
// the error returned.
func (r *netReader) fetchParts(ctx context.Context, p []byte, off int64) error {
	n := int64(len(p))
	parts := (n + r.partSize - 1) / r.partSize
	if parts == 1 {
		return r.fetchPart(ctx, p, off)
	}
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	for range min(int64(r.parallel), parts) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= parts {
					return
				}
				a := i * r.partSize
				b := min(a+r.partSize, n)
				if err := r.fetchPart(gctx, p[a:b], off+a); err != nil {
					once.Do(func() { first = err; cancel(err) })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && gctx.Err() != nil {
		first = fmt.Errorf("%s: %w", r.name, context.Cause(gctx))
	}
	return first
}

func (r *netReader) fetchPart(ctx context.Context, dst []byte, off int64) error {
	what := func() string { return fmt.Sprintf("%s: bytes %d-%d", r.name, off, off+int64(len(dst))-1) }
	return r.policy.run(ctx, what, func(actx context.Context, progress func()) error {
		return r.fetch(actx, dst, off, progress)
	})
}

// readFull reads exactly len(dst) bytes of a response body, calling
// progress as they arrive, then reads on to the body's end (the body
// should end there): a connection goes back to the pool only when its
// body was read to io.EOF, and the SDK's wrappers of the body may not
// report io.EOF with the last byte. A body that ends early is an error
// worth retrying.
// checkContentRange checks the Content-Range of an answer to Range:
// bytes=off-end. Another total size means the object changed, told by
// changed("its size is now …"); anything else is a permanent error naming
// who answered.
func (r *netReader) checkContentRange(cr string, off, end int64, who string, changed func(why string) error) error {
	if cr == fmt.Sprintf("bytes %d-%d/%d", off, end, r.size) {
		return nil
	}
	if _, _, total, ok := parseContentRange(cr); ok && total != r.size {
		return changed(fmt.Sprintf("its size is now %d, not %d", total, r.size))
	}
	return permanent(fmt.Errorf("%s answered Range: bytes=%d-%d with Content-Range %q", who, off, end, cr))
}

func readFull(body io.Reader, dst []byte, progress func()) error {
	n, err := io.ReadFull(progressReader{body, progress}, dst)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return fmt.Errorf("response body ended after %d of %d bytes: %w", n, len(dst), io.ErrUnexpectedEOF)
	case err != nil:
		return fmt.Errorf("response body, after %d of %d bytes: %w", n, len(dst), err)
	}
	io.CopyN(io.Discard, body, 4<<10)
	return nil
}

type progressReader struct {
	r        io.Reader
	progress func()
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.progress()
	}
	return n, err
}
