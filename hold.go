package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Defaults of Hold, RunLoop and Lead; docs/design.md §4 and §5 give the
// reasoning.
const (
	// defaultReleaseTimeout bounds the detached release after the critical
	// section; past 2 s the store is in trouble and the TTL frees the key.
	defaultReleaseTimeout = 2 * time.Second

	// defaultLeaderTTL replaces a crashed leader within about 10 s, while a
	// live one rides out two failed renewals (the leader lease of §5).
	defaultLeaderTTL = 10 * time.Second
)

// HoldOption configures the ways of holding a lock: Hold, Lease.KeepAlive,
// RunLoop and Lead. An option a call does not take (see each option) is an
// *ArgumentError naming it, not ignored.
type HoldOption func(*holdConfig)

// The calls an option applies to.
type optCalls uint8

const (
	optRenewal  optCalls = 1 << iota // KeepAlive, and Hold and Lead, which renew
	optHold                          // Hold
	optLoop                          // RunLoop
	optLead                          // Lead
	optRenewing = optRenewal | optHold | optLead
)

type holdConfig struct {
	policy
	marginSet      bool
	releaseTimeout time.Duration
	waitBudget     time.Duration // 0: wait until ctx is done
	ttl            time.Duration // RunLoop and Lead; 0: their default
	calling        optCalls      // the call being configured
	misfit         string        // the first option it does not take
	badFenceAfter  *int          // a FenceAfter count below 1
}

// option is an option named name that applies to calls.
func option(name string, calls optCalls, apply func(*holdConfig)) HoldOption {
	return func(c *holdConfig) {
		if calls&c.calling == 0 {
			if c.misfit == "" {
				c.misfit = name
			}
			return
		}
		apply(c)
	}
}

// FenceAfter selects the fence policy (the default): the lease is given up
// after n consecutive renewal failures (default 3) or at its local deadline,
// cancelling the critical section with cause ErrAbandoned, without a release.
// n below 1 is an *ArgumentError. For Hold, KeepAlive and Lead.
func FenceAfter(n int) HoldOption {
	return option("FenceAfter", optRenewing, func(c *holdConfig) {
		if n < 1 {
			c.badFenceAfter = &n
			return
		}
		c.maxFailures, c.badFenceAfter = n, nil // the last policy option wins
	})
}

// ContinueOnRenewFailure selects the continue policy: failures are reported,
// the critical section is never cancelled, and a lease that expired under it
// is reported (Observer.OnLeaseExpired); Hold then returns an error matching
// ErrNotOwned, and Lead's term ends. Fence every write if you choose it. For
// Hold, KeepAlive and Lead.
func ContinueOnRenewFailure() HoldOption {
	return option("ContinueOnRenewFailure", optRenewing, func(c *holdConfig) { c.maxFailures, c.badFenceAfter = 0, nil })
}

// WithRenewInterval sets the time between renewals. Default: ttl/3. For
// Hold, KeepAlive and Lead.
func WithRenewInterval(d time.Duration) HoldOption {
	return option("WithRenewInterval", optRenewing, func(c *holdConfig) { c.interval = d })
}

// WithRenewTimeout bounds each renewal call. Default: 2 s, at most the
// interval. For Hold, KeepAlive and Lead.
func WithRenewTimeout(d time.Duration) HoldOption {
	return option("WithRenewTimeout", optRenewing, func(c *holdConfig) { c.timeout = d })
}

// WithDriftMargin sets how long before the server-side expiry the local
// deadline falls: where the fence policy gives a lease up, and where a
// RunLoop tick's context ends. Default: ttl/10. For every call.
func WithDriftMargin(d time.Duration) HoldOption {
	return option("WithDriftMargin", optRenewing|optLoop, func(c *holdConfig) { c.margin, c.marginSet = d, true })
}

// WithReleaseTimeout bounds the release after the critical section (Hold's
// fn, a Lead term, a RunLoop tick that panicked). Default: 2 s. A release
// may end up to 1 ms early (a sixteenth of a bound under 16 ms), never
// late: the releases that start that close share one deadline. For Hold,
// RunLoop and Lead.
func WithReleaseTimeout(d time.Duration) HoldOption {
	return option("WithReleaseTimeout", optHold|optLoop|optLead, func(c *holdConfig) { c.releaseTimeout = d })
}

// WithWaitBudget bounds how long Hold waits for a busy key, then returns an
// error matching ErrNotAcquired. The budget counts from the answer to the
// first attempt, which goes under ctx alone: a free key is taken whatever
// the budget. Default: until ctx is done. For Hold.
func WithWaitBudget(d time.Duration) HoldOption {
	return option("WithWaitBudget", optHold, func(c *holdConfig) { c.waitBudget = d })
}

