package leasehold_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// faultyStore wraps a store and injects renewal faults.
type faultyStore struct {
	driver.Store
	mu       sync.Mutex
	fault    func(attempt int) error // nil, or the error for renewal attempt n (from 1)
	renews   int
	releases int
	crashed  bool // releases are lost, as a crashed process sends none
}

// errHang makes a renewal hang until its context is done, like a slow server.
var errHang = errors.New("hang")

// errStuck makes a renewal ignore its context and return only after ten
// TTLs, like a client whose socket reads do not honour contexts.
var errStuck = errors.New("stuck")

var errRenewDown = errors.New("store unreachable")

func (s *faultyStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	s.mu.Lock()
	s.renews++
	n, fault := s.renews, s.fault
	s.mu.Unlock()
	if fault != nil {
		switch err := fault(n); {
		case errors.Is(err, errHang):
			<-ctx.Done()
			return ctx.Err()
		case errors.Is(err, errStuck):
			time.Sleep(10 * ttl)
			return errRenewDown
		case err != nil:
			return err
		}
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

func (s *faultyStore) Release(ctx context.Context, key, token string) error {
	s.mu.Lock()
	s.releases++
	crashed := s.crashed
	s.mu.Unlock()
	if crashed {
		return driver.ErrNotOwned // gives up at once; the lease stays until its TTL
	}
	return s.Store.Release(ctx, key, token)
}

func (s *faultyStore) counts() (renews, releases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renews, s.releases
}

func always(err error) func(int) error { return func(int) error { return err } }

// recorder is an Observer that keeps what it saw.
type recorder struct {
	mu       sync.Mutex
	acquires []leasehold.AcquireEvent
	releases []leasehold.ReleaseEvent
	failures []leasehold.RenewFailureEvent
	notOwned []leasehold.NotOwnedEvent
	abandons []leasehold.AbandonEvent
	expiries []leasehold.LeaseExpiredEvent
}

// record appends e to the recorder's list under its lock.
func record[T any](r *recorder, list *[]T, e T) {
	r.mu.Lock()
	*list = append(*list, e)
	r.mu.Unlock()
}

func (r *recorder) OnAcquire(e leasehold.AcquireEvent)           { record(r, &r.acquires, e) }
func (r *recorder) OnRelease(e leasehold.ReleaseEvent)           { record(r, &r.releases, e) }
func (r *recorder) OnRenewFailure(e leasehold.RenewFailureEvent) { record(r, &r.failures, e) }
func (r *recorder) OnNotOwned(e leasehold.NotOwnedEvent)         { record(r, &r.notOwned, e) }
func (r *recorder) OnAbandon(e leasehold.AbandonEvent)           { record(r, &r.abandons, e) }
func (r *recorder) OnLeaseExpired(e leasehold.LeaseExpiredEvent) { record(r, &r.expiries, e) }

type fixture struct {
	mem   *memstore.Store
	store *faultyStore
	rec   *recorder
	c     *leasehold.Client
}

func newFixture(fault func(int) error) *fixture {
	mem := memstore.New()
	f := &fixture{mem: mem, store: &faultyStore{Store: mem, fault: fault}, rec: &recorder{}}
	f.c = leasehold.New(f.store, leasehold.WithObserver(observerOf(f.rec)), leasehold.WithLogger(quietLogger()))
	return f
}

const (
	key = "jobs:7"
	ttl = time.Minute
)

// Renewals that fail at once, with renewals every ttl/5 so that the counter
// runs out (at 3 × 12 s = 36 s) long before the local deadline (54 s).
func TestHoldFencesAfterNConsecutiveFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(always(errRenewDown))
		start := time.Now()
		var cause error
		var cancelledAt time.Duration
		errFn := errors.New("fn saw the cancellation")
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			<-ctx.Done()
			cause, cancelledAt = context.Cause(ctx), time.Since(start)
			// The key is still ours on the store: the fence came first.
			if info, _ := f.mem.Inspect(t.Context(), key); !info.Held || info.Token != l.Token() {
				t.Errorf("at the fence the key is %+v, want still held by us", info)
			}
			return errFn
		}, leasehold.FenceAfter(3), leasehold.WithRenewInterval(ttl/5))

		if !errors.Is(cause, leasehold.ErrAbandoned) || !errors.Is(cause, errRenewDown) {
			t.Fatalf("context cause %v, want ErrAbandoned with the last failure", cause)
		}
		if !errors.Is(err, leasehold.ErrAbandoned) || !errors.Is(err, errFn) {
			t.Fatalf("Hold returned %v, want fn's error and ErrAbandoned", err)
		}
		if cancelledAt != 36*time.Second {
			t.Errorf("cancelled after %v, want 36s (the third failure)", cancelledAt)
		}
		renews, releases := f.store.counts()
		if renews != 3 || releases != 0 {
			t.Errorf("%d renewals, %d releases; want exactly 3 and none (the release is skipped)", renews, releases)
		}
		if info, _ := f.mem.Inspect(t.Context(), key); !info.Held {
			t.Error("the key is gone: the release was not skipped")
		}
		if len(f.rec.failures) != 3 || f.rec.failures[2].Consecutive != 3 || len(f.rec.abandons) != 1 {
			t.Errorf("observed %d failures, %d abandons; want 3 and 1", len(f.rec.failures), len(f.rec.abandons))
		}
	})
}

