package leasehold

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

// A detached context ends with its shared deadline, to the nanosecond, and
// what watches it (context.AfterFunc, a child context) is woken then without
// a goroutine of its own while it waits.
func TestDetachedContextEndsWithItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sharedDeadlines
		parent, cancel := context.WithCancel(t.Context())
		cancel()
		ctx := &detachedContext{Context: context.WithoutCancel(parent), end: s.within(time.Now(), time.Second)}
		fired := make(chan struct{})
		context.AfterFunc(ctx, func() { close(fired) })
		stopped := false
		stop := context.AfterFunc(ctx, func() { stopped = true })
		if !stop() {
			t.Error("stop of an AfterFunc before the deadline returned false")
		}
		child, cancelChild := context.WithCancel(ctx)
		defer cancelChild()

		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		select {
		case <-fired:
			t.Fatal("AfterFunc ran before the deadline")
		case <-child.Done():
			t.Fatal("the child ended before the deadline")
		default:
		}
		if ctx.Err() != nil || context.Cause(ctx) != nil {
			t.Fatalf("before the deadline: Err %v, Cause %v, want nil, nil (the parent's cancellation does not reach it)", ctx.Err(), context.Cause(ctx))
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		select {
		case <-fired:
		default:
			t.Fatal("AfterFunc did not run at the deadline")
		}
		if !errors.Is(child.Err(), context.DeadlineExceeded) || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Errorf("at the deadline: child %v, ctx %v; want DeadlineExceeded", child.Err(), ctx.Err())
		}
		if stopped {
			t.Error("a stopped AfterFunc ran")
		}
	})
}

// Children of a detached context are watched through AfterFunc: making many
// starts no goroutine each, as context.WithCancel would for a context type
// it does not know.
func TestDetachedContextChildrenNeedNoGoroutine(t *testing.T) {
	var s sharedDeadlines
	ctx := &detachedContext{Context: context.Background(), end: s.within(time.Now(), time.Minute)}
	before := runtime.NumGoroutine()
	cancels := make([]context.CancelFunc, 200)
	for i := range cancels {
		_, cancels[i] = context.WithCancel(ctx)
	}
	after := runtime.NumGoroutine()
	for _, cancel := range cancels {
		cancel()
	}
	if after-before >= len(cancels)/2 {
		t.Errorf("%d goroutines for %d child contexts, want none each", after-before, len(cancels))
	}
}

// within never returns a deadline past the bound, nor more than 1 ms (a
// sixteenth of a bound under 16 ms) before, at the edges too.
func TestSharedDeadlineWithinItsBound(t *testing.T) {
	var s sharedDeadlines
	now := time.Now()
	for i, bound := range []time.Duration{time.Nanosecond, 15, 16, 17, time.Millisecond, 16*time.Millisecond - 1, 16 * time.Millisecond,
		16*time.Millisecond + 1, 2 * time.Second, time.Hour, 1<<62 - 1} {
		// Calls 100 µs apart: a deadline shared with the call before must
		// still be within this call's bound.
		at := now.Add(time.Duration(i) * 100 * time.Microsecond)
		dl, ok := s.within(at, bound).Deadline()
		share := min(bound/16, time.Millisecond)
		if !ok || dl.After(at.Add(bound)) || dl.Before(at.Add(bound-share)) {
			t.Errorf("bound %v: deadline %v after now (ok %v), want within [%v, %v]", bound, dl.Sub(at), ok, bound-share, bound)
		}
	}
}

// BenchmarkReleaseContext compares a release's context with a deadline of
// its own (context.WithDeadline, as before the shared deadlines) and on a
// shared deadline, each watched once as a driver watches a statement's
// (context.AfterFunc, then its stop), on every core.
// Reproduce: go test -run '^$' -bench ReleaseContext -benchmem -count 6
func BenchmarkReleaseContext(b *testing.B) {
	const bound = 2 * time.Second
	watch := func(ctx context.Context) {
		stop := context.AfterFunc(ctx, func() {})
		stop()
	}
	b.Run("own-deadline", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ctx, cancel := context.WithDeadline(context.WithoutCancel(b.Context()), time.Now().Add(bound))
				watch(ctx)
				cancel()
			}
		})
	})
	b.Run("shared", func(b *testing.B) {
		var s sharedDeadlines
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				watch(&detachedContext{Context: context.WithoutCancel(b.Context()), end: s.within(time.Now(), bound)})
			}
		})
	})
}

// A release bound longer than maxSharedBound gets a context of its own,
// cancelled when the release returns, so that a long WithReleaseTimeout
// does not keep a shared context alive per millisecond of releases.
func TestLongReleaseBoundsAreNotShared(t *testing.T) {
	c := New(nil)
	ctx, cancel := c.releaseContext(context.Background(), time.Hour)
	if _, shared := ctx.(*detachedContext); shared {
		t.Fatal("a 1 h release bound got a shared deadline")
	}
	cancel()
	if ctx.Err() == nil {
		t.Fatal("cancelling a release's own context did not end it")
	}
	ctx, cancel = c.releaseContext(context.Background(), maxSharedBound)
	defer cancel()
	if _, shared := ctx.(*detachedContext); !shared {
		t.Fatal("a release bound of maxSharedBound did not share its deadline")
	}
}
