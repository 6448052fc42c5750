package leasehold_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// recoverValue runs f and returns what it panicked with (nil: it returned).
func recoverValue(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// mustBeFree fails the test unless key is free on mem.
func mustBeFree(t *testing.T, mem *memstore.Store, key string) {
	t.Helper()
	if info, _ := mem.Inspect(context.Background(), key); info.Held {
		t.Fatalf("%s is still held: %+v", key, info)
	}
}

// Hold's fn panics (or calls runtime.Goexit, as t.FailNow does): the
// renewal stops, fn's context is cancelled, the lease is released, and the
// panic reaches Hold's caller unchanged. synctest.Test fails if any
// goroutine is left behind.
func TestHoldFnPanicReleasesAndRepanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		rec := &recorder{}
		c := leasehold.New(mem, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
		var fnCtx context.Context
		v := recoverValue(func() {
			_ = c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
				fnCtx = ctx
				time.Sleep(ttl) // renewals run
				panic("boom")
			})
		})
		if v != "boom" {
			t.Fatalf("recovered %v, want fn's panic", v)
		}
		mustBeFree(t, mem, key)
		if fnCtx.Err() == nil {
			t.Error("fn's context is still live after its panic")
		}
		if releases, _ := rec.counts(); releases != 1 {
			t.Errorf("%d release events, want 1", releases)
		}

		// runtime.Goexit from fn, in a goroutine of its own.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.Hold(t.Context(), key, ttl, func(context.Context, *leasehold.Lease) error {
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		mustBeFree(t, mem, key)

		// Hold with a wait budget, and with waiters queued behind: the line
		// is left clean.
		if v := recoverValue(func() {
			_ = c.Hold(t.Context(), key, ttl, func(context.Context, *leasehold.Lease) error { panic("envelope") }, leasehold.WithWaitBudget(2*time.Second))
		}); v != "envelope" {
			t.Fatalf("Hold with a wait budget: recovered %v", v)
		}
		mustBeFree(t, mem, key)
		waited := make(chan error, 1)
		if v := recoverValue(func() {
			_ = c.Hold(t.Context(), key, ttl, func(context.Context, *leasehold.Lease) error {
				go func() {
					waited <- c.Hold(t.Context(), key, ttl, func(context.Context, *leasehold.Lease) error { return nil })
				}()
				synctest.Wait() // the second Hold waits in the line
				panic("with a waiter")
			})
		}); v != "with a waiter" {
			t.Fatalf("Hold with a waiter: recovered %v", v)
		}
		if err := <-waited; err != nil {
			t.Fatalf("the waiter behind a panicking Hold: %v", err)
		}
		mustBeFree(t, mem, key)
		if n := leasehold.Lines(c); n != 0 {
			t.Errorf("the Client still tracks %d keys", n)
		}
	})
}

// panickingObserver panics in every method.
type panickingObserver struct{}

func (panickingObserver) OnAcquire(leasehold.AcquireEvent)               { panic("OnAcquire") }
func (panickingObserver) OnRelease(leasehold.ReleaseEvent)               { panic("OnRelease") }
func (panickingObserver) OnRenewFailure(leasehold.RenewFailureEvent)     { panic("OnRenewFailure") }
func (panickingObserver) OnNotOwned(leasehold.NotOwnedEvent)             { panic("OnNotOwned") }
func (panickingObserver) OnAbandon(leasehold.AbandonEvent)               { panic("OnAbandon") }
func (panickingObserver) OnLeaseExpired(leasehold.LeaseExpiredEvent)     { panic("OnLeaseExpired") }
func (panickingObserver) OnReleaseFailure(leasehold.ReleaseFailureEvent) { panic("OnReleaseFailure") }
func (panickingObserver) OnAcquireStart(leasehold.Event)                 { panic("OnAcquireStart") }
func (panickingObserver) OnRenew(leasehold.RenewEvent)                   { panic("OnRenew") }
func (panickingObserver) OnStoreCall(leasehold.StoreCallEvent)           { panic("OnStoreCall") }
func (panickingObserver) OnError(leasehold.ErrorEvent)                   { panic("OnError") }

// panickingHandler is a log handler that panics on every record.
type panickingHandler struct{}

func (panickingHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panickingHandler) Handle(context.Context, slog.Record) error { panic("log handler") }
func (h panickingHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h panickingHandler) WithGroup(string) slog.Handler           { return h }

