package leasehold

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// LoopOption configures RunLoop.
type LoopOption func(*loopConfig)

type loopConfig struct {
	ttl time.Duration // 0: 2 × interval
}

// WithLoopTTL sets the loop lock's TTL. Default: 2 × interval, so a window
// spans one missed tick and a crashed owner is replaced within two intervals.
func WithLoopTTL(ttl time.Duration) LoopOption { return func(c *loopConfig) { c.ttl = ttl } }

type leaseKey struct{}

// LeaseFromContext returns the lease a RunLoop tick runs under, for fencing.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// RunLoop runs tick every interval on whichever replica owns key, until ctx
// is done, and returns ctx's error: the per-loop TTL hold. Each tick takes key
// for 2 × interval and never releases it, so one replica runs each window and
// another takes over within two intervals of a crash.
//
// tick's context ends before its window does, so it cannot overlap the next
// owner's. A tick's error is logged; a store error skips the tick; a panic
// releases the lease and goes on in the caller.
func (c *Client) RunLoop(ctx context.Context, key string, interval time.Duration, tick func(ctx context.Context) error, opts ...LoopOption) error {
	cfg := loopConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.ttl == 0 {
		cfg.ttl = 2 * interval
	}
	switch {
	case interval <= 0:
		return &ArgumentError{Arg: "interval", Reason: interval.String() + " is not positive"}
	case tick == nil:
		return &ArgumentError{Arg: "tick", Reason: "nil"}
	}
	if err := validateKeyTTL(key, cfg.ttl); err != nil {
		return err
	}
	margin := cfg.ttl / DefaultDriftDivisor
	next := time.Now()
	for {
		if err := sleepUntil(ctx, next); err != nil {
			return err
		}
		next = next.Add(interval)
		l, err := c.TryAcquire(ctx, key, cfg.ttl)
		var held *HeldError
		switch {
		case errors.As(err, &held) && held.Remaining > 0:
			// Owned elsewhere: try again when its window ends, if sooner.
			if at := time.Now().Add(held.Remaining + time.Millisecond); at.Before(next) {
				next = at
			}
			continue
		case errors.Is(err, ErrNotAcquired):
			continue
		case err != nil:
			if cerr := expired(ctx); cerr != nil {
				return cerr
			}
			c.log.WarnContext(ctx, "leasehold: loop tick skipped: the store failed", slog.String("key", key), slog.Any("error", err))
			continue
		}
		c.tick(ctx, l, l.sent.Add(cfg.ttl-margin), tick)
	}
}

// tick runs one tick under l until deadline; a panic gives the lease back.
func (c *Client) tick(ctx context.Context, l *Lease, deadline time.Time, tick func(ctx context.Context) error) {
	tctx, cancel := context.WithDeadline(context.WithValue(ctx, leaseKey{}, l), deadline)
	returned := false
	defer func() {
		cancel()
		if !returned {
			_ = l.release(context.WithoutCancel(ctx), defaultReleaseTimeout)
		}
	}()
	err := tick(tctx)
	returned = true
	if err != nil && ctx.Err() == nil {
		c.log.WarnContext(ctx, "leasehold: loop tick failed", l.lock().logAttrs(slog.Any("error", err))...)
	}
}

// sleepUntil waits until t or ctx is done, whichever is first.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
