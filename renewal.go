package leasehold

import (
	"fmt"
	"time"
)

// Defaults of Hold and KeepAlive. Each is used when its option is not given.
const (
	// defaultFenceAfter is the consecutive renewal failures after which the
	// fence policy gives the lease up. Three tolerates a blip or two (a
	// dropped connection, a failover) without letting a broken store keep a
	// critical section running on a lease that is about to lapse.
	defaultFenceAfter = 3

	// DefaultRenewDivisor sets the renewal interval to ttl/3: a lease gets
	// two more tries after a failed renewal before its TTL runs out, and the
	// store sees one renewal per ttl/3 per lease.
	DefaultRenewDivisor = 3

	// defaultRenewTimeout bounds one renewal call. A renewal slower than 2 s
	// on a store that normally answers in milliseconds is as good as failed;
	// the call is also never allowed past the renewal interval or the local
	// deadline, whichever is sooner.
	defaultRenewTimeout = 2 * time.Second

	// defaultReleaseTimeout bounds the release after the critical section.
	// The release is detached from the caller's context (a cancelled caller
	// must still give the key back); if it takes longer than 2 s the store
	// is in trouble, and the lease's TTL frees the key anyway.
	defaultReleaseTimeout = 2 * time.Second

	// DefaultDriftDivisor sets the drift margin to ttl/10: the local deadline
	// falls 10% of the TTL before the server's expiry at the earliest. The
	// margin covers the difference in clock rates between client and server
	// (parts per million; NTP slews at most 500 ppm), Redis's millisecond
	// expiry resolution, and the time a critical section needs to notice
	// its cancelled context and stop writing.
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

// FenceAfter selects the fence policy (the default) and gives the lease up
// after n consecutive renewal failures, or when the local deadline (the start
// of the last successful renewal + ttl − drift margin) passes without a
// successful renewal, whichever comes first. Giving up cancels the critical
// section's context with a cause matching ErrAbandoned and skips the release.
// Default: defaultFenceAfter (3).
func FenceAfter(n int) RenewOption { return func(c *holdConfig) { c.maxFailures = n } }

// ContinueOnRenewFailure selects the continue policy: renewal failures are
// logged and reported, but the critical section's context is never
// cancelled. Choose it only where finishing the work matters more than
// exclusivity, and fence every write: a lease that expired while the work
// kept running is reported (Observer.OnLeaseExpired), not prevented.
func ContinueOnRenewFailure() RenewOption { return func(c *holdConfig) { c.maxFailures = 0 } }

// WithRenewInterval sets the time between renewals. Default: ttl/3.
func WithRenewInterval(d time.Duration) RenewOption { return func(c *holdConfig) { c.interval = d } }

// WithRenewTimeout bounds each renewal call. Default: defaultRenewTimeout
// (2 s), and never more than the renewal interval.
func WithRenewTimeout(d time.Duration) RenewOption { return func(c *holdConfig) { c.renewTimeout = d } }

// WithReleaseTimeout bounds the release after the critical section. Default:
// defaultReleaseTimeout (2 s).
func WithReleaseTimeout(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) { c.releaseTimeout = d })
}

// WithWaitBudget bounds how long Hold waits for a busy key; after d it gives
// up with an error matching ErrNotAcquired. Default for Hold: no bound (until
// ctx is done). A request handler answering a person or an API call typically
// waits about 2 s.
func WithWaitBudget(d time.Duration) HoldOption {
	return holdOption(func(c *holdConfig) { c.waitBudget = d })
}

// WithDriftMargin sets how long before the server-side expiry the local
// deadline falls. Default: ttl/10.
func WithDriftMargin(d time.Duration) RenewOption {
	return func(c *holdConfig) { c.margin, c.marginSet = d, true }
}

// newHoldConfig applies opts over the defaults for a lease of ttl and checks
// that the result can work: at least one renewal must be able to land before
// the local deadline.
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

// renewState is the renewal arithmetic, kept free of goroutines and clocks so
// that it can be tested with plain times.
type renewState struct {
	ttl, margin time.Duration
	maxFailures int       // 0: never give up on failures
	lastSent    time.Time // when the last successful renewal (or the acquire) was sent
	lastDone    time.Time // when its reply arrived
	failures    int       // consecutive failures since
}

// deadline is when the fence policy gives up if no renewal succeeded by
// then. The server's TTL restarted no earlier than lastSent, so the lease is
// certainly still ours until lastSent + ttl, give or take the clocks' drift.
func (s *renewState) deadline() time.Time { return s.lastSent.Add(s.ttl - s.margin) }

// expiredBy is when the lease has certainly expired on the server: its TTL
// restarted no later than lastDone, plus the margin for drift.
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

// callTimeout bounds a renewal sent at now: never past the local deadline
// under the fence policy, so a hanging store cannot hold the renewal past
// the point where the lease must be given up.
func (s *renewState) callTimeout(now time.Time, limit time.Duration) time.Duration {
	if s.maxFailures > 0 {
		limit = min(limit, s.deadline().Sub(now))
	}
	return limit
}
