package prom_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/prom"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// On a real Redis: held and waiters go up and back to 0, and every store
// round trip is timed under its op and the store "redisstore".
func TestGaugesOnRedis(t *testing.T) {
	srv := testserver.StartRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	store, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(); _ = rc.Close() })

	reg := prometheus.NewPedanticRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	calls := &callCounter{n: map[string]uint64{}}
	waiting := make(chan struct{}, 1)
	signal := calls.observer()
	signal.OnAcquireStart = func(context.Context, leasehold.Event) { waiting <- struct{}{} }
	newClient := func() *leasehold.Client {
		c := leasehold.New(store, leasehold.WithObserver(m.Observer()), leasehold.WithObserver(signal),
			leasehold.WithLogger(slog.New(slog.DiscardHandler)))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := newClient(), newClient()
	ctx, key := t.Context(), "approvals:redis-1"

	la, err := a.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if h := gauge(t, reg, "leasehold_leases_held", "approvals"); h != 1 {
		t.Errorf("held{approvals} = %v, want 1", h)
	}
	acquired := make(chan *leasehold.Lease, 1)
	go func() {
		lb, err := b.Acquire(ctx, key, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		acquired <- lb
	}()
	<-waiting // B's Acquire has started; the key is A's
	if w := gauge(t, reg, "leasehold_lock_waiters", "approvals"); w != 1 {
		t.Errorf("waiters{approvals} = %v while B waits, want 1", w)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := <-acquired
	if lb == nil {
		t.FailNow()
	}
	if w := gauge(t, reg, "leasehold_lock_waiters", "approvals"); w != 0 {
		t.Errorf("waiters{approvals} = %v once B has the key, want 0", w)
	}
	if ttl := gauge(t, reg, "leasehold_lock_ttl_seconds", "approvals"); ttl != 20 {
		t.Errorf("ttl{approvals} = %v, want B's 20", ttl)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h := gauge(t, reg, "leasehold_leases_held", "approvals"); h != 0 {
		t.Errorf("held{approvals} = %v after both releases, want 0", h)
	}

	got, want := storeCalls(t, reg, "redisstore"), calls.get()
	// redisstore releases by a hand-off call, which names the head it woke.
	if got["acquire"] < 2 || got["release"]+got["handoff"] != 2 || got["acquire"] != want["acquire"] ||
		got["release"] != want["release"] || got["handoff"] != want["handoff"] {
		t.Errorf("redisstore calls observed by op %v, reported %v: want them equal, at least 2 acquires and 2 releases", got, want)
	}
	var sum float64
	for _, s := range seriesOf(t, reg, "leasehold_store_call_seconds") {
		if label(s, "store") == "redisstore" {
			sum += s.GetHistogram().GetSampleSum()
		}
	}
	if sum <= 0 {
		t.Errorf("redis round trips took %v s in all, want more than 0", sum)
	}
}
