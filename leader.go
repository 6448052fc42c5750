package leasehold

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"time"
)

// Defaults of Lead, from the snapshot writer's numbers in docs/design.md §5.
const (
	// defaultLeaderTTL is the leader lease's TTL: a crashed leader is
	// replaced after about 10 s, while a leader that renews every ttl/3
	// (3.3 s) rides out two failed renewals before stepping down.
	defaultLeaderTTL = 10 * time.Second

	// defaultRetryPeriod is the longest a candidate waits between two
	// attempts at a held lease. Releases and expiries wake candidates
	// sooner; the period only bounds the delay when a wake-up is lost.
	defaultRetryPeriod = 2 * time.Second
)

// LeaderConfig configures Lead. The zero value of every field but
// OnStartedLeading is valid.
type LeaderConfig struct {
	// TTL is the leader lease's TTL. Default: defaultLeaderTTL.
	TTL time.Duration
	// RetryPeriod bounds the wait between campaign attempts. Default:
	// defaultRetryPeriod.
	RetryPeriod time.Duration
	// OnStartedLeading runs in its own goroutine for each term, with a
	// context cancelled when the term ends: leadership can no longer be
	// trusted (renewal fenced), or Lead's context is done. Required. If it
	// panics, the term ends as if it had returned (the lease is released),
	// and the panic goes on in Lead's goroutine.
	OnStartedLeading func(ctx context.Context, l *Lease)
	// OnStoppedLeading is called as soon as a term ends, before the lease
	// can expire when renewal failed, and before OnStartedLeading has
	// necessarily returned. Optional. If it panics, the term is still ended
	// (renewal stopped, OnStartedLeading waited for, the lease released
	// unless lost) before the panic goes on in Lead's goroutine.
	OnStoppedLeading func()
	// KeepLeaseOnShutdown leaves the lease to expire when Lead's context
	// ends, instead of releasing it: the default (false) releases, so a
	// successor takes over at once after a clean shutdown.
	KeepLeaseOnShutdown bool
	// ReleaseTimeout bounds the release at the end of a term. Default: 2 s.
	ReleaseTimeout time.Duration
	// Renewal configures the renewal (policy, interval, timeouts).
	// Default: the fence policy, renewing every TTL/3.
	Renewal []RenewOption
}

// Lead campaigns for key and runs cfg.OnStartedLeading while this process is
// the leader, until ctx is done; it then returns ctx's error. One process at
// a time leads, as far as the store can tell; a leader steps down (its
// context is cancelled, OnStoppedLeading called) when renewal fences, which
// is before its lease can expire, and campaigns again. A new term does not
// start until the previous OnStartedLeading has returned, so one process
// never runs two terms at once.
//
// After a leader crashes, a candidate takes over when the lease expires: at
// most TTL after the crash, plus RetryPeriod if the expiry's wake-up is lost.
// The lease's fence (l.Fence()) rises with every term: fence the leader's
// writes with it.
func (c *Client) Lead(ctx context.Context, key string, cfg LeaderConfig) error {
	if cfg.TTL == 0 {
		cfg.TTL = defaultLeaderTTL
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = defaultRetryPeriod
	}
	switch {
	case cfg.OnStartedLeading == nil:
		return &ArgumentError{Arg: "OnStartedLeading", Reason: "nil"}
	case cfg.RetryPeriod < 0:
		return &ArgumentError{Arg: "RetryPeriod", Reason: cfg.RetryPeriod.String() + " is negative"}
	}
	if err := validateKeyTTL(key, cfg.TTL); err != nil {
		return err
	}
	opts := make([]HoldOption, 0, len(cfg.Renewal)+1)
	for _, o := range cfg.Renewal {
		opts = append(opts, o)
	}
	if cfg.ReleaseTimeout != 0 {
		opts = append(opts, WithReleaseTimeout(cfg.ReleaseTimeout))
	}
	hcfg, err := newHoldConfig(cfg.TTL, opts)
	if err != nil {
		return err
	}
	for {
		l, err := c.acquireBackoff(ctx, key, cfg.TTL, min(cfg.RetryPeriod, c.maxBackoff))
		switch {
		case expired(ctx) != nil:
			if l != nil && !cfg.KeepLeaseOnShutdown { // acquired as ctx ended: no term; as at shutdown
				_ = c.releaseBounded(ctx, l, hcfg.releaseTimeout)
			}
			return expired(ctx)
		case err != nil:
			// A store failure: try again after a retry period.
			if err := sleepUntil(ctx, time.Now().Add(cfg.RetryPeriod)); err != nil {
				return err
			}
			continue
		}
		if err := c.term(ctx, l, hcfg, cfg); err != nil {
			return err
		}
	}
}

// term runs one term of leadership on l. It returns ctx's error when Lead
// must end, nil to campaign again.
func (c *Client) term(ctx context.Context, l *Lease, hcfg holdConfig, cfg LeaderConfig) error {
	k, err := l.keepAlive(ctx, withConfig(hcfg))
	if err != nil {
		return errors.Join(err, c.releaseBounded(ctx, l, hcfg.releaseTimeout))
	}
	done := make(chan struct{})
	var panicked any // OnStartedLeading's panic, to go on in Lead's goroutine
	go func() {
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				panicked = v
				c.log.ErrorContext(ctx, "leasehold: OnStartedLeading panicked; the term ends and the panic goes on in Lead",
					l.lock().logAttrs(slog.Any("panic", v), slog.String("stack", string(debug.Stack())))...)
			}
		}()
		cfg.OnStartedLeading(k.Context(), l)
	}()
	ended := false
	defer func() {
		if !ended { // OnStoppedLeading panicked: finish the term first
			c.endTerm(ctx, l, k, done, hcfg, cfg)
		}
	}()
	select {
	case <-k.Lost(): // renewal fenced: step down before the lease can expire
	case <-ctx.Done():
	case <-done: // the leader's work ended by itself (or panicked): hand over
	}
	if cfg.OnStoppedLeading != nil {
		cfg.OnStoppedLeading()
	}
	ended = true
	c.endTerm(ctx, l, k, done, hcfg, cfg)
	if panicked != nil {
		panic(panicked)
	}
	return ctx.Err()
}

// endTerm stops the term's renewal, waits for OnStartedLeading to return and
// releases the lease unless it was lost or is kept on shutdown.
func (c *Client) endTerm(ctx context.Context, l *Lease, k *KeepAlive, done <-chan struct{}, hcfg holdConfig, cfg LeaderConfig) {
	k.Stop()
	<-done
	lost := k.Err() != nil
	if !lost && !(ctx.Err() != nil && cfg.KeepLeaseOnShutdown) {
		if err := c.releaseBounded(ctx, l, hcfg.releaseTimeout); err != nil {
			c.log.WarnContext(ctx, "leasehold: leader lease was lost before the term ended", l.lock().logAttrs()...)
		}
	}
}
