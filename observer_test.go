package leasehold_test

import (
	"context"
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
