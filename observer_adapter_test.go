package leasehold_test

import (
	"context"

	"github.com/leasehold/leasehold"
)

// observerOf wires the On… methods x has, each taking an event, into an
// Observer: the tests' recorders keep their methods.
func observerOf(x any) leasehold.Observer {
	var o leasehold.Observer
	if v, ok := x.(interface{ OnAcquire(leasehold.AcquireEvent) }); ok {
		o.OnAcquire = func(_ context.Context, e leasehold.AcquireEvent) { v.OnAcquire(e) }
	}
	if v, ok := x.(interface{ OnRelease(leasehold.ReleaseEvent) }); ok {
		o.OnRelease = func(_ context.Context, e leasehold.ReleaseEvent) { v.OnRelease(e) }
	}
	if v, ok := x.(interface {
		OnRenewFailure(leasehold.RenewFailureEvent)
	}); ok {
		o.OnRenewFailure = func(_ context.Context, e leasehold.RenewFailureEvent) { v.OnRenewFailure(e) }
	}
	if v, ok := x.(interface{ OnNotOwned(leasehold.NotOwnedEvent) }); ok {
		o.OnNotOwned = func(_ context.Context, e leasehold.NotOwnedEvent) { v.OnNotOwned(e) }
	}
	if v, ok := x.(interface{ OnAbandon(leasehold.AbandonEvent) }); ok {
		o.OnAbandon = func(_ context.Context, e leasehold.AbandonEvent) { v.OnAbandon(e) }
	}
	if v, ok := x.(interface {
		OnLeaseExpired(leasehold.LeaseExpiredEvent)
	}); ok {
		o.OnLeaseExpired = func(_ context.Context, e leasehold.LeaseExpiredEvent) { v.OnLeaseExpired(e) }
	}
	if v, ok := x.(interface {
		OnReleaseFailure(leasehold.ReleaseFailureEvent)
	}); ok {
		o.OnReleaseFailure = func(_ context.Context, e leasehold.ReleaseFailureEvent) { v.OnReleaseFailure(e) }
	}
	if v, ok := x.(interface{ OnAcquireStart(leasehold.Event) }); ok {
		o.OnAcquireStart = func(_ context.Context, e leasehold.Event) { v.OnAcquireStart(e) }
	}
	if v, ok := x.(interface{ OnRenew(leasehold.RenewEvent) }); ok {
		o.OnRenew = func(_ context.Context, e leasehold.RenewEvent) { v.OnRenew(e) }
	}
	if v, ok := x.(interface {
		OnStoreCall(leasehold.StoreCallEvent)
	}); ok {
		o.OnStoreCall = func(_ context.Context, e leasehold.StoreCallEvent) { v.OnStoreCall(e) }
	}
	return o
}
