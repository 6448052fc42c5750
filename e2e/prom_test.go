package e2e_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
	"github.com/leasehold/leasehold/prom"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/store/redisstore/redisfence"
)

// The metrics of package prom after real lock traffic on a real Redis and
// fenced writes to real Redis and PostgreSQL. Each test has its own
// registry, so its counts are its own whatever runs beside it.

// observed returns a registry with a prom.Metrics registered on it.
func observed(t *testing.T) (*prometheus.Registry, *prom.Metrics) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	o, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, o
}

// observedWorker is worker (paused_worker_test.go) reporting to o.
func observedWorker(t *testing.T, o leasehold.Observer, hooks ...redis.Hook) *leasehold.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})
	for _, h := range hooks {
		client.AddHook(h)
	}
	s, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); _ = client.Close() })
	return leasehold.New(s, leasehold.WithObserver(o), leasehold.WithLogger(slog.New(slog.DiscardHandler)))
}

// sample returns the value of the series of family name with labels (a
// histogram's sample count), or fails the test if there is none.
func sample(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			default:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// A stalls past its TTL, B takes the lock when it expires on the server, and
// A's late release is refused: not_owned{op="release"}.
func TestPromStaleReleaseOnRedis(t *testing.T) {
	reg, o := observed(t)
	a, b := observedWorker(t, o.Observer()), observedWorker(t, o.Observer())
	ctx, lock := t.Context(), unique("jobs:")

	la, err := a.TryAcquire(ctx, lock, ttl)
	if err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lb, err := b.Acquire(waitCtx, lock, ttl) // free when A's lease expires
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("A's late release: %v, want ErrNotOwned", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}

	want := `# HELP leasehold_lock_not_owned_total Releases and renewals refused because the key no longer held the lease (a timing symptom: pauses, network delay, work longer than the TTL), by namespace and op (release, renew).
# TYPE leasehold_lock_not_owned_total counter
leasehold_lock_not_owned_total{namespace="jobs",op="release"} 1
leasehold_lock_not_owned_total{namespace="jobs",op="renew"} 0
leasehold_lock_not_owned_total{namespace="other",op="release"} 0
leasehold_lock_not_owned_total{namespace="other",op="renew"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leasehold_lock_not_owned_total"); err != nil {
		t.Error(err)
	}
	jobs := map[string]string{"namespace": "jobs"}
	if n := sample(t, reg, "leasehold_lock_acquire_total", map[string]string{"namespace": "jobs", "result": "acquired"}); n != 2 {
		t.Errorf("acquired = %v, want 2", n)
	}
	if n := sample(t, reg, "leasehold_lock_wait_seconds", jobs); n != 2 {
		t.Errorf("%v waits observed, want 2", n)
	}
	if n := sample(t, reg, "leasehold_lock_held_seconds", jobs); n != 1 {
		t.Errorf("%v holds observed, want 1 (B's; A's ownership never ended by its release)", n)
	}
}

// A's renewals to Redis fail (a go-redis hook), and Hold gives the lease up
// before it can expire: abandoned, after renew failures.
func TestPromHoldAbandonedOnRedis(t *testing.T) {
	reg, o := observed(t)
	sw := newRenewSwitch(t)
	a := observedWorker(t, o.Observer(), sw)
	lock := unique("runs:")

	err := a.Hold(t.Context(), lock, ttl, func(hctx context.Context, _ *leasehold.Lease) error {
		sw.broken.Store(true)
		<-hctx.Done()
		return nil
	})
	if !errors.Is(err, leasehold.ErrAbandoned) {
		t.Fatalf("Hold returned %v, want ErrAbandoned", err)
	}

	want := `# HELP leasehold_lock_abandoned_total Leases given up under the fence policy because renewal could not be trusted: the critical section was cancelled and no release sent, by namespace.
# TYPE leasehold_lock_abandoned_total counter
leasehold_lock_abandoned_total{namespace="other"} 0
leasehold_lock_abandoned_total{namespace="runs"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leasehold_lock_abandoned_total"); err != nil {
		t.Error(err)
	}
	runs := map[string]string{"namespace": "runs"}
	// Renewals every ttl/3 (100 ms), deadline at 270 ms: two fail before
	// the deadline, fewer when a loaded machine delays them past it (a
	// figure), never more.
	n := sample(t, reg, "leasehold_lock_renew_failures_total", runs)
	t.Logf("%v renew failures counted before the local deadline", n)
	if n > 2 {
		t.Errorf("%v renew failures, want at most the 2 that fit before the deadline", n)
	}
	if n := sample(t, reg, "leasehold_lock_held_seconds", runs); n != 1 {
		t.Errorf("%v holds observed, want 1 (the abandonment ends the ownership)", n)
	}
	if n := sample(t, reg, "leasehold_lock_not_owned_total", map[string]string{"namespace": "runs", "op": "renew"}); n != 0 {
		t.Errorf("%v refused renewals, want 0: the renewals failed, the lease was not lost", n)
	}
}

// A paused worker's late writes, refused by redisfence and pgfence:
// fence_rejected{store="redis"} and {store="postgres"}.
func TestPromFenceRejectedOnRedisAndPostgres(t *testing.T) {
	reg, o := observed(t)
	client := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	rw, err := redisfence.New(client, fence.OnReject(o.FenceRejected))
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgfence.NewRegister(pool, unique("jobs_"), fence.OnReject(o.FenceRejected))
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}

	for name, store := range map[string]fence.Register{"redis": rw, "postgres": pg} {
		a, b := observedWorker(t, o.Observer()), observedWorker(t, o.Observer())
		ctx, lock, job := t.Context(), unique("jobs:"), unique("job:")
		la, err := a.TryAcquire(ctx, lock, ttl)
		if err != nil {
			t.Fatal(err)
		}
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		lb, err := b.Acquire(waitCtx, lock, ttl)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Write(ctx, job, lb.Fence(), []byte("B")); err != nil {
			t.Fatalf("%s: B's write: %v", name, err)
		}
		if err := store.Write(ctx, job, la.Fence(), []byte("A, late")); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("%s: A's late write: %v, want ErrStale", name, err)
		}
	}

	want := `# HELP leasehold_fence_rejected_total Writes refused by fenced storage because their fence was stale (a stale owner stopped at the storage boundary), by store.
# TYPE leasehold_fence_rejected_total counter
leasehold_fence_rejected_total{store="etcd"} 0
leasehold_fence_rejected_total{store="memory"} 0
leasehold_fence_rejected_total{store="other"} 0
leasehold_fence_rejected_total{store="postgres"} 1
leasehold_fence_rejected_total{store="redis"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "leasehold_fence_rejected_total"); err != nil {
		t.Error(err)
	}
}
