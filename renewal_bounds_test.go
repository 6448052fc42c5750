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

// hangingRenewStore never answers a renewal: each waits for the end of its
// context. It records the deadlines the engine gave its calls.
type hangingRenewStore struct {
	driver.Store
	mu        sync.Mutex
	deadlines []time.Time
}

func (s *hangingRenewStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	s.mu.Lock()
	s.deadlines = append(s.deadlines, dl)
	s.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// No renewal call runs past its lease's local deadline (design.md §4, "one
// renewal call"): a renewal sent late in the lease, after a failure or on a
// long interval, was bounded by the interval alone, so one that landed just
// after the lease was given up kept the key from the next owner for up to
// another TTL.
func TestRenewalCallsEndByTheLocalDeadline(t *testing.T) {
	const ttl, margin = time.Second, 100 * time.Millisecond
	for name, opts := range map[string][]leasehold.HoldOption{
		"defaults":      nil,
		"long interval": {leasehold.WithRenewInterval(800 * time.Millisecond), leasehold.WithDriftMargin(margin)},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &hangingRenewStore{Store: memstore.New()}
				c := leasehold.New(store, leasehold.WithLogger(quietLogger()))
				defer c.Close()
				start := time.Now() // the acquire's send time: the fake clock stands still meanwhile
				l, err := c.TryAcquire(t.Context(), "k", ttl)
				if err != nil {
					t.Fatal(err)
				}
				k, err := l.KeepAlive(t.Context(), opts...)
				if err != nil {
					t.Fatal(err)
				}
				<-k.Context().Done()
				deadline := start.Add(ttl - margin)
				if now := time.Now(); now.After(deadline) {
					t.Errorf("given up at +%v, after the local deadline +%v", now.Sub(start), deadline.Sub(start))
				}
				if !errors.Is(context.Cause(k.Context()), leasehold.ErrAbandoned) {
					t.Errorf("cause %v, want ErrAbandoned", context.Cause(k.Context()))
				}
				time.Sleep(2 * ttl) // every call ends by its own deadline
				store.mu.Lock()
				defer store.mu.Unlock()
				if len(store.deadlines) == 0 {
					t.Fatal("no renewal call")
				}
				for i, dl := range store.deadlines {
					if dl.IsZero() || dl.After(deadline) {
						t.Errorf("renewal call %d ends at +%v, past the local deadline +%v", i+1, dl.Sub(start), deadline.Sub(start))
					}
				}
			})
		})
	}
}

// gatedRenewStore holds the first renewal until gate is closed, then applies
// it: a renewal whose reply comes late, as from a stalled server.
type gatedRenewStore struct {
	driver.Store
	once    sync.Once
	arrived chan struct{}
	gate    chan struct{}
}

func (s *gatedRenewStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.arrived)
		<-s.gate
		return s.Store.Renew(context.Background(), key, token, ttl)
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

// A Renew by hand after Stop waits for the stopped KeepAlive's renewal still
// in flight: landing after it, that renewal set the shorter TTL it was sent
// with, and another Client took the key while the lease's new KeepAlive
// counted on the longer one.
func TestRenewWaitsForAStoppedKeepAlivesRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		store := &gatedRenewStore{Store: mem, arrived: make(chan struct{}), gate: make(chan struct{})}
		c := leasehold.New(store, leasehold.WithLogger(quietLogger()))
		defer c.Close()
		other := leasehold.New(mem)
		defer other.Close()
		ctx := t.Context()
		l, err := c.TryAcquire(ctx, "k", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-store.arrived
		k.Stop()

		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		err = l.Renew(short, 10*time.Second)
		cancel()
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Renew while the old renewal is in flight, ctx ending first: %v, want its deadline", err)
		}

		time.AfterFunc(50*time.Millisecond, func() { close(store.gate) })
		if err := l.Renew(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		k2, err := l.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer k2.Stop()
		time.Sleep(time.Second) // three of the old TTLs
		if err := k2.Context().Err(); err != nil {
			t.Fatalf("the new KeepAlive ended: %v", context.Cause(k2.Context()))
		}
		if l2, err := other.TryAcquire(ctx, "k", time.Second); err == nil {
			t.Fatalf("another Client took the key (fence %d) while the lease's KeepAlive was live", l2.Fence())
		}
	})
}

// lostRenewStore applies the first Renew and loses its reply.
type lostRenewStore struct {
	driver.Store
	once sync.Once
}

func (s *lostRenewStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	lost := false
	s.once.Do(func() { lost = true })
	if err := s.Store.Renew(ctx, key, token, ttl); err != nil || !lost {
		return err
	}
	return errors.New("no reply: it may still be applied")
}

// A Renew to a shorter TTL whose reply is lost may have shortened the
// lease: the lease and a KeepAlive started after count from it. Before, they
// counted from the longer TTL, and another Client took the key while the
// KeepAlive's context was live.
func TestLostRenewToAShorterTTLCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		c := leasehold.New(&lostRenewStore{Store: mem}, leasehold.WithLogger(quietLogger()))
		defer c.Close()
		other := leasehold.New(mem)
		defer other.Close()
		ctx := t.Context()
		l, err := c.TryAcquire(ctx, "k", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Renew(ctx, 3*time.Second); err == nil {
			t.Fatal("the lost renewal reported no error")
		}
		k, err := l.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Stop()
		time.Sleep(4 * time.Second)
		if l2, err := other.TryAcquire(ctx, "k", time.Second); err == nil && k.Context().Err() == nil {
			t.Fatalf("another Client took the key (fence %d) while the KeepAlive (fence %d) was live", l2.Fence(), l.Fence())
		}
	})
}
