package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// KeepAlive renews a lease in the background under a failure policy (see
// FenceAfter and ContinueOnRenewFailure) and tells its holder when ownership
// can no longer be trusted. It owns one goroutine, which Stop (or the lease's
// Release) ends and waits for; it also ends by itself when the lease is lost.
type KeepAlive struct {
	lease     *Lease
	cfg       holdConfig
	ctx       context.Context
	cancel    context.CancelCauseFunc
	calls     context.Context // the renewal calls' parent; cancelled by Stop
	stopCalls context.CancelFunc

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	lost     chan struct{}

	mu  sync.Mutex
	err error // why ownership is no longer trusted
}

// KeepAlive starts renewing l every renewal interval (default ttl/3) until
// Stop or l.Release. Renewal does not stop when ctx is cancelled, so that a
// cancelled holder keeps its lease while it winds down; ctx is only the
// parent of Context. Under the fence policy (the default) a lease whose
// renewals fail is given up: Context is cancelled with a cause matching
// ErrAbandoned and Lost is closed.
//
// It returns an *ArgumentError for options that cannot work with the lease's
// TTL, and an error if l already has a KeepAlive.
func (l *Lease) KeepAlive(ctx context.Context, opts ...HoldOption) (*KeepAlive, error) {
	cfg, err := newHoldConfig(l.TTL(), opts)
	if err != nil {
		return nil, err
	}
	return l.keepAlive(ctx, cfg)
}

func (l *Lease) keepAlive(ctx context.Context, cfg holdConfig) (*KeepAlive, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.keeper != nil:
		return nil, fmt.Errorf("leasehold: %q already has a KeepAlive", l.key)
	case l.ended:
		return nil, fmt.Errorf("leasehold: %q was released: %w", l.key, ErrNotOwned)
	}
	k := &KeepAlive{
		lease: l,
		cfg:   cfg,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		lost:  make(chan struct{}),
	}
	k.ctx, k.cancel = context.WithCancelCause(ctx)
	k.calls, k.stopCalls = context.WithCancel(context.WithoutCancel(ctx))
	l.keeper = k
	st := renewState{ttl: l.ttl, margin: cfg.margin, maxFailures: cfg.maxFailures, lastSent: l.sent, lastDone: l.acquired}
	// l.ttl cannot change while the KeepAlive runs: Lease.Renew refuses.
	go k.run(st)
	return k, nil
}

// Context returns the context the critical section should run under: it is
// cancelled when the parent is, when Stop is called, and, under the fence
// policy, when the lease is given up, with a cause matching ErrAbandoned
// (see context.Cause).
func (k *KeepAlive) Context() context.Context { return k.ctx }

// Lost returns a channel closed when ownership can no longer be trusted: the
// lease was given up (fence policy), the store said it is no longer ours, or
// it certainly expired (continue policy). It is not closed by Stop.
func (k *KeepAlive) Lost() <-chan struct{} { return k.lost }

// Err returns why ownership is no longer trusted, or nil. The error matches
// ErrAbandoned when the fence policy gave the lease up, and ErrNotOwned when
// the lease was lost under the continue policy.
func (k *KeepAlive) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Stop ends renewal, cancels an in-flight renewal call and Context, and waits
// for the goroutine to return. It does not release the lease. It is safe to
// call more than once and concurrently.
func (k *KeepAlive) Stop() {
	k.halt()
	k.cancel(context.Canceled)
}

// halt ends renewal and waits for it, leaving Context as it is.
func (k *KeepAlive) halt() {
	k.stopOnce.Do(func() {
		close(k.stop)
		k.stopCalls()
	})
	<-k.done
	k.lease.mu.Lock()
	if k.lease.keeper == k {
		k.lease.keeper = nil
	}
	k.lease.mu.Unlock()
}

