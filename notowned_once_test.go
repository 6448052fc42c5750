package leasehold_test

import (
	"context"
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
