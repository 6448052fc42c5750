package cli

import (
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/driver"
)

// Bounds of the numeric flags: out of range is a usage error naming the
// flag, never clamped or replaced by a default.
const (
	// MaxTimeout bounds --timeout: a store call or metrics fetch still
	// unanswered after 10 minutes is broken, and a larger bound is no bound.
	MaxTimeout = 10 * time.Minute

	// MaxWorkers bounds drill --workers: package drill's bound, which
	// says why.
	MaxWorkers = drill.MaxWorkers

	// MaxProcesses bounds drill --processes: package drill's bound.
	MaxProcesses = drill.MaxProcesses

	// MaxJobs bounds drill --jobs: package drill's bound.
	MaxJobs = drill.MaxJobs

	// MaxDrillTimeout bounds drill --drill-timeout: package drill's bound.
	MaxDrillTimeout = drill.MaxTimeout

	// MinTimeScale bounds drill --time-scale from below: package drill's
	// bound.
	MinTimeScale = drill.MinTimeScale
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
