package leasehold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// Observer receives a Client's lock events, each with the caller's context,
// for metrics, traces and logs. Every field is optional. The funcs run
// inline, some on the renewal goroutine: they must be quick and safe for
// concurrent use. One that blocks there holds up the renewal of every lease
// of the Client and the cancelling of their contexts at their deadlines:
// hand slow work (an exporter's I/O) to a goroutine of its own. A func that
// panics loses that event (OnError hears of it).
type Observer struct {
	// OnAcquireStart precedes every Acquire call (Hold's too), which may
	// wait; its OnAcquire, with Blocking set, follows. Fence is 0.
	OnAcquireStart func(context.Context, Event)
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
	// OnError follows what goes wrong outside the store calls: a RunLoop
	// tick's error, or a panic in a callback the Client survived.
	OnError func(context.Context, ErrorEvent)
}

// Event is what every event carries: the lock's key, its namespace and the
// lease's fence.
type Event struct {
	Key       string
	Namespace string // the key's class, from the Client's namespace function
	Fence     int64  // 0 when no lease was acquired
}

// logAttrs returns the key, namespace and fence, then extra, for logging.
func (ev Event) logAttrs(extra ...any) []any {
	return append([]any{slog.String("key", ev.Key), slog.String("namespace", ev.Namespace), slog.Int64("fence", ev.Fence)}, extra...)
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
	Event
	Result   AcquireResult
	Wait     time.Duration // from the call to its result
	TTL      time.Duration // the TTL asked for
	Blocking bool          // an Acquire, which OnAcquireStart announced
	Err      error         // what the call returned, for every Result but Acquired
}

// RenewEvent describes a renewal the store accepted.
type RenewEvent struct {
	Event
	TTL time.Duration // the lease's new remaining time, from the renewal's send
}

// StoreCallEvent describes one call to the store.
type StoreCallEvent struct {
	// Op is "acquire", "release", "renew", "renew_batch", "handoff" (a
	// release that passes the key to this Client's next waiter), "leave"
	// (a waiter leaving a store-kept queue), "watch" (setting up a
	// wake-up), or "inspect".
	Op    string
	Store string // the store's package: "redisstore", "memstore", …
	Items int    // leases in the call: 1, or a batch's size
	Took  time.Duration
	Err   error // the store's answer: nil, ErrNotAcquired, ErrNotOwned or a failure
}

// Failed reports whether the call failed: an error that is not one of the
// store's answers (ErrNotAcquired, ErrNotOwned) nor its caller cancelling
// it. A call cut short by its caller's deadline is a failure: a store that
// stops answering shows as nothing else when callers have deadlines (their
// acquires count as timeouts, AcquireResult), which is what
// leasehold_store_call_failures_total and its alert are for.
func (e StoreCallEvent) Failed() bool {
	err := e.Err
	return err != nil && !errors.Is(err, ErrNotAcquired) && !errors.Is(err, ErrNotOwned) &&
		!(errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded))
}

// ReleaseEvent describes the end of an ownership.
type ReleaseEvent struct {
	Event
	Held time.Duration // from acquire to release or abandonment
}

// RenewFailureEvent describes one failed renewal.
type RenewFailureEvent struct {
	Event
	Err         error
	Consecutive int       // failures in a row, this one included
	Deadline    time.Time // when the fence policy gives the lease up; zero under the continue policy
}

// NotOwnedEvent describes a Release or Renew refused by the store.
type NotOwnedEvent struct {
	Event
	Op string // "release" or "renew"
}

// AbandonEvent describes a lease given up under the fence policy.
type AbandonEvent struct {
	Event
	Reason error // matches ErrAbandoned
}

// LeaseExpiredEvent describes a lease that expired while its critical section ran.
type LeaseExpiredEvent struct {
	Event
	Overrun time.Duration // how long past its certain expiry the lease was noticed
	Why     string
}

// ReleaseFailureEvent describes a release the store failed to answer; the
// key frees itself when its TTL runs out.
type ReleaseFailureEvent struct {
	Event
	Err error
}

// ErrorEvent describes a failure outside the store calls.
type ErrorEvent struct {
	Event
	Op  string // "tick" (a RunLoop tick's error), "observer" or "namespace" (a panic recovered)
	Err error
}

