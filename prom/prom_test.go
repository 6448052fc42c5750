package prom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/prom"
	"github.com/leasehold/leasehold/store/memstore"
)

// The HELP and TYPE lines of each metric, as CollectAndCompare expects them.
const (
	acquireHead = `# HELP leasehold_lock_acquire_total Acquire and TryAcquire calls, by lock namespace and result (acquired, busy, timeout, error).
# TYPE leasehold_lock_acquire_total counter
`
	notOwnedHead = `# HELP leasehold_lock_not_owned_total Releases and renewals refused because the key no longer held the lease (a timing symptom: pauses, network delay, work longer than the TTL), by namespace and op (release, renew).
# TYPE leasehold_lock_not_owned_total counter
`
	waitHead = `# HELP leasehold_lock_wait_seconds Time from an acquire call to its answer (acquired, busy or timeout; store errors are not observed), by namespace.
# TYPE leasehold_lock_wait_seconds histogram
`
	heldHead = `# HELP leasehold_lock_held_seconds Time a lease was held, from acquire to release or abandonment, by namespace.
# TYPE leasehold_lock_held_seconds histogram
`
	renewFailuresHead = `# HELP leasehold_lock_renew_failures_total Renewals that failed (a timeout, a connection error) without the store saying the lease is gone, by namespace.
# TYPE leasehold_lock_renew_failures_total counter
`
	abandonedHead = `# HELP leasehold_lock_abandoned_total Leases given up under the fence policy because renewal could not be trusted: the critical section was cancelled and no release sent, by namespace.
# TYPE leasehold_lock_abandoned_total counter
`
	expiredHead = `# HELP leasehold_lock_expired_while_running_total Leases that expired while their critical section kept running (continue policy), by namespace.
# TYPE leasehold_lock_expired_while_running_total counter
`
	releaseFailuresHead = `# HELP leasehold_lock_release_failures_total Releases the store could not answer (the key frees itself when its TTL runs out), by namespace.
# TYPE leasehold_lock_release_failures_total counter
`
	fenceHead = `# HELP leasehold_fence_rejected_total Writes refused by fenced storage because their fence was stale (a stale owner stopped at the storage boundary), by store.
# TYPE leasehold_fence_rejected_total counter
`
)

// faultyStore wraps a memstore and injects faults into chosen calls, as a
// broken network to the store would.
type faultyStore struct {
	*memstore.Store
	mu         sync.Mutex
	renewErr   error
	releaseErr error
	acquireErr error
}

var errDown = errors.New("store unreachable")

func (s *faultyStore) fault(which *error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *which
}

func (s *faultyStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if err := s.fault(&s.acquireErr); err != nil {
		return 0, err
	}
	return s.Store.Acquire(ctx, key, token, ttl)
}