func (k *KeepAlive) run(st renewState) {
	defer close(k.done)
	l := k.lease
	fence := k.cfg.maxFailures > 0
	next := st.lastSent.Add(k.cfg.interval)
	for {
		wake := next
		if fence {
			wake = earliest(wake, st.deadline())
		} else {
			wake = earliest(wake, st.expiredBy())
		}
		timer := time.NewTimer(time.Until(wake))
		select {
		case <-k.stop:
			timer.Stop()
			return
		case <-timer.C:
		}

		now := time.Now()
		switch {
		case fence && !now.Before(st.deadline()):
			k.abandon(fmt.Errorf("%w: no renewal succeeded within ttl %v − drift margin %v (%d failed in a row)",
				ErrAbandoned, st.ttl, st.margin, st.failures))
			return
		case !fence && !now.Before(st.expiredBy()):
			k.expired(now.Sub(st.expiredBy()), "its TTL ran out without a successful renewal")
			return
		case now.Before(next):
			continue
		}

		err, ok := k.renew(st, now)
		if !ok {
			return // stopped, or given up while the call was in flight
		}
		done := time.Now()
		next = now.Add(k.cfg.interval)
		switch {
		case err == nil:
			st.succeeded(now, done)
		case errors.Is(err, ErrNotOwned):
			l.notOwned(k.calls, "renew")
			if fence {
				k.abandon(fmt.Errorf("%w: the store says the lease is no longer ours", ErrAbandoned))
			} else {
				k.expired(max(done.Sub(st.expiredBy()), 0), "the store says the lease is no longer ours")
			}
			return
		default:
			giveUp := st.failed()
			lk := l.lock()
			l.client.observer.OnRenewFailure(RenewFailureEvent{Lock: lk, Err: err, Consecutive: st.failures})
			l.client.log.Warn("leasehold: renewal failed",
				lk.logAttrs(slog.Int("consecutive", st.failures), slog.Time("deadline", st.deadline()), slog.Any("error", err))...)
			if giveUp {
				k.abandon(fmt.Errorf("%w: %d renewals failed in a row, the last with: %w", ErrAbandoned, st.failures, err))
				return
			}
		}
	}
}

// renew makes one renewal call. The call runs in a goroutine of its own so
// that the local deadline is kept even when the store does not return when
// its context ends (a client that ignores contexts, a stuck socket): the
// lease is then given up at the deadline with the call still in flight. The
// call is always waited for, so no goroutine outlives the KeepAlive. ok is
// false when run must return: stopped, or given up.
func (k *KeepAlive) renew(st renewState, now time.Time) (err error, ok bool) {
	l := k.lease
	ctx, cancel := context.WithTimeout(k.calls, st.callTimeout(now, k.cfg.renewTimeout))
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- l.client.store.Renew(ctx, l.key, l.token, l.ttl) }()

	var deadline <-chan time.Time
	if k.cfg.maxFailures > 0 {
		t := time.NewTimer(time.Until(st.deadline()))
		defer t.Stop()
		deadline = t.C
	}
	select {
	case err = <-result:
		select {
		case <-k.stop: // the failure, if any, is Stop's doing
			return nil, false
		default:
			return err, true
		}
	case <-deadline:
		k.abandon(fmt.Errorf("%w: a renewal was still in flight at the local deadline (ttl %v − drift margin %v)",
			ErrAbandoned, st.ttl, st.margin))
	case <-k.stop:
	}
	cancel()
	<-result
	return nil, false
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// setLost records why ownership is gone and closes Lost.
func (k *KeepAlive) setLost(err error) {
	k.mu.Lock()
	k.err = err
	k.mu.Unlock()
	close(k.lost)
}

// abandon gives the lease up under the fence policy: the critical section is
// cancelled, and no release will be sent.
func (k *KeepAlive) abandon(reason error) {
	l := k.lease
	k.setLost(reason)
	k.cancel(reason)
	lk := l.lock()
	l.client.observer.OnAbandon(AbandonEvent{Lock: lk, Reason: reason})
	l.client.log.Error("leasehold: lock abandoned; its critical section was cancelled and the release is skipped",
		lk.logAttrs(slog.Any("reason", reason))...)
	l.end()
}

// expired reports, under the continue policy, a lease that is gone while its
// critical section goes on.
func (k *KeepAlive) expired(overrun time.Duration, why string) {
	l := k.lease
	k.setLost(fmt.Errorf("%w: %s while the critical section kept running (continue policy)", ErrNotOwned, why))
	lk := l.lock()
	l.client.observer.OnLeaseExpired(LeaseExpiredEvent{Lock: lk, Overrun: overrun})
	l.client.log.Error("leasehold: lease expired while its critical section kept running; its writes are no longer exclusive",
		lk.logAttrs(slog.String("why", why))...)
	l.end()
}