// WithTTL sets the lease's TTL of RunLoop (default: 2 × interval, so a window
// spans one missed tick and a crashed owner is replaced within two
// intervals) and of Lead (default: 10 s). Hold and KeepAlive take the TTL as
// an argument. For RunLoop and Lead.
func WithTTL(d time.Duration) HoldOption {
	return option("WithTTL", optLoop|optLead, func(c *holdConfig) { c.ttl = d })
}

// newHoldConfig applies opts for a call named name, taking the options of
// call, over the defaults for a lease of ttl (for RunLoop and Lead, the
// default WithTTL overrides; the TTL used is cfg.ttl), and checks that a
// renewal can land before the local deadline.
func newHoldConfig(ttl time.Duration, opts []HoldOption, name string, call optCalls) (holdConfig, error) {
	c := holdConfig{
		policy:         policy{maxFailures: defaultFenceAfter, timeout: defaultRenewTimeout},
		releaseTimeout: defaultReleaseTimeout,
		calling:        call,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.misfit != "" {
		return c, &ArgumentError{Arg: c.misfit, Reason: "does not apply to " + name}
	}
	if c.ttl < 0 {
		return c, &ArgumentError{Arg: "WithTTL", Reason: fmt.Sprintf("%v is negative", c.ttl)}
	}
	if c.ttl > 0 {
		var bad *ArgumentError
		if errors.As(driver.ValidateTTL(c.ttl), &bad) {
			return c, &ArgumentError{Arg: "WithTTL", Reason: bad.Reason}
		}
		ttl = c.ttl
	}
	c.ttl = ttl
	if c.interval == 0 {
		c.interval = ttl / DefaultRenewDivisor
	}
	if !c.marginSet {
		c.margin = ttl / DefaultDriftDivisor
	}
	switch {
	case c.badFenceAfter != nil:
		return c, &ArgumentError{Arg: "FenceAfter", Reason: fmt.Sprintf("%d is not positive: the fence policy gives up after 1 or more failures (ContinueOnRenewFailure never does)", *c.badFenceAfter)}
	case c.margin < 0:
		return c, &ArgumentError{Arg: "WithDriftMargin", Reason: fmt.Sprintf("%v is negative", c.margin)}
	case c.waitBudget < 0:
		return c, &ArgumentError{Arg: "WithWaitBudget", Reason: fmt.Sprintf("%v is negative", c.waitBudget)}
	case c.releaseTimeout <= 0:
		return c, &ArgumentError{Arg: "WithReleaseTimeout", Reason: fmt.Sprintf("%v is not positive", c.releaseTimeout)}
	}
	if call&optRenewing == 0 {
		if c.margin >= ttl {
			return c, &ArgumentError{Arg: "WithDriftMargin", Reason: fmt.Sprintf("%v leaves nothing of a %v lease", c.margin, ttl)}
		}
		return c, nil
	}
	switch {
	case c.interval <= 0:
		return c, &ArgumentError{Arg: "WithRenewInterval", Reason: fmt.Sprintf("%v is not positive", c.interval)}
	case c.margin >= ttl:
		return c, &ArgumentError{Arg: "WithDriftMargin", Reason: fmt.Sprintf("%v leaves nothing of a %v lease", c.margin, ttl)}
	case c.interval >= ttl-c.margin: // not interval+margin >= ttl: the sum can overflow
		return c, &ArgumentError{Arg: "WithRenewInterval", Reason: fmt.Sprintf(
			"%v plus the drift margin %v leaves no time to renew a %v lease before its deadline", c.interval, c.margin, ttl)}
	case c.timeout <= 0:
		return c, &ArgumentError{Arg: "WithRenewTimeout", Reason: fmt.Sprintf("%v is not positive", c.timeout)}
	}
	c.timeout = min(c.timeout, c.interval)
	return c, nil
}

// Hold takes key for ttl, waiting like Acquire (at most the WithWaitBudget),
// runs fn while the lease is renewed, and releases it when fn returns.
//
// fn's context has ctx's deadline and ends when ctx does (its cause says the
// caller's context ended; at the deadline its error is
// context.DeadlineExceeded), and under the fence policy before the lease can
// expire when renewal fails: its cause then matches ErrAbandoned and the
// release is skipped. fn must stop writing then, and should fence its writes with
// l.Fence(). A cancelled ctx does not end the lease: it is renewed until fn
// returns, then released.
//
// Hold returns fn's error, joined with one matching ErrAbandoned or
// ErrNotOwned when fn did not run exclusively to the end. A release the store
// fails is reported (OnReleaseFailure), not returned; the TTL frees the key.
// If fn panics, Hold ends the hold as if fn had returned and re-panics.
func (c *Client) Hold(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error, opts ...HoldOption) error {
	if err := validateKeyTTL(key, ttl); err != nil {
		return err
	}
	if fn == nil {
		return &ArgumentError{Arg: "fn", Reason: "nil"}
	}
	cfg, err := newHoldConfig(ttl, opts, "Hold", optHold)
	if err != nil {
		return err
	}
	l, err := c.acquireKept(ctx, key, ttl, cfg.waitBudget)
	if err != nil {
		return err
	}
	return c.runHeld(ctx, l, cfg, false, fn)
}

var errWaitBudget = errors.New("leasehold: wait budget spent")

// errCallerDone is the cause on fn's context when the caller's ended.
var errCallerDone = errors.New("leasehold: the caller's context ended; the lease is kept until fn returns")

// callerEnd is the cause of fn's context at the caller's deadline: the
// caller's own cause, read when asked (the caller's timer may fire just
// after fn's).
type callerEnd struct{ ctx context.Context }

func (e callerEnd) cause() error {
	if c := context.Cause(e.ctx); c != nil {
		return c
	}
	return context.DeadlineExceeded
}
func (e callerEnd) Error() string   { return errCallerDone.Error() + ": " + e.cause().Error() }
func (e callerEnd) Unwrap() []error { return []error{errCallerDone, e.cause()} }

// runHeld runs fn under l with renewal, then releases l unless it was lost.
// Renewal goes on until fn returns, whatever the caller's ctx does; ctx's end
// only cancels fn's context. endOnLoss also cancels fn's context when the
// lease is lost under the continue policy (Lead).
func (c *Client) runHeld(ctx context.Context, l *Lease, cfg holdConfig, endOnLoss bool, fn func(ctx context.Context, l *Lease) error) error {
	var (
		mu        sync.Mutex
		cancelFn  context.CancelCauseFunc
		lostEarly error // a loss told before fn's context was made
		onLoss    func(error)
	)
	if endOnLoss {
		onLoss = func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if cancelFn != nil {
				cancelFn(err)
			} else {
				lostEarly = err
			}
		}
	}
	k, err := l.keepAlive(context.WithoutCancel(ctx), onLoss, func(time.Duration) (policy, error) { return cfg.policy, nil })
	if err != nil { // only after Close; release rather than leak the lease
		return errors.Join(err, c.releaseBounded(ctx, l, cfg.releaseTimeout))
	}
	// fn's context ends with the lease's trust (k's context) and with the
	// caller's, whose end does not touch the lease. The caller's deadline is
	// fn's too, so that fn sees it (Deadline) and its end reads as one
	// (DeadlineExceeded); a cancel of the caller's context is passed on.
	fnCtx, cancel := context.WithCancelCause(k.Context())
	stopDeadline := context.CancelFunc(func() {})
	dl, dated := ctx.Deadline()
	if dated {
		fnCtx, stopDeadline = context.WithDeadlineCause(fnCtx, dl, callerEnd{ctx})
	}
	mu.Lock()
	cancelFn = cancel
	if lostEarly != nil {
		cancel(lostEarly)
	}
	mu.Unlock()
	stopCaller := context.AfterFunc(ctx, func() {
		// a deadline ends fnCtx by itself; an end reading as one before it does not
		if !dated || !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Now().Before(dl) {
			cancel(fmt.Errorf("%w: %w", errCallerDone, context.Cause(ctx)))
		}
	})
	end := func() error {
		stopCaller()
		stopDeadline()
		k.Stop()
		cancel(context.Canceled)
		if lost := k.lossErr(); lost != nil {
			return lost
		}
		if l.hasEnded() { // fn released the lease itself
			return nil
		}
		return c.releaseBounded(ctx, l, cfg.releaseTimeout)
	}
	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit: end the hold, let the panic go on
			_ = end()
		}
	}()
	fnErr := fn(fnCtx, l)
	returned = true
	if err := end(); err != nil {
		return errors.Join(fnErr, err)
	}
	return fnErr
}

// releaseBounded releases l detached from ctx, within timeout. It returns an
// error only for a lease found lost; a store failure is reported (by the
// release, OnReleaseFailure) and the TTL frees the key.
func (c *Client) releaseBounded(ctx context.Context, l *Lease, timeout time.Duration) error {
	if err := l.release(context.WithoutCancel(ctx), timeout); errors.Is(err, ErrNotOwned) {
		l.mu.Lock()
		own := l.released
		l.mu.Unlock()
		if own {
			return nil // fn's own Release, from another goroutine, went first
		}
		return fmt.Errorf("leasehold: %q was lost before fn returned: %w", l.key, err)
	}
	return nil
}
