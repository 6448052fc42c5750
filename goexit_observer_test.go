package leasehold_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
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
