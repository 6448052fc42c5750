package leasehold_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// releaseCtxStore records the context of each Release; block makes a
// release wait for its context's end.
type releaseCtxStore struct {
	driver.Store
	block bool

	mu   sync.Mutex
	ctxs []context.Context
	errs []error // each context's Err when the release began
}

func (s *releaseCtxStore) Release(ctx context.Context, key, token string) error {
	s.mu.Lock()
	s.ctxs = append(s.ctxs, ctx)
	s.errs = append(s.errs, ctx.Err())
	s.mu.Unlock()
	if s.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Release(ctx, key, token)
}

func (s *releaseCtxStore) last(t *testing.T) (context.Context, error) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ctxs) == 0 {
		t.Fatal("no release reached the store")
	}
	return s.ctxs[len(s.ctxs)-1], s.errs[len(s.errs)-1]
}

type ctxKey struct{}

// A release runs under a context of its own: the caller's values, not its
// cancellation, and a deadline within the bound (2 s, or WithReleaseTimeout)
// that is never later than the bound and at most 1 ms earlier. A caller's
// earlier deadline is kept exactly. Releases that start within 1 ms share
// one deadline; later ones get a new one.
func TestReleaseContextIsDetachedAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &releaseCtxStore{Store: memstore.New()}
		c := leasehold.New(st)
		acquire := func(key string) *leasehold.Lease {
			t.Helper()
			l, err := c.TryAcquire(t.Context(), key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		within := func(ctx context.Context, start time.Time, bound time.Duration) {
			t.Helper()
			dl, ok := ctx.Deadline()
			if !ok {
				t.Fatal("the release's context has no deadline")
			}
			if latest, earliest := start.Add(bound), start.Add(bound-time.Millisecond); dl.After(latest) || dl.Before(earliest) {
				t.Errorf("the release's deadline is %v after it began, want within [%v, %v]", dl.Sub(start), bound-time.Millisecond, bound)
			}
		}

		// A cancelled caller: the release goes out, with the caller's values.
		caller, cancel := context.WithCancelCause(context.WithValue(t.Context(), ctxKey{}, "v"))
		cancel(errors.New("the caller gave up"))
		start := time.Now()
		if err := acquire("a").Release(caller); err != nil {
			t.Fatalf("Release with a cancelled context: %v", err)
		}
		first, errAtStart := st.last(t)
		if errAtStart != nil || context.Cause(first) != nil {
			t.Errorf("the release's context began ended: Err %v, Cause %v", errAtStart, context.Cause(first))
		}
		if v := first.Value(ctxKey{}); v != "v" {
			t.Errorf("the release's context carries %v, want the caller's value", v)
		}
		within(first, start, 2*time.Second)

		// Started 600 µs later: the same deadline.
		time.Sleep(600 * time.Microsecond)
		if err := acquire("b").Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		second, _ := st.last(t)
		if second.Done() != first.Done() {
			t.Error("two releases 600 µs apart got deadlines of their own, want one shared")
		}
		within(second, time.Now(), 2*time.Second)

		// Just over 1 ms after the first: a new one.
		time.Sleep(400*time.Microsecond + time.Nanosecond)
		if err := acquire("c").Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		third, _ := st.last(t)
		if third.Done() == first.Done() {
			t.Error("a release over 1 ms after another shares its deadline, which would end it early")
		}
		within(third, time.Now(), 2*time.Second)

		// Hold's release, bounded by WithReleaseTimeout.
		err := c.Hold(t.Context(), "d", time.Minute, func(context.Context, *leasehold.Lease) error {
			start = time.Now()
			return nil
		}, leasehold.WithReleaseTimeout(800*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		held, _ := st.last(t)
		within(held, start, 800*time.Millisecond)

		// A caller's earlier deadline, exactly.
		ctx, cancelDL := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancelDL()
		want, _ := ctx.Deadline()
		if err := acquire("e").Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got, _ := st.last(t); !deadlineIs(got, want) {
			dl, _ := got.Deadline()
			t.Errorf("the release's deadline is %v, want the caller's %v", dl, want)
		}
	})
}

func deadlineIs(ctx context.Context, want time.Time) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Equal(want)
}

// A release to a store that never answers ends within its bound, never
// after it, and says the deadline passed.
func TestReleaseEndsByItsSharedDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &releaseCtxStore{Store: memstore.New()}
		c := leasehold.New(st, leasehold.WithLogger(quietLogger()))
		l, err := c.TryAcquire(t.Context(), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		st.block = true
		start := time.Now()
		err = l.Release(t.Context())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Release to a silent store: %v, want a deadline error", err)
		}
		if took := time.Since(start); took > 2*time.Second || took < 2*time.Second-time.Millisecond {
			t.Errorf("Release returned after %v, want within [%v, 2s]", took, 2*time.Second-time.Millisecond)
		}
		ctx, _ := st.last(t)
		if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			t.Errorf("Cause of the ended release context: %v, want DeadlineExceeded", context.Cause(ctx))
		}
	})
}
