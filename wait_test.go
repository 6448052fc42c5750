package leasehold_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// hookStore counts acquire calls and lets a test step into one.
type hookStore struct {
	*memstore.Store
	acquires atomic.Int64
	// onAcquire, when set, runs before the store's Acquire; a non-nil
	// error is returned instead of calling the store.
	onAcquire atomic.Pointer[func(ctx context.Context) error]
}

func (s *hookStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	s.acquires.Add(1)
	if f := s.onAcquire.Load(); f != nil {
		if err := (*f)(ctx); err != nil {
			return 0, err
		}
	}
	return s.Store.Acquire(ctx, key, token, ttl)
}

type waiterName struct{}

// acquireIn starts a waiting Acquire of key named name, under ctx, and
// returns the channel its lease arrives on (nil when it failed).
func acquireIn(t *testing.T, ctx context.Context, c *leasehold.Client, key, name string) <-chan *leasehold.Lease {
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := c.Acquire(context.WithValue(ctx, waiterName{}, name), key, time.Hour)
		if err != nil && ctx.Err() == nil {
			t.Errorf("waiter %s: %v", name, err)
		}
		got <- l
	}()
	return got
}

// received returns what ch has ready, without waiting.
func received(ch <-chan *leasehold.Lease) (*leasehold.Lease, bool) {
	select {
	case l := <-ch:
		return l, true
	default:
		return nil, false
	}
}

// With 8 local waiters on one Client, each release makes one acquire call at
// the store, not eight, and hands the key to the waiters in arrival order.
// The backoff is an hour, so every hand-off is a wake-up, made while the fake
// clock stands still.
func TestReleaseWakesOneLocalWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		holder, err := c.TryAcquire(t.Context(), "k", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		got := make([]<-chan *leasehold.Lease, n)
		for i := range n {
			got[i] = acquireIn(t, t.Context(), c, "k", string(rune('A'+i)))
			synctest.Wait() // queued before the next one comes
		}
		// The holder's attempt, then the head's two (before and after
		// setting up its watch); the other seven made none.
		if calls := store.acquires.Load(); calls != 3 {
			t.Fatalf("%d acquire calls before the first release, want 3", calls)
		}
		if w := leasehold.Waiting(c, "k"); w != n {
			t.Fatalf("Waiting = %d, want %d", w, n)
		}
		start := time.Now()
		for i := range n {
			before := store.acquires.Load()
			if err := holder.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			for j := i + 1; j < n; j++ {
				if _, ok := received(got[j]); ok {
					t.Fatalf("release %d went to waiter %d, want waiter %d (arrival order)", i, j, i)
				}
			}
			next, ok := received(got[i])
			if !ok || next == nil {
				t.Fatalf("release %d: waiter %d has no lease", i, i)
			}
			if calls := store.acquires.Load() - before; calls != 1 {
				t.Fatalf("release %d with %d waiters made %d acquire calls, want 1", i, n-i, calls)
			}
			if next.Fence() <= holder.Fence() {
				t.Fatalf("fence %d after %d", next.Fence(), holder.Fence())
			}
			holder = next
		}
		if time.Since(start) != 0 {
			t.Fatalf("the fake clock moved %v: a hand-off waited for its backoff", time.Since(start))
		}
		if w := leasehold.Waiting(c, "k"); w != 0 {
			t.Fatalf("Waiting = %d after every waiter acquired", w)
		}
	})
}

// A head that takes a wake-up and then gives up (its context ends during its
// attempt) passes the wake-up on: the next waiter tries at once and gets the
// key, though its backoff is an hour.
func TestCancelledHeadPassesWakeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		holder, err := c.TryAcquire(t.Context(), "k", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctxA, cancelA := context.WithCancel(t.Context())
		defer cancelA()
		gotA := acquireIn(t, ctxA, c, "k", "A")
		synctest.Wait()
		gotB := acquireIn(t, t.Context(), c, "k", "B")
		synctest.Wait()

		// A's next attempt is the one its wake-up starts: end A's context
		// in it, before the store is asked.
		cancelInA := func(ctx context.Context) error {
			if ctx.Value(waiterName{}) == "A" {
				cancelA()
				return ctx.Err()
			}
			return nil
		}
		store.onAcquire.Store(&cancelInA)
		before := store.acquires.Load()
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l, ok := received(gotA); !ok || l != nil {
			t.Fatalf("A: lease %v, done %v; want A to have given up", l, ok)
		}
		if l, ok := received(gotB); !ok || l == nil {
			t.Fatal("B did not get the key: A's wake-up was swallowed")
		}
		if calls := store.acquires.Load() - before; calls != 2 {
			t.Fatalf("%d acquire calls after the release, want 2 (A's, cut short, and B's)", calls)
		}
	})
}

