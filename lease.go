package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Lease is one ownership of a key: the key, the owner's token and its fence.
// Its methods are safe for concurrent use and on a nil *Lease, whose
// accessors give zero values and other methods an *ArgumentError. It prints
// as its key, fence and remaining time, never its token.
type Lease struct {
	client  *Client
	key     string
	token   string
	fence   int64
	started time.Time // when the acquire reply arrived; held time counts from here

	// op serialises Renew, Release and the start of a KeepAlive
	// (docs/lease-concurrency.md).
	op chan struct{}

	mu    sync.Mutex
	ended bool // released, handed on or given up; reported once
	// quiet: never given to a caller (a hand-off that came too late, given
	// back at once), so no OnAcquire reported it and OnRelease does not
	// report its end either. Set before the lease is shared.
	quiet bool
	// notOwnedSeen: an OnNotOwned was reported for it (by the renewal
	// engine): a Release or Renew refused afterwards does not report it
	// again.
	notOwnedSeen bool
	released     bool // a Release ended it: "not owned" is then no wrong-owner event
	// unconfirmed: taken by a grant (driver.Granter), whose term may be
	// shorter than the TTL, and not renewed since; the renewal.sent the
	// grant was counted from. Set before the lease is shared.
	unconfirmed time.Time
	line        *line   // the Client's line of waiters that counts it as held; nil if none (wait.go)
	r           renewal // everything about renewing it (renewal.go)
	// certainEnd is r.expiredBy() in Unix ns, kept by noteEnd wherever r
	// changes: the Client's waiters for the key stop counting the lease
	// as held then, released or not (wait.go).
	certainEnd atomic.Int64
}

// noteEnd records the lease's certain expiry (certainEnd) after r changed.
// l.mu is held, or l is not shared yet.
func (l *Lease) noteEnd() { l.certainEnd.Store(l.r.expiredBy().UnixNano()) }

// newLease is a lease of key just acquired with an attempt sent at sent and
// answered at done; the Client's waiters for key count it as held.
func (c *Client) newLease(key, token string, fence int64, ttl time.Duration, sent, done time.Time) *Lease {
	l := &Lease{client: c, key: key, token: token, fence: fence, started: done, op: make(chan struct{}, 1)}
	l.r = renewal{ttl: ttl, sent: sent, done: done}
	l.noteEnd()
	c.lines.hold(l)
	return l
}

// errNilLease is what the methods of a nil (or zero) *Lease return.
var errNilLease = &ArgumentError{Arg: "lease", Reason: "nil, or not made by a Client (a failed acquire returns no lease)"}

// valid reports errNilLease for a nil or zero Lease.
func (l *Lease) valid() error {
	if l == nil || l.client == nil {
		return errNilLease
	}
	return nil
}

// Key returns the locked key ("" for a nil Lease).
func (l *Lease) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the owner token, a credential: it can renew or release the lease.
func (l *Lease) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Fence returns the lease's fence token, larger than every earlier fence of the
// key: send it with every write so the storage can refuse a stale owner.
func (l *Lease) Fence() int64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// TTL returns the duration the lease was acquired or last renewed by hand with.
func (l *Lease) TTL() time.Duration {
	if l == nil || l.client == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.ttl
}

// String is the lease's key, fence and the time left before the store may
// expire it (as of its last renewal that landed), or how it ended; never its
// token.
func (l *Lease) String() string {
	if l == nil || l.client == nil {
		return "<nil lease>"
	}
	l.mu.Lock()
	ended, left := l.ended, time.Until(l.r.sent.Add(l.r.ttl))
	l.mu.Unlock()
	switch {
	case ended:
		return fmt.Sprintf("lease %q fence %d (ended)", l.key, l.fence)
	case left <= 0:
		return fmt.Sprintf("lease %q fence %d (expired)", l.key, l.fence)
	}
	return fmt.Sprintf("lease %q fence %d (%v left)", l.key, l.fence, left.Round(time.Millisecond))
}

// GoString is String, so %#v does not print the token either.
func (l *Lease) GoString() string { return l.String() }

// LogValue logs a Lease as its key, fence and holder identity, never its
// token.
func (l *Lease) LogValue() slog.Value {
	if l == nil || l.client == nil {
		return slog.StringValue("<nil lease>")
	}
	return slog.GroupValue(slog.String("key", l.key), slog.Int64("fence", l.fence), slog.String("holder", driver.TokenHolder(l.token)))
}

