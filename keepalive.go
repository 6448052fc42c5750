package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// KeepAlive renews a lease on its Client's renewal engine under a failure
// policy, and tells its holder when ownership can no longer be trusted.
type KeepAlive struct {
	lease  *Lease
	cfg    holdConfig
	ctx    context.Context
	cancel context.CancelCauseFunc
	lost   chan struct{}
	slot   renewSlot // its place in the Client's renewer

	// report is held while an outcome is reported; stopped, set under it,
	// silences reports after Stop.
	report  sync.Mutex
	stopped bool

	mu      sync.Mutex  // held by setLost while it cancels and closes Lost
	err     error       // why ownership is no longer trusted
	unwatch func() bool // stops the watch that ends renewal with the caller's ctx
}

// KeepAlive renews l every ttl/3 until Stop, l.Release, the end of ctx or
// Client.Close; none of them releases l. Under the fence policy a lease whose
// renewals fail is given up: Context is cancelled with a cause matching
// ErrAbandoned and Lost is closed. A lease has one KeepAlive at a time.
func (l *Lease) KeepAlive(ctx context.Context, opts ...RenewOption) (*KeepAlive, error) {
	if err := l.valid(); err != nil {
		return nil, err
	}
	return l.keepAlive(ctx, func(ttl time.Duration) (holdConfig, error) { return newHoldConfig(ttl, opts) })
}

// keepAlive starts renewing l under the configuration configure makes for
// l's TTL, with l's operation slot held so no Renew changes the TTL under it.
func (l *Lease) keepAlive(ctx context.Context, configure func(ttl time.Duration) (holdConfig, error)) (*KeepAlive, error) {
	if err := l.client.usable(); err != nil {
		return nil, err
	}
	if !l.begin(ctx.Done()) {
		return nil, fmt.Errorf("leasehold: KeepAlive of %q: still waiting for another call on the lease: %w", l.key, context.Cause(ctx))
	}
	defer l.finish()
	cfg, err := configure(l.TTL())
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.keeper != nil:
		return nil, fmt.Errorf("leasehold: %q already has a KeepAlive", l.key)
	case l.ended || l.released:
		return nil, fmt.Errorf("leasehold: %q was released or given up: %w", l.key, ErrNotOwned)
	}
	k := &KeepAlive{lease: l, cfg: cfg, lost: make(chan struct{})}
	st := renewState{ttl: l.ttl, margin: cfg.margin, maxFailures: cfg.maxFailures, lastSent: l.sent, lastDone: l.acquired}
	k.ctx, k.cancel = context.WithCancelCause(ctx)
	if err := l.client.renew.add(k, st); err != nil {
		k.cancel(err)
		return nil, err
	}
	l.keeper = k
	k.mu.Lock()
	k.unwatch = context.AfterFunc(ctx, func() { k.shut(context.Cause(ctx)) })
	k.mu.Unlock()
	return k, nil
}

// withConfig is a configure for keepAlive that gives cfg.
func withConfig(cfg holdConfig) func(time.Duration) (holdConfig, error) {
	return func(time.Duration) (holdConfig, error) { return cfg, nil }
}

// errNilKeepAlive is what a nil (or zero) *KeepAlive reports.
var errNilKeepAlive = &ArgumentError{Arg: "KeepAlive", Reason: "nil, or not made by KeepAlive (a failed KeepAlive returns none)"}

// A nil *KeepAlive's Context is done and its Lost closed: it renews nothing.
var nilKeepAliveCtx, nilKeepAliveLost = func() (context.Context, chan struct{}) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errNilKeepAlive)
	lost := make(chan struct{})
	close(lost)
	return ctx, lost
}()

func (k *KeepAlive) isNil() bool { return k == nil || k.lease == nil }

// Context returns the context to run the critical section under: cancelled
// when renewal ends, before a release is sent, and with a cause matching
// ErrAbandoned when the lease is given up.
func (k *KeepAlive) Context() context.Context {
	if k.isNil() {
		return nilKeepAliveCtx
	}
	return k.ctx
}

// Lost returns a channel closed when ownership can no longer be trusted
// (given up, refused by the store, or expired); Stop does not close it.
func (k *KeepAlive) Lost() <-chan struct{} {
	if k.isNil() {
		return nilKeepAliveLost
	}
	k.mu.Lock() // waits for a setLost in progress (see there)
	defer k.mu.Unlock()
	return k.lost
}

