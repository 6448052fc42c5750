package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// closingStore is a memstore with a Close that counts its calls and, once
// closed, fails every call as a closed connection would.
type closingStore struct {
	*memstore.Store
	closes atomic.Int32
}

var errStoreClosed = errors.New("store closed")

func (s *closingStore) Close() error {
	s.closes.Add(1)
	return nil
}

func (s *closingStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if s.closes.Load() > 0 {
		return errStoreClosed
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

func (s *closingStore) RenewBatch(ctx context.Context, items []driver.RenewItem) []error {
	if s.closes.Load() > 0 {
		errs := make([]error, len(items))
		for i := range errs {
			errs[i] = errStoreClosed
		}
		return errs
	}
	return s.Store.RenewBatch(ctx, items)
}

func (s *closingStore) Release(ctx context.Context, key, token string) error {
	if s.closes.Load() > 0 {
		return errStoreClosed
	}
	return s.Store.Release(ctx, key, token)
}

// With WithOwnedStore one Close closes both, once however often it is
// called; without it the store is left to its owner. Closing in the wrong
// order stays safe: the store first makes the Client's renewals fail (its
// leases are given up under the fence policy, never released by mistake),
// and the Client's Close after it closes nothing twice.
func TestOneCloseAndEitherOrder(t *testing.T) {
	owned := &closingStore{Store: memstore.New()}
	c := leasehold.New(owned, leasehold.WithOwnedStore())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if n := owned.closes.Load(); n != 1 {
		t.Fatalf("WithOwnedStore: the store was closed %d times, want once", n)
	}

	notOwned := &closingStore{Store: memstore.New()}
	if err := leasehold.New(notOwned).Close(); err != nil || notOwned.closes.Load() != 0 {
		t.Fatalf("without WithOwnedStore the Client closed the store (%v, %d)", err, notOwned.closes.Load())
	}

	// The store closed first, under a kept-alive lease.
	early := &closingStore{Store: memstore.New()}
	c = leasehold.New(early, leasehold.WithOwnedStore())
	l, err := c.TryAcquire(t.Context(), "jobs:1", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	k, err := l.KeepAlive(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_ = early.Close()
	select {
	case <-k.Context().Done():
		if !errors.Is(context.Cause(k.Context()), leasehold.ErrAbandoned) {
			t.Fatalf("cause %v, want ErrAbandoned", context.Cause(k.Context()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a lease on a closed store was not given up")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := early.closes.Load(); n != 2 {
		t.Fatalf("the store was closed %d times, want twice (by hand, then by the Client, which is harmless)", n)
	}
}

// A Lease prints as its key, fence and time left, never its token, with
// every verb; a Client logs nothing unless given a logger.
func TestLeasePrintsNoTokenAndTheClientIsQuiet(t *testing.T) {
	var logs strings.Builder
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(prev)
	c := leasehold.New(memstore.New())
	l, err := c.TryAcquire(t.Context(), "jobs:42", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		out := fmt.Sprintf(verb, l)
		if strings.Contains(out, l.Token()) || strings.Contains(out, l.Token()[:10]) || !strings.Contains(out, "jobs:42") {
			t.Errorf("%s prints %s", verb, out)
		}
	}
	if out := l.String(); !strings.Contains(out, fmt.Sprintf("fence %d", l.Fence())) || !strings.Contains(out, "left") {
		t.Errorf("String() = %q, want the fence and the time left", out)
	}
	// A release refused, an abandonment: events, and no log line.
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatal(err)
	}
	if out := l.String(); !strings.Contains(out, "ended") {
		t.Errorf("String() of a released lease = %q", out)
	}
	if logs.Len() != 0 {
		t.Errorf("a Client without WithLogger logged:\n%s", logs.String())
	}
	var nilLease *leasehold.Lease
	if s := fmt.Sprint(nilLease); s != "<nil lease>" {
		t.Errorf("a nil lease prints %q", s)
	}
}

// Close ends the Client's waiting Acquires at once with ErrClosed, the head
// of its line and the waiters behind it, on a store with a queue and on one
// without; before, each went on until its next backoff step, up to the
// maximum backoff later.
func TestCloseEndsWaitingAcquires(t *testing.T) {
	for name, store := range map[string]func() driver.Store{
		"memstore":         func() driver.Store { return memstore.New() },
		"no release watch": func() driver.Store { return struct{ driver.Store }{memstore.New()} },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := store()
				holder := leasehold.New(s)
				defer holder.Close()
				if _, err := holder.TryAcquire(t.Context(), "k", time.Minute); err != nil {
					t.Fatal(err)
				}
				c := leasehold.New(s, leasehold.WithBackoff(time.Minute, time.Minute))
				const waiters = 3
				errs := make(chan error, waiters)
				for range waiters {
					go func() {
						_, err := c.Acquire(t.Context(), "k", time.Minute)
						errs <- err
					}()
				}
				synctest.Wait() // every waiter asleep, a minute's backoff ahead
				c.Close()
				timeout := time.After(10 * time.Second)
				for i := range waiters {
					select {
					case err := <-errs:
						if !errors.Is(err, leasehold.ErrClosed) {
							t.Errorf("waiter %d: %v, want ErrClosed", i, err)
						}
					case <-timeout:
						t.Fatalf("%d of %d waiters still waiting 10 s after Close", waiters-i, waiters)
					}
				}
			})
		})
	}
}

// ownedStore is a queue store a Client owns (WithOwnedStore) that counts
// the calls that take or watch a key once it is closed; like the bundled
// stores it still serves releases after its Close.
type ownedStore struct {
	*queueStore
	closed   atomic.Bool
	afterUse atomic.Int64
}

func (s *ownedStore) Close() error { s.closed.Store(true); return nil }

func (s *ownedStore) used() {
	if s.closed.Load() {
		s.afterUse.Add(1)
	}
}

func (s *ownedStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	s.used()
	return s.queueStore.Acquire(ctx, key, token, ttl)
}

func (s *ownedStore) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	s.used()
	return s.queueStore.AcquireQueued(ctx, key, token, ttl, stay)
}

func (s *ownedStore) WatchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	s.used()
	return s.queueStore.WatchTurn(ctx, key, token)
}