// With the defaults (renew every 20 s, 3 failures) the counter would run out
// at 60 s, when the lease expires; the local deadline fences at 54 s.
func TestHoldDeadlineFencesBeforeTheCounter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(always(errRenewDown))
		start := time.Now()
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			<-ctx.Done()
			if at := time.Since(start); at != 54*time.Second {
				t.Errorf("cancelled after %v, want 54s: ttl − ttl/10", at)
			}
			if info, _ := f.mem.Inspect(t.Context(), key); !info.Held || info.TTL != 6*time.Second {
				t.Errorf("at the fence the store says %+v, want held with 6s left", info)
			}
			return nil
		})
		if !errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want ErrAbandoned", err)
		}
		if renews, releases := f.store.counts(); renews != 2 || releases != 0 {
			t.Errorf("%d renewals, %d releases; want 2 and none", renews, releases)
		}
	})
}

// Renewals that hang (a slow server) are cut at the deadline; the fence fires
// while the store still holds the key for us.
func TestHoldFencesBeforeExpiryWhenRenewalsHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(always(errHang))
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			<-ctx.Done()
			info, _ := f.mem.Inspect(t.Context(), key)
			if !info.Held || info.Token != l.Token() || info.TTL <= 0 {
				t.Errorf("at the fence the store says %+v, want still held by us", info)
			}
			// No second owner could have acquired before the fence.
			if _, err := f.mem.Acquire(t.Context(), key, "intruder", ttl); !errors.Is(err, leasehold.ErrNotAcquired) {
				t.Errorf("a second owner acquired before the fence: %v", err)
			}
			return nil
		})
		if !errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want ErrAbandoned", err)
		}
	})
}

func TestIntermittentFailuresNeverAbandon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(func(n int) error {
			if n%2 == 1 {
				return errRenewDown
			}
			return nil
		})
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * ttl):
			}
			if info, _ := f.mem.Inspect(ctx, key); info.Token != l.Token() {
				t.Errorf("after 10 TTLs the key is %+v, want ours", info)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		renews, releases := f.store.counts()
		if renews < 29 || releases != 1 || len(f.rec.abandons) != 0 || len(f.rec.failures) != (renews+1)/2 {
			t.Errorf("%d renewals, %d releases, %d failures, %d abandons", renews, releases, len(f.rec.failures), len(f.rec.abandons))
		}
	})
}

func TestContinuePolicyNeverCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(always(errRenewDown))
		errFn := errors.New("done")
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			select {
			case <-ctx.Done():
				t.Errorf("context cancelled under the continue policy: %v", context.Cause(ctx))
			case <-time.After(3 * ttl):
			}
			return errFn
		}, leasehold.ContinueOnRenewFailure())
		if !errors.Is(err, errFn) || !errors.Is(err, leasehold.ErrNotOwned) || errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want fn's error and ErrNotOwned (the lease expired under it)", err)
		}
		renews, _ := f.store.counts()
		if len(f.rec.failures) != renews || renews < 3 {
			t.Errorf("%d failures reported for %d renewals", len(f.rec.failures), renews)
		}
		if len(f.rec.expiries) != 1 || len(f.rec.abandons) != 0 {
			t.Errorf("%d expiries and %d abandons reported, want 1 and 0", len(f.rec.expiries), len(f.rec.abandons))
		}
	})
}

func TestReleaseHappensWhenCallerIsCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		ctx, cancel := context.WithCancel(t.Context())
		err := f.c.Hold(ctx, key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) || errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want fn's context.Canceled", err)
		}
		if info, _ := f.mem.Inspect(t.Context(), key); info.Held {
			t.Fatalf("the key is still held after Hold returned: %+v", info)
		}
		if _, releases := f.store.counts(); releases != 1 {
			t.Errorf("%d releases, want 1", releases)
		}
	})
}

// fn sees the caller's deadline, and its context ends there as a deadline
// does (DeadlineExceeded), while the lease is kept until fn returns and then
// released; a deadline later than fn's work changes nothing.
func TestHoldPassesTheCallersDeadlineToFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		ctx, cancel := context.WithTimeout(t.Context(), 5*ttl)
		defer cancel()
		want, _ := ctx.Deadline()
		err := f.c.Hold(ctx, key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			if dl, ok := ctx.Deadline(); !ok || !dl.Equal(want) {
				t.Errorf("fn's Deadline() = %v, %v; want the caller's, %v", dl, ok, want)
			}
			<-ctx.Done()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Errorf("fn's context ended with %v, want context.DeadlineExceeded", ctx.Err())
			}
			if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
				t.Errorf("fn's context's cause is %v, want one matching context.DeadlineExceeded", cause)
			}
			if info, _ := f.mem.Inspect(t.Context(), key); info.Token != l.Token() {
				t.Errorf("at the caller's deadline the key is %+v, want still ours until fn returns", info)
			}
			return ctx.Err()
		})
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want fn's context.DeadlineExceeded", err)
		}
		if info, _ := f.mem.Inspect(t.Context(), key); info.Held {
			t.Fatalf("the key is still held after Hold returned: %+v", info)
		}
		late, cancelLate := context.WithTimeout(t.Context(), time.Hour)
		defer cancelLate()
		if err := f.c.Hold(late, key, ttl, func(ctx context.Context, _ *leasehold.Lease) error {
			return ctx.Err()
		}); err != nil {
			t.Fatalf("Hold under a distant deadline: %v", err)
		}
	})
}

func TestHoldRenewsWhileFnRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		start := time.Now()
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			time.Sleep(5*ttl + time.Second) // fake time: a long critical section, clear of the renewal at 5 TTLs
			if info, _ := f.mem.Inspect(ctx, key); info.Token != l.Token() {
				t.Errorf("the key is %+v after 5 TTLs, want ours", info)
			}
			return ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if renews, _ := f.store.counts(); renews != 15 {
			t.Errorf("%d renewals in 5 TTLs, want 15 (every ttl/3)", renews)
		}
		if len(f.rec.acquires) != 1 || f.rec.acquires[0].Result != leasehold.Acquired || f.rec.acquires[0].Namespace != "jobs" {
			t.Errorf("acquire events %+v", f.rec.acquires)
		}
		if len(f.rec.releases) != 1 || f.rec.releases[0].Held != time.Since(start) {
			t.Errorf("release events %+v, want one with held %v", f.rec.releases, time.Since(start))
		}
	})
}

