package prom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/prom"
)

// gauge returns the value of the series name{namespace=ns}, failing the test
// when it is not exported.
func gauge(t *testing.T, reg prometheus.Gatherer, name, ns string) float64 {
	t.Helper()
	for _, m := range seriesOf(t, reg, name) {
		if label(m, "namespace") == ns {
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s{namespace=%q}", name, ns)
	return 0
}

// seriesOf returns the series of the metric family name.
func seriesOf(t *testing.T, reg prometheus.Gatherer, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// storeCalls returns the observation count of leasehold_store_call_seconds
// by op, for store.
func storeCalls(t *testing.T, reg prometheus.Gatherer, store string) map[string]uint64 {
	t.Helper()
	n := make(map[string]uint64)
	for _, m := range seriesOf(t, reg, "leasehold_store_call_seconds") {
		if label(m, "store") == store {
			n[label(m, "op")] += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

// callCounter counts the OnStoreCall events a Client reports, by op.
type callCounter struct {
	mu sync.Mutex
	n  map[string]uint64
}

func (c *callCounter) observer() leasehold.Observer {
	return leasehold.Observer{OnStoreCall: func(_ context.Context, e leasehold.StoreCallEvent) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.n[e.Op]++
	}}
}

func (c *callCounter) get() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// memClient is a Client straight on the fixture's memstore (store label
// "memstore"), reporting to the fixture's Observer, then to calls.
func (f *fixture) memClient(calls *callCounter) *leasehold.Client {
	return leasehold.New(f.mem, leasehold.WithObserver(f.o.Observer()), leasehold.WithObserver(calls.observer()),
		leasehold.WithLogger(slog.New(slog.DiscardHandler)))
}

// A holder and a waiter on one key: held and waiters go up, and back to 0
// once the waiter has the key and releases it; the TTL gauge follows the
// latest acquire; every store call is timed under its op.
func TestHeldAndWaitersGoUpAndDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		calls := &callCounter{n: map[string]uint64{}}
		a, b := f.memClient(calls), f.memClient(calls)
		ctx, key := t.Context(), "jobs:7"

		la, err := a.TryAcquire(ctx, key, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := gauge(t, f.reg, "leasehold_leases_held", "jobs"); got != 1 {
			t.Errorf("held{jobs} = %v after the acquire, want 1", got)
		}
		if got := gauge(t, f.reg, "leasehold_lock_ttl_seconds", "jobs"); got != 30 {
			t.Errorf("ttl{jobs} = %v, want 30", got)
		}

		acquired := make(chan *leasehold.Lease, 1)
		go func() {
			lb, err := b.Acquire(ctx, key, 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			acquired <- lb
		}()
		synctest.Wait() // B waits for the key
		if w := gauge(t, f.reg, "leasehold_lock_waiters", "jobs"); w != 1 {
			t.Errorf("waiters{jobs} = %v while B waits, want 1", w)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb := <-acquired
		if lb == nil {
			t.FailNow()
		}
		if w := gauge(t, f.reg, "leasehold_lock_waiters", "jobs"); w != 0 {
			t.Errorf("waiters{jobs} = %v once B has the key, want 0", w)
		}
		if h := gauge(t, f.reg, "leasehold_leases_held", "jobs"); h != 1 {
			t.Errorf("held{jobs} = %v with B holding, want 1", h)
		}
		if ttl := gauge(t, f.reg, "leasehold_lock_ttl_seconds", "jobs"); ttl != 10 {
			t.Errorf("ttl{jobs} = %v after B's acquire, want 10", ttl)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if h := gauge(t, f.reg, "leasehold_leases_held", "jobs"); h != 0 {
			t.Errorf("held{jobs} = %v after both releases, want 0", h)
		}

		// A's TryAcquire, B's attempts (busy, then on the wake-up), 2 releases.
		got, want := storeCalls(t, f.reg, "memstore"), calls.get()
		if !maps.Equal(got, want) || got["acquire"] < 3 || got["release"] != 2 {
			t.Errorf("store calls observed by op %v, reported %v: want them equal, at least 3 acquires and 2 releases", got, want)
		}
	})
}

// A lease that is never released (RunLoop's) counts as held until its TTL
// runs out; a renewed one stays held past its first TTL.
func TestHeldLeasesEndAtTheirTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		calls := &callCounter{n: map[string]uint64{}}
		c := f.memClient(calls)
		if _, err := c.TryAcquire(t.Context(), "loops:sweep", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(9 * time.Second) // fake time
		if h := gauge(t, f.reg, "leasehold_leases_held", "loops"); h != 1 {
			t.Errorf("held{loops} = %v within the TTL, want 1", h)
		}
		time.Sleep(time.Second)
		if h := gauge(t, f.reg, "leasehold_leases_held", "loops"); h != 0 {
			t.Errorf("held{loops} = %v at the TTL, want 0", h)
		}
		if n := f.o.TrackedLeases(); n != 0 {
			t.Errorf("%d leases tracked after Collect pruned, want 0", n)
		}

		err := c.Hold(t.Context(), "runs:R5", 30*time.Second, func(ctx context.Context, l *leasehold.Lease) error {
			time.Sleep(time.Minute) // two TTLs, renewed every 10 s
			if h := gauge(t, f.reg, "leasehold_leases_held", "runs"); h != 1 {
				t.Errorf("held{runs} = %v while renewed past its first TTL, want 1", h)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if h := gauge(t, f.reg, "leasehold_leases_held", "runs"); h != 0 {
			t.Errorf("held{runs} = %v after Hold, want 0", h)
		}
		got, want := storeCalls(t, f.reg, "memstore"), calls.get()
		if n := got["renew_batch"] + got["renew"]; n < 5 || !maps.Equal(got, want) {
			t.Errorf("store calls observed by op %v, reported %v: want them equal, and at least 5 renewals in a minute at ttl/3 = 10 s", got, want)
		}
	})
}

// A lease whose renewal is refused is no longer held, even before its TTL.
func TestNotOwnedLeaseIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		c := f.memClient(&callCounter{n: map[string]uint64{}})
		l, err := c.TryAcquire(t.Context(), "approvals:1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.mem.Release(t.Context(), "approvals:1", l.Token()); err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(t.Context(), time.Minute); !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("Renew = %v, want ErrNotOwned", err)
		}
		if h := gauge(t, f.reg, "leasehold_leases_held", "approvals"); h != 0 {
			t.Errorf("held{approvals} = %v after a refused renewal, want 0", h)
		}
	})
}

// Expired leases are pruned as new ones are added, so the map stays bounded
// by the leases held, not by the leases ever acquired.
func TestHeldLeasesMapStaysBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg := prometheus.NewPedanticRegistry()
	m, err := prom.New(reg, prom.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	obs := m.Observer()
	acquire := func(i int, ttl time.Duration) {
		key := fmt.Sprintf("loops:%d", i)
		obs.OnAcquire(t.Context(), leasehold.AcquireEvent{Event: leasehold.Event{Key: key, Namespace: "loops", Fence: int64(i)}, Result: leasehold.Acquired, TTL: ttl})
	}
	for i := range 10000 {
		acquire(i, time.Second)
		now = now.Add(2 * time.Second) // each lease expires before the next
	}
	if n := m.TrackedLeases(); n > 64 {
		t.Errorf("%d leases tracked of 10000 acquired, all but one expired: want at most 64", n)
	}
	// 1000 live leases are all kept and counted; Collect prunes them at expiry.
	for i := range 1000 {
		acquire(20000+i, time.Minute)
	}
	if h := gauge(t, reg, "leasehold_leases_held", "loops"); h != 1000 {
		t.Errorf("held{loops} = %v, want 1000", h)
	}
	now = now.Add(time.Minute)
	if h := gauge(t, reg, "leasehold_leases_held", "loops"); h != 0 {
		t.Errorf("held{loops} = %v a TTL later, want 0", h)
	}
	if n := m.TrackedLeases(); n != 0 {
		t.Errorf("%d leases tracked after Collect, want 0", n)
	}
}

// A flood of namespaces, stores and ops from many goroutines, collected
// while it runs: the new metrics keep to their bounds (21 namespaces; 5 ops ×
// 9 stores), every store call is observed once, and the waiters return to 0.
func TestNewMetricsCardinalityUnderFlood(t *testing.T) {
	f := newFixture(t)
	obs := f.o.Observer()
	ops := []string{"acquire", "release", "renew", "renew_batch", "drop_table"}
	const goroutines, events = 8, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range events {
				ns := fmt.Sprintf("tenant-%d", (i*7+g)%100)
				lk := leasehold.Event{Key: ns + ":" + fmt.Sprint(i), Namespace: ns}
				obs.OnAcquireStart(t.Context(), lk)
				lk.Fence = int64(g*events + i + 1)
				obs.OnAcquire(t.Context(), leasehold.AcquireEvent{Event: lk, Result: leasehold.Acquired, TTL: time.Minute, Blocking: true})
				obs.OnStoreCall(t.Context(), leasehold.StoreCallEvent{Op: ops[i%len(ops)], Store: fmt.Sprintf("store%d", (i+g)%50), Items: 1, Took: time.Millisecond})
				obs.OnRelease(t.Context(), leasehold.ReleaseEvent{Event: lk, Held: time.Second})
			}
		})
	}
	for range 20 { // scrapes during the flood
		if _, err := f.reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()

	for name, want := range map[string]int{
		"leasehold_leases_held":        prom.DefaultMaxNamespaces + 1,
		"leasehold_lock_waiters":       prom.DefaultMaxNamespaces + 1,
		"leasehold_lock_ttl_seconds":   prom.DefaultMaxNamespaces + 1,
		"leasehold_store_call_seconds": len(ops) * (prom.DefaultMaxStores + 1),
		"leasehold_build_info":         1,
	} {
		if n := testutil.CollectAndCount(f.reg, name); n != want {
			t.Errorf("%d series of %s, want %d", n, name, want)
		}
	}
	var calls uint64
	stores := map[string]bool{}
	for _, m := range seriesOf(t, f.reg, "leasehold_store_call_seconds") {
		calls += m.GetHistogram().GetSampleCount()
		stores[label(m, "store")] = true
		if op := label(m, "op"); op == "drop_table" {
			t.Errorf("op %q exported, want it counted as other", op)
		}
	}
	if calls != goroutines*events || !stores[prom.Other] {
		t.Errorf("%d store calls observed under stores %v, want %d and other among them", calls, stores, goroutines*events)
	}
	for _, m := range seriesOf(t, f.reg, "leasehold_lock_waiters") {
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("waiters{%s} = %v after every acquire answered, want 0", label(m, "namespace"), v)
		}
	}
	for _, m := range seriesOf(t, f.reg, "leasehold_leases_held") {
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("held{%s} = %v after every release, want 0", label(m, "namespace"), v)
		}
	}
	// An invalid name is other too, and takes no place.
	before := storeCalls(t, f.reg, prom.Other)["renew"]
	obs.OnStoreCall(t.Context(), leasehold.StoreCallEvent{Op: "renew", Store: "\xff"})
	if after := storeCalls(t, f.reg, prom.Other)["renew"]; after != before+1 {
		t.Errorf("store calls{renew,other}: %d then %d, want one more for an invalid store name", before, after)
	}
}

