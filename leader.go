package leasehold

import (
	"context"
	"time"
)

// Lead campaigns for key and runs lead while this process leads, until ctx
// is done, and returns ctx's error: the leader lease. Each term is a Hold of
// key (WithTTL, default 10 s) with no wait budget: lead runs with a context
// that ends when the term does — the lease given up under the fence policy
// before it can expire, or lost under the continue policy, or ctx done — and
// the lease is renewed until lead returns, then released; Lead campaigns
// again. Terms of one process never overlap, and the fence rises with every
// term: fence the leader's writes with l.Fence(). A store failure while
// campaigning is retried after a backoff step, and so is a term that ended
// sooner than the backoff's cap (WithBackoff; lead returned at once); on a
// closed Client (or one made with a bad option) Lead returns ErrClosed (or
// the *ArgumentError) instead. It takes every option but WithWaitBudget. A
// panic in lead ends the term and goes on in the caller.
func (c *Client) Lead(ctx context.Context, key string, lead func(ctx context.Context, l *Lease), opts ...HoldOption) error {
	if lead == nil {
		return &ArgumentError{Arg: "lead", Reason: "nil"}
	}
	cfg, err := newHoldConfig(defaultLeaderTTL, opts, "Lead", optLead)
	if err != nil {
		return err
	}
	if err := validateKeyTTL(key, cfg.ttl); err != nil {
		return err
	}
	for {
		l, err := c.acquireKept(ctx, key, cfg.ttl, 0)
		switch {
		case expired(ctx) != nil:
			if l != nil { // acquired as ctx ended: no term
				_ = c.releaseBounded(ctx, l, cfg.releaseTimeout)
			}
			return expired(ctx)
		case err != nil:
			if uerr := c.usable(); uerr != nil { // closed, or a bad option: no retry helps
				return uerr
			}
			// A store failure: try again after a backoff step.
			if err := c.sleepUntil(ctx, time.Now().Add(jitter(c.maxBackoff))); err != nil {
				return err
			}
			continue
		}
		began := time.Now()
		_ = c.runHeld(ctx, l, cfg, true, func(ctx context.Context, l *Lease) error {
			lead(ctx, l)
			return nil
		})
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(began) < c.maxBackoff {
			// A term shorter than a backoff step (lead returned at once: its
			// database is down, a bad configuration) is followed by a
			// pause of one, not a campaign at once: a leader failing
			// that way would otherwise loop through acquire and release.
			if err := c.sleepUntil(ctx, time.Now().Add(jitter(c.maxBackoff))); err != nil {
				return err
			}
		}
	}
}
