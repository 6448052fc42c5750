package leasehold

import (
	"context"
	"log/slog"
	"time"
)

// Observer receives a Client's lock events, each with the caller's context,
// for metrics and traces. Every field is optional. The funcs run inline, some
// on the renewal goroutine: they must be quick and safe for concurrent use.
type Observer struct {
	// OnAcquireStart precedes every Acquire call (Hold's too), which may
	// wait; its OnAcquire, with Blocking set, follows. Fence is 0.
	OnAcquireStart func(context.Context, Lock)
	// OnAcquire follows every TryAcquire and Acquire call.
	OnAcquire func(context.Context, AcquireEvent)
	// OnRenew follows every renewal the store accepted.
	OnRenew func(context.Context, RenewEvent)
	// OnRelease follows the end of an ownership: a release or an abandonment.
	OnRelease func(context.Context, ReleaseEvent)
	// OnRenewFailure follows a renewal that failed without the store saying
	// the lease is gone.
	OnRenewFailure func(context.Context, RenewFailureEvent)
	// OnNotOwned follows a Release or Renew refused because the key no
	// longer holds the lease's token.
	OnNotOwned func(context.Context, NotOwnedEvent)
	// OnAbandon follows a lease given up under the fence policy.
	OnAbandon func(context.Context, AbandonEvent)
	// OnLeaseExpired follows a lease that expired under the continue policy.
	OnLeaseExpired func(context.Context, LeaseExpiredEvent)
	// OnReleaseFailure follows a release the store could not answer.
	OnReleaseFailure func(context.Context, ReleaseFailureEvent)
	// OnStoreCall follows every call the Client makes to its store.
	OnStoreCall func(context.Context, StoreCallEvent)
}

// Lock names every event carries.
type Lock struct {
	Key       string
	Namespace string // the key's class, from the Client's namespace function
	Fence     int64  // 0 when no lease was acquired
}

// logAttrs returns the lock's key, namespace and fence, then extra, for logging.
func (lk Lock) logAttrs(extra ...any) []any {
	return append([]any{slog.String("key", lk.Key), slog.String("namespace", lk.Namespace), slog.Int64("fence", lk.Fence)}, extra...)
}

// AcquireResult is the outcome of an acquire call.
type AcquireResult string

// Acquire outcomes.
const (
	Acquired    AcquireResult = "acquired"
	Busy        AcquireResult = "busy"    // TryAcquire found the key held
	TimedOut    AcquireResult = "timeout" // Acquire's context ended while waiting
	StoreFailed AcquireResult = "error"   // the store failed or the input was bad
)

// AcquireEvent describes one TryAcquire or Acquire call.
type AcquireEvent struct {
	Lock
	Result   AcquireResult
	Wait     time.Duration // from the call to its result
	TTL      time.Duration // the TTL asked for
	Blocking bool          // an Acquire, which OnAcquireStart announced
}

// RenewEvent describes a renewal the store accepted.
type RenewEvent struct {
	Lock
	TTL time.Duration // the lease's new remaining time, from the renewal's send
}

// StoreCallEvent describes one call to the store.
type StoreCallEvent struct {
	Op    string // "acquire", "release", "renew", "renew_batch" or "leave" (a waiter leaving a store-kept queue)
	Store string // the store's package: "redisstore", "memstore", …
	Items int    // leases in the call: 1, or a batch's size
	Took  time.Duration
	Err   error // the store's answer: nil, ErrNotAcquired, ErrNotOwned or a failure
}

// ReleaseEvent describes the end of an ownership.
type ReleaseEvent struct {
	Lock
	Held time.Duration // from acquire to release or abandonment
}

// RenewFailureEvent describes one failed renewal.
type RenewFailureEvent struct {
	Lock
	Err         error
	Consecutive int // failures in a row, this one included
}

// NotOwnedEvent describes a Release or Renew refused by the store.
type NotOwnedEvent struct {
	Lock
	Op string // "release" or "renew"
}

// AbandonEvent describes a lease given up under the fence policy.
type AbandonEvent struct {
	Lock
	Reason error // matches ErrAbandoned
}

// LeaseExpiredEvent describes a lease that expired while its critical section ran.
type LeaseExpiredEvent struct {
	Lock
	Overrun time.Duration // how long past its certain expiry the lease was noticed
}

// ReleaseFailureEvent describes a release the store failed to answer.
type ReleaseFailureEvent struct {
	Lock
	Err error
}
