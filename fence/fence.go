// Package fence rejects stale writers at the storage boundary.
//
// A lock cannot stop a holder that was paused past its lease from writing
// after it wakes up; only the storage can. Every acquire issues a fence
// token that is larger than every earlier one for the same key
// (leasehold.Lease.Fence). A correctness-critical write carries that fence,
// and fenced storage applies it only if the fence is newer than the last one
// it accepted for the same resource, raising its mark in the same atomic
// step:
//
//	UPDATE runs SET payload = $2, fence_token = $3
//	 WHERE run_id = $1 AND $3 > fence_token   -- 0 rows: a stale writer
//
// A rejected write returns a *StaleError, which matches ErrStale, and
// nothing is written. This package has the errors, the acceptance rule, the
// Register interface for fenced key-value storage, and an in-memory
// Register; pgfence (PostgreSQL) and redisfence (Redis) apply the same rule
// in those stores.
//
// # Strict and same-holder writes
//
// By default a fence must be strictly newer (Strict). That allows one write
// per resource per ownership, and a retry of a write whose reply was lost is
// rejected as stale. SameHolder also accepts a fence equal to the current
// one: the same ownership writing again. It is as safe, because a fence is
// issued to exactly one ownership, and it is what a holder needs to move a
// job through several states under one lease.
//
// # What it does not guarantee
//
// Fencing orders writers by the lock's fences; it says nothing about a
// writer that does not present one, or that presents a fence from another
// key's lock. A fence is only as monotonic as its lock store: see
// store/redisstore for what holds after Redis loses its data.
package fence

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/driver"
)

// ErrStale is matched by every *StaleError.
var ErrStale = errors.New("fence: stale")

// StaleError reports a write refused because its fence was not newer than
// the newest one the storage had accepted for the resource.
type StaleError struct {
	Resource  string // the key, or "table/id"
	Presented int64  // the writer's fence
	Current   int64  // the storage's newest accepted fence
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale: %s written with fence %d, storage has accepted %d", e.Resource, e.Presented, e.Current)
}

// Is makes every StaleError match ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Mode says which fences a fenced store accepts.
type Mode int

const (
	// Strict accepts only a fence strictly newer than the current one.
	Strict Mode = iota
	// SameHolder also accepts a fence equal to the current one: the same
	// ownership writing again, or retrying a write whose reply was lost.
	SameHolder
)

// Accepts reports whether a write presenting fence may be applied over a
// resource whose newest accepted fence is current. A Mode other than Strict
// and SameHolder accepts as Strict does.
func (m Mode) Accepts(presented, current int64) bool {
	if m == SameHolder {
		return presented >= current
	}
	return presented > current
}

func (m Mode) String() string {
	switch m {
	case Strict:
		return "strict"
	case SameHolder:
		return "same-holder"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Validate checks a presented fence: fences issued by leasehold are positive,
// so zero or less is a caller's mistake (an unset field), not a stale writer.
func Validate(presented int64) error {
	if presented <= 0 {
		return &driver.ArgumentError{Arg: "fence", Reason: fmt.Sprintf("%d is not positive", presented)}
	}
	return nil
}

// Rejection describes a write refused as stale, for the hook set with
// OnReject.
type Rejection struct {
	Store     string // "memory", "redis", "postgres", or a caller's own name
	Resource  string // what was written: a key, or "table/id"
	Presented int64  // the writer's fence
	Current   int64  // the newest fence the storage had accepted
}

// Config is what every fenced store in this project is configured with.
type Config struct {
	Mode     Mode                             // default Strict
	OnReject func(context.Context, Rejection) // default nil: none
}

// Option configures a fenced store.
type Option func(*Config)

// WithMode sets which fences are accepted. Default: Strict. A Mode other
// than Strict and SameHolder is refused by the stores whose constructors
// return an error (pgfence, redisfence); MemRegister treats it as Strict.
func WithMode(m Mode) Option { return func(c *Config) { c.Mode = m } }

// OnReject sets a func called, with the write's context, for every write
// refused as stale (for metrics; see package prom). It must be quick and
// safe for concurrent use. Default: none.
func OnReject(f func(context.Context, Rejection)) Option {
	return func(c *Config) { c.OnReject = f }
}

// NewConfig applies opts over the defaults, skipping nil ones. Fenced stores
// call it.
func NewConfig(opts ...Option) Config {
	c := Config{Mode: Strict}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// Check refuses a Mode that is neither Strict nor SameHolder, naming opts:
// a store whose constructor can fail calls it, so that a mistaken mode is
// not silently Strict.
func (c Config) Check() error {
	if c.Mode != Strict && c.Mode != SameHolder {
		return &driver.ArgumentError{Arg: "opts", Reason: fmt.Sprintf("fence.WithMode(%v) is neither Strict nor SameHolder", c.Mode)}
	}
	return nil
}

// Reject reports a refused write to the OnReject hook and returns its
// *StaleError. store names the storage ("memory", "redis", "postgres").
// Call it holding no lock of the store's: the hook may read the store.
func (c Config) Reject(ctx context.Context, store, resource string, presented, current int64) error {
	if c.OnReject != nil {
		c.OnReject(ctx, Rejection{Store: store, Resource: resource, Presented: presented, Current: current})
	}
	return &StaleError{Resource: resource, Presented: presented, Current: current}
}
