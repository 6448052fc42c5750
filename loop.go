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

// WithLoopTTL sets the loop lock's TTL: the window in which one replica owns
// the loop. Default: 2 × interval, so the owner's window spans one missed
// tick and a crashed owner is replaced within two intervals.
func WithLoopTTL(ttl time.Duration) LoopOption { return func(c *loopConfig) { c.ttl = ttl } }

type leaseKey struct{}

// LeaseFromContext returns the lease a RunLoop tick runs under, so that the
// tick can fence its writes with its Fence.
func LeaseFromContext(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// RunLoop runs tick every interval on whichever replica owns the loop lock,
// until ctx is done; it then returns ctx's error. It is the per-loop TTL hold
// for periodic work (a reconcile sweep, a replay): at each tick a replica
// tries to take key with a TTL of 2 × interval and never releases it, so at
// most one replica runs a given window, and when the owner stops ticking (a
// crash, a deploy) the lock expires and another replica takes over at most
// two intervals after the owner's last acquisition. A replica that finds the
// key held tries again right when the holder's lease runs out, so takeover
// does not wait for its next tick.
//
// tick's context ends at the window's end (the acquire's send time + TTL −
// the drift margin, ttl/10), so a slow tick cannot overlap the next owner's
// window; LeaseFromContext gives its lease, for fenced writes. A tick's
// error is logged and the loop goes on. A store error skips the tick. A tick
// that panics (or calls runtime.Goexit) has its context cancelled and its
// lease released, so another replica can take the loop at once; the panic
// then goes on in RunLoop's caller.
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
			// Owned elsewhere: try again right after its window ends, if
			// that comes before our next tick.
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

// tick runs one tick under l until deadline. A tick that does not return
// (a panic, runtime.Goexit) gives the lease back on its way out.
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
