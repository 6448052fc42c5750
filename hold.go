package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Hold takes key for ttl (waiting like Acquire), runs fn while renewing the
// lease in the background, and releases it when fn returns.
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
// to the end. A release that fails for another reason is logged and reported,
// not returned: fn's work is done and the TTL frees the key. Errors from the
// acquire (ErrNotAcquired with the context's error, an *ArgumentError, the
// store's error) are returned before fn runs. Hold leaves no goroutine behind.
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
	l, err := c.Acquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	k, err := l.keepAlive(ctx, cfg)
	if err != nil { // cannot happen for a fresh lease; release rather than leak it
		return errors.Join(err, l.Release(context.WithoutCancel(ctx)))
	}
	defer k.Stop() // also when fn panics; the TTL then frees the key
	fnErr := fn(k.Context(), l)
	k.Stop()
	if lost := k.Err(); lost != nil {
		return errors.Join(fnErr, lost)
	}
	if l.hasEnded() { // fn released the lease itself
		return fnErr
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.releaseTimeout)
	defer cancel()
	switch rerr := l.Release(rctx); {
	case rerr == nil:
		return fnErr
	case errors.Is(rerr, ErrNotOwned):
		return errors.Join(fnErr, fmt.Errorf("leasehold: %q was lost before fn returned: %w", key, rerr))
	default:
		lk := l.lock()
		c.log.WarnContext(ctx, "leasehold: release after Hold failed; the key frees itself when its TTL runs out",
			lk.logAttrs(slog.Any("error", rerr))...)
		return fnErr
	}
}
