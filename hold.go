package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Hold takes key for ttl, waiting like Acquire (at most the WithWaitBudget),
// runs fn while the lease is renewed, and releases it when fn returns. A
// Client's goroutines holding one key take turns in the process first.
//
// fn's context is cancelled when ctx is, and under the fence policy before
// the lease can expire when renewal fails: its cause then matches
// ErrAbandoned and the release is skipped. fn must stop writing then, and
// should fence its writes with l.Fence().
//
// Hold returns fn's error, joined with one matching ErrAbandoned or
// ErrNotOwned when fn did not run exclusively to the end. A release the store
// fails is logged and reported, not returned; the TTL frees the key. If fn
// panics, Hold ends the hold as if fn had returned and re-panics.
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

// acquireWithin is Acquire bounded by budget when budget > 0; running out of
// it is an ErrNotAcquired, not a context error.
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

// releaseBounded releases l detached from ctx, within timeout. It returns an
// error only for a lease found lost; a store failure is logged and reported.
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