// An Observer, a log handler and a namespace function that panic in every
// call: every event is raised (acquire, release, renewal failure, not owned,
// abandon, expiry under the continue policy, release failure), on callers'
// goroutines, per-lease renewal goroutines and a Renewer's, and locking
// works as if they were quiet: no crash, leases returned, keys freed.
func TestPanickingObserverLoggerAndNamespaceCannotBreakLocking(t *testing.T) {
	for _, kp := range keepers {
		t.Run(kp.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(nil)
				var s driver.Store = f.store
				if kp.batch {
					s = &batchStore{faultyStore: f.store, start: time.Now()}
				}
				c := leasehold.New(s, leasehold.WithObserver(observerOf(panickingObserver{})),
					leasehold.WithLogger(slog.New(panickingHandler{})),
					leasehold.WithNamespace(func(string) string { panic("namespace") }))

				// OnAcquire, then OnRelease.
				l, err := c.TryAcquire(t.Context(), key, ttl)
				if err != nil || l == nil {
					t.Fatalf("TryAcquire: (%v, %v)", l, err)
				}
				if err := l.Release(t.Context()); err != nil {
					t.Fatalf("Release: %v", err)
				}
				mustBeFree(t, f.mem, key)

				// OnRenewFailure, then OnAbandon on the renewal goroutine.
				f.store.mu.Lock()
				f.store.fault = always(errRenewDown)
				f.store.mu.Unlock()
				l, err = c.TryAcquire(t.Context(), key, ttl)
				if err != nil {
					t.Fatal(err)
				}
				k, err := l.KeepAlive(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				<-k.Context().Done()
				if !errors.Is(context.Cause(k.Context()), leasehold.ErrAbandoned) {
					t.Fatalf("after failed renewals: cause %v", context.Cause(k.Context()))
				}
				k.Stop()
				// OnNotOwned: releasing the abandoned lease after it expired.
				time.Sleep(ttl)
				if err := l.Release(t.Context()); !errors.Is(err, leasehold.ErrNotOwned) {
					t.Fatalf("late Release: %v", err)
				}

				// OnLeaseExpired under the continue policy.
				l, err = c.TryAcquire(t.Context(), key, ttl)
				if err != nil {
					t.Fatal(err)
				}
				k, err = l.KeepAlive(t.Context(), leasehold.ContinueOnRenewFailure())
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(2 * ttl) // past its certain expiry: reported, its context left alone
				if k.Context().Err() != nil {
					t.Fatalf("the continue policy cancelled the context: %v", context.Cause(k.Context()))
				}
				k.Stop()

				// OnReleaseFailure from Hold.
				f.store.mu.Lock()
				f.store.fault = nil
				f.store.mu.Unlock()
				faults := &releaseFaults{Store: f.mem, fault: func(int) (bool, error) { return false, errLostReply }}
				c2 := leasehold.New(faults, leasehold.WithObserver(observerOf(panickingObserver{})), leasehold.WithLogger(slog.New(panickingHandler{})))
				if err := c2.Hold(t.Context(), "k2", ttl, func(context.Context, *leasehold.Lease) error { return nil }); err != nil {
					t.Fatalf("Hold with a failing release: %v", err)
				}
				faults.fault = nil

				// Locking still works end to end.
				if err := c.Hold(t.Context(), "k3", ttl, func(context.Context, *leasehold.Lease) error { return nil }); err != nil {
					t.Fatalf("Hold: %v", err)
				}
				mustBeFree(t, f.mem, "k3")
			})
		})
	}
}

// Lead's function panics: the term ends (the lease is released, so a
// successor can take over at once) and the panic goes on in Lead's caller.
func TestLeadPanicEndsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		c := leasehold.New(mem)
		var leadCtx context.Context
		v := recoverValue(func() {
			_ = c.Lead(t.Context(), "leader:main", func(ctx context.Context, l *leasehold.Lease) {
				leadCtx = ctx
				time.Sleep(time.Second)
				panic("leader")
			})
		})
		if v != "leader" {
			t.Fatalf("recovered %v; want the leader's panic", v)
		}
		if leadCtx.Err() == nil {
			t.Error("the term's context is live after its panic")
		}
		mustBeFree(t, mem, "leader:main")
	})
}

// A RunLoop tick panics: its context is cancelled, its lease released so
// another replica can run the loop at once, and the panic reaches RunLoop's
// caller.
func TestRunLoopTickPanicReleasesTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		c := leasehold.New(mem, leasehold.WithLogger(quietLogger()))
		var tickCtx context.Context
		v := recoverValue(func() {
			_ = c.RunLoop(t.Context(), "loops:sweep", 30*time.Second, func(ctx context.Context, _ *leasehold.Lease) error {
				tickCtx = ctx
				panic("tick")
			})
		})
		if v != "tick" {
			t.Fatalf("recovered %v, want the tick's panic", v)
		}
		if tickCtx.Err() == nil {
			t.Error("the tick's context is live after its panic")
		}
		mustBeFree(t, mem, "loops:sweep")

		// Another replica takes the loop at once.
		ctx, cancel := context.WithCancel(t.Context())
		var once sync.Once
		start := time.Now()
		_ = c.RunLoop(ctx, "loops:sweep", 30*time.Second, func(context.Context, *leasehold.Lease) error {
			once.Do(func() {
				if waited := time.Since(start); waited != 0 {
					t.Errorf("the next replica ticked after %v, want at once", waited)
				}
				cancel()
			})
			return nil
		})
	})
}
