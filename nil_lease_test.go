package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// Every method of the nil *Lease a failed acquire returns (and of a zero
// Lease) answers with an error or a zero value, never a panic, and touches
// nothing in the store.
func TestNilLeaseNeverPanics(t *testing.T) {
	mem := memstore.New()
	rec := &recorder{}
	c := leasehold.New(mem, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
	holder, err := c.TryAcquire(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	failed, err := c.TryAcquire(t.Context(), key, ttl)
	if err == nil || failed != nil {
		t.Fatalf("TryAcquire of a held key: (%v, %v)", failed, err)
	}
	for name, l := range map[string]*leasehold.Lease{"nil": failed, "zero": new(leasehold.Lease)} {
		if l.Key() != "" || l.Token() != "" || l.Fence() != 0 || l.TTL() != 0 {
			t.Errorf("%s: accessors %q %q %d %v, want zero values", name, l.Key(), l.Token(), l.Fence(), l.TTL())
		}
		for op, err := range map[string]error{
			"Release": l.Release(t.Context()),
			"Renew":   l.Renew(t.Context(), ttl),
		} {
			if !errors.Is(err, leasehold.ErrInvalidArgument) {
				t.Errorf("%s.%s: %v, want an *ArgumentError", name, op, err)
			}
		}
		if k, err := l.KeepAlive(t.Context()); k != nil || !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("%s.KeepAlive: (%v, %v), want no KeepAlive and an *ArgumentError", name, k, err)
		}
		_ = fmt.Sprint(l.LogValue())
		slog.New(slog.DiscardHandler).Info("lease", "lease", l)
	}
	if info, _ := mem.Inspect(t.Context(), key); info.Token != holder.Token() {
		t.Fatalf("calls on a nil lease touched the holder's key: %+v", info)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.notOwned) != 0 || len(rec.releases) != 0 {
		t.Errorf("calls on a nil lease reported %d not-owned and %d release events", len(rec.notOwned), len(rec.releases))
	}
}

// The nil *KeepAlive a failed KeepAlive returns renews nothing and says so:
// its Context is done, Lost is closed, Err is an error and Stop is a no-op.
func TestNilKeepAliveNeverPanics(t *testing.T) {
	c := leasehold.New(memstore.New())
	l, err := c.TryAcquire(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	failed, err := l.KeepAlive(t.Context(), leasehold.WithRenewInterval(2*ttl))
	if err == nil || failed != nil {
		t.Fatalf("KeepAlive with a bad interval: (%v, %v)", failed, err)
	}
	for name, k := range map[string]*leasehold.KeepAlive{"nil": failed, "zero": new(leasehold.KeepAlive)} {
		k.Stop()
		k.Stop()
		if k.Context() == nil || k.Context().Err() == nil {
			t.Errorf("%s: Context %v is not done", name, k.Context())
		}
		if cause := context.Cause(k.Context()); !errors.Is(cause, leasehold.ErrInvalidArgument) {
			t.Errorf("%s: cause %v, want an *ArgumentError", name, cause)
		}
	}
	// The lease itself is untouched by all that.
	if err := l.Renew(t.Context(), time.Minute); err != nil {
		t.Fatalf("Renew after the failed KeepAlive: %v", err)
	}
}

// A nil Option is skipped, as a nil HoldOption is, not a panic in New.
func TestNilOptionIsSkipped(t *testing.T) {
	c := leasehold.New(memstore.New(), nil, leasehold.WithLogger(quietLogger()), nil)
	defer c.Close()
	l, err := c.TryAcquire(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
