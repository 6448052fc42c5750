package leasehold

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// RunLoop runs tick every interval on whichever replica owns key, until ctx
// is done, and returns ctx's error: the per-loop TTL hold. Each tick takes key
// for its TTL (WithTTL, default 2 × interval) and never releases it, so one
// replica runs each window and another takes over within two intervals of a
// crash. It takes WithTTL, WithDriftMargin and WithReleaseTimeout.
//
// tick's context ends before its window does (the TTL less the drift
// margin), so it cannot overlap the next owner's, and when ctx ends; RunLoop
// returns once tick has. A tick's error is reported (Observer.OnError); a
// store error skips the tick; a panic releases the lease and goes on in the
// caller. On a closed Client (or one made with a bad option) RunLoop
// returns ErrClosed (or the *ArgumentError).
func (c *Client) RunLoop(ctx context.Context, key string, interval time.Duration, tick func(ctx context.Context, l *Lease) error, opts ...HoldOption) error {
	switch {
	case interval <= 0:
		return &ArgumentError{Arg: "interval", Reason: interval.String() + " is not positive"}
	case interval > driver.MaxTTL/2:
		return &ArgumentError{Arg: "interval", Reason: fmt.Sprintf("%v is longer than %v, half the longest lease", interval, driver.MaxTTL/2)}
	case tick == nil:
		return &ArgumentError{Arg: "tick", Reason: "nil"}
	}
	cfg, err := newHoldConfig(2*interval, opts, "RunLoop", optLoop)
	if err != nil {
		return err
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := driver.ValidateTTL(cfg.ttl); err != nil {
		var bad *ArgumentError
		if cfg.ttl == 2*interval && errors.As(err, &bad) {
			// The TTL is the default, two intervals: the interval is what is bad.
			return &ArgumentError{Arg: "interval", Reason: fmt.Sprintf("%v gives a TTL of twice that, and %s", interval, bad.Reason)}
		}
		return err
	}
	next := time.Now()
	for {
		if err := c.sleepUntil(ctx, next); err != nil {
			return err
		}
		next = next.Add(interval)
		if now := time.Now(); !next.After(now) {
			// A tick overran its interval, or the process was paused: skip
			// the windows missed, one attempt now and the next on the
			// interval's beat, not an attempt for each window back to back.
			next = next.Add((now.Sub(next)/interval + 1) * interval)
		}
		l, err := c.TryAcquire(ctx, key, cfg.ttl)
		var held *HeldError
		switch {
		case errors.As(err, &held) && held.Remaining > 0:
			// Owned elsewhere: try again when its window ends, if sooner.
			if at := time.Now().Add(heldFor(held) + time.Millisecond); at.Before(next) {
				next = at
			}
			continue
		case errors.Is(err, ErrNotAcquired):
			continue
		case err != nil:
			if cerr := expired(ctx); cerr != nil {
				return cerr
			}
			if uerr := c.usable(); uerr != nil { // closed, or a bad option: no retry helps
				return uerr
			}
			continue // reported by TryAcquire (OnAcquire, StoreFailed)
		}
		l.mu.Lock()
		deadline := l.r.sent.Add(cfg.ttl - cfg.margin)
		l.mu.Unlock()
		c.tick(ctx, l, deadline, cfg.releaseTimeout, tick)
	}
}

// tick runs one tick under l until deadline; a panic gives the lease back.
func (c *Client) tick(ctx context.Context, l *Lease, deadline time.Time, releaseTimeout time.Duration, tick func(ctx context.Context, l *Lease) error) {
	tctx, cancel := context.WithDeadline(ctx, deadline)
	returned := false
	defer func() {
		cancel()
		if !returned {
			_ = l.release(context.WithoutCancel(ctx), releaseTimeout)
		}
	}()
	err := tick(tctx, l)
	returned = true
	if err != nil && ctx.Err() == nil {
		c.reportError(ctx, l.key, l.fence, "tick", fmt.Errorf("leasehold: loop tick of %q: %w", l.key, err))
	}
}

// sleepUntil waits until t, the end of ctx (its error) or the Client's
// Close, whichever is first.
func (c *Client) sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.renew.quit: // Close: the next attempt says so
		return nil
	case <-timer.C:
		return nil
	}
}

// heldFor is a refusal's remaining TTL, at most the longest lease: a store
// may answer more (PostgreSQL's 100 years for a row pinned at 'infinity', a
// clock stepped back), and time arithmetic on it would overflow.
func heldFor(held *HeldError) time.Duration { return min(held.Remaining, driver.MaxTTL) }
