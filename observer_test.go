package leasehold_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

type traceKey struct{}

// Events carry the caller's context, so a tracing adapter can attach them to
// the caller's trace; every Observer given gets every event, and one that
// sets only some funcs gets only those.
func TestObserversGetTheCallersContext(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]any{}
	note := func(event string) func(ctx context.Context) {
		return func(ctx context.Context) {
			mu.Lock()
			defer mu.Unlock()
			seen[event] = ctx.Value(traceKey{})
		}
	}
	full := leasehold.Observer{
		OnAcquire: func(ctx context.Context, _ leasehold.AcquireEvent) { note("acquire")(ctx) },
		OnRelease: func(ctx context.Context, _ leasehold.ReleaseEvent) { note("release")(ctx) },
		OnNotOwned: func(ctx context.Context, _ leasehold.NotOwnedEvent) {
			note("not owned")(ctx)
		},
	}
	var second int
	partial := leasehold.Observer{OnAcquire: func(context.Context, leasehold.AcquireEvent) { mu.Lock(); second++; mu.Unlock() }}
	c := leasehold.New(memstore.New(), leasehold.WithObserver(full), leasehold.WithObserver(partial), leasehold.WithObserver(leasehold.Observer{}))
	ctx := context.WithValue(t.Context(), traceKey{}, "trace-1")
	err := c.Hold(ctx, "jobs:1", time.Minute, func(ctx context.Context, l *leasehold.Lease) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "jobs:2", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	_ = l.Release(context.WithValue(t.Context(), traceKey{}, "trace-2")) // not owned any more: no wrong-owner event after our own release
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range []string{"acquire", "release"} {
		if seen[ev] != "trace-1" {
			t.Errorf("%s event saw context value %v, want the caller's trace-1", ev, seen[ev])
		}
	}
	if second != 2 {
		t.Errorf("the second Observer got %d acquire events, want 2", second)
	}
}

// The events metrics and traces are made of: an Acquire announced and then
// ended (Blocking, with its TTL), a TryAcquire not announced, a renewal the
// store accepted (by hand and by KeepAlive), and every store call timed
// with its operation, the store's package and its answer.
func TestAcquireRenewAndStoreCallEvents(t *testing.T) {
	var (
		mu     sync.Mutex
		starts []leasehold.Event
		acqs   []leasehold.AcquireEvent
		renews []leasehold.RenewEvent
		calls  []leasehold.StoreCallEvent
	)
	renewed := make(chan struct{}, 16)
	obs := leasehold.Observer{
		OnAcquireStart: func(_ context.Context, l leasehold.Event) { mu.Lock(); starts = append(starts, l); mu.Unlock() },
		OnAcquire:      func(_ context.Context, e leasehold.AcquireEvent) { mu.Lock(); acqs = append(acqs, e); mu.Unlock() },
		OnRenew: func(_ context.Context, e leasehold.RenewEvent) {
			mu.Lock()
			renews = append(renews, e)
			mu.Unlock()
			select {
			case renewed <- struct{}{}:
			default:
			}
		},
		OnStoreCall: func(_ context.Context, e leasehold.StoreCallEvent) { mu.Lock(); calls = append(calls, e); mu.Unlock() },
	}
	c := leasehold.New(memstore.New(), leasehold.WithObserver(obs))
	defer c.Close()
	ctx := t.Context()
	l, err := c.Acquire(ctx, "jobs:1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "jobs:1", 2*time.Minute); err == nil {
		t.Fatal("TryAcquire of a held key succeeded")
	}
	if err := l.Renew(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	k, err := l.KeepAlive(ctx, leasehold.WithRenewInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the hand renewal's, then KeepAlive's
		select {
		case <-renewed:
		case <-time.After(10 * time.Second):
			t.Fatal("no renewal event within 10 s")
		}
	}
	k.Stop()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 1 || starts[0].Key != "jobs:1" || starts[0].Namespace != "jobs" || starts[0].Fence != 0 {
		t.Errorf("OnAcquireStart = %+v, want one for jobs:1", starts)
	}
	if len(acqs) != 2 ||
		acqs[0].Result != leasehold.Acquired || !acqs[0].Blocking || acqs[0].TTL != time.Minute || acqs[0].Fence != l.Fence() ||
		acqs[1].Result != leasehold.Busy || acqs[1].Blocking || acqs[1].TTL != 2*time.Minute {
		t.Errorf("OnAcquire = %+v, want a blocking Acquire then a busy TryAcquire, with their TTLs", acqs)
	}
	if len(renews) < 2 || renews[0].TTL != 3*time.Minute || renews[0].Fence != l.Fence() || renews[1].TTL != 3*time.Minute {
		t.Errorf("OnRenew = %+v, want the hand renewal and KeepAlive's, with the lease's TTL", renews)
	}
	ops := map[string]int{}
	for _, e := range calls {
		ops[e.Op]++
		if e.Store != "memstore" || e.Items < 1 || e.Took < 0 {
			t.Errorf("OnStoreCall %+v: want store memstore, items ≥ 1", e)
		}
		if e.Op == "acquire" && e.Err != nil && !errors.Is(e.Err, leasehold.ErrNotAcquired) {
			t.Errorf("OnStoreCall acquire error %v", e.Err)
		}
	}
	if ops["acquire"] != 2 || ops["release"] != 1 || ops["renew"] != 1 || ops["renew_batch"] < 1 {
		t.Errorf("store calls by operation %v, want 2 acquires, 1 release, 1 renew by hand and KeepAlive's renew_batch", ops)
	}
}
