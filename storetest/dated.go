package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// testDatedAcquire: AcquireDated is Acquire (stay 0) and AcquireQueued
// (stay > 0), with a term that began at most half of ttl before the call
// and never after it; the key is held at the term's end less a margin;
// bad arguments are refused by name and write nothing.
func testDatedAcquire(t *testing.T, s driver.Store) {
	d := s.(driver.DatedAcquirer)
	ctx := t.Context()
	key := Key(t)
	const ttl = 2 * time.Second

	for name, stay := range map[string]time.Duration{"negative": -time.Second, "under 1 ms": time.Millisecond - 1} {
		_, _, err := d.AcquireDated(ctx, key, "a", ttl, stay)
		wantArgument(t, "AcquireDated with stay "+name, err, "stay")
	}
	_, _, err := d.AcquireDated(ctx, "", "a", ttl, 0)
	wantArgument(t, "AcquireDated with an empty key", err, "key")
	_, _, err = d.AcquireDated(ctx, key, "a b", ttl, 0)
	wantArgument(t, "AcquireDated with a bad token", err, "token")
	_, _, err = d.AcquireDated(ctx, key, "a", 0, 0)
	wantArgument(t, "AcquireDated with ttl 0", err, "ttl")
	if info := inspect(t, s, key); info != (driver.Info{Key: key}) {
		t.Fatalf("refused dated acquires wrote to the store: %+v", info)
	}

	// Several cycles, so that a store reusing what the last one left (a
	// lease, on etcd) dates the next from it.
	_, queues := s.(driver.Queuer)
	var (
		last        int64
		start, from time.Time // the last cycle's call and term
	)
	for i := range 3 {
		if i > 0 {
			if err := s.Release(ctx, key, "a"); err != nil {
				t.Fatal(err)
			}
		}
		var stay time.Duration // Acquire, then AcquireQueued on a Queuer
		if queues && i == 1 {
			stay = longTTL
		}
		start = time.Now()
		var fence int64
		fence, from, err = d.AcquireDated(ctx, key, "a", ttl, stay)
		if err != nil || fence <= last {
			t.Fatalf("cycle %d: fence %d, %v; want above %d", i, fence, err, last)
		}
		last = fence
		if !from.IsZero() && (from.After(start) || from.Before(start.Add(-ttl/2))) {
			t.Fatalf("cycle %d: the term began %v before the call; want 0 to %v", i, start.Sub(from), ttl/2)
		}
		if info := wantHeldBy(t, s, key, "a"); info.Fence != fence {
			t.Fatalf("cycle %d: Inspect fence %d, want %d", i, info.Fence, fence)
		}
		_, _, err = d.AcquireDated(ctx, key, "b", ttl, 0)
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("cycle %d: another token's dated acquire of the held key: %v, want ErrNotAcquired", i, err)
		}
	}
	// The key is the holder's until the term's end (less a margin for the
	// store's clock rate): never shorter than the holder counts.
	if from.IsZero() {
		from = start
	}
	time.Sleep(time.Until(from.Add(ttl - ttl/10))) // waits for a clock reading, not for an event
	wantHeldBy(t, s, key, "a")

	// With a waiter queued, a newcomer's dated acquire of the free key is
	// refused, as Acquire's is; the head's (stay > 0) takes it.
	if err := s.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	if queues {
		acquire(t, s, key, "holder", longTTL)
		_, _, err := d.AcquireDated(ctx, key, "head", ttl, longTTL)
		refused(t, "the head's dated attempt on a held key", err, true)
		if err := s.Release(ctx, key, "holder"); err != nil {
			t.Fatal(err)
		}
		_, _, err = d.AcquireDated(ctx, key, "newcomer", ttl, 0)
		refused(t, "a newcomer's dated acquire with a waiter queued", err, false)
		if fence, _, err := d.AcquireDated(ctx, key, "head", ttl, longTTL); err != nil || fence <= last {
			t.Fatalf("the head's dated attempt on the free key: fence %d, %v; want above %d", fence, err, last)
		}
	}
}

// wantArgument checks that err is an *ArgumentError naming arg.
func wantArgument(t *testing.T, what string, err error, arg string) {
	t.Helper()
	var ae *driver.ArgumentError
	if !errors.As(err, &ae) || !errors.Is(err, driver.ErrInvalidArgument) {
		t.Fatalf("%s: error %v, want an *ArgumentError", what, err)
	}
	if ae.Arg != arg || !strings.Contains(err.Error(), arg) {
		t.Fatalf("%s: error %q names %q, want %q", what, err, ae.Arg, arg)
	}
}