func (s *faultyStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := s.fault(&s.renewErr); err != nil {
		return err
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

// RenewBatch fails every item while renewals fail: the Client's renewal
// engine renews in batches when the store can.
func (s *faultyStore) RenewBatch(ctx context.Context, items []driver.RenewItem) []error {
	if err := s.fault(&s.renewErr); err != nil {
		errs := make([]error, len(items))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	return s.Store.RenewBatch(ctx, items)
}

func (s *faultyStore) Release(ctx context.Context, key, token string) error {
	if err := s.fault(&s.releaseErr); err != nil {
		return err
	}
	return s.Store.Release(ctx, key, token)
}

type fixture struct {
	reg   *prometheus.Registry
	o     *prom.Metrics
	mem   *memstore.Store
	store *faultyStore
}

// newFixture registers an Observer with a fresh registry, over a memstore
// that the fixture's clients share.
func newFixture(t *testing.T, opts ...prom.Option) *fixture {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	o, err := prom.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New()
	return &fixture{reg: reg, o: o, mem: mem, store: &faultyStore{Store: mem}}
}

// client is one replica: its own Client over the shared store, reporting to
// the fixture's Observer.
func (f *fixture) client(opts ...leasehold.Option) *leasehold.Client {
	base := []leasehold.Option{leasehold.WithObserver(f.o.Observer()), leasehold.WithLogger(slog.New(slog.DiscardHandler))}
	return leasehold.New(f.store, append(base, opts...)...)
}

func (f *fixture) compare(t *testing.T, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// A holder stalls past its TTL, another takes the key, and the first one's
// late release is refused: one not_owned{op="release"}.
func TestStaleReleaseCountsNotOwned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a, b := f.client(), f.client()
		ctx, key := t.Context(), "jobs:J1"

		la, err := a.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // A stalls (fake time)
		lb, err := b.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := la.Release(ctx); !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("A's late release: %v, want ErrNotOwned", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}

		f.compare(t, notOwnedHead+`
leasehold_lock_not_owned_total{namespace="jobs",op="release"} 1
leasehold_lock_not_owned_total{namespace="jobs",op="renew"} 0
leasehold_lock_not_owned_total{namespace="other",op="release"} 0
leasehold_lock_not_owned_total{namespace="other",op="renew"} 0
`, "leasehold_lock_not_owned_total")
		// Only B's release ended an ownership; A's lease was never released.
		f.compare(t, heldHead+`
leasehold_lock_held_seconds_bucket{namespace="jobs",le="0.01"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="0.025"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="0.05"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="0.1"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="0.25"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="0.5"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="1"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="2"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="3"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="5"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="7.5"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="10"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="15"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="20"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="30"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="45"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="60"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="90"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="120"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="180"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="300"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="450"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="600"} 1
leasehold_lock_held_seconds_bucket{namespace="jobs",le="+Inf"} 1
leasehold_lock_held_seconds_sum{namespace="jobs"} 0
leasehold_lock_held_seconds_count{namespace="jobs"} 1
`, "leasehold_lock_held_seconds")
	})
}

// A Hold whose renewals all fail is given up at its local deadline (60 s TTL:
// renewals fail at 20 s and 40 s, the deadline is 54 s): two renew failures,
// one abandonment, and a hold of 54 s.
func TestHoldAbandonedByFailingRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		c := f.client()
		f.store.renewErr = errDown
		err := c.Hold(t.Context(), "runs:R1", time.Minute, func(ctx context.Context, l *leasehold.Lease) error {
			<-ctx.Done()
			return nil
		})
		if !errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want ErrAbandoned", err)
		}

		f.compare(t, abandonedHead+`
leasehold_lock_abandoned_total{namespace="other"} 0
leasehold_lock_abandoned_total{namespace="runs"} 1
`+renewFailuresHead+`
leasehold_lock_renew_failures_total{namespace="other"} 0
leasehold_lock_renew_failures_total{namespace="runs"} 2
`, "leasehold_lock_abandoned_total", "leasehold_lock_renew_failures_total")
		f.compare(t, heldHead+`
leasehold_lock_held_seconds_bucket{namespace="runs",le="0.01"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="0.025"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="0.05"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="0.1"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="0.25"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="0.5"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="1"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="2"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="3"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="5"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="7.5"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="10"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="15"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="20"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="30"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="45"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="60"} 1
leasehold_lock_held_seconds_bucket{namespace="runs",le="90"} 1
leasehold_lock_held_seconds_bucket{namespace="runs",le="120"} 1
leasehold_lock_held_seconds_bucket{namespace="runs",le="180"} 1
leasehold_lock_held_seconds_bucket{namespace="runs",le="300"} 1
leasehold_lock_held_seconds_bucket{namespace="runs",le="450"} 1
leasehold_lock_held_seconds_bucket{namespace="runs",le="600"} 1
leasehold_lock_held_seconds_bucket{namespace="runs",le="+Inf"} 1
leasehold_lock_held_seconds_sum{namespace="runs"} 54
leasehold_lock_held_seconds_count{namespace="runs"} 1
`, "leasehold_lock_held_seconds")
	})
}