// begin takes the lease's operation slot, giving up when done is closed first.
func (l *Lease) begin(done <-chan struct{}) bool {
	if l.tryBegin() {
		return true
	}
	select {
	case l.op <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// tryBegin takes the lease's operation slot if it is free.
func (l *Lease) tryBegin() bool {
	select {
	case l.op <- struct{}{}:
		return true
	default:
		return false
	}
}

// awaitInflight waits, until ctx's end, for the renewal a stopped
// KeepAlive left in flight, if any: landing after a Renew or a new
// KeepAlive, it would set the TTL it was sent with. The operation slot is
// held.
func (l *Lease) awaitInflight(ctx context.Context) error {
	l.mu.Lock()
	inflight := l.r.inflight
	l.mu.Unlock()
	if inflight == nil {
		return nil
	}
	select {
	case <-inflight:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("a renewal of its stopped KeepAlive is still in flight: %w", context.Cause(ctx))
	}
}

// finish gives the operation slot back.
func (l *Lease) finish() { <-l.op }

// Renew resets the lease's remaining time to ttl if the key still holds its
// token, and returns ErrNotOwned if not. The fence does not change. While a
// KeepAlive runs, Renew is refused without calling the store; after one
// stopped, Renew first waits for its renewal still in flight, if any. A
// Renew whose outcome is unknown (a lost reply) may have been applied: when
// that would shorten the lease, the lease counts as shortened.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	if err := l.valid(); err != nil {
		return err
	}
	if err := driver.ValidateTTL(ttl); err != nil {
		return err
	}
	return l.renew(ctx, ttl, false)
}

// renew is Renew; confirming, it is the confirmation of a grant (confirm),
// which a call on the lease since the grant makes moot: it then does
// nothing and returns nil.
func (l *Lease) renew(ctx context.Context, ttl time.Duration, confirming bool) error {
	if !l.begin(ctx.Done()) {
		return fmt.Errorf("leasehold: renew %q: still waiting for another call on the lease: %w", l.key, context.Cause(ctx))
	}
	l.mu.Lock()
	// Not owned is no wrong-owner event after our own release, nor a second
	// one after the renewal engine reported it.
	running, released := l.r.keeper != nil, l.released || l.notOwnedSeen
	moot := running || l.ended || released || !l.r.sent.Equal(l.unconfirmed)
	l.mu.Unlock()
	switch {
	case confirming && moot:
		l.finish()
		return nil
	case running:
		l.finish()
		return fmt.Errorf("leasehold: %q is renewed by its KeepAlive; stop it before renewing by hand", l.key)
	}
	if err := l.awaitInflight(ctx); err != nil {
		l.finish()
		return fmt.Errorf("leasehold: renew %q: %w", l.key, err)
	}
	sent := time.Now()
	err := l.client.storeCall(ctx, "renew", 1, func() error { return l.client.store.Renew(ctx, l.key, l.token, ttl) })
	switch {
	case err == nil:
		// A KeepAlive started later counts its deadline from this renewal.
		done := time.Now()
		l.mu.Lock()
		l.r.ttl, l.r.sent, l.r.done = ttl, sent, done
		l.noteEnd()
		l.mu.Unlock()
	case unknownOutcome(err):
		// It may have been applied: when that would end the lease sooner,
		// count from it, so that the local deadline (and a KeepAlive
		// started later) never outlasts the store's.
		l.mu.Lock()
		if sent.Add(ttl).Before(l.r.sent.Add(l.r.ttl)) {
			l.r.ttl, l.r.sent = ttl, sent
			l.noteEnd()
		}
		l.mu.Unlock()
	}
	// Reported once the lease is free for other calls: an Observer may
	// Release it from the event (it waited for this very call).
	l.finish()
	switch {
	case err == nil:
		l.renewed(ctx, ttl)
	case unknownOutcome(err):
		if len(l.client.observers) > 0 {
			observe(l.client, ctx, RenewFailureEvent{Event: l.event(), Err: err, Consecutive: 1},
				func(o *Observer) func(context.Context, RenewFailureEvent) { return o.OnRenewFailure })
		}
	case errors.Is(err, ErrNotOwned) && !released:
		l.notOwned(ctx, "renew")
	}
	return err
}

// confirm renews a lease taken by a grant to its TTL, grantConfirmDelay
// after Acquire returned it: the grant held the key for the waiter's queue
// stay at most (driver.Granter). A call on the lease that comes first (a
// Renew, a KeepAlive, a Release) makes it moot, and so does the Client's
// Close, which stops renewing. Its outcome is reported as a Renew's.
func (l *Lease) confirm() {
	if l.client.usable() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultRenewTimeout)
	defer cancel()
	_ = l.renew(ctx, l.TTL(), true)
}

// Release gives the key up if it still holds the lease's token, and returns
// ErrNotOwned if it did not. A running KeepAlive's Context is cancelled
// before the release is sent. A cancelled ctx does not stop the release; its
// live deadline bounds it, else 2 s (up to 1 ms less: the releases that
// start within a millisecond share one deadline). A release of unknown
// outcome (a lost reply) is retried within that bound. When this Client's
// next waiter for the key is next in line, the key goes to it in the same
// store call.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.valid(); err != nil {
		return err
	}
	timeout := defaultReleaseTimeout
	if dl, ok := ctx.Deadline(); ok && expired(ctx) == nil {
		timeout = time.Until(dl) // the caller's own bound, longer or shorter
	}
	return l.release(ctx, timeout)
}

