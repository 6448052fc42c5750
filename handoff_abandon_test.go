package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
)

// slowHandOffStore's hand-offs take hold to answer: applied at once, then
// answered after hold, or (lost) answered with an error of unknown outcome.
type slowHandOffStore struct {
	*queueStore
	hold time.Duration
	lost bool
}

func (s *slowHandOffStore) HandOff(ctx context.Context, key, token, next string, ttl time.Duration) (int64, string, error) {
	fence, head, err := s.queueStore.HandOff(ctx, key, token, next, ttl)
	time.Sleep(s.hold)
	if s.lost {
		return 0, "", fmt.Errorf("no reply; it may have been applied: %w", context.DeadlineExceeded)
	}
	return fence, head, err
}

// A waiter whose context ends, or whose Client is closed, while a hand-off
// to it is under way returns then, not when the releaser's store call
// answers; what the hand-off gave it is released by the releaser, so the
// key is free afterwards, not held for a TTL by a token nobody has.
func TestWaiterLeavesDuringAHandOffToIt(t *testing.T) {
	for _, lost := range []bool{false, true} {
		for _, by := range []string{"context", "close"} {
			t.Run(fmt.Sprintf("lost=%v/%s", lost, by), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const ttl = time.Minute
					store := &slowHandOffStore{queueStore: newQueueStore(), hold: 10 * time.Second, lost: lost}
					c := leasehold.New(store, leasehold.WithLogger(quietLogger()))
					defer c.Close()
					l1, err := c.TryAcquire(t.Context(), "k", ttl)
					if err != nil {
						t.Fatal(err)
					}
					wctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					got := make(chan error, 1)
					go func() {
						l, err := c.Acquire(wctx, "k", ttl)
						if l != nil {
							err = errors.New("acquired")
						}
						got <- err
					}()
					synctest.Wait() // queued, asleep
					released := make(chan error, 1)
					go func() { released <- l1.Release(t.Context()) }()
					time.Sleep(time.Second) // the hand-off is in the store
					start := time.Now()
					if by == "context" {
						cancel()
					} else {
						go c.Close()
					}
					err = <-got
					if waited := time.Since(start); waited > 0 {
						t.Errorf("the waiter returned %v after its end, with the hand-off still under way", waited)
					}
					want := leasehold.ErrNotAcquired
					if by == "close" {
						want = leasehold.ErrClosed
					}
					if !errors.Is(err, want) {
						t.Errorf("the waiter's error %v, want %v", err, want)
					}
					<-released
					synctest.Wait()
					info, err := store.Inspect(t.Context(), "k")
					if err != nil {
						t.Fatal(err)
					}
					if info.Held {
						t.Errorf("after the hand-off answered, the key is held by %q: want it free", info.Token)
					}
				})
			})
		}
	}
}