// Busy, acquired, timed out and failed acquires on one key, with their waits
// in fake time: 0 s (acquired), 0 s (busy), 3 s (timeout), 1 s (acquired on
// the release's wake-up). A store failure is counted but not observed as a
// wait.
func TestAcquireResultsAndWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a, b, c := f.client(), f.client(), f.client()
		ctx, key := t.Context(), "approvals:7"

		la, err := a.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.TryAcquire(ctx, key, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("B's TryAcquire: %v, want ErrNotAcquired", err)
		}
		tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = b.Acquire(tctx, key, time.Minute)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("B's Acquire: %v, want a timeout", err)
		}

		got := make(chan error, 1)
		go func() {
			lc, err := c.Acquire(ctx, key, time.Minute)
			if err == nil {
				err = lc.Release(ctx)
			}
			got <- err
		}()
		synctest.Wait() // C is waiting for the key
		time.Sleep(time.Second)
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("C: %v", err)
		}

		f.store.mu.Lock()
		f.store.acquireErr = errDown
		f.store.mu.Unlock()
		if _, err := c.TryAcquire(ctx, "leader:main", time.Minute); !errors.Is(err, errDown) {
			t.Fatalf("TryAcquire on a failing store: %v", err)
		}

		f.compare(t, acquireHead+`
leasehold_lock_acquire_total{namespace="approvals",result="acquired"} 2
leasehold_lock_acquire_total{namespace="approvals",result="busy"} 1
leasehold_lock_acquire_total{namespace="approvals",result="error"} 0
leasehold_lock_acquire_total{namespace="approvals",result="timeout"} 1
leasehold_lock_acquire_total{namespace="leader",result="acquired"} 0
leasehold_lock_acquire_total{namespace="leader",result="busy"} 0
leasehold_lock_acquire_total{namespace="leader",result="error"} 1
leasehold_lock_acquire_total{namespace="leader",result="timeout"} 0
leasehold_lock_acquire_total{namespace="other",result="acquired"} 0
leasehold_lock_acquire_total{namespace="other",result="busy"} 0
leasehold_lock_acquire_total{namespace="other",result="error"} 0
leasehold_lock_acquire_total{namespace="other",result="timeout"} 0
`+waitHead+`
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.001"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.0025"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.005"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.01"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.025"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.05"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.1"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.25"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="0.5"} 2
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="1"} 3
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="2"} 3
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="5"} 4
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="10"} 4
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="30"} 4
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="60"} 4
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="120"} 4
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="300"} 4
leasehold_lock_wait_seconds_bucket{namespace="approvals",le="+Inf"} 4
leasehold_lock_wait_seconds_sum{namespace="approvals"} 4
leasehold_lock_wait_seconds_count{namespace="approvals"} 4
`, "leasehold_lock_acquire_total", "leasehold_lock_wait_seconds")

		// A held the key for the 4 s of B's and C's waits, C for no time.
		if n := testutil.CollectAndCount(f.reg, "leasehold_lock_held_seconds"); n != 1 {
			t.Errorf("%d held-time series, want 1 (approvals)", n)
		}
		if err := testutil.GatherAndCompare(f.reg, strings.NewReader(heldHead+heldApprovals), "leasehold_lock_held_seconds"); err != nil {
			t.Error(err)
		}
	})
}

const heldApprovals = `
leasehold_lock_held_seconds_bucket{namespace="approvals",le="0.01"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="0.025"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="0.05"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="0.1"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="0.25"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="0.5"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="1"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="2"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="3"} 1
leasehold_lock_held_seconds_bucket{namespace="approvals",le="5"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="7.5"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="10"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="15"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="20"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="30"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="45"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="60"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="90"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="120"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="180"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="300"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="450"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="600"} 2
leasehold_lock_held_seconds_bucket{namespace="approvals",le="+Inf"} 2
leasehold_lock_held_seconds_sum{namespace="approvals"} 4
leasehold_lock_held_seconds_count{namespace="approvals"} 2
`

