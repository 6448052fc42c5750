package memstore_test

import (
	"errors"
	"math"
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

// A restarted process has a new Store: its fences start above those the old
// one issued, on the clock, so storage that kept the old fences takes the
// new owner's writes. Within a Store they rise by one while the clock stands
// still, and keep rising when it steps back.
func TestFencesRiseAcrossARestart(t *testing.T) {
	ctx := t.Context()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	acquire := func(s *memstore.Store) int64 {
		t.Helper()
		f, err := s.Acquire(ctx, "k", "t", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "k", "t"); err != nil {
			t.Fatal(err)
		}
		return f
	}
	old := memstore.New(memstore.WithClock(clock.Now))
	want := clock.Now().UnixMicro()
	if f := acquire(old); f != want {
		t.Fatalf("first fence %d, want the clock in µs, %d", f, want)
	}
	for i := range int64(1000) { // more acquires than microseconds pass
		if f := acquire(old); f != want+1+i {
			t.Fatalf("fence %d with the clock standing still, want %d", f, want+1+i)
		}
	}
	last := want + 1000

	clock.Advance(2 * time.Millisecond) // the restart, longer than the fences' 1 ms lead
	restarted := memstore.New(memstore.WithClock(clock.Now))
	if f := acquire(restarted); f <= last {
		t.Fatalf("a new Store's first fence %d, not above the old Store's last, %d", f, last)
	}
	clock.Advance(-time.Hour) // a clock stepped back
	prev := acquire(restarted)
	if f := acquire(restarted); f != prev+1 {
		t.Fatalf("after the clock stepped back: fence %d, want %d", f, prev+1)
	}
}

// A clock before 1970, or past the last second whose microseconds int64
// holds, floors nothing: the fences count from 1, and no acquire fails or
// wraps (before the year -290307 UnixMicro itself wraps).
func TestFenceClockOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		now  time.Time
		want int64
	}{
		{time.Time{}, 1},
		{time.Unix(-1, 0), 1},
		{time.Date(-300_000, 1, 1, 0, 0, 0, 0, time.UTC), 1},
		{time.Unix(0, 0), 1},
		{time.Unix(0, 1_000), 1},
		{time.Unix(9_223_372_036_853, 999_999_999), 9_223_372_036_853_999_999},
		{time.Unix(9_223_372_036_854, 0), 1}, // MaxInt64 / 1e6: the cut-off
		{time.Unix(math.MaxInt64, 0), 1},
	} {
		s := memstore.New(memstore.WithClock(func() time.Time { return tc.now }))
		if f, err := s.Acquire(t.Context(), "k", "t", time.Second); err != nil || f != tc.want {
			t.Errorf("clock %v: fence (%d, %v), want %d", tc.now, f, err, tc.want)
		}
	}
}