// build_info is 1, labelled with the leasehold module's version as this
// binary was built with it, and the Go version.
func TestBuildInfo(t *testing.T) {
	f := newFixture(t)
	version := prom.ModuleVersion(debug.ReadBuildInfo())
	want := fmt.Sprintf(`# HELP leasehold_build_info Always 1: the version of the github.com/leasehold/leasehold module built in, and the Go version.
# TYPE leasehold_build_info gauge
leasehold_build_info{goversion=%q,version=%q} 1
`, runtime.Version(), version)
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "leasehold_build_info"); err != nil {
		t.Error(err)
	}
	if version == "" || !strings.HasPrefix(runtime.Version(), "go") {
		t.Errorf("version %q, goversion %q", version, runtime.Version())
	}
}

func TestModuleVersion(t *testing.T) {
	dep := func(v string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: "github.com/leasehold/leasehold", Version: v, Replace: replace}
	}
	app := debug.Module{Path: "example.com/app", Version: "(devel)"}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"a dependency", &debug.BuildInfo{Main: app, Deps: []*debug.Module{{Path: "x/y", Version: "v9"}, dep("v1.4.2", nil)}}, true, "v1.4.2"},
		{"replaced by a version", &debug.BuildInfo{Main: app, Deps: []*debug.Module{dep("v1.4.2", &debug.Module{Path: "fork/leasehold", Version: "v1.4.3-fix"})}}, true, "v1.4.3-fix"},
		{"replaced by a directory", &debug.BuildInfo{Main: app, Deps: []*debug.Module{dep("v1.4.2", &debug.Module{Path: "../leasehold"})}}, true, "(devel)"},
		{"the main module", &debug.BuildInfo{Main: debug.Module{Path: "github.com/leasehold/leasehold", Version: "v1.5.0"}}, true, "v1.5.0"},
		{"not a dependency", &debug.BuildInfo{Main: app}, true, "(devel)"},
		{"no build info", nil, false, "(devel)"},
	} {
		if got := prom.ModuleVersion(tc.bi, tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