// A Hold that runs 12 s and releases: one held observation of 12 s, in the
// (10, 15] bucket.
func TestHeldAfterHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		err := f.client().Hold(t.Context(), "leader:main", time.Minute, func(ctx context.Context, l *leasehold.Lease) error {
			time.Sleep(12 * time.Second)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		f.compare(t, heldHead+`
leasehold_lock_held_seconds_bucket{namespace="leader",le="0.01"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="0.025"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="0.05"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="0.1"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="0.25"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="0.5"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="1"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="2"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="3"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="5"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="7.5"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="10"} 0
leasehold_lock_held_seconds_bucket{namespace="leader",le="15"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="20"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="30"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="45"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="60"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="90"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="120"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="180"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="300"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="450"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="600"} 1
leasehold_lock_held_seconds_bucket{namespace="leader",le="+Inf"} 1
leasehold_lock_held_seconds_sum{namespace="leader"} 12
leasehold_lock_held_seconds_count{namespace="leader"} 1
`, "leasehold_lock_held_seconds")
	})
}

// The key is taken from under a KeepAlive (its token released at the store,
// another owner acquires): the next renewal is refused, op="renew".
func TestRenewOfALostLeaseCountsNotOwned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a, b := f.client(), f.client()
		key := "loops:sweep"
		err := a.Hold(t.Context(), key, 30*time.Second, func(ctx context.Context, l *leasehold.Lease) error {
			if err := f.mem.Release(ctx, key, l.Token()); err != nil {
				return err
			}
			if _, err := b.TryAcquire(ctx, key, time.Minute); err != nil {
				return err
			}
			<-ctx.Done() // the renewal at 10 s finds B's token
			return nil
		})
		if !errors.Is(err, leasehold.ErrAbandoned) {
			t.Fatalf("Hold returned %v, want ErrAbandoned", err)
		}
		if got := testutil.ToFloat64(f.o.NotOwnedCounter("loops", "renew")); got != 1 {
			t.Errorf("not_owned{loops,renew} = %v, want 1", got)
		}
	})
}

// Under the continue policy a lease whose renewals fail expires under the
// running work: one expired_while_running. A release the store cannot
// answer: one release failure.
func TestExpiredWhileRunningAndReleaseFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		c := f.client()
		f.store.renewErr = errDown
		err := c.Hold(t.Context(), "jobs:batch", 30*time.Second, func(ctx context.Context, l *leasehold.Lease) error {
			time.Sleep(time.Minute) // past the TTL, renewals failing
			return nil
		}, leasehold.ContinueOnRenewFailure())
		if !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("Hold returned %v, want ErrNotOwned", err)
		}

		f.store.mu.Lock()
		f.store.renewErr, f.store.releaseErr = nil, errDown
		f.store.mu.Unlock()
		if err := c.Hold(t.Context(), "approvals:8", 10*time.Second, func(context.Context, *leasehold.Lease) error { return nil }); err != nil {
			t.Fatalf("a failed release is reported, not returned: %v", err)
		}

		f.compare(t, expiredHead+`
leasehold_lock_expired_while_running_total{namespace="approvals"} 0
leasehold_lock_expired_while_running_total{namespace="jobs"} 1
leasehold_lock_expired_while_running_total{namespace="other"} 0
`+releaseFailuresHead+`
leasehold_lock_release_failures_total{namespace="approvals"} 1
leasehold_lock_release_failures_total{namespace="jobs"} 0
leasehold_lock_release_failures_total{namespace="other"} 0
`, "leasehold_lock_expired_while_running_total", "leasehold_lock_release_failures_total")
	})
}

// A holder pauses past its TTL, the next owner writes with its higher fence,
// and the paused one's late write is refused by the fenced register. A
// fenced store of the caller's own, with a name outside the known set, is
// counted as "other".
func TestFenceRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		a, b := f.client(), f.client()
		reg := fence.NewMemRegister(fence.OnReject(f.o.FenceRejected))
		ctx, key, job := t.Context(), "jobs:J9", "jobs/J9"

		la, err := a.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		lb, err := b.TryAcquire(ctx, key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Write(ctx, job, lb.Fence(), []byte("B")); err != nil {
			t.Fatal(err)
		}
		if err := reg.Write(ctx, job, la.Fence(), []byte("A")); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("A's late write: %v, want ErrStale", err)
		}
		own := fence.NewConfig(fence.OnReject(f.o.FenceRejected))
		if err := own.Reject(t.Context(), "cassandra", job, la.Fence(), lb.Fence()); !errors.Is(err, fence.ErrStale) {
			t.Fatal(err)
		}

		f.compare(t, fenceHead+`
leasehold_fence_rejected_total{store="etcd"} 0
leasehold_fence_rejected_total{store="memory"} 1
leasehold_fence_rejected_total{store="other"} 1
leasehold_fence_rejected_total{store="postgres"} 0
leasehold_fence_rejected_total{store="redis"} 0
`, "leasehold_fence_rejected_total")
	})
}

