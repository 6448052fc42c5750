package cli

import (
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// Bounds of the numeric flags: out of range is a usage error naming the
// flag, never clamped or replaced by a default.
const (
	// MaxTimeout bounds --timeout: a store call or metrics fetch still
	// unanswered after 10 minutes is broken, and a larger bound is no bound.
	MaxTimeout = 10 * time.Minute

	// MaxWorkers bounds drill --workers: each is a goroutine with its own
	// lock traffic; the default is 8, and 1000 is far past what a drill needs.
	MaxWorkers = 1000

	// MaxProcesses bounds drill --processes: each is an OS process with its
	// own Go runtime and store and PostgreSQL connections.
	MaxProcesses = 16

	// MaxJobs bounds drill --jobs: 100 take about 12 s at the default time
	// scale, so 10,000 are about 20 minutes of history kept in memory.
	MaxJobs = 10_000

	// MaxDrillTimeout bounds drill --drill-timeout: a drill is a game day.
	MaxDrillTimeout = 24 * time.Hour

	// MinTimeScale bounds drill --time-scale from below: it makes the 60 s
	// TTL 6 ms, not much above a store's round trip.
	MinTimeScale = 1.0 / 10_000
)

// checkInt is a usage error naming flag when v is outside [lo, hi].
func checkInt(flag string, v, lo, hi int) error {
	if v < lo || v > hi {
		return usagef("%s must be between %d and %d, not %d", flag, lo, hi, v)
	}
	return nil
}

// checkDuration is a usage error naming flag when d is outside [lo, hi].
func checkDuration(flag string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return usagef("%s must be between %v and %v, not %v", flag, lo, hi, d)
	}
	return nil
}

// firstError returns the first non-nil of errs.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkTTLSum is a usage error when the TTL, exec p99 + jitter + guard, is
// out of leasehold's range.
func checkTTLSum(execP99, jitter, guard time.Duration) error {
	var ae *leasehold.ArgumentError
	if err := driver.ValidateTTL(execP99 + jitter + guard); errors.As(err, &ae) {
		return usagef("invalid ttl (--exec-p99 + --jitter + --guard): %s", ae.Reason)
	} else if err != nil {
		return usageError{err}
	}
	return nil
}