// With WithOwnedStore, Close closes the store only after the Client has
// stopped taking keys from it: an Acquire after Close reaches neither the
// store's acquire nor its turn watch. A Hold whose fn returns after Close
// still gives its key back, so that no one waits a TTL for a Client that is
// gone.
func TestOwnedStoreIsNotUsedAfterClose(t *testing.T) {
	s := &ownedStore{queueStore: newQueueStore()}
	c := leasehold.New(s, leasehold.WithOwnedStore())
	inFn, closed, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- c.Hold(context.Background(), "owned:hold", time.Minute, func(ctx context.Context, l *leasehold.Lease) error {
			close(inFn)
			<-ctx.Done() // cancelled by Close
			<-closed     // and returns once Close has
			return nil
		})
	}()
	<-inFn
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	close(closed)
	if err := <-done; err != nil {
		// fn ran exclusively to its end: the lease outlives it.
		t.Errorf("Hold whose fn returned after Close: %v", err)
	}
	if info, _ := s.Inspect(t.Context(), "owned:hold"); info.Held {
		t.Error("a Hold ended by Close left its key held: its release did not go")
	}
	if _, err := c.Acquire(t.Context(), "owned:acquire", time.Second); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	if n := s.afterUse.Load(); n > 0 {
		t.Fatalf("the Client made %d acquire or watch calls after Close closed the store it owns", n)
	}
}

// With WithOwnedStore, Close closes the store once the store calls in
// flight have returned, and no later than 2 s after it began when one hangs.
func TestOwnedStoreClosesAfterTheCallsInFlight(t *testing.T) {
	for _, hang := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			s := &ownedStore{queueStore: newQueueStore()}
			entered, answer := make(chan struct{}), make(chan struct{})
			s.beforeQueued = func(context.Context, string) {
				close(entered)
				<-answer
			}
			defer close(answer)
			c := leasehold.New(s, leasehold.WithOwnedStore())
			go func() { _, _ = c.Acquire(context.Background(), "owned:inflight", time.Second) }()
			<-entered
			start := time.Now()
			closed := make(chan struct{})
			go func() {
				_ = c.Close()
				close(closed)
			}()
			synctest.Wait()
			if s.closed.Load() {
				t.Fatal("Close closed the store under a call in flight")
			}
			if !hang {
				answer <- struct{}{}
			}
			<-closed
			if took := time.Since(start); !s.closed.Load() || (hang && took != 2*time.Second) || (!hang && took != 0) {
				t.Fatalf("hang %v: Close returned after %v, store closed %v", hang, took, s.closed.Load())
			}
		})
	}
}