// WithStores adds a store name to the allowed set.
func TestWithStores(t *testing.T) {
	f := newFixture(t, prom.WithStores("cassandra"))
	if err := fence.NewConfig(fence.OnReject(f.o.FenceRejected)).Reject(t.Context(), "cassandra", "jobs/J1", 1, 2); !errors.Is(err, fence.ErrStale) {
		t.Fatal(err)
	}
	f.compare(t, fenceHead+`
leasehold_fence_rejected_total{store="cassandra"} 1
leasehold_fence_rejected_total{store="etcd"} 0
leasehold_fence_rejected_total{store="memory"} 0
leasehold_fence_rejected_total{store="other"} 0
leasehold_fence_rejected_total{store="postgres"} 0
leasehold_fence_rejected_total{store="redis"} 0
`, "leasehold_fence_rejected_total")
}

// With WithNamespaces the allowed set is fixed: a Client whose namespace
// function returns tenant names has every name outside the set counted as
// "other", so tenants cannot blow up the series count; a name in the set
// gets its own series, created in New.
func TestUnknownNamespaceIsOther(t *testing.T) {
	f := newFixture(t, prom.WithNamespaces("invoices"))
	// Pre-created: invoices and other × 4 results, before any event.
	if n := testutil.CollectAndCount(f.reg, "leasehold_lock_acquire_total"); n != 8 {
		t.Errorf("%d acquire series before any event, want 8", n)
	}
	byTenant := leasehold.WithNamespace(func(key string) string { tenant, _, _ := strings.Cut(key, ":"); return tenant })
	c := f.client(byTenant)
	for _, key := range []string{"tenant-1:job", "tenant-2:job", "tenant-3:job", "invoices:9"} {
		l, err := c.TryAcquire(t.Context(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(acquired(f, "other")); got != 3 {
		t.Errorf("acquired{namespace=other} = %v, want 3 (the tenants)", got)
	}
	if got := testutil.ToFloat64(acquired(f, "invoices")); got != 1 {
		t.Errorf("acquired{namespace=invoices} = %v, want 1", got)
	}
	// 2 namespaces (invoices, other) × 4 results: the tenants added none.
	if n := testutil.CollectAndCount(f.reg, "leasehold_lock_acquire_total"); n != 8 {
		t.Errorf("%d acquire series, want 8", n)
	}
	if n := testutil.CollectAndCount(f.reg, "leasehold_lock_held_seconds"); n != 2 {
		t.Errorf("%d held-time series, want 2 (other, invoices)", n)
	}
}

// By default namespaces are learned as events arrive: the first
// DefaultMaxNamespaces get their own series, every later one is counted as
// "other", and every event is counted. An empty or invalid label value is
// "other" too.
func TestLearnedNamespacesAreBounded(t *testing.T) {
	f := newFixture(t)
	if n := testutil.CollectAndCount(f.reg, "leasehold_lock_acquire_total"); n != 4 {
		t.Errorf("%d acquire series before any event, want 4 (other)", n)
	}
	obs := f.o.Observer()
	acquire := func(ns string) {
		obs.OnAcquire(t.Context(), leasehold.AcquireEvent{Event: leasehold.Event{Key: ns + ":1", Namespace: ns}, Result: leasehold.Acquired})
	}
	for i := range prom.DefaultMaxNamespaces + 5 {
		acquire(fmt.Sprintf("tenant-%d", i))
	}
	acquire("tenant-0") // learned: still its own
	acquire("\xff")     // not UTF-8
	acquire(prom.Other) // other itself takes no place
	for i := range prom.DefaultMaxNamespaces {
		want := 1.0
		if i == 0 {
			want = 2
		}
		if got := testutil.ToFloat64(acquired(f, fmt.Sprintf("tenant-%d", i))); got != want {
			t.Errorf("acquired{tenant-%d} = %v, want %v", i, got, want)
		}
	}
	if got := testutil.ToFloat64(acquired(f, "other")); got != 7 {
		t.Errorf("acquired{other} = %v, want 7 (5 tenants past the bound, one bad value, other)", got)
	}
	// 21 namespaces × 4 results, and one wait series per namespace.
	if n := testutil.CollectAndCount(f.reg, "leasehold_lock_acquire_total"); n != 4*(prom.DefaultMaxNamespaces+1) {
		t.Errorf("%d acquire series, want %d", n, 4*(prom.DefaultMaxNamespaces+1))
	}
	if n := testutil.CollectAndCount(f.reg, "leasehold_lock_wait_seconds"); n != prom.DefaultMaxNamespaces+1 {
		t.Errorf("%d wait series, want %d", n, prom.DefaultMaxNamespaces+1)
	}
	// A learned namespace gets all its counters at once, at zero.
	if n := testutil.CollectAndCount(f.reg, "leasehold_lock_abandoned_total"); n != prom.DefaultMaxNamespaces+1 {
		t.Errorf("%d abandoned series, want %d", n, prom.DefaultMaxNamespaces+1)
	}
}

// Events from many goroutines over 100 namespaces: at most
// DefaultMaxNamespaces of them get series, every event is counted once, and
// a namespace that got its series is never counted as "other". Run with
// -race.
func TestLearnedNamespacesUnderConcurrency(t *testing.T) {
	f := newFixture(t)
	obs := f.o.Observer()
	const goroutines, events = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range events {
				ns := fmt.Sprintf("ns%d", (i*7+g)%100)
				obs.OnAcquire(t.Context(), leasehold.AcquireEvent{Event: leasehold.Event{Key: ns + ":x", Namespace: ns}, Result: leasehold.Acquired})
			}
		})
	}
	wg.Wait()

	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	namespaces := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "leasehold_lock_acquire_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "namespace" {
					namespaces[lp.GetValue()] = true
				}
			}
		}
	}
	if total != goroutines*events {
		t.Errorf("%v acquisitions counted, want %d", total, goroutines*events)
	}
	if len(namespaces) != prom.DefaultMaxNamespaces+1 || !namespaces[prom.Other] {
		t.Errorf("namespaces %v: want other and %d more", namespaces, prom.DefaultMaxNamespaces)
	}
}