// release is Release bounded by timeout (see releaseContext).
func (l *Lease) release(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := l.client.releaseContext(ctx, timeout)
	defer cancel()
	if !l.tryBegin() {
		if l.client.renew.onEngine() {
			// An Observer's Release while another call holds the lease (its
			// holder's Release, which may be waiting for this very report):
			// waiting would hold up every lease's renewal. Renewal stops;
			// the other call ends the lease.
			l.mu.Lock()
			k := l.r.keeper
			l.mu.Unlock()
			if k != nil {
				k.shut(context.Canceled)
			}
			return fmt.Errorf("leasehold: release %q: another call on the lease is under way, not waited for on the renewal goroutine", l.key)
		}
		if !l.begin(rctx.Done()) {
			return fmt.Errorf("leasehold: release %q: still waiting for another call on the lease: %w", l.key, context.DeadlineExceeded)
		}
	}
	l.mu.Lock()
	k, released := l.r.keeper, l.released || l.notOwnedSeen // see Renew
	l.mu.Unlock()
	if k != nil {
		// Tell the holder before another owner can take the key.
		k.shut(context.Canceled)
	}
	err := l.client.giveBack(rctx, l) // a hand-off to this Client's next waiter, or a release (wait.go)
	if err == nil {
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
	}
	l.finish()
	switch {
	case err == nil:
		l.end(ctx)
	case errors.Is(err, ErrNotOwned) && !released: // after our own release it is no wrong owner
		l.notOwned(ctx, "release")
		l.client.lines.unhold(l)
	default:
		l.client.lines.unhold(l) // the TTL frees the key: this Client's waiters look again
		if unknownOutcome(err) {
			l.client.releaseFailed(ctx, l.key, l.fence, err)
		}
	}
	return err
}

// releaseContext is ctx without its cancellation, ending at ctx's live
// deadline when that comes first, else within timeout: at most 1 ms earlier,
// on a deadline shared with the releases that start about then
// (sharedDeadlines).
func (c *Client) releaseContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	now := time.Now()
	if dl, ok := ctx.Deadline(); ok && expired(ctx) == nil && dl.Before(now.Add(timeout)) {
		return context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	if timeout > maxSharedBound {
		return context.WithTimeout(context.WithoutCancel(ctx), timeout)
	}
	return &detachedContext{Context: context.WithoutCancel(ctx), end: c.deadlines.within(now, timeout)}, func() {}
}

// releaseRetrying sends a release until it gets an answer or ctx ends; unsure
// says an earlier attempt may have been applied without its reply arriving.
func (c *Client) releaseRetrying(ctx context.Context, key, token string) (err error, unsure bool) {
	wait := releaseRetryMin
	for {
		err = c.storeCall(ctx, "release", 1, func() error { return c.store.Release(ctx, key, token) })
		if !unknownOutcome(err) {
			return err, unsure
		}
		unsure = true
		timer := time.NewTimer(jitter(wait))
		select {
		case <-ctx.Done():
			timer.Stop()
			return err, unsure
		case <-timer.C:
		}
		wait = min(2*wait, releaseRetryMax)
	}
}

// unknownOutcome says whether a call that returned err may have been applied.
func unknownOutcome(err error) bool {
	return err != nil && !errors.Is(err, ErrNotOwned) && !errors.Is(err, ErrInvalidArgument) && err != errNilStore && err != errStoreClosed
}

func (l *Lease) event() Event { return l.client.event(l.key, l.fence) }

// hasEnded reports whether the ownership ended: released, handed on or given up.
func (l *Lease) hasEnded() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// end reports the end of the ownership, once, and lets the Client's waiters
// for the key look again.
func (l *Lease) end(ctx context.Context) {
	if l.markEnded() {
		l.reportEnd(ctx)
	}
}

// markEnded marks the ownership ended and lets the Client's waiters for the
// key look again; it reports whether this was the first end.
func (l *Lease) markEnded() (first bool) {
	l.mu.Lock()
	first = !l.ended
	l.ended = true
	l.mu.Unlock()
	if first {
		l.client.lines.unhold(l)
	}
	return first
}

// reportEnd reports the end of the ownership (OnRelease).
func (l *Lease) reportEnd(ctx context.Context) {
	if len(l.client.observers) > 0 && !l.quiet {
		observe(l.client, ctx, ReleaseEvent{Event: l.event(), Held: time.Since(l.started)},
			func(o *Observer) func(context.Context, ReleaseEvent) { return o.OnRelease })
	}
}

// renewed reports a renewal the store accepted.
func (l *Lease) renewed(ctx context.Context, ttl time.Duration) {
	if len(l.client.observers) > 0 {
		observe(l.client, ctx, RenewEvent{Event: l.event(), TTL: ttl},
			func(o *Observer) func(context.Context, RenewEvent) { return o.OnRenew })
	}
}

func (l *Lease) notOwned(ctx context.Context, op string) {
	l.mu.Lock()
	l.notOwnedSeen = true
	l.mu.Unlock()
	observe(l.client, ctx, NotOwnedEvent{Event: l.event(), Op: op},
		func(o *Observer) func(context.Context, NotOwnedEvent) { return o.OnNotOwned })
}
