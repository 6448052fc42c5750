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

// lateHandOffStore's hand-offs lose their reply: each waits out its
// context, answers with an error of unknown outcome, and lands later, as
// on a network that delays the request past the releaser's deadline.
type lateHandOffStore struct {
	*queueStore
	delay time.Duration
}

func (s *lateHandOffStore) HandOff(ctx context.Context, key, token, next string, ttl time.Duration) (int64, string, error) {
	<-ctx.Done()
	time.AfterFunc(s.delay, func() { _, _, _ = s.queueStore.HandOff(context.Background(), key, token, next, ttl) })
	return 0, "", fmt.Errorf("no reply before the context ended; it may still be applied: %w", ctx.Err())
}

// A hand-off whose reply was lost and that lands after the waiter looked
// gives the key to the waiter's token: the waiter's next attempt, refused
// by its own token, finds it and returns the lease, and a waiter that gives
// up afterwards gives its token back. Before, the waiter was refused by its
// own token until it gave up, and the key stayed held by a token no one used
// for its whole TTL. (A hand-off that lands after its waiter gave up still
// holds the key for a TTL: no one can tell it will land.)
func TestLateHandOffIsNotStranded(t *testing.T) {
	for _, tc := range []struct {
		budget, backoff time.Duration
	}{
		{5 * time.Second, 10 * time.Millisecond},  // attempts again while waiting
		{400 * time.Millisecond, 4 * time.Second}, // asleep when it lands, gives up before it attempts again
	} {
		budget := tc.budget
		t.Run(fmt.Sprint("wait ", budget), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const ttl = 30 * time.Second
				store := &lateHandOffStore{queueStore: newQueueStore(), delay: 200 * time.Millisecond}
				c := leasehold.New(store, leasehold.WithLogger(quietLogger()), leasehold.WithBackoff(tc.backoff, tc.backoff))
				defer c.Close()
				ctx := t.Context()
				l1, err := c.TryAcquire(ctx, "k", ttl)
				if err != nil {
					t.Fatal(err)
				}
				type result struct {
					l   *leasehold.Lease
					err error
				}
				got := make(chan result, 1)
				go func() {
					wctx, cancel := context.WithTimeout(ctx, budget)
					defer cancel()
					l, err := c.Acquire(wctx, "k", ttl)
					got <- result{l, err}
				}()
				synctest.Wait() // the waiter is queued and asleep
				rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
				_ = l1.Release(rctx)
				cancel()
				r := <-got
				time.Sleep(time.Second) // the hand-off has landed; a waiter that gave up has cleaned up
				info, err := store.Inspect(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case r.err == nil:
					if r.l.Fence() <= l1.Fence() || !info.Held || info.Token != r.l.Token() {
						t.Errorf("the waiter's lease %v, the store %+v: want the hand-off's lease", r.l, info)
					}
				case budget > time.Second:
					t.Errorf("the waiter gave up with %v though the hand-off landed within its budget", r.err)
				case !errors.Is(r.err, leasehold.ErrNotAcquired):
					t.Errorf("the waiter: %v, want ErrNotAcquired", r.err)
				case info.Held:
					t.Errorf("the key is held by %s for %v more after its waiter gave up: stranded", info.Holder(), info.TTL)
				}
			})
		})
	}
}
