package leasehold_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// flakyStore fails renewals and releases while told to, as a store that
// does not answer.
type flakyStore struct {
	*memstore.Store
	renewDown, releaseDown atomic.Bool
}

var errNoAnswer = errors.New("no answer from the store")

func (s *flakyStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if s.renewDown.Load() {
		return errNoAnswer
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

func (s *flakyStore) Release(ctx context.Context, key, token string) error {
	if s.releaseDown.Load() {
		return errNoAnswer
	}
	return s.Store.Release(ctx, key, token)
}

// A renewal or release by hand that the store does not answer is reported
// as one OnRenewFailure or OnReleaseFailure, as the Observer's doc says,
// and a Hold's release failure once, not twice. Before, Lease.Renew and
// Lease.Release reported nothing, and leasehold_lock_renew_failures_total
// and _release_failures_total missed them.
func TestFailuresByHandAreReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: memstore.New()}
		var renewFailures, releaseFailures atomic.Int32
		c := leasehold.New(store, leasehold.WithLogger(quietLogger()), leasehold.WithObserver(leasehold.Observer{
			OnRenewFailure:   func(context.Context, leasehold.RenewFailureEvent) { renewFailures.Add(1) },
			OnReleaseFailure: func(context.Context, leasehold.ReleaseFailureEvent) { releaseFailures.Add(1) },
		}))
		defer c.Close()
		ctx := t.Context()
		l, err := c.TryAcquire(ctx, "jobs:1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		store.renewDown.Store(true)
		if err := l.Renew(ctx, time.Minute); !errors.Is(err, errNoAnswer) {
			t.Fatalf("Renew: %v", err)
		}
		store.releaseDown.Store(true)
		if err := l.Release(ctx); !errors.Is(err, errNoAnswer) {
			t.Fatalf("Release: %v", err)
		}
		if renewFailures.Load() != 1 || releaseFailures.Load() != 1 {
			t.Errorf("by hand: %d renew failures and %d release failures reported, want 1 and 1", renewFailures.Load(), releaseFailures.Load())
		}
		store.renewDown.Store(false)
		if err := c.Hold(ctx, "jobs:2", time.Minute, func(context.Context, *leasehold.Lease) error { return nil }); err != nil {
			t.Fatalf("Hold: %v", err)
		}
		if releaseFailures.Load() != 2 {
			t.Errorf("after a Hold whose release failed: %d release failures reported, want 2", releaseFailures.Load())
		}
	})
}

// A hand-off that lands for a waiter whose context ended meanwhile is given
// back at once: the waiter's Acquire reports a timeout, and no OnRelease
// reports the end of an ownership no OnAcquire reported.
func TestLeaseGivenBackUnseenIsNotReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newQueueStore()
		var acquired, released atomic.Int32
		c := leasehold.New(store, leasehold.WithObserver(leasehold.Observer{
			OnAcquire: func(_ context.Context, e leasehold.AcquireEvent) {
				if e.Result == leasehold.Acquired {
					acquired.Add(1)
				}
			},
			OnRelease: func(context.Context, leasehold.ReleaseEvent) { released.Add(1) },
		}))
		defer c.Close()
		l1, err := c.TryAcquire(t.Context(), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(t.Context())
		got := make(chan error, 1)
		go func() {
			_, err := c.Acquire(wctx, "k", time.Minute)
			got <- err
		}()
		synctest.Wait() // queued, asleep
		store.beforeHandOff = cancel
		if err := l1.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := <-got; !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("the waiter: %v, want ErrNotAcquired", err)
		}
		synctest.Wait()
		if a, r := acquired.Load(), released.Load(); r > a {
			t.Errorf("%d OnRelease for %d OnAcquire(acquired)", r, a)
		}
		if info, _ := store.Inspect(t.Context(), "k"); info.Held {
			t.Errorf("the key is held by %q after the waiter left", info.Token)
		}
	})
}

// downAcquireStore fails every acquire.
type downAcquireStore struct{ *memstore.Store }

func (downAcquireStore) Acquire(context.Context, string, string, time.Duration) (int64, error) {
	return 0, errNoAnswer
}

// An acquire the store fails is logged (a RunLoop against a dead store
// wrote nothing to the log, although the runbook names the line).
func TestAcquireFailureIsLogged(t *testing.T) {
	var buf syncBuffer
	c := leasehold.New(downAcquireStore{memstore.New()}, leasehold.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	defer c.Close()
	if _, err := c.TryAcquire(t.Context(), "loops:sweep", time.Minute); !errors.Is(err, errNoAnswer) {
		t.Fatalf("TryAcquire: %v", err)
	}
	if out := buf.String(); !strings.Contains(out, "leasehold: acquire failed") || !strings.Contains(out, "loops:sweep") || !strings.Contains(out, errNoAnswer.Error()) {
		t.Errorf("log: %q; want the acquire failure with its key and error", out)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An Observer may Release the lease it is told about from OnRenew of a
// Renew by hand: the event comes once the Renew no longer holds the lease.
// Before, the Release waited for the Renew that was reporting to it, until
// its 2 s bound, failed, and left the key held for its TTL.
func TestObserverReleasesFromOnRenewOfARenewByHand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		var target atomic.Pointer[leasehold.Lease]
		var relErr error
		c := leasehold.New(mem, leasehold.WithObserver(leasehold.Observer{OnRenew: func(context.Context, leasehold.RenewEvent) {
			if l := target.Swap(nil); l != nil {
				relErr = l.Release(context.Background())
			}
		}}))
		defer c.Close()
		l, err := c.TryAcquire(t.Context(), "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		target.Store(l)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := l.Renew(ctx, time.Minute); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if took := time.Since(start); took > 10*time.Millisecond {
			t.Errorf("Renew with a 10ms deadline returned after %v", took)
		}
		if relErr != nil {
			t.Errorf("Release from OnRenew: %v", relErr)
		}
		if info, _ := mem.Inspect(context.Background(), "k"); info.Held {
			t.Errorf("the key is held after the Observer's Release (%v left)", info.TTL)
		}
	})
}
