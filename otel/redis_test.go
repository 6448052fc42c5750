package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/otel"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

func redisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	s, err := redisstore.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = rdb.Close()
	})
	return s
}

// renewals signals each renewal the store accepted.
func renewals(ch chan<- struct{}) leasehold.Option {
	return leasehold.WithObserver(leasehold.Observer{OnRenew: func(context.Context, leasehold.RenewEvent) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}})
}

// One Hold on a real Redis, under the caller's span, renewed twice: the span
// tree (printed for the record) has the store calls, the acquire and the hold
// as children of the caller's span.
func TestHoldOnRedisTrace(t *testing.T) {
	f := newFixture(t)
	renewed := make(chan struct{}, 1)
	c := f.client(t, redisStore(t), renewals(renewed))
	ctx, root := f.root(t.Context())
	err := c.Hold(ctx, "orders:42", 300*time.Millisecond, func(ctx context.Context, l *leasehold.Lease) error {
		if got := points(t, f.collect(t), "leasehold_leases_held")["namespace=orders"]; got != 1 {
			t.Errorf("leases_held{orders} = %v while held, want 1", got)
		}
		for range 2 {
			select {
			case <-renewed:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	})
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	spans := f.spans.GetSpans()
	t.Logf("span tree of one Hold on Redis:\n%s", tree(spans))

	rootID := root.SpanContext().SpanID()
	acq, hold := f.one(t, "leasehold.acquire"), f.one(t, "leasehold.hold")
	for _, s := range []string{"leasehold.store.acquire", "leasehold.acquire", "leasehold.hold", "leasehold.store.release"} {
		if sp := f.one(t, s); sp.Parent.SpanID() != rootID {
			t.Errorf("%s is not a child of the caller's span", s)
		}
	}
	wantAttrs(t, acq, map[attribute.Key]string{otel.StoreAttr: "redisstore", otel.ResultAttr: "acquired", otel.KeyAttr: "orders:42", otel.TTLAttr: "0.3"})
	wantAttrs(t, hold, map[attribute.Key]string{otel.StoreAttr: "redisstore", otel.OutcomeAttr: otel.Released})
	if hold.StartTime.Before(acq.StartTime) || hold.EndTime.Before(acq.EndTime) {
		t.Errorf("hold [%v, %v] does not follow acquire [%v, %v]", hold.StartTime, hold.EndTime, acq.StartTime, acq.EndTime)
	}
	ms := f.collect(t)
	for _, op := range []string{"acquire", "release", "renew_batch"} {
		if got := points(t, ms, "leasehold_store_call_seconds")["op="+op+",store=redisstore"]; got < 1 {
			t.Errorf("store_call_seconds{%s,redisstore} count %v, want ≥ 1", op, got)
		}
	}
	if len(f.named("leasehold.store.renew_batch")) != 0 {
		t.Errorf("renewal batches made spans without a caller")
	}
}

// Renewals failing on Redis (a wrapper refuses them) are events of the hold
// span until the fence policy abandons the lease.
func TestRenewFailuresOnRedis(t *testing.T) {
	f := newFixture(t)
	store := &faultyStore{Store: redisStore(t)}
	c := f.client(t, store)
	ctx, root := f.root(t.Context())
	store.set(true, false)
	err := c.Hold(ctx, "orders:43", 600*time.Millisecond, func(ctx context.Context, l *leasehold.Lease) error {
		<-ctx.Done()
		return nil
	}, leasehold.FenceAfter(2))
	root.End()
	if !errors.Is(err, leasehold.ErrAbandoned) {
		t.Fatalf("Hold: %v, want ErrAbandoned", err)
	}
	t.Logf("span tree of a Hold on Redis whose renewals fail:\n%s", tree(f.spans.GetSpans()))
	hold := f.one(t, "leasehold.hold")
	if got := strings.Join(eventNames(hold), " "); got != "leasehold.renew_failure leasehold.renew_failure leasehold.abandon" {
		t.Errorf("hold events %q, want two renew failures and the abandonment", got)
	}
	for i, ev := range hold.Events {
		if ev.Time.Before(hold.StartTime) || ev.Time.After(hold.EndTime) || (i > 0 && ev.Time.Before(hold.Events[i-1].Time)) {
			t.Errorf("event %s at %v, outside the hold [%v, %v] or out of order", ev.Name, ev.Time, hold.StartTime, hold.EndTime)
		}
	}
	if hold.Status.Code != codes.Error || hold.Parent.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("hold status %v parent %v", hold.Status, hold.Parent.SpanID())
	}
	if got := points(t, f.collect(t), "leasehold_lock_renew_failures_total")["namespace=orders"]; got != 2 {
		t.Errorf("renew_failures{orders} = %v, want 2", got)
	}
}
