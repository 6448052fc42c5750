package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// An Observer that calls runtime.Goexit (t.FailNow does) on the renewal
// engine's goroutine, once, ends that goroutine: the engine goes on in
// another, so every lease, the one reported on and the others in its
// batch, is still renewed, and a lost one still cancels its holder. Before,
// no lease of the Client was renewed or given up again: fn kept a live
// context while the store let its lease expire.
func TestObserverGoexitDoesNotStopRenewal(t *testing.T) {
	for _, in := range []string{"OnRenew", "OnStoreCall", "OnNotOwned"} {
		t.Run(in, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				var once atomic.Bool
				exit := func() {
					if once.CompareAndSwap(false, true) {
						runtime.Goexit()
					}
				}
				obs := leasehold.Observer{}
				switch in {
				case "OnRenew":
					obs.OnRenew = func(context.Context, leasehold.RenewEvent) { exit() }
				case "OnStoreCall":
					obs.OnStoreCall = func(_ context.Context, e leasehold.StoreCallEvent) {
						if e.Op == "renew_batch" || e.Op == "renew" {
							exit()
						}
					}
				case "OnNotOwned":
					obs.OnNotOwned = func(context.Context, leasehold.NotOwnedEvent) { exit() }
				}
				c := leasehold.New(mem, leasehold.WithObserver(obs))
				defer c.Close()
				const ttl = 30 * time.Second
				var keeps []*leasehold.KeepAlive
				for i := range 5 {
					l, err := c.TryAcquire(t.Context(), fmt.Sprint("jobs:", i), ttl)
					if err != nil {
						t.Fatal(err)
					}
					k, err := l.KeepAlive(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					keeps = append(keeps, k)
				}
				if in == "OnNotOwned" {
					if _, err := mem.ForceRelease(t.Context(), "jobs:0", "test", "test"); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(3 * ttl)
				for i, k := range keeps {
					key := fmt.Sprint("jobs:", i)
					info, err := mem.Inspect(t.Context(), key)
					if err != nil {
						t.Fatal(err)
					}
					lost := k.Context().Err() != nil
					switch {
					case in == "OnNotOwned" && i == 0:
						if !lost {
							t.Errorf("%s: force-released, and its KeepAlive's context is live", key)
						}
					case !info.Held || lost:
						t.Errorf("%s: held %v, KeepAlive ended %v, after 3 TTLs: want it renewed", key, info.Held, lost)
					}
					k.Stop()
				}
			})
		})
	}
}

// downRenewStore's renewals fail while down is set.
type downRenewStore struct {
	driver.Store
	down atomic.Bool
}

func (s *downRenewStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if s.down.Load() {
		return errors.New("no answer")
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

// A loss takes effect before any Observer hears of it: a Goexit in
// OnNotOwned leaves no live KeepAlive context behind (it stayed live until
// the lease's limit, about 16 s past the store's "not owned"), and a Goexit
// in OnAbandon does not get the abandonment reported twice (the engine that
// took over decided the lease again).
func TestObserverGoexitDuringALoss(t *testing.T) {
	t.Run("OnNotOwned", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mem := memstore.New()
			var once atomic.Bool
			var abandons atomic.Int32
			c := leasehold.New(mem, leasehold.WithLogger(quietLogger()), leasehold.WithObserver(leasehold.Observer{
				OnNotOwned: func(context.Context, leasehold.NotOwnedEvent) {
					if once.CompareAndSwap(false, true) {
						runtime.Goexit()
					}
				},
				OnAbandon: func(context.Context, leasehold.AbandonEvent) { abandons.Add(1) }}))
			defer c.Close()
			const ttl = 30 * time.Second
			l, err := c.TryAcquire(t.Context(), "jobs:0", ttl)
			if err != nil {
				t.Fatal(err)
			}
			k, err := l.KeepAlive(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := mem.ForceRelease(t.Context(), "jobs:0", "test", "test"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(ttl/3 + time.Second)
			if k.Context().Err() == nil {
				t.Errorf("1 s after the store said not owned, the KeepAlive's context is live (OnAbandon reported %d times)", abandons.Load())
			}
			time.Sleep(ttl)
			if n := abandons.Load(); n != 0 {
				t.Errorf("OnAbandon reported %d times for a lease lost as not owned", n)
			}
			k.Stop()
		})
	})
	t.Run("OnAbandon", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			store := &downRenewStore{Store: memstore.New()}
			var abandons atomic.Int32
			c := leasehold.New(store, leasehold.WithLogger(quietLogger()), leasehold.WithObserver(leasehold.Observer{
				OnAbandon: func(context.Context, leasehold.AbandonEvent) {
					if abandons.Add(1) == 1 {
						runtime.Goexit()
					}
				}}))
			defer c.Close()
			l, err := c.TryAcquire(t.Context(), "jobs:0", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			k, err := l.KeepAlive(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			store.down.Store(true)
			time.Sleep(time.Minute)
			if n := abandons.Load(); n != 1 {
				t.Errorf("OnAbandon reported %d times for one lease, want 1", n)
			}
			if k.Context().Err() == nil {
				t.Error("the abandoned lease's context is live")
			}
		})
	})
}