// A head whose Client holds the key needs no watch of the store: its own
// Client's release wakes it in process. A's first attempt takes the free key
// while B waits behind it: B makes no call until A releases, then gets the
// key at once though its backoff is an hour.
func TestNextHeadIsWokenByItsOwnClientsRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		unblock := make(chan struct{})
		holdA := func(ctx context.Context) error {
			if ctx.Value(waiterName{}) == "A" {
				<-unblock
			}
			return nil
		}
		store.onAcquire.Store(&holdA)
		gotA := acquireIn(t, t.Context(), c, "k", "A")
		synctest.Wait() // A's first attempt is under way
		gotB := acquireIn(t, t.Context(), c, "k", "B")
		synctest.Wait() // B queued behind it
		close(unblock)
		synctest.Wait()
		a, ok := received(gotA)
		if !ok || a == nil {
			t.Fatal("A did not get the free key")
		}
		if calls := store.acquires.Load(); calls != 1 {
			t.Fatalf("%d acquire calls, want 1: A's (B waits for its own Client's release)", calls)
		}
		start := time.Now()
		if err := a.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l, ok := received(gotB); !ok || l == nil {
			t.Fatal("B was not woken by A's release")
		}
		if calls := store.acquires.Load(); calls != 2 || time.Since(start) != 0 {
			t.Fatalf("%d acquire calls after %v, want 2 at once", calls, time.Since(start))
		}
	})
}

// A head whose context ends while it waits hands the turn to the next
// waiter, which a later release then wakes.
func TestCancelledHeadHandsOverItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		holder, err := c.TryAcquire(t.Context(), "k", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctxA, cancelA := context.WithCancel(t.Context())
		gotA := acquireIn(t, ctxA, c, "k", "A")
		synctest.Wait()
		gotB := acquireIn(t, t.Context(), c, "k", "B")
		synctest.Wait()
		cancelA()
		synctest.Wait()
		if l, ok := received(gotA); !ok || l != nil {
			t.Fatalf("A: lease %v, done %v; want A to have given up", l, ok)
		}
		before := store.acquires.Load()
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l, ok := received(gotB); !ok || l == nil {
			t.Fatal("B did not get the key after the release")
		}
		if calls := store.acquires.Load() - before; calls != 1 {
			t.Fatalf("%d acquire calls after the release, want 1", calls)
		}
	})
}

// A head that wins the key on its backoff while a wake-up is pending leaves
// the wake-up to the next waiter, which acts on it at once: a wake-up is
// never dropped while others wait, even when it turns out to be spent.
func TestHeadAcquiringOnBackoffLeavesWakeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		holder, err := c.TryAcquire(t.Context(), "k", 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		gotA := acquireIn(t, t.Context(), c, "k", "A")
		synctest.Wait()
		gotB := acquireIn(t, t.Context(), c, "k", "B")
		synctest.Wait()

		// A's backoff attempt finds the holder releasing just before it:
		// the release's wake-up lands while A is not listening.
		var once sync.Once
		releaseFirst := func(ctx context.Context) error {
			if ctx.Value(waiterName{}) == "A" {
				once.Do(func() {
					if err := holder.Release(t.Context()); err != nil {
						t.Error(err)
					}
				})
			}
			return nil
		}
		store.onAcquire.Store(&releaseFirst)
		before := store.acquires.Load()
		a := <-gotA // the fake clock moves until A's backoff runs out
		if a == nil {
			t.Fatal("A did not get the key on its backoff attempt")
		}
		synctest.Wait()
		if _, ok := received(gotB); ok {
			t.Fatal("B got the key A holds")
		}
		if calls := store.acquires.Load() - before; calls != 2 {
			t.Fatalf("%d acquire calls, want 2: A's, and B's on the wake-up A left", calls)
		}
		if err := a.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l, ok := received(gotB); !ok || l == nil {
			t.Fatal("B did not get the key after A's release")
		}
	})
}