// prom.WithNamespace overrides the Client's namespace from the key, and is
// bounded the same way.
func TestWithNamespaceOverridesTheEvent(t *testing.T) {
	f := newFixture(t, prom.WithNamespaces("leader"), prom.WithNamespace(func(key string) string {
		if strings.HasPrefix(key, "ops/") {
			return "leader"
		}
		return "nonsense-" + key
	}))
	c := f.client()
	for _, key := range []string{"ops/snapshot", "runs:R2"} {
		if _, err := c.TryAcquire(t.Context(), key, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(acquired(f, "leader")); got != 1 {
		t.Errorf("acquired{leader} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(acquired(f, "other")); got != 1 {
		t.Errorf("acquired{other} = %v, want 1 (the function's answer is not allowed)", got)
	}
	if got := testutil.ToFloat64(acquired(f, "runs")); got != 0 {
		t.Errorf("acquired{runs} = %v, want 0 (the Client's namespace is overridden)", got)
	}
}

// The default bound is the Client's, so every namespace a Client with the
// default namespace function reports is counted under its own name: of these
// keys only the one without a namespace and the one past the Client's bound
// are counted as other.
func TestDefaultNamespacesAreAllowed(t *testing.T) {
	f := newFixture(t)
	keys := []string{"jobs:42", "runs/R1", "approvals:7", "leader:main", "loops:sweep", ":no-namespace"}
	for i := 5; i < prom.DefaultMaxNamespaces; i++ { // 20 namespaces in all
		keys = append(keys, fmt.Sprintf("class-%d:x", i))
	}
	c := f.client()
	for _, key := range keys {
		if _, err := c.TryAcquire(t.Context(), key, time.Minute); err != nil {
			t.Fatal(err)
		}
		if ns := leasehold.DefaultNamespace(key); testutil.ToFloat64(f.o.AcquireCounter(ns, "acquired")) == 0 {
			t.Errorf("%q → %q: not counted under its own namespace", key, ns)
		}
	}
	if _, err := c.TryAcquire(t.Context(), "one-too-many:x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(f.o.AcquireCounter("other", "acquired")); got != 2 {
		t.Errorf("acquired{other} = %v, want 2 (:no-namespace, one-too-many)", got)
	}
}

// A second Observer on the same registry is an error, not a panic, and the
// failed New leaves nothing of its own registered.
func TestDuplicateRegistrationIsAnError(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := prom.New(reg); err != nil {
		t.Fatal(err)
	}
	_, err := prom.New(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second New: %v, want an AlreadyRegisteredError", err)
	}

	// A clash on a later metric: the ones registered before it are undone.
	reg = prometheus.NewPedanticRegistry()
	clash := prometheus.NewCounter(prometheus.CounterOpts{Name: "leasehold_fence_rejected_total", Help: "someone else's"})
	reg.MustRegister(clash)
	if _, err := prom.New(reg); err == nil {
		t.Fatal("New over a clashing name succeeded")
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
		t.Errorf("after a failed New the registry has %d series (%v), want only the clashing one", n, err)
	}
	if _, err := prom.New(reg, prom.WithStores()); err == nil {
		t.Error("New succeeded over a clashing name on the second try")
	}

	// Wrapped with a constant label, a second Observer is its own set.
	if _, err := prom.New(prometheus.WrapRegistererWith(prometheus.Labels{"client": "b"}, prometheus.NewRegistry())); err != nil {
		t.Errorf("New on a wrapped registerer: %v", err)
	}
	if _, err := prom.New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// A nil Registerer or a bad option is an *ArgumentError naming it (the
// first bad option's, whatever follows), with nothing registered; a nil
// option is skipped.
func TestBadArgumentsAreArgumentErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  bool // a registry, not nil
		opts []prom.Option
		arg  string // the argument the error names, "" for none
	}{
		{"nil registerer", false, nil, "reg"},
		{"WithStores not UTF-8", true, []prom.Option{prom.WithStores("cassandra", "bad\xff")}, "WithStores"},
		{"WithNamespaces not UTF-8", true, []prom.Option{prom.WithNamespaces("invoices", "bad\xff")}, "WithNamespaces"},
		{"the first bad option", true, []prom.Option{prom.WithNamespaces("bad\xff"), prom.WithStores("bad\xff"), prom.WithNamespaces("ok")}, "WithNamespaces"},
		{"nil options", true, []prom.Option{nil, prom.WithStores("cassandra"), nil}, ""},
	} {
		var reg *prometheus.Registry
		var r prometheus.Registerer
		if tc.reg {
			reg = prometheus.NewPedanticRegistry()
			r = reg
		}
		_, err := prom.New(r, tc.opts...)
		var ae *leasehold.ArgumentError
		switch {
		case tc.arg == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.arg != "" && (!errors.As(err, &ae) || ae.Arg != tc.arg || !errors.Is(err, leasehold.ErrInvalidArgument)):
			t.Errorf("%s: %v, want an *ArgumentError naming %s", tc.name, err, tc.arg)
		case tc.arg != "" && reg != nil:
			if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
				t.Errorf("%s: the registry has %d series (%v) after the refused New, want none", tc.name, n, err)
			}
		}
	}
}

func acquired(f *fixture, ns string) prometheus.Collector { return f.o.AcquireCounter(ns, "acquired") }
