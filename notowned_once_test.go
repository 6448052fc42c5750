package leasehold_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// One lost lease is one not-owned event: a KeepAlive whose renewal the
// store refuses reports it, and the holder's Release afterwards (as the
// KeepAlive example does) or a Renew by hand does not report it again.
// Before, both did, and the not-owned ratio alert fired at half its bound.
func TestOneLostLeaseIsOneNotOwnedEvent(t *testing.T) {
	for _, then := range []string{"release", "renew"} {
		t.Run(then, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := memstore.New()
				var n atomic.Int32
				c := leasehold.New(mem, leasehold.WithObserver(leasehold.Observer{
					OnNotOwned: func(context.Context, leasehold.NotOwnedEvent) { n.Add(1) }}))
				defer c.Close()
				l, err := c.Acquire(t.Context(), "jobs:7", 30*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				k, err := l.KeepAlive(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mem.ForceRelease(t.Context(), "jobs:7", "INC-1", "op"); err != nil {
					t.Fatal(err)
				}
				<-k.Context().Done()
				if then == "release" {
					_ = l.Release(t.Context())
				} else {
					k.Stop()
					_ = l.Renew(t.Context(), 30*time.Second)
				}
				synctest.Wait()
				if got := n.Load(); got != 1 {
					t.Errorf("one lost lease: %d not-owned events, want 1", got)
				}
			})
		})
	}
}

// A lease abandoned because its renewals failed (only OnAbandon reported),
// whose key another Client then takes, is refused to its holder's Release:
// that is a wrong-owner event, reported. (Suppressing every report after a
// lease ended lost these.)
func TestReleaseAfterAbandonReportsNotOwned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		store := &downRenewStore{Store: mem}
		var notOwned atomic.Int32
		c := leasehold.New(store, leasehold.WithLogger(quietLogger()), leasehold.WithObserver(leasehold.Observer{
			OnNotOwned: func(context.Context, leasehold.NotOwnedEvent) { notOwned.Add(1) }}))
		defer c.Close()
		other := leasehold.New(mem)
		defer other.Close()
		const ttl = 30 * time.Second
		l, err := c.TryAcquire(t.Context(), "jobs:1", ttl)
		if err != nil {
			t.Fatal(err)
		}
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		store.down.Store(true)
		<-k.Context().Done()
		time.Sleep(ttl)
		if _, err := other.TryAcquire(t.Context(), "jobs:1", ttl); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatalf("Release: %v", err)
		}
		if n := notOwned.Load(); n != 1 {
			t.Errorf("Release refused by another owner's key after an abandon: %d OnNotOwned, want 1", n)
		}
	})
}