// 8 goroutines of one Client take one key 50 times each, on the default
// backoff: every one finishes, the key goes round in arrival order (no
// goroutine takes it twice while another waits), and the store sees about
// one acquire call per hand-off.
func TestNoLocalWaiterStarves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, rounds = 8, 50
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store)
		var (
			mu     sync.Mutex
			owners []int
			wg     sync.WaitGroup
		)
		for w := range n {
			wg.Go(func() {
				for range rounds {
					l, err := c.Acquire(t.Context(), "k", time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					owners = append(owners, w)
					mu.Unlock()
					time.Sleep(time.Millisecond) // the critical section, on the fake clock
					if err := l.Release(t.Context()); err != nil {
						t.Error(err)
						return
					}
				}
			})
			synctest.Wait() // each joins before the next: arrival order is w
		}
		wg.Wait()
		if len(owners) != n*rounds {
			t.Fatalf("%d acquisitions, want %d", len(owners), n*rounds)
		}
		for i := n; i < len(owners); i++ {
			if owners[i] != owners[i-n] {
				t.Fatalf("acquisition %d went to %d, want %d: the key did not go round in order (%v)", i, owners[i], owners[i-n], owners[max(0, i-2*n):i+1])
			}
		}
		if calls := store.acquires.Load(); calls > n*rounds+2*n {
			t.Fatalf("%d acquire calls for %d acquisitions", calls, n*rounds)
		}
	})
}

// watchStore counts release watches set up and stopped; with fail set,
// every watch fails.
type watchStore struct {
	*hookStore
	fail           bool
	watches, stops atomic.Int64
}

var errWatch = errors.New("pub/sub unavailable")

func (s *watchStore) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s.watches.Add(1)
	if s.fail {
		return nil, nil, errWatch
	}
	ch, stop, err := s.hookStore.WatchReleases(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	return ch, func() { s.stops.Add(1); stop() }, nil
}

// A head whose attempt on a wake-up fails in the store returns that failure
// at once, not "busy", and passes the wake-up on: the next waiter tries at
// once and gets the key, though its backoff is an hour.
func TestFailedHeadReturnsAtOnceAndPassesWakeOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		holder, err := c.TryAcquire(t.Context(), "k", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		errA := make(chan error, 1)
		go func() {
			_, err := c.Acquire(context.WithValue(t.Context(), waiterName{}, "A"), "k", time.Hour)
			errA <- err
		}()
		synctest.Wait()
		gotB := acquireIn(t, t.Context(), c, "k", "B")
		synctest.Wait()

		errDown := errors.New("store down")
		failA := func(ctx context.Context) error {
			if ctx.Value(waiterName{}) == "A" {
				return errDown
			}
			return nil
		}
		store.onAcquire.Store(&failA)
		before, start := store.acquires.Load(), time.Now()
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-errA:
			if !errors.Is(err, errDown) || errors.Is(err, leasehold.ErrNotAcquired) {
				t.Fatalf("A: %v, want the store's failure alone", err)
			}
		default:
			t.Fatal("A did not return its store failure at once")
		}
		if l, ok := received(gotB); !ok || l == nil {
			t.Fatal("B did not get the key: A's wake-up was swallowed")
		}
		if calls := store.acquires.Load() - before; calls != 2 {
			t.Fatalf("%d acquire calls after the release, want 2 (A's, failed, and B's)", calls)
		}
		if time.Since(start) != 0 {
			t.Fatalf("the fake clock moved %v: B waited for its backoff", time.Since(start))
		}
	})
}