func TestHoldRejectsBadInputBeforeAcquiring(t *testing.T) {
	f := newFixture(nil)
	fn := func(context.Context, *leasehold.Lease) error { return nil }
	cases := []struct {
		name string
		err  error
		arg  string
	}{
		{"key", f.c.Hold(t.Context(), "", ttl, fn), "key"},
		{"ttl", f.c.Hold(t.Context(), key, 0, fn), "ttl"},
		{"fn", f.c.Hold(t.Context(), key, ttl, nil), "fn"},
		{"interval", f.c.Hold(t.Context(), key, ttl, fn, leasehold.WithRenewInterval(ttl)), "WithRenewInterval"},
		{"FenceAfter", f.c.Hold(t.Context(), key, ttl, fn, leasehold.FenceAfter(-2)), "FenceAfter"},
		// FenceAfter(0) is not the continue policy, which never fences.
		{"FenceAfter 0", f.c.Hold(t.Context(), key, ttl, fn, leasehold.FenceAfter(0)), "FenceAfter"},
		// interval + margin past MaxInt64 must not wrap round to a small sum.
		{"huge interval", f.c.Hold(t.Context(), key, ttl, fn, leasehold.WithRenewInterval(math.MaxInt64)), "WithRenewInterval"},
		{"huge margin", f.c.Hold(t.Context(), key, ttl, fn, leasehold.WithDriftMargin(math.MaxInt64)), "WithDriftMargin"},
		{"margin of the TTL", f.c.Hold(t.Context(), key, ttl, fn, leasehold.WithDriftMargin(ttl)), "WithDriftMargin"},
	}
	for _, tc := range cases {
		var ae *leasehold.ArgumentError
		if !errors.As(tc.err, &ae) || ae.Arg != tc.arg {
			t.Errorf("%s: %v, want an *ArgumentError naming %q", tc.name, tc.err, tc.arg)
		}
	}
	if info, _ := f.mem.Inspect(t.Context(), key); info.Fence != 0 {
		t.Fatalf("rejected Holds wrote to the store: %+v", info)
	}
}

func TestKeepAliveWithoutCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(always(errRenewDown))
		l, err := f.c.TryAcquire(t.Context(), key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.KeepAlive(t.Context()); err == nil {
			t.Error("a second KeepAlive on one lease was accepted")
		}
		<-k.Context().Done()
		if !errors.Is(context.Cause(k.Context()), leasehold.ErrAbandoned) {
			t.Fatalf("cause %v; want ErrAbandoned", context.Cause(k.Context()))
		}
		k.Stop()
		k.Stop()
	})
}

// Releasing a lease stops its KeepAlive first, so the renewal does not take
// the release for a lost lease.
func TestReleaseStopsKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		l, err := f.c.TryAcquire(t.Context(), key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(ttl / 2)
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ttl)
		if cause := context.Cause(k.Context()); cause != context.Canceled {
			t.Fatalf("after a release, the cause is %v, want context.Canceled (no loss)", cause)
		}
		if len(f.rec.notOwned) != 0 || len(f.rec.releases) != 1 || len(f.rec.abandons) != 0 {
			t.Errorf("%d not-owned, %d release, %d abandon events; want 0, 1, 0", len(f.rec.notOwned), len(f.rec.releases), len(f.rec.abandons))
		}
	})
}

// A lease taken by another owner while its holder was paused: the renewal
// finds it gone and fences at once.
func TestRenewalThatFindsAnotherOwnerFencesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			// Simulate the pause: the key is handed to someone else.
			if err := f.mem.Release(ctx, key, l.Token()); err != nil {
				t.Fatal(err)
			}
			if _, err := f.mem.Acquire(ctx, key, "other", ttl); err != nil {
				t.Fatal(err)
			}
			<-ctx.Done()
			return nil
		})
		if !errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want ErrAbandoned", err)
		}
		if info, _ := f.mem.Inspect(t.Context(), key); info.Token != "other" {
			t.Fatalf("the other owner's lock was touched: %+v", info)
		}
		if len(f.rec.notOwned) != 1 || f.rec.notOwned[0].Op != "renew" {
			t.Errorf("not-owned events %+v, want one for renew", f.rec.notOwned)
		}
	})
}

// Not parallel: counts the process's goroutines before and after.
func TestHoldLeavesNoGoroutineBehind(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, fault := range []func(int) error{nil, always(errRenewDown), always(errHang)} {
		f := newFixture(fault)
		_ = f.c.Hold(t.Context(), key, 30*time.Millisecond, func(ctx context.Context, l *leasehold.Lease) error {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			return nil
		})
	}
	// A goroutine that closed its done channel may still be on its way out;
	// give it a bounded moment, as goleak does.
	after := runtime.NumGoroutine()
	for i := 0; i < 100 && after > before; i++ {
		time.Sleep(time.Millisecond)
		after = runtime.NumGoroutine()
	}
	if after > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after Hold returned:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// A store that does not return when the renewal's context ends must not hold
// the fence back: the deadline is kept with the call still in flight.
func TestHoldFencesAtTheDeadlineWhenTheStoreIgnoresContexts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(always(errStuck))
		start := time.Now()
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			<-ctx.Done()
			if at := time.Since(start); at != 54*time.Second {
				t.Errorf("cancelled after %v, want 54s, with the renewal still in flight", at)
			}
			return nil
		})
		if !errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want ErrAbandoned", err)
		}
		// Hold returns once fn has; the stuck call (started at 20 s) is the
		// Client's, which waits for it rather than leave it behind.
		if at := time.Since(start); at != 54*time.Second {
			t.Errorf("Hold returned after %v, want at the deadline, 54s", at)
		}
		_ = f.c.Close()
		if at := time.Since(start); at != 20*time.Second+10*ttl {
			t.Errorf("Close returned after %v, want when the stuck call returned", at)
		}
	})
}

