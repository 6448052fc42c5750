package leasehold

import (
	"log/slog"
	"strings"
	"time"
)

// Observer receives the Client's lock events, for metrics. Implementations
// must be safe for concurrent use and quick: they are called inline, some
// from the renewal goroutine. Embed NopObserver to implement only some
// methods and stay compatible when methods are added.
type Observer interface {
	// OnAcquire follows every TryAcquire and Acquire call.
	OnAcquire(AcquireEvent)
	// OnRelease follows the end of an ownership: a release, or an
	// abandonment, with how long the lease was held.
	OnRelease(ReleaseEvent)
	// OnRenewFailure follows each renewal that failed without the store
	// saying the lease is gone (a timeout, a connection error).
	OnRenewFailure(RenewFailureEvent)
	// OnNotOwned follows each Release or Renew that found the key no longer
	// holds the lease's token: a timing symptom (pauses, network delay, a
	// critical section longer than its TTL).
	OnNotOwned(NotOwnedEvent)
	// OnAbandon follows a lease given up under the fence policy: its
	// critical section's context was cancelled and no release was sent.
	OnAbandon(AbandonEvent)
	// OnLeaseExpired follows a lease that certainly expired while its
	// critical section kept running (the continue policy).
	OnLeaseExpired(LeaseExpiredEvent)
	// OnReleaseFailure follows a release the store could not answer (the
	// lease then frees itself when its TTL runs out).
	OnReleaseFailure(ReleaseFailureEvent)
	// OnFenceRejected follows a write refused at the storage boundary
	// because its fence was stale (see package fence).
	OnFenceRejected(FenceRejectedEvent)
}

// Lock names every event carries.
type Lock struct {
	Key       string
	Namespace string // the key's class, from the Client's namespace function
	Fence     int64  // 0 when no lease was acquired
}

// logAttrs returns the lock's key, namespace and fence as slog attributes,
// followed by extra, for the Client's log lines.
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
	Result AcquireResult
	Wait   time.Duration // from the call to its result
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

// LeaseExpiredEvent describes a lease that expired while its critical
// section was still running.
type LeaseExpiredEvent struct {
	Lock
	Overrun time.Duration // how long past its certain expiry the lease was noticed
}

// ReleaseFailureEvent describes a release the store failed to answer.
type ReleaseFailureEvent struct {
	Lock
	Err error
}

// FenceRejectedEvent describes a write refused by fenced storage.
type FenceRejectedEvent struct {
	Store     string // "memory", "redis", "postgres", or a caller's own name
	Resource  string // what was written: a key, or "table/id"
	Presented int64  // the writer's fence
	Current   int64  // the newest fence the storage had accepted
}

// NopObserver ignores every event. It is the default, and a base to embed.
type NopObserver struct{}

func (NopObserver) OnAcquire(AcquireEvent)               {}
func (NopObserver) OnRelease(ReleaseEvent)               {}
func (NopObserver) OnRenewFailure(RenewFailureEvent)     {}
func (NopObserver) OnNotOwned(NotOwnedEvent)             {}
func (NopObserver) OnAbandon(AbandonEvent)               {}
func (NopObserver) OnLeaseExpired(LeaseExpiredEvent)     {}
func (NopObserver) OnFenceRejected(FenceRejectedEvent)   {}
func (NopObserver) OnReleaseFailure(ReleaseFailureEvent) {}

var _ Observer = NopObserver{}

// namespaceWords maps a key segment to the lock class it names.
var namespaceWords = map[string]string{
	"wf": "workflow", "workflow": "workflow", "run": "workflow",
	"scheduler": "scheduler", "job": "scheduler",
	"approval":   "approval",
	"reconciler": "reconciler", "loop": "reconciler", "replayer": "reconciler",
	"leader": "leader", "snapshot": "leader",
}

// DefaultNamespace derives a metrics namespace from a key: the class named by
// the first ':'-separated segment that is a known word, or "other".
//
//	cordum:wf:run:lock:R1   → workflow
//	cordum:scheduler:job:J  → scheduler
//	approval:A7             → approval
//	cordum:reconciler:tick  → reconciler
//	cordum:leader:snapshot  → leader
//	tenant-42:anything      → other
//
// The result is one of six values whatever the key, so label cardinality
// stays bounded; use WithNamespace for another rule.
func DefaultNamespace(key string) string {
	for seg := range strings.SplitSeq(key, ":") {
		if ns, ok := namespaceWords[strings.ToLower(seg)]; ok {
			return ns
		}
	}
	return "other"
}
