package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Hold takes key for ttl (waiting like Acquire, or at most the wait budget
// set with WithWaitBudget), runs fn while renewing the lease in the
// background, and releases it when fn returns.
//
// The goroutines of one Client that Hold the same key take turns locally
// first: while one holds the key, the others wait in the process, not at the
// store, so a Client's contention on a key costs the store one acquire per
// turn.
//
// fn's context is cancelled when ctx is, and, under the fence policy (the
// default, see FenceAfter), when renewal can no longer be trusted: after n
// consecutive failures or at the local deadline, whichever comes first. Its
// cause then matches ErrAbandoned, and the release is skipped, since the key
// may already belong to someone else. fn must stop writing when its context
// is done, and should fence its writes with l.Fence().
//
// The release is detached from ctx, so a cancelled caller still gives the key
// back, and bounded by the release timeout (default 2 s).
//
// Hold returns fn's error, joined with an error matching ErrAbandoned when the
// lease was given up, or ErrNotOwned when it was lost under the continue
// policy or found gone at release: in both cases fn did not run exclusively
// to the end. A release that fails for another reason is logged and reported
// (Observer.OnReleaseFailure), not returned: fn's work is done and the TTL
// frees the key. Errors from the acquire (ErrNotAcquired, with the context's
// error or the wait budget; an *ArgumentError; the store's error) are
// returned before fn runs. Hold leaves no goroutine behind.
//
// If fn panics (or calls runtime.Goexit), Hold stops the renewal, cancels
// fn's context and releases the lease as if fn had returned, then lets the
// panic go on in the caller's goroutine, with fn's stack.
func (c *Client) Hold(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error, opts ...HoldOption) error {
	if err := validateKeyTTL(key, ttl); err != nil {
		return err
	}
	if fn == nil {
		return &ArgumentError{Arg: "fn", Reason: "nil"}
	}
	cfg, err := newHoldConfig(ttl, opts)
	if err != nil {
		return err
	}
	start := time.Now()
	turn, err := c.local.take(ctx, key, cfg.waitBudget)
	if err != nil {
		return err
	}
	defer turn()
	budget := cfg.waitBudget
	if budget > 0 { // the store wait gets what is left of the budget
		if budget -= time.Since(start); budget <= 0 {
			return errors.Join(ErrNotAcquired, errWaitBudget)
		}
	}
	l, err := c.acquireWithin(ctx, key, ttl, budget)
	if err != nil {
		return err
	}
	return c.runHeld(ctx, l, cfg, fn)
}

// acquireWithin is Acquire bounded by budget when budget > 0. Running out of
// budget is an ErrNotAcquired that says so, not a context error: the
// caller's context is still live.
func (c *Client) acquireWithin(ctx context.Context, key string, ttl, budget time.Duration) (*Lease, error) {
	if budget <= 0 {
		return c.Acquire(ctx, key, ttl)
	}
	bctx, cancel := context.WithTimeoutCause(ctx, budget, errWaitBudget)
	defer cancel()
	l, err := c.Acquire(bctx, key, ttl)
	if err != nil && expired(ctx) == nil && (context.Cause(bctx) == errWaitBudget || expired(bctx) != nil) {
		return nil, fmt.Errorf("leasehold: %q still held after the %v wait budget: %w", key, budget, ErrNotAcquired)
	}
	return l, err
}

var errWaitBudget = errors.New("leasehold: wait budget spent")

// runHeld runs fn under l with renewal, then releases l unless it was lost.
func (c *Client) runHeld(ctx context.Context, l *Lease, cfg holdConfig, fn func(ctx context.Context, l *Lease) error) error {
	k, err := l.keepAlive(ctx, withConfig(cfg))
	if err != nil { // cannot happen for a fresh lease; release rather than leak it
		return errors.Join(err, c.releaseBounded(ctx, l, cfg.releaseTimeout))
	}
	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit: end the hold, let the panic go on
			k.Stop()
			if k.Err() == nil && !l.hasEnded() {
				_ = c.releaseBounded(ctx, l, cfg.releaseTimeout)
			}
		}
	}()
	fnErr := fn(k.Context(), l)
	returned = true
	k.Stop()
	if lost := k.Err(); lost != nil {
		return errors.Join(fnErr, lost)
	}
	if l.hasEnded() { // fn released the lease itself
		return fnErr
	}
	if rerr := c.releaseBounded(ctx, l, cfg.releaseTimeout); rerr != nil {
		return errors.Join(fnErr, rerr)
	}
	return fnErr
}

// releaseBounded releases l with a context detached from ctx and bounded by
// timeout. It returns an error only when the lease turned out to be lost (a
// fact the caller must hear); a store failure is logged and reported.
func (c *Client) releaseBounded(ctx context.Context, l *Lease, timeout time.Duration) error {
	switch err := l.release(context.WithoutCancel(ctx), timeout); {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotOwned):
		return fmt.Errorf("leasehold: %q was lost before fn returned: %w", l.key, err)
	default:
		lk := l.lock()
		observe(c, ctx, ReleaseFailureEvent{Lock: lk, Err: err},
			func(o *Observer) func(context.Context, ReleaseFailureEvent) { return o.OnReleaseFailure })
		c.log.WarnContext(ctx, "leasehold: release failed; the key frees itself when its TTL runs out",
			lk.logAttrs(slog.Any("error", err))...)
		return nil
	}
}