// observe hands ev to each Observer's handler that pick chooses. A panic
// loses only that event, and is reported to every OnError (unless ev was
// itself an ErrorEvent).
func observe[E any](c *Client, ctx context.Context, ev E, pick func(*Observer) func(context.Context, E)) {
	if ctx == nil {
		ctx = context.Background()
	}
	for i := range c.observers {
		f := pick(&c.observers[i])
		if f == nil {
			continue
		}
		if v := callSafely(func() { f(ctx, ev) }); v != nil {
			if _, isErr := any(ev).(ErrorEvent); !isErr {
				c.reportError(ctx, "", 0, "observer",
					fmt.Errorf("leasehold: an Observer panicked on %T, which is dropped: %v\n%s", ev, v, debug.Stack()))
			}
		}
	}
}

// callSafely runs f and returns what it panicked with, or nil.
func callSafely(f func()) (panicked any) {
	defer func() { panicked = recover() }()
	f()
	return nil
}

// reportError reports an ErrorEvent about key (may be "").
func (c *Client) reportError(ctx context.Context, key string, fence int64, op string, err error) {
	ev := ErrorEvent{Op: op, Err: err}
	if key != "" {
		ev.Event = c.event(key, fence)
	}
	observe(c, ctx, ev, func(o *Observer) func(context.Context, ErrorEvent) { return o.OnError })
}

// logObserver is the Observer WithLogger adds: it logs what needs an
// operator's attention, at the levels below, and nothing on the happy path.
func logObserver(log *slog.Logger) Observer {
	return Observer{
		OnAcquire: func(ctx context.Context, ev AcquireEvent) {
			if ev.Result == StoreFailed {
				log.WarnContext(ctx, "leasehold: acquire failed: the store failed or refused the input", ev.logAttrs(slog.Any("error", ev.Err))...)
			}
		},
		OnRenewFailure: func(ctx context.Context, ev RenewFailureEvent) {
			log.WarnContext(ctx, "leasehold: renewal failed", ev.logAttrs(
				slog.Int("consecutive", ev.Consecutive), slog.Time("deadline", ev.Deadline), slog.Any("error", ev.Err))...)
		},
		OnNotOwned: func(ctx context.Context, ev NotOwnedEvent) {
			log.WarnContext(ctx, "leasehold: "+ev.Op+" refused: the key no longer holds this lease", ev.logAttrs()...)
		},
		OnAbandon: func(ctx context.Context, ev AbandonEvent) {
			log.ErrorContext(ctx, "leasehold: lock abandoned; its critical section was cancelled and the release is skipped",
				ev.logAttrs(slog.Any("reason", ev.Reason))...)
		},
		OnLeaseExpired: func(ctx context.Context, ev LeaseExpiredEvent) {
			log.ErrorContext(ctx, "leasehold: lease expired while its critical section kept running; its writes are no longer exclusive",
				ev.logAttrs(slog.String("why", ev.Why))...)
		},
		OnReleaseFailure: func(ctx context.Context, ev ReleaseFailureEvent) {
			log.WarnContext(ctx, "leasehold: release failed; the key frees itself when its TTL runs out",
				ev.logAttrs(slog.Any("error", ev.Err))...)
		},
		OnStoreCall: func(ctx context.Context, ev StoreCallEvent) {
			if ev.Err == nil {
				return
			}
			switch ev.Op {
			case "watch":
				log.WarnContext(ctx, "leasehold: wake-ups unavailable, waiting on backoff only",
					slog.String("store", ev.Store), slog.Any("error", ev.Err))
			case "leave":
				log.WarnContext(ctx, "leasehold: could not leave the store's queue; the entry expires on its own",
					slog.String("store", ev.Store), slog.Any("error", ev.Err))
			}
		},
		OnError: func(ctx context.Context, ev ErrorEvent) {
			log.ErrorContext(ctx, "leasehold: "+ev.Op+" failed", ev.logAttrs(slog.Any("error", ev.Err))...)
		},
	}
}

// safeHandler drops a log record whose handler panics.
type safeHandler struct{ h slog.Handler }

func (s safeHandler) Enabled(ctx context.Context, level slog.Level) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return s.h.Enabled(ctx, level)
}

func (s safeHandler) Handle(ctx context.Context, r slog.Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("leasehold: log handler panicked: %v", v)
		}
	}()
	return s.h.Handle(ctx, r)
}

func (s safeHandler) WithAttrs(attrs []slog.Attr) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = s
		}
	}()
	return safeHandler{s.h.WithAttrs(attrs)}
}

func (s safeHandler) WithGroup(name string) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = s
		}
	}()
	return safeHandler{s.h.WithGroup(name)}
}
