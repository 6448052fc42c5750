package leasehold

import (
	"fmt"
	"time"
)

// Defaults of Hold and KeepAlive; docs/design.md §4 gives the reasoning.
const (
	// defaultFenceAfter tolerates a blip or two (a dropped connection, a
	// failover) before the fence policy gives the lease up.
	defaultFenceAfter = 3

	// DefaultRenewDivisor renews every ttl/3: two more tries after a failure
	// before the TTL runs out.
	DefaultRenewDivisor = 3

	// defaultRenewTimeout bounds one renewal call: slower than 2 s is as good
	// as failed on a store that answers in milliseconds.
	defaultRenewTimeout = 2 * time.Second

	// defaultReleaseTimeout bounds the detached release after the critical
	// section; past 2 s the store is in trouble and the TTL frees the key.
	defaultReleaseTimeout = 2 * time.Second

	// DefaultDriftDivisor puts the local deadline ttl/10 before the server's
	// expiry: room for clock-rate drift, expiry resolution, and fn to stop.
	DefaultDriftDivisor = 10
)

// HoldOption configures Hold: any RenewOption, WithWaitBudget or
// WithReleaseTimeout.
type HoldOption interface{ applyHold(*holdConfig) }

// RenewOption configures renewal: of Lease.KeepAlive, Hold and Lead.
type RenewOption func(*holdConfig)

func (o RenewOption) applyHold(c *holdConfig) { o(c) }

// holdOption is an option of Hold alone.
type holdOption func(*holdConfig)

func (o holdOption) applyHold(c *holdConfig) { o(c) }

type holdConfig struct {
	maxFailures    int // 0: the continue policy, never give up
	interval       time.Duration
	renewTimeout   time.Duration
	releaseTimeout time.Duration
	margin         time.Duration
	marginSet      bool
	waitBudget     time.Duration // 0: wait until ctx is done
}

// FenceAfter selects the fence policy (the default): the lease is given up
// after n consecutive renewal failures (default 3) or at its local deadline,
// cancelling the critical section with cause ErrAbandoned, without a release.
func FenceAfter(n int) RenewOption { return func(c *holdConfig) { c.maxFailures = n } }

// ContinueOnRenewFailure selects the continue policy: failures are reported,
// the critical section is never cancelled, and a lease that expired under it
// is reported (Observer.OnLeaseExpired). Fence every write if you choose it.
func ContinueOnRenewFailure() RenewOption { return func(c *holdConfig) { c.maxFailures = 0 } }

// WithRenewInterval sets the time between renewals. Default: ttl/3.
func WithRenewInterval(d time.Duration) RenewOption { return func(c *holdConfig) { c.interval = d } }

// WithRenewTimeout bounds each renewal call. Default: 2 s, at most the interval.
func WithRenewTimeout(d time.Duration) RenewOption { return func(c *holdConfig) { c.renewTimeout = d } }

// WithReleaseTimeout bounds Hold's release after fn. Default: 2 s.
func WithReleaseTimeout(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) { c.releaseTimeout = d })
}

// WithWaitBudget bounds how long Hold waits for a busy key, then returns an
// error matching ErrNotAcquired. Default: until ctx is done.
func WithWaitBudget(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) { c.waitBudget = d })
}

// WithDriftMargin sets how long before the server-side expiry the local
// deadline falls. Default: ttl/10.
func WithDriftMargin(d time.Duration) RenewOption {
	return func(c *holdConfig) { c.margin, c.marginSet = d, true }
}

// newHoldConfig applies opts over the defaults for a lease of ttl, and checks
// that a renewal can land before the local deadline.
func newHoldConfig[O HoldOption](ttl time.Duration, opts []O) (holdConfig, error) {
	c := holdConfig{
		maxFailures:    defaultFenceAfter,
		interval:       ttl / DefaultRenewDivisor,
		renewTimeout:   defaultRenewTimeout,
		releaseTimeout: defaultReleaseTimeout,
	}
	for _, o := range opts {
		o.applyHold(&c)
	}
	if !c.marginSet {
		c.margin = ttl / DefaultDriftDivisor
	}
	switch {
	case c.maxFailures < 0:
		return c, &ArgumentError{Arg: "FenceAfter", Reason: fmt.Sprintf("%d is negative", c.maxFailures)}
	case c.interval <= 0:
		return c, &ArgumentError{Arg: "renew interval", Reason: fmt.Sprintf("%v is not positive", c.interval)}
	case c.margin < 0:
		return c, &ArgumentError{Arg: "drift margin", Reason: fmt.Sprintf("%v is negative", c.margin)}
	case c.interval+c.margin >= ttl:
		return c, &ArgumentError{Arg: "renew interval", Reason: fmt.Sprintf(
			"%v plus the drift margin %v leaves no time to renew a %v lease before its deadline", c.interval, c.margin, ttl)}
	case c.renewTimeout <= 0:
		return c, &ArgumentError{Arg: "renew timeout", Reason: fmt.Sprintf("%v is not positive", c.renewTimeout)}
	case c.waitBudget < 0:
		return c, &ArgumentError{Arg: "wait budget", Reason: fmt.Sprintf("%v is negative", c.waitBudget)}
	case c.releaseTimeout <= 0:
		return c, &ArgumentError{Arg: "release timeout", Reason: fmt.Sprintf("%v is not positive", c.releaseTimeout)}
	}
	c.renewTimeout = min(c.renewTimeout, c.interval)
	return c, nil
}

// renewState is the renewal arithmetic, free of goroutines and clocks.
type renewState struct {
	ttl, margin time.Duration
	maxFailures int       // 0: never give up on failures
	lastSent    time.Time // when the last successful renewal (or the acquire) was sent
	lastDone    time.Time // when its reply arrived
	failures    int       // consecutive failures since
}

// deadline is when the fence policy gives up: the server's TTL restarted no
// earlier than lastSent.
func (s *renewState) deadline() time.Time { return s.lastSent.Add(s.ttl - s.margin) }

// expiredBy is when the lease has certainly expired on the server.
func (s *renewState) expiredBy() time.Time { return s.lastDone.Add(s.ttl + s.margin) }

// succeeded records a renewal sent at sent and answered at done.
func (s *renewState) succeeded(sent, done time.Time) {
	s.lastSent, s.lastDone, s.failures = sent, done, 0
}

// failed records a failed renewal and says whether the failure budget is spent.
func (s *renewState) failed() (giveUp bool) {
	s.failures++
	return s.maxFailures > 0 && s.failures >= s.maxFailures
}

// callTimeout bounds a renewal sent at now, never past the fence deadline.
func (s *renewState) callTimeout(now time.Time, limit time.Duration) time.Duration {
	if s.maxFailures > 0 {
		limit = min(limit, s.deadline().Sub(now))
	}
	return limit
}
