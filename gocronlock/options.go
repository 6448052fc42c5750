package gocronlock

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Defaults; docs/gocron.md gives the arithmetic.
const (
	// DefaultMinHold covers schedulers whose clocks (and timers) differ by up
	// to 1 s: a run's lock is kept 2 s, and an acquire answered later than
	// half of it (1 s) is refused.
	DefaultMinHold = 2 * time.Second

	// DefaultLockTTL is the lease of one run: a scheduler that dies mid-run
	// holds its job up for at most 30 s, under the commonest cron interval
	// (a minute); it is renewed every 10 s while the job runs.
	DefaultLockTTL = 30 * time.Second

	// DefaultLeaderTTL is the leader's lease (leasehold's Lead default): a
	// dead leader is replaced within about 10 s.
	DefaultLeaderTTL = 10 * time.Second

	// DefaultKeyPrefix puts the Locker's keys in the namespace "gocron",
	// apart from the application's own keys.
	DefaultKeyPrefix = "gocron:"

	// unlockTimeout bounds the store call of Unlock, detached from the job's
	// context; past 2 s the store is in trouble and the lease's TTL frees it.
	unlockTimeout = 2 * time.Second
)

// LockerOption configures NewLocker.
type LockerOption interface{ applyLocker(*lockerConfig) }

// ElectorOption configures NewElector.
type ElectorOption interface{ applyElector(*electorConfig) }

// Option configures both NewLocker and NewElector.
type Option interface {
	LockerOption
	ElectorOption
}

type lockerConfig struct {
	ttl, minHold time.Duration
	prefix       string
}

type electorConfig struct {
	ttl time.Duration
}

type ttlOption time.Duration

func (o ttlOption) applyLocker(c *lockerConfig)   { c.ttl = time.Duration(o) }
func (o ttlOption) applyElector(c *electorConfig) { c.ttl = time.Duration(o) }

// WithTTL sets the lease's TTL: of each run for a Locker (default
// DefaultLockTTL, at least the minimum hold) and of each term for an
// Elector (default DefaultLeaderTTL).
func WithTTL(d time.Duration) Option { return ttlOption(d) }

type minHoldOption time.Duration

func (o minHoldOption) applyLocker(c *lockerConfig) { c.minHold = time.Duration(o) }

// WithMinHold sets how long a run keeps its job's lock at least, from its
// Lock call, however soon the job returns. Default: DefaultMinHold. It must
// be shorter than the job's interval, or the next slot finds the key held.
func WithMinHold(d time.Duration) LockerOption { return minHoldOption(d) }

type prefixOption string

func (o prefixOption) applyLocker(c *lockerConfig) { c.prefix = string(o) }

// WithKeyPrefix sets what a Locker puts before a job's name to make its
// lock key. Default: DefaultKeyPrefix.
func WithKeyPrefix(p string) LockerOption { return prefixOption(p) }

func newLockerConfig(opts []LockerOption) (lockerConfig, error) {
	c := lockerConfig{ttl: DefaultLockTTL, minHold: DefaultMinHold, prefix: DefaultKeyPrefix}
	for _, o := range opts {
		if o != nil {
			o.applyLocker(&c)
		}
	}
	if err := driver.ValidateTTL(c.ttl); err != nil {
		return c, renamed(err, "WithTTL")
	}
	switch {
	case c.minHold < 2*driver.MinTTL:
		return c, &driver.ArgumentError{Arg: "WithMinHold", Reason: fmt.Sprintf("%v is shorter than %v", c.minHold, 2*driver.MinTTL)}
	case c.minHold > c.ttl:
		return c, &driver.ArgumentError{Arg: "WithMinHold", Reason: fmt.Sprintf("%v is longer than the lease's TTL %v (WithTTL)", c.minHold, c.ttl)}
	}
	if c.prefix != "" {
		// The prefix must make a valid key with the shortest job name.
		if err := driver.ValidateKey(c.prefix + "j"); err != nil {
			return c, renamed(err, "WithKeyPrefix")
		}
	}
	return c, nil
}

func newElectorConfig(opts []ElectorOption) (electorConfig, error) {
	c := electorConfig{ttl: DefaultLeaderTTL}
	for _, o := range opts {
		if o != nil {
			o.applyElector(&c)
		}
	}
	if err := driver.ValidateTTL(c.ttl); err != nil {
		return c, renamed(err, "WithTTL")
	}
	return c, nil
}

// renamed is err, an *ArgumentError from a check of a derived value, naming
// arg instead.
func renamed(err error, arg string) error {
	if ae, ok := err.(*driver.ArgumentError); ok {
		return &driver.ArgumentError{Arg: arg, Reason: ae.Reason}
	}
	return err
}
