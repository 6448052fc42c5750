package memstore_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) driver.Store { return memstore.New() })
}

// fakeClock is moved by the test; no test here sleeps.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestExpiryFollowsTheClock(t *testing.T) {
	cases := []struct {
		name      string
		advance   time.Duration
		wantHeld  bool
		wantRenew error
	}{
		{"just before the TTL", 10*time.Second - time.Nanosecond, true, nil},
		{"at the TTL", 10 * time.Second, false, leasehold.ErrNotOwned},
		{"well after", time.Hour, false, leasehold.ErrNotOwned},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
			s := memstore.New(memstore.WithClock(clock.Now))
			ctx := t.Context()
			if _, err := s.Acquire(ctx, "k", "a", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			clock.Advance(tc.advance)
			info, _ := s.Inspect(ctx, "k")
			if info.Held != tc.wantHeld {
				t.Fatalf("held = %v, want %v", info.Held, tc.wantHeld)
			}
			if tc.wantHeld && info.TTL != 10*time.Second-tc.advance {
				t.Fatalf("TTL = %v, want %v", info.TTL, 10*time.Second-tc.advance)
			}
			if err := s.Renew(ctx, "k", "a", 10*time.Second); !errors.Is(err, tc.wantRenew) || (tc.wantRenew == nil) != (err == nil) {
				t.Fatalf("Renew: %v, want %v", err, tc.wantRenew)
			}
			_, err := s.Acquire(ctx, "k", "b", 10*time.Second)
			if tc.wantHeld != errors.Is(err, leasehold.ErrNotAcquired) {
				t.Fatalf("second Acquire: %v (held %v)", err, tc.wantHeld)
			}
		})
	}
}

func TestRenewRestartsTheTTLFromNow(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := memstore.New(memstore.WithClock(clock.Now))
	ctx := t.Context()
	if _, err := s.Acquire(ctx, "k", "a", 3*time.Second); err != nil {
		t.Fatal(err)
	}
	for range 10 { // renewing every ttl/3 keeps the lease alive indefinitely
		clock.Advance(time.Second)
		if err := s.Renew(ctx, "k", "a", 3*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(3 * time.Second)
	if err := s.Renew(ctx, "k", "a", 3*time.Second); !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("Renew after a missed TTL: %v, want ErrNotOwned", err)
	}
}

// A nil Option is skipped, as leasehold.New skips one, not a panic in New.
func TestNilOptionIsSkipped(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := memstore.New(nil, memstore.WithClock(clock.Now), nil)
	if _, err := s.Acquire(t.Context(), "k", "a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * time.Second) // the clock after the nil option is the Store's
	if info, err := s.Inspect(t.Context(), "k"); err != nil || info.Held {
		t.Fatalf("Inspect after the TTL on the Store's clock = %+v, %v; want free", info, err)
	}
}