func TestManualRenewIsRefusedWhileKeepAliveRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		l, err := f.c.TryAcquire(t.Context(), key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(t.Context(), time.Second); err == nil {
			t.Fatal("a manual Renew to a shorter TTL was accepted while the KeepAlive runs")
		}
		if renews, _ := f.store.counts(); renews != 0 {
			t.Fatalf("the refused Renew reached the store")
		}
		k.Stop()
		if err := l.Renew(t.Context(), ttl); err != nil {
			t.Fatalf("Renew after Stop: %v", err)
		}
	})
}

// A KeepAlive started after a manual renewal counts its deadline from that
// renewal, not from the acquire.
func TestKeepAliveCountsFromTheLastManualRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		start := time.Now()
		l, err := f.c.TryAcquire(t.Context(), key, ttl)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Second)
		if err := l.Renew(t.Context(), ttl); err != nil {
			t.Fatal(err)
		}
		f.store.mu.Lock()
		f.store.fault = always(errRenewDown)
		f.store.mu.Unlock()
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		<-k.Context().Done()
		if at := time.Since(start); at != 104*time.Second {
			t.Errorf("given up after %v, want 104s: the renewal at 50s + 54s", at)
		}
		k.Stop()
	})
}

// Releasing inside fn with fn's own context works, and Hold then has
// nothing left to release.
func TestReleaseInsideHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		err := f.c.Hold(t.Context(), key, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			return l.Release(ctx)
		})
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
		if _, releases := f.store.counts(); releases != 1 || len(f.rec.notOwned) != 0 {
			t.Errorf("%d releases, %d not-owned events; want 1 and 0", releases, len(f.rec.notOwned))
		}
	})
}

var errCallerBudget = errors.New("the caller's request budget spent")

// A caller's deadline set with WithTimeoutCause reaches fn with the
// caller's cause, not a bare DeadlineExceeded.
func TestHoldKeepsTheCallersDeadlineCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		ctx, cancel := context.WithTimeoutCause(t.Context(), 5*ttl, errCallerBudget)
		defer cancel()
		_ = f.c.Hold(ctx, key, ttl, func(fctx context.Context, _ *leasehold.Lease) error {
			<-fctx.Done()
			<-ctx.Done() // the caller's timer, due at the same instant, may fire just after fn's
			if cause := context.Cause(fctx); !errors.Is(cause, errCallerBudget) {
				t.Errorf("fn's cause = %v; want the caller's cause %v", cause, errCallerBudget)
			}
			return nil
		})
	})
}

// deadlinelessCtx ends with DeadlineExceeded but reports no Deadline (an
// outer framework's budget), below a later WithTimeout.
type deadlinelessCtx struct {
	context.Context
	done chan struct{}
}

func (c deadlinelessCtx) Done() <-chan struct{} { return c.done }
func (c deadlinelessCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// A caller's context that ends with DeadlineExceeded before its reported
// Deadline (an outer budget that reports none) still ends fn's context:
// fn's own timer only covers the reported deadline.
func TestHoldPassesAnEarlyDeadlineExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(nil)
		outer := deadlinelessCtx{Context: context.Background(), done: make(chan struct{})}
		ctx, cancel := context.WithTimeout(outer, time.Hour)
		defer cancel()
		go func() { time.Sleep(ttl); close(outer.done) }()
		_ = f.c.Hold(ctx, key, ttl, func(fctx context.Context, _ *leasehold.Lease) error {
			select {
			case <-fctx.Done():
			case <-time.After(10 * ttl):
				t.Errorf("caller's context ended (%v) at %v; fn's context still live 10 ttl later", ctx.Err(), ttl)
			}
			return nil
		})
	})
}
