package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// A lease of this Client left to expire without a release no longer counts
// as held by the Client once it has certainly expired: a later waiter for
// the key watches for another Client's release and takes the key at once,
// instead of polling at its backoff cap (an hour here) as if the Client
// itself would hand the key on.
func TestExpiredOwnLeaseDoesNotSilenceReleases(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprint("own lease left to expire: ", stale), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memstore.New()
				a := leasehold.New(s, leasehold.WithBackoff(10*time.Millisecond, time.Hour))
				b := leasehold.New(s)
				defer a.Close()
				defer b.Close()
				ctx := t.Context()
				if stale {
					if _, err := a.Acquire(ctx, "k", 100*time.Millisecond); err != nil {
						t.Fatal(err)
					}
					time.Sleep(200 * time.Millisecond)
				}
				lb, err := b.TryAcquire(ctx, "k", time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan time.Time)
				go func() {
					if _, err := a.Acquire(ctx, "k", time.Minute); err != nil {
						t.Error(err)
					}
					got <- time.Now()
				}()
				synctest.Wait() // a's waiter is asleep, its watch set up
				released := time.Now()
				if err := lb.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if waited := (<-got).Sub(released); waited > 0 {
					t.Errorf("the waiter took the key %v after the other Client's release, want at once (fake clock)", waited)
				}
			})
		})
	}
}

// A waiter that is the head while its own Client's earlier lease on the key
// runs out unreleased tries right after that lease certainly expires, not
// at its next backoff step.
func TestWaiterTriesWhenItsClientsLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 100 * time.Millisecond
		c := leasehold.New(memstore.New(), leasehold.WithBackoff(10*time.Millisecond, time.Hour))
		defer c.Close()
		ctx := t.Context()
		first, err := c.Acquire(ctx, "k", ttl) // left to expire
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l, err := c.Acquire(ctx, "k", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= first.Fence() {
			t.Errorf("fence %d after %d", l.Fence(), first.Fence())
		}
		if waited := time.Since(start); waited > 2*ttl {
			t.Errorf("the waiter took the key %v after its Client's lease of %v was taken, want just past the TTL", waited, ttl)
		}
	})
}

// A waiter that becomes the head when the one before it takes the key
// learns when that lease runs out, and tries right after it does (the
// lease is left to expire), not at its backoff cap.
func TestNextHeadTriesWhenTheLeaseBeforeItExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 100 * time.Millisecond
		c := leasehold.New(memstore.New(), leasehold.WithBackoff(10*time.Millisecond, time.Hour))
		defer c.Close()
		ctx := t.Context()
		s := c.Store().(*memstore.Store)
		if _, err := s.Acquire(ctx, "k", "another-owner", ttl); err != nil {
			t.Fatal(err)
		}
		got := make(chan time.Time, 2)
		go func() { // the first head: takes the key and lets it expire
			if _, err := c.Acquire(ctx, "k", ttl); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		synctest.Wait()
		go func() { // the head once the first takes the key
			if _, err := c.Acquire(ctx, "k", ttl); err != nil {
				t.Error(err)
			}
			got <- time.Now()
		}()
		first, second := <-got, <-got
		if late := second.Sub(first.Add(ttl)); late > ttl {
			t.Errorf("the second waiter took the key %v after the first's lease ran out, want within %v", late, ttl)
		}
	})
}

// The lines of keys whose leases were left to expire go at the next sweep
// (when the map of lines has doubled): they take no memory for good.
func TestExpiredLeasesLinesAreSwept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := leasehold.New(memstore.New())
		defer c.Close()
		for i := range 1100 {
			if _, err := c.Acquire(t.Context(), fmt.Sprint("jobs:", i), time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		for i := range 3000 {
			if _, err := c.Acquire(t.Context(), fmt.Sprint("more:", i), time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		// Every lease has expired; at most the lines since the last sweep
		// remain, never all 4,100.
		if n := leasehold.Lines(c); n > 2200 {
			t.Errorf("%d keys keep a line after their leases expired, with nothing waiting", n)
		}
	})
}

// A wait budget bounds the waiting for a busy key, counted from the first
// attempt's answer: a budget shorter than that attempt still takes a free
// key, and one spent on a busy key says so.
func TestWaitBudgetTakesAFreeKey(t *testing.T) {
	s := memstore.New()
	c := leasehold.New(s)
	defer c.Close()
	ctx := t.Context()
	for _, budget := range []time.Duration{time.Nanosecond, time.Microsecond} {
		ran := false
		err := c.Hold(ctx, "free", time.Second, func(context.Context, *leasehold.Lease) error {
			ran = true
			return nil
		}, leasehold.WithWaitBudget(budget))
		if err != nil || !ran {
			t.Errorf("budget %v on a free key: ran %v, %v", budget, ran, err)
		}
	}
	other := leasehold.New(s)
	defer other.Close()
	if _, err := other.TryAcquire(ctx, "busy", time.Minute); err != nil {
		t.Fatal(err)
	}
	err := c.Hold(ctx, "busy", time.Second, func(context.Context, *leasehold.Lease) error {
		t.Error("fn ran on a busy key")
		return nil
	}, leasehold.WithWaitBudget(time.Nanosecond))
	if !errors.Is(err, leasehold.ErrNotAcquired) || !strings.Contains(err.Error(), "still held after the 1ns wait budget") {
		t.Errorf("a busy key with a 1ns budget: %v, want ErrNotAcquired after the budget", err)
	}
}

// fn releasing its lease from another goroutine as it returns races Hold's
// own release: whichever goes first, Hold reports no loss (no one else
// owned the key).
func TestHoldRacesFnsOwnRelease(t *testing.T) {
	c := leasehold.New(memstore.New())
	defer c.Close()
	lost := 0
	var first error
	for range 2000 {
		done := make(chan error, 1)
		err := c.Hold(t.Context(), "k", time.Minute, func(ctx context.Context, l *leasehold.Lease) error {
			go func() { done <- l.Release(context.Background()) }()
			return nil
		})
		<-done
		if err != nil {
			if first == nil {
				first = err
			}
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of 2000 Holds failed; first: %v", lost, first)
	}
}
