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
	// defaultLeaderTTL replaces a crashed leader within about 10 s, while a
	// live one rides out two failed renewals.
	defaultLeaderTTL = 10 * time.Second

	// defaultRetryPeriod bounds a candidate's wait when a wake-up is lost.
	defaultRetryPeriod = 2 * time.Second
)

// LeaderConfig configures Lead. The zero value of every field but
// OnStartedLeading is valid.
type LeaderConfig struct {
	// TTL is the leader lease's TTL. Default: 10 s.
	TTL time.Duration
	// RetryPeriod bounds the wait between campaign attempts. Default: 2 s.
	RetryPeriod time.Duration
	// OnStartedLeading runs on its own goroutine for each term, with a
	// context cancelled when the term ends. Required. A panic ends the term
	// and goes on in Lead's goroutine.
	OnStartedLeading func(ctx context.Context, l *Lease)
	// OnStoppedLeading is called as soon as a term ends, maybe before
	// OnStartedLeading returns. Optional. A panic goes on after the term ends.
	OnStoppedLeading func()
	// KeepLeaseOnShutdown leaves the lease to expire when ctx ends, instead
	// of releasing it for a successor at once.
	KeepLeaseOnShutdown bool
	// ReleaseTimeout bounds the release at the end of a term. Default: 2 s.
	ReleaseTimeout time.Duration
	// Renewal configures the renewal. Default: the fence policy, every TTL/3.
	Renewal []RenewOption
}

// Lead campaigns for key and runs cfg.OnStartedLeading while this process
// leads, until ctx is done, and returns ctx's error. A leader steps down when
// renewal fences, before its lease can expire, and campaigns again; terms of
// one process never overlap. The fence rises with every term: fence the
// leader's writes with l.Fence().
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

// term runs one term on l: ctx's error ends Lead, nil campaigns again.
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

// endTerm stops renewal, waits for OnStartedLeading, and releases unless lost
// or kept on shutdown.
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
