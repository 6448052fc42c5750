package redisstore_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest"
)

// countingStore counts acquire calls on their way to the store.
type countingStore struct {
	*storetest.BusySignal
	acquires atomic.Int64
}

func (s *countingStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	s.acquires.Add(1)
	return s.BusySignal.Acquire(ctx, key, token, ttl)
}

// 16 goroutines of one Client wait for one key on a real Redis. Every release
// reaches the Store's pub/sub connection once, and the Client wakes the head
// of its queue alone: each of the 16 hand-offs makes exactly one acquire
// call, where waking every waiter made one per remaining waiter (136 in
// all). The backoff is an hour, so each hand-off is a wake-up.
func TestReleaseWakesOneLocalWaiter(t *testing.T) {
	store := &countingStore{BusySignal: storetest.NewBusySignal(newStore(t, singleClient(shared.Addr())))}
	c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
	key := storetest.Key(t)
	holder, err := c.TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // no waiter outlives the test, even a failed one
	const n = 16
	got := make(chan *leasehold.Lease, n)
	for range n {
		wg.Go(func() {
			l, err := c.Acquire(ctx, key, time.Minute)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
			}
			got <- l
		})
	}
	// The head found the key busy, set up its watch and found it busy
	// again; wait for the others to join the queue behind it.
	store.WaitBusy(t, 2)
	for i := 0; c.Waiting(key) < n; i++ {
		if ctx.Err() != nil || i == 10_000_000 {
			t.Fatalf("%d of %d waiters queued", c.Waiting(key), n)
		}
		runtime.Gosched()
	}
	if calls := store.acquires.Load(); calls != 3 {
		t.Fatalf("%d acquire calls before the first release, want 3 (the holder's, the head's two)", calls)
	}
	start := time.Now()
	for i := range n {
		before := store.acquires.Load()
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		next := <-got
		if next == nil {
			t.FailNow()
		}
		if calls := store.acquires.Load() - before; calls != 1 {
			t.Errorf("hand-off %d with %d waiters made %d acquire calls, want 1", i, n-i, calls)
		}
		holder = next
	}
	t.Logf("%d hand-offs in %v, %d acquire calls in all", n, time.Since(start), store.acquires.Load())
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
