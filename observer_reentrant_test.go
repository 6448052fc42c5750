package leasehold_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// An Observer may Release or Stop the lease it is told about from the
// renewal goroutine (OnRenew here): the call returns, and the engine goes
// on renewing the Client's other leases. It once deadlocked the engine, and
// every other lease of the Client then went unrenewed and unfenced.
func TestObserverMayEndTheLeaseFromTheRenewalGoroutine(t *testing.T) {
	for _, how := range []string{"Release", "Stop"} {
		t.Run(how, func(t *testing.T) {
			const ttl = time.Second
			ctx := t.Context()
			var target atomic.Pointer[leasehold.Lease]
			var targetKA atomic.Pointer[leasehold.KeepAlive]
			otherRenewed := make(chan struct{}, 64)
			ended := make(chan error, 1)
			obs := leasehold.Observer{OnRenew: func(_ context.Context, ev leasehold.RenewEvent) {
				if ev.Key == "other" {
					select {
					case otherRenewed <- struct{}{}:
					default:
					}
				}
				if l := target.Load(); l != nil && ev.Key == l.Key() && target.CompareAndSwap(l, nil) {
					if how == "Stop" {
						targetKA.Load().Stop()
						ended <- nil
						return
					}
					ended <- l.Release(context.Background())
				}
			}}
			mem := memstore.New()
			c := leasehold.New(mem, leasehold.WithObserver(obs))
			defer c.Close()
			a, err := c.TryAcquire(ctx, "a", ttl)
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.TryAcquire(ctx, "other", ttl)
			if err != nil {
				t.Fatal(err)
			}
			kb, err := b.KeepAlive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ka, err := a.KeepAlive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			targetKA.Store(ka)
			target.Store(a)
			select {
			case err := <-ended:
				if err != nil {
					t.Fatalf("%s from OnRenew: %v", how, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s from OnRenew has not returned after 10 s", how)
			}
			if ka.Context().Err() == nil {
				t.Errorf("a's KeepAlive context is live after %s", how)
			}
			if info, _ := mem.Inspect(ctx, "a"); info.Held != (how == "Stop") {
				t.Errorf("a held = %v after %s", info.Held, how)
			}
			// The engine still renews the other lease: two more renewals,
			// about 0.7 s on a quiet machine.
			for len(otherRenewed) > 0 {
				<-otherRenewed
			}
			timeout := time.After(10 * time.Second)
			for i := range 2 {
				select {
				case <-otherRenewed:
				case <-timeout:
					t.Fatalf("the other lease was renewed %d times in 10 s after %s from OnRenew; want 2", i, how)
				}
			}
			if err := kb.Context().Err(); err != nil {
				t.Fatalf("the other lease's KeepAlive ended: %v", context.Cause(kb.Context()))
			}
		})
	}
}

// An Observer may Close the Client from the renewal goroutine: Close
// returns, and every KeepAlive's context ends with ErrClosed.
func TestObserverMayCloseTheClientFromTheRenewalGoroutine(t *testing.T) {
	var c *leasehold.Client
	closed := make(chan struct{})
	var once atomic.Bool
	obs := leasehold.Observer{OnRenew: func(context.Context, leasehold.RenewEvent) {
		if once.CompareAndSwap(false, true) {
			c.Close()
			close(closed)
		}
	}}
	c = leasehold.New(memstore.New(), leasehold.WithObserver(obs))
	var kas []*leasehold.KeepAlive
	for _, key := range []string{"a", "b"} {
		l, err := c.TryAcquire(t.Context(), key, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		kas = append(kas, k)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close from OnRenew has not returned after 10 s")
	}
	for i, k := range kas {
		if !errors.Is(context.Cause(k.Context()), leasehold.ErrClosed) {
			t.Errorf("KeepAlive %d: cause %v, want ErrClosed", i, context.Cause(k.Context()))
		}
	}
}

// failRenewOf fails every renewal of one key.
type failRenewOf struct {
	driver.Store
	key string
}

func (s failRenewOf) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if key == s.key {
		return errors.New("store unreachable")
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

// A Close from OnAbandon, while the engine holds another lease it has taken
// out of its heap to renew, ends that lease's KeepAlive too: it was put back
// in the heap after Close had taken its list, and was neither renewed nor
// fenced again, its context live.
func TestObserverCloseEndsTheLeasesTheEngineHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c *leasehold.Client
		closed := make(chan struct{})
		obs := leasehold.Observer{OnAbandon: func(context.Context, leasehold.AbandonEvent) {
			c.Close()
			close(closed)
		}}
		c = leasehold.New(failRenewOf{memstore.New(), "a"}, leasehold.WithObserver(obs), leasehold.WithLogger(quietLogger()))
		ctx := t.Context()
		// a: renewals fail, given up at 270 ms; b: its renewal due at
		// 280 ms, taken out of the heap with a (a 20 ms batch window).
		la, err := c.TryAcquire(ctx, "a", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := c.TryAcquire(ctx, "b", 840*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := la.KeepAlive(ctx); err != nil {
			t.Fatal(err)
		}
		kb, err := lb.KeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		<-closed
		synctest.Wait()
		if !errors.Is(context.Cause(kb.Context()), leasehold.ErrClosed) {
			t.Fatalf("b's KeepAlive after Close: cause %v, want ErrClosed", context.Cause(kb.Context()))
		}
	})
}

// An Observer may Close the Client from OnStoreCall of a renewal: the
// engine reports its workers' calls on its own goroutine, which Close does
// not wait for, instead of on the worker, which Close waits for.
func TestObserverMayCloseFromOnStoreCallOfARenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c *leasehold.Client
		closed := make(chan struct{})
		var once atomic.Bool
		c = leasehold.New(memstore.New(), leasehold.WithObserver(leasehold.Observer{OnStoreCall: func(_ context.Context, ev leasehold.StoreCallEvent) {
			if (ev.Op == "renew" || ev.Op == "renew_batch") && once.CompareAndSwap(false, true) {
				c.Close()
				close(closed)
			}
		}}))
		l, err := c.TryAcquire(t.Context(), "close:onstorecall", 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		<-closed // a deadlock fails the bubble
		<-k.Context().Done()
		if cause := context.Cause(k.Context()); !errors.Is(cause, leasehold.ErrClosed) {
			t.Fatalf("KeepAlive ended with %v, want ErrClosed", cause)
		}
	})
}
