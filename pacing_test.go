package leasehold_test

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// A tick that overruns its interval (or a paused process) is followed by
// one attempt, then attempts on the interval's beat: not one attempt for
// every window missed, back to back.
func TestRunLoopSkipsTheWindowsATickOverran(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var attempts atomic.Int64
		c := leasehold.New(memstore.New(), leasehold.WithLogger(quietLogger()), leasehold.WithObserver(leasehold.Observer{
			OnAcquire: func(context.Context, leasehold.AcquireEvent) { attempts.Add(1) },
		}))
		defer c.Close()
		ctx, cancel := context.WithCancel(t.Context())
		const interval = 10 * time.Millisecond
		ticks, done := 0, make(chan error, 1)
		go func() {
			done <- c.RunLoop(ctx, "loops:overrun", interval, func(context.Context, *leasehold.Lease) error {
				if ticks++; ticks == 1 {
					time.Sleep(10 * time.Second) // ignores its context: a thousand windows
				}
				return nil
			})
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		before := attempts.Load()
		time.Sleep(5 * interval)
		synctest.Wait()
		if n := attempts.Load() - before; n > 7 {
			t.Errorf("%d attempts in the 5 intervals after the overrun, want about 5", n)
		}
		if before > 3 {
			t.Errorf("%d attempts by the end of the overrunning tick, want 2 at most", before)
		}
		cancel()
		<-done
	})
}

// heldForever answers every acquire with a holder whose remaining TTL is
// the longest a time.Duration holds.
type heldForever struct {
	*memstore.Store
	n atomic.Int64
}

func (s *heldForever) Acquire(_ context.Context, key, _ string, _ time.Duration) (int64, error) {
	s.n.Add(1)
	return 0, &driver.HeldError{Key: key, Remaining: math.MaxInt64}
}

// A refusal's remaining TTL past what time arithmetic holds (a store's
// 'infinity', a clock stepped back) paces waiting and RunLoop like any
// other: no overflow to a wait of a nanosecond.
func TestHugeRemainingDoesNotSpin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &heldForever{Store: memstore.New()}
		c := leasehold.New(s, leasehold.WithLogger(quietLogger()))
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if _, err := c.Acquire(ctx, "k", time.Second); err == nil {
			t.Fatal("acquired a key held forever")
		}
		if n := s.n.Load(); n > 100 {
			t.Errorf("Acquire: %d store calls in 2 s of waiting", n)
		}
		s.n.Store(0)
		ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_ = c.RunLoop(ctx, "loops:k", 100*time.Millisecond, func(context.Context, *leasehold.Lease) error { return nil })
		if n := s.n.Load(); n > 25 {
			t.Errorf("RunLoop: %d store calls in 2 s at an interval of 100 ms", n)
		}
	})
}

// A leader whose lead returns at once campaigns again after a backoff
// step, not in a loop of acquires and releases.
func TestLeadPausesAfterATermThatEndsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := leasehold.New(memstore.New(), leasehold.WithLogger(quietLogger()), leasehold.WithBackoff(10*time.Millisecond, time.Second))
		defer c.Close()
		var terms atomic.Int64
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_ = c.Lead(ctx, "leader:fails", func(context.Context, *leasehold.Lease) { terms.Add(1) })
		if n := terms.Load(); n < 5 || n > 25 {
			t.Errorf("%d terms in 10 s of a lead that returns at once, want about one a backoff step (0.5–1 s)", n)
		}
	})
}