// A waiter whose ctx ends while it waits for its turn returns at once with
// ErrNotAcquired and ctx's error, without a store call, and the waiters
// before and after it keep their order.
func TestWaiterCancelledBeforeItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &hookStore{Store: memstore.New()}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		holder, err := c.TryAcquire(t.Context(), "k", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		gotA := acquireIn(t, t.Context(), c, "k", "A")
		synctest.Wait()
		ctxB, cancelB := context.WithCancel(t.Context())
		errB := make(chan error, 1)
		go func() {
			_, err := c.Acquire(ctxB, "k", time.Hour)
			errB <- err
		}()
		synctest.Wait()
		gotC := acquireIn(t, t.Context(), c, "k", "C")
		synctest.Wait()

		before := store.acquires.Load()
		cancelB()
		synctest.Wait()
		select {
		case err := <-errB:
			if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
				t.Fatalf("B: %v, want ErrNotAcquired joined with context.Canceled", err)
			}
		default:
			t.Fatal("B still waits after its ctx ended")
		}
		if calls := store.acquires.Load() - before; calls != 0 {
			t.Fatalf("%d acquire calls when B gave up, want 0", calls)
		}
		if w := leasehold.Waiting(c, "k"); w != 2 {
			t.Fatalf("Waiting = %d after B left, want 2", w)
		}
		for i, got := range []<-chan *leasehold.Lease{gotA, gotC} {
			if err := holder.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			l, ok := received(got)
			if !ok || l == nil {
				t.Fatalf("release %d did not go to waiter %c", i, "AC"[i])
			}
			holder = l
		}
	})
}

// When the store cannot watch, the head falls back to its backoff: it asks
// for the watch once, not at every step, makes no extra attempt for it, and
// takes the released key at its next backoff step.
func TestFailedWatchFallsBackToBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &watchStore{hookStore: &hookStore{Store: memstore.New()}, fail: true}
		c := leasehold.New(store, leasehold.WithBackoff(time.Minute, time.Minute), leasehold.WithLogger(quietLogger()))
		holder, err := c.TryAcquire(t.Context(), "k", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		gotA := acquireIn(t, t.Context(), c, "k", "A")
		synctest.Wait()
		if calls, watches := store.acquires.Load(), store.watches.Load(); calls != 2 || watches != 1 {
			t.Fatalf("%d acquire calls and %d watches, want 2 (the holder's, A's) and 1", calls, watches)
		}
		// A's next step finds the key still held: no new watch, one attempt.
		time.Sleep(time.Minute + time.Millisecond)
		synctest.Wait()
		if calls, watches := store.acquires.Load(), store.watches.Load(); calls != 3 || watches != 1 {
			t.Fatalf("after one step: %d acquire calls and %d watches, want 3 and 1: a failed watch is not asked again at every step", calls, watches)
		}
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		synctest.Wait()
		if _, ok := received(gotA); ok {
			t.Fatal("A acquired without a watch or a backoff step")
		}
		if l := <-gotA; l == nil { // the fake clock moves to A's next step
			t.Fatal("A did not get the key on its backoff")
		}
		if waited := time.Since(released); waited <= 0 || waited > time.Minute {
			t.Fatalf("A took the released key %v later, want within one backoff step (1m)", waited)
		}
		if watches := store.watches.Load(); watches != 1 {
			t.Fatalf("%d watches, want 1", watches)
		}
	})
}

// Every release watch a queue sets up is stopped once, when its last waiter
// leaves, and a queue that empties and fills again watches anew.
func TestEveryWatchIsStoppedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &watchStore{hookStore: &hookStore{Store: memstore.New()}}
		c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
		for round := 1; round <= 2; round++ {
			holder, err := c.TryAcquire(t.Context(), "k", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]<-chan *leasehold.Lease, 4)
			for i := range got {
				got[i] = acquireIn(t, t.Context(), c, "k", string(rune('A'+i)))
				synctest.Wait()
			}
			for i := range got {
				if err := holder.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				if holder = <-got[i]; holder == nil {
					t.Fatalf("round %d: waiter %d got no lease", round, i)
				}
				if stops := store.stops.Load(); i < len(got)-1 && stops != int64(round-1) {
					t.Fatalf("round %d: %d watches stopped while %d waiters wait", round, stops, len(got)-1-i)
				}
			}
			if err := holder.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			if w, s := store.watches.Load(), store.stops.Load(); w != int64(round) || s != int64(round) {
				t.Fatalf("round %d: %d watches set up, %d stopped; want %d of each", round, w, s, round)
			}
		}
	})
}
