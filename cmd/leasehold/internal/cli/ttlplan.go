package cli

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// DefaultRetry is the waiter's retry delay the takeover bound assumes when
// --retry is not given: leasehold.DefaultMaxBackoff (1 s), the longest a
// waiting Client.Acquire sleeps between two tries. Expiries are not
// notified, so after a crash the next owner is the first waiter to try
// after the lease ran out. When the store reports the holder's remaining
// TTL (every backend of this repository does) the waiter tries 1 ms after
// it, so 1 s is the worse case, for a waiter whose store did not say.
// Client.Lead candidates wait as Client.Acquire does.
const DefaultRetry = leasehold.DefaultMaxBackoff

// PlanInput is what a lock path's TTL is computed from.
type PlanInput struct {
	// ExecP99 is the critical section's 99th-percentile run time.
	ExecP99 time.Duration
	// Jitter covers what the p99 does not show: GC and VM pauses,
	// scheduling delays, a slow store round trip.
	Jitter time.Duration
	// Guard is the safety margin on top of both.
	Guard time.Duration
	// Retry is the longest a waiter may take, after the lease ran out, to
	// try again (see DefaultRetry).
	Retry time.Duration
	// SLO is the takeover SLO: the longest a crashed owner may keep the lock
	// from the next one. 0: no check.
	SLO time.Duration
}

// Plan is a lock path's TTL and what follows from it under the Client's
// defaults.
type Plan struct {
	PlanInput

	// TTL is ExecP99 + Jitter + Guard.
	TTL time.Duration
	// RenewInterval is TTL / leasehold.DefaultRenewDivisor (ttl/3), the
	// Hold's renewal period.
	RenewInterval time.Duration
	// DriftMargin is TTL / leasehold.DefaultDriftDivisor (ttl/10).
	DriftMargin time.Duration
	// LocalDeadline is TTL − DriftMargin: counted from the send time of the
	// last successful renewal, the fence policy cancels the critical
	// section at this point, before the server can give the lock away.
	LocalDeadline time.Duration
	// Takeover bounds the time from an owner's crash to the next owner's
	// acquire: the lease runs out at most TTL after the owner's last
	// successful renewal, and a waiter tries again within Retry.
	Takeover time.Duration
	// SLOMet reports Takeover ≤ SLO; true when there is no SLO.
	SLOMet bool
	// MaxExecP99 is the longest exec p99 that meets the SLO with the same
	// jitter, guard and retry: SLO − Retry − Jitter − Guard. Not positive:
	// no critical section can meet the SLO. 0 when there is no SLO.
	MaxExecP99 time.Duration
}

// PlanTTL computes the TTL of a lock path, TTL = exec p99 + jitter + guard,
// with its renewal interval, local deadline and takeover bound, and checks
// the takeover bound against the SLO. It returns an *leasehold.ArgumentError
// when an input is negative, the exec p99 is not positive, or the TTL is out
// of the range every store accepts (driver.MinTTL to driver.MaxTTL).
// An SLO that cannot be met is not an error: Plan.SLOMet is false.
func PlanTTL(in PlanInput) (Plan, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"exec p99", in.ExecP99}, {"jitter", in.Jitter}, {"guard", in.Guard}, {"retry", in.Retry}, {"slo", in.SLO}} {
		switch {
		case d.v < 0:
			return Plan{}, &leasehold.ArgumentError{Arg: d.name, Reason: fmt.Sprintf("%v is negative", d.v)}
		case d.v > driver.MaxTTL:
			return Plan{}, &leasehold.ArgumentError{Arg: d.name, Reason: fmt.Sprintf("%v is longer than %v", d.v, driver.MaxTTL)}
		}
	}
	if in.ExecP99 == 0 {
		return Plan{}, &leasehold.ArgumentError{Arg: "exec p99", Reason: "not given or zero"}
	}
	p := Plan{PlanInput: in, TTL: in.ExecP99 + in.Jitter + in.Guard}
	if err := driver.ValidateTTL(p.TTL); err != nil {
		return Plan{}, err
	}
	p.RenewInterval = p.TTL / leasehold.DefaultRenewDivisor
	p.DriftMargin = p.TTL / leasehold.DefaultDriftDivisor
	p.LocalDeadline = p.TTL - p.DriftMargin
	p.Takeover = p.TTL + in.Retry
	p.SLOMet = in.SLO == 0 || p.Takeover <= in.SLO
	if in.SLO > 0 {
		p.MaxExecP99 = in.SLO - in.Retry - in.Jitter - in.Guard
	}
	return p, nil
}

// Advice says, when the SLO is not met, what would meet it: a shorter
// critical section (or the work split into sections that short, each under
// its own lease), less jitter, guard or retry, or a looser SLO. It is empty
// when the SLO is met.
func (p Plan) Advice() string {
	if p.SLOMet {
		return ""
	}
	if p.MaxExecP99 <= 0 {
		return fmt.Sprintf("no critical section can meet it: jitter %v + guard %v + retry %v already take %v of the %v SLO; lower them, or relax the SLO to at least %v",
			p.Jitter, p.Guard, p.Retry, p.Jitter+p.Guard+p.Retry, p.SLO, p.Takeover)
	}
	return fmt.Sprintf("it needs exec p99 ≤ %v (now %v): shorten the critical section, or split the work into steps of at most %v each under its own lease; or relax the SLO to at least %v",
		p.MaxExecP99, p.ExecP99, p.MaxExecP99, p.Takeover)
}