// Err returns why ownership is no longer trusted (matching ErrAbandoned or
// ErrNotOwned), or nil.
func (k *KeepAlive) Err() error {
	if k.isNil() {
		return errNilKeepAlive
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Stop ends renewal and cancels Context without releasing the lease; nothing
// is reported for the lease after it returns. It is safe to call twice.
func (k *KeepAlive) Stop() {
	if k.isNil() {
		return
	}
	k.shut(context.Canceled)
}

// shut ends renewal and cancels Context with cause before detaching k from
// its lease, so a Release that finds no KeepAlive finds its Context cancelled.
func (k *KeepAlive) shut(cause error) {
	k.report.Lock()
	k.stopped = true
	k.report.Unlock()
	k.lease.client.renew.remove(k)
	k.cancel(cause)
	k.mu.Lock()
	unwatch := k.unwatch
	k.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	k.lease.mu.Lock()
	if k.lease.keeper == k {
		k.lease.keeper = nil
	}
	k.lease.mu.Unlock()
}

// The failure policy, run by the renewer's goroutine (docs/design.md §4).

// wakeAt is when the lease next needs attention.
func (k *KeepAlive) wakeAt(st *renewState, next time.Time) time.Time {
	return earliest(next, k.limit(st))
}

// limit is when lapse ends the lease: the local deadline (fence policy) or
// the certain expiry (continue policy).
func (k *KeepAlive) limit(st *renewState) time.Time {
	if k.cfg.maxFailures > 0 {
		return st.deadline()
	}
	return st.expiredBy()
}

// lapse ends the lease if its limit has passed at now, even with a renewal
// in flight, and says whether it ended.
func (k *KeepAlive) lapse(st *renewState, now time.Time, inFlight bool) (ended bool) {
	if now.Before(k.limit(st)) {
		return false
	}
	k.report.Lock()
	defer k.report.Unlock()
	switch {
	case k.stopped:
	case k.cfg.maxFailures == 0:
		k.expired(now.Sub(st.expiredBy()), "its TTL ran out without a successful renewal")
	case inFlight:
		k.abandon(fmt.Errorf("%w: a renewal was still in flight at the local deadline (ttl %v − drift margin %v)",
			ErrAbandoned, st.ttl, st.margin))
	default:
		k.abandon(fmt.Errorf("%w: no renewal succeeded within ttl %v − drift margin %v (%d failed in a row)",
			ErrAbandoned, st.ttl, st.margin, st.failures))
	}
	return true
}

// settle applies a renewal's result and says whether the lease ended.
func (k *KeepAlive) settle(st *renewState, err error, sent, done time.Time) (ended bool) {
	if err == nil {
		st.succeeded(sent, done)
		k.lease.renewed(k, sent, done)
		observe(k.lease.client, k.ctx, RenewEvent{Lock: k.lease.lock(), TTL: st.ttl},
			func(o *Observer) func(context.Context, RenewEvent) { return o.OnRenew })
		return false
	}
	l := k.lease
	k.report.Lock()
	defer k.report.Unlock()
	if k.stopped {
		return true
	}
	fence := k.cfg.maxFailures > 0
	if errors.Is(err, ErrNotOwned) {
		l.notOwned(k.ctx, "renew")
		if fence {
			k.abandon(fmt.Errorf("%w: the store says the lease is no longer ours (%w)", ErrAbandoned, err))
		} else {
			k.expired(max(done.Sub(st.expiredBy()), 0), "the store says the lease is no longer ours")
		}
		return true
	}
	giveUp := st.failed()
	lk := l.lock()
	observe(l.client, k.ctx, RenewFailureEvent{Lock: lk, Err: err, Consecutive: st.failures},
		func(o *Observer) func(context.Context, RenewFailureEvent) { return o.OnRenewFailure })
	l.client.log.Warn("leasehold: renewal failed",
		lk.logAttrs(slog.Int("consecutive", st.failures), slog.Time("deadline", st.deadline()), slog.Any("error", err))...)
	if giveUp {
		k.abandon(fmt.Errorf("%w: %d renewals failed in a row, the last with: %w", ErrAbandoned, st.failures, err))
		return true
	}
	return false
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// setLost sets Err, cancels Context if cancel, and closes Lost, all under
// k.mu, so whoever sees one of them sees the others.
func (k *KeepAlive) setLost(err error, cancel bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.err = err
	if cancel {
		k.cancel(err)
	}
	close(k.lost)
}

// abandon gives the lease up: the critical section is cancelled, no release sent.
func (k *KeepAlive) abandon(reason error) {
	l := k.lease
	k.setLost(reason, true)
	lk := l.lock()
	observe(l.client, k.ctx, AbandonEvent{Lock: lk, Reason: reason},
		func(o *Observer) func(context.Context, AbandonEvent) { return o.OnAbandon })
	l.client.log.Error("leasehold: lock abandoned; its critical section was cancelled and the release is skipped",
		lk.logAttrs(slog.Any("reason", reason))...)
	l.end(k.ctx)
}

// expired reports a lease gone while its critical section goes on.
func (k *KeepAlive) expired(overrun time.Duration, why string) {
	l := k.lease
	k.setLost(fmt.Errorf("%w: %s while the critical section kept running (continue policy)", ErrNotOwned, why), false)
	lk := l.lock()
	observe(l.client, k.ctx, LeaseExpiredEvent{Lock: lk, Overrun: overrun},
		func(o *Observer) func(context.Context, LeaseExpiredEvent) { return o.OnLeaseExpired })
	l.client.log.Error("leasehold: lease expired while its critical section kept running; its writes are no longer exclusive",
		lk.logAttrs(slog.String("why", why))...)
	l.end(k.ctx)
}
