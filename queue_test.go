package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// queueStore is a memstore with a driver.Queuer ability kept in memory, as a
// store shared by several Clients keeps it: a FIFO of tokens per key, each
// with a deadline, a free key refused to all but the head, and a release
// waking the head's watch alone.
type queueStore struct {
	*memstore.Store
	mu        sync.Mutex
	queues    map[string][]queueEntry
	turns     map[string]chan struct{} // per token
	queued    atomic.Int64             // AcquireQueued calls
	leaves    atomic.Int64             // LeaveQueue calls
	handOffs  atomic.Int64             // HandOff calls
	panicking atomic.Bool              // HandOff panics
	// beforeHandOff, if set, runs as a HandOff begins.
	beforeHandOff func()
	stayArg       atomic.Int64 // the last stay, in ns
	// beforeQueued, if set, runs at the start of each AcquireQueued, before
	// the store looks at anything: a test holds an attempt up there.
	beforeQueued func(ctx context.Context, token string)
	// watchTrips: a turn watch takes a round trip, so WatchTurn with a
	// done context fails (driver.Queuer), as on a Redis Store before its
	// turn channel is up.
	watchTrips bool
}

type queueEntry struct {
	token    string
	deadline time.Time
}

var (
	_ driver.Queuer    = (*queueStore)(nil)
	_ driver.HandOffer = (*queueStore)(nil)
)

func newQueueStore() *queueStore {
	return &queueStore{Store: memstore.New(), queues: make(map[string][]queueEntry), turns: make(map[string]chan struct{})}
}

// head is key's live head, expired heads removed; s.mu is held.
func (s *queueStore) head(key string) (string, bool) {
	q := s.queues[key]
	for len(q) > 0 && time.Now().After(q[0].deadline) {
		q = q[1:]
	}
	s.queues[key] = q
	if len(q) == 0 {
		return "", false
	}
	return q[0].token, true
}

// remove takes token out of key's queue; s.mu is held.
func (s *queueStore) remove(key, token string) bool {
	q := s.queues[key]
	i := slices.IndexFunc(q, func(e queueEntry) bool { return e.token == token })
	if i < 0 {
		return false
	}
	s.queues[key] = slices.Delete(q, i, i+1)
	return true
}

// wake wakes key's head; s.mu is held.
func (s *queueStore) wake(key string) {
	if head, ok := s.head(key); ok {
		if ch := s.turns[head]; ch != nil {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func (s *queueStore) acquire(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	head, queued := s.head(key)
	if !queued || head == token {
		f, err := s.Store.Acquire(ctx, key, token, ttl)
		if err == nil {
			s.remove(key, token)
		}
		if !errors.Is(err, leasehold.ErrNotAcquired) {
			return f, err
		}
	}
	if stay > 0 {
		q := s.queues[key]
		if i := slices.IndexFunc(q, func(e queueEntry) bool { return e.token == token }); i >= 0 {
			q[i].deadline = time.Now().Add(stay)
		} else {
			s.queues[key] = append(q, queueEntry{token, time.Now().Add(stay)})
		}
	}
	return 0, &leasehold.HeldError{Key: key}
}

func (s *queueStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	return s.acquire(ctx, key, token, ttl, 0)
}

func (s *queueStore) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	if s.beforeQueued != nil {
		s.beforeQueued(ctx, token)
	}
	s.queued.Add(1)
	s.stayArg.Store(int64(stay))
	return s.acquire(ctx, key, token, ttl, stay)
}

func (s *queueStore) Release(ctx context.Context, key, token string) error {
	if err := s.Store.Release(ctx, key, token); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake(key)
	return nil
}

// HandOff implements driver.HandOffer: under s.mu, which every queue
// operation takes, a release and an acquire for next are one step.
func (s *queueStore) HandOff(ctx context.Context, key, token, next string, ttl time.Duration) (int64, string, error) {
	s.handOffs.Add(1)
	if s.beforeHandOff != nil {
		s.beforeHandOff()
	}
	if s.panicking.Load() {
		panic("hand-off")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Release(ctx, key, token); err != nil {
		return 0, "", err
	}
	if head, queued := s.head(key); next == "" || (queued && head != next) {
		s.wake(key)
		return 0, head, nil
	}
	f, err := s.Store.Acquire(ctx, key, next, ttl)
	if err != nil {
		return 0, "", err
	}
	s.remove(key, next)
	return f, "", nil
}

func (s *queueStore) WatchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil && s.watchTrips {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{}, 1)
	s.turns[token] = ch
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.turns, token)
	}, nil
}

func (s *queueStore) LeaveQueue(ctx context.Context, key, token string) error {
	s.leaves.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.remove(key, token) {
		if info, err := s.Store.Inspect(ctx, key); err == nil && !info.Held {
			s.wake(key)
		}
	}
	return nil
}

func (s *queueStore) queueLen(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[key])
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Waiters of five Clients sharing a store that keeps a queue are served in
// arrival order, each woken by the release before its turn (an hour of
// backoff: nothing else moves them), and each Client counts its waiters.
func TestStoreQueueServesClientsInArrivalOrder(t *testing.T) {
	s := newQueueStore()
	const n = 5
	clients := make([]*leasehold.Client, n)
	for i := range clients {
		clients[i] = leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	key := "queue:order"
	holder, err := leasehold.New(s).TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]<-chan *leasehold.Lease, n)
	for i := range n {
		got[i] = acquireIn(t, ctx, clients[i], key, "w")
		waitFor(t, "the waiter to queue", func() bool { return s.queueLen(key) == i+1 })
		if w := leasehold.Waiting(clients[i], key); w != 1 {
			t.Errorf("client %d counts %d waiters, want 1", i, w)
		}
	}
	waitFor(t, "every waiter to watch its turn", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.turns) == n
	})
	if stay := time.Duration(s.stayArg.Load()); stay != driver.MaxQueueStay {
		t.Errorf("entries stay %v, want the bound %v", stay, driver.MaxQueueStay)
	}
	for i := range n {
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case holder = <-got[i]:
		case <-ctx.Done():
			t.Fatalf("waiter %d was not served next", i)
		}
		for j := i + 1; j < n; j++ {
			if l, ok := received(got[j]); ok {
				t.Fatalf("waiter %d served before its turn (%v)", j, l)
			}
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q := s.queueLen(key); q != 0 {
		t.Errorf("%d entries left", q)
	}
	if l := s.leaves.Load(); l != 0 {
		t.Errorf("%d LeaveQueue calls by waiters that were served, want 0: the acquire removes the entry", l)
	}
}

// A waiter that gives up leaves the store's queue, and the waiter behind
// it becomes the head that the next release wakes.
func TestStoreQueueWaiterThatGivesUpLeaves(t *testing.T) {
	s := newQueueStore()
	ctx := t.Context()
	key := "queue:leave"
	a := leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
	b := leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
	holder, err := leasehold.New(s).TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	actx, quit := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := a.Acquire(actx, key, time.Minute)
		gaveUp <- err
	}()
	waitFor(t, "a to queue", func() bool { return s.queueLen(key) == 1 })
	got := acquireIn(t, ctx, b, key, "b")
	waitFor(t, "b to queue and watch", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queues[key]) == 2 && len(s.turns) == 2
	})
	quit()
	if err := <-gaveUp; !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a gave up with %v", err)
	}
	if s.leaves.Load() != 1 || s.queueLen(key) != 1 || leasehold.Waiting(a, key) != 0 {
		t.Fatalf("after a gave up: %d leaves, %d queued, a counts %d waiting", s.leaves.Load(), s.queueLen(key), leasehold.Waiting(a, key))
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b was not woken")
	}
}

// A waiter whose backoff cap is long asks for an entry that lives at most
// driver.MaxQueueStay: a crashed waiter holds the queue up no longer, and
// the store takes it.
func TestStoreQueueStayIsBounded(t *testing.T) {
	s := newQueueStore()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	key := "queue:stay"
	if _, err := s.Store.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := leasehold.New(s, leasehold.WithBackoff(20*time.Hour, 20*time.Hour)).Acquire(ctx, key, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want the deadline", err)
	}
	if stay := time.Duration(s.stayArg.Load()); stay != driver.MaxQueueStay {
		t.Errorf("entries stay %v, want driver.MaxQueueStay (%v)", stay, driver.MaxQueueStay)
	}
}

// An uncontended Acquire on a store that keeps a queue is one attempt and
// no LeaveQueue.
func TestStoreQueueUncontended(t *testing.T) {
	s := newQueueStore()
	ctx := t.Context()
	l, err := leasehold.New(s).Acquire(ctx, "queue:free", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q, lv := s.queued.Load(), s.leaves.Load(); q != 1 || lv != 0 {
		t.Errorf("uncontended Acquire: %d queued attempts and %d leaves, want 1 and 0", q, lv)
	}
}

// A waiter behind the head of a store's queue, once its turn watch is in
// place, polls only once per backoff cap (to keep its entry alive): its turn
// comes with a wake-up, so the short backoff steps of a head would only cost
// the store round trips. When the store can watch its turn without a round
// trip, the waiter sets the watch up before its first attempt and needs
// nothing more; else it looks once more after setting it up. Fake clock:
// 400 ms in which a head's backoff from 10 ms would have polled five more
// times.
func TestStoreQueueWaiterBehindTheHeadPollsAtTheCap(t *testing.T) {
	t.Run("watch without a round trip", func(t *testing.T) { testBehindPolls(t, false, 2) })
	t.Run("watch with a round trip", func(t *testing.T) { testBehindPolls(t, true, 3) })
}

func testBehindPolls(t *testing.T, watchTrips bool, want int64) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueStore()
		s.watchTrips = watchTrips
		ctx := t.Context()
		holder, err := leasehold.New(s).TryAcquire(ctx, "queue:behind", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		head := leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
		behind := leasehold.New(s, leasehold.WithBackoff(10*time.Millisecond, time.Second))
		done := make(chan error, 2)
		for _, c := range []*leasehold.Client{head, behind} {
			go func() {
				l, err := c.Acquire(ctx, "queue:behind", time.Minute)
				if err == nil {
					err = l.Release(ctx)
				}
				done <- err
			}()
			synctest.Wait()
		}
		if got := s.queueLen("queue:behind"); got != 2 {
			t.Fatalf("%d waiters queued, want 2", got)
		}
		time.Sleep(400 * time.Millisecond)
		synctest.Wait()
		// head: its joining attempt; behind: its joining attempt and, if
		// its watch took a round trip, one after the watch was in place.
		if got := s.queued.Load(); got != want {
			t.Errorf("%d queued attempts in 400 ms, want %d", got, want)
		}
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
}

// A store whose HandOff panics: the releaser's panic goes on, and the waiter
// the key was being handed to does not wait for that hand-off forever; it
// takes the key once the holder's lease has run out.
func TestPanickingHandOffLeavesNoWaiterHanging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueStore()
		c := leasehold.New(s)
		holder, err := c.TryAcquire(t.Context(), "queue:panic", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := c.Acquire(t.Context(), "queue:panic", time.Minute)
			if err == nil {
				err = l.Release(t.Context())
			}
			got <- err
		}()
		synctest.Wait() // queued behind the holder
		s.panicking.Store(true)
		if v := recoverValue(func() { _ = holder.Release(t.Context()) }); v != "hand-off" {
			t.Fatalf("Release recovered %v, want the store's panic", v)
		}
		s.panicking.Store(false)
		start := time.Now()
		if err := <-got; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		if waited := time.Since(start); waited > 11*time.Second {
			t.Fatalf("the waiter got the key %v after the panic, want by the holder's TTL", waited)
		}
	})
}

// queueOrder is key's queue, as the names of its waiters' tokens.
func (s *queueStore) queueOrder(key string, names map[string]string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var order []string
	for _, e := range s.queues[key] {
		order = append(order, names[e.token])
	}
	return order
}

// A Client's waiters reach the store's queue in the order they joined its
// line: the second waiter's first attempt is held up on its way, and the
// third waits for its answer instead of taking a place ahead of it. Then the
// holder's release serves them in arrival order.
func TestOneClientsWaitersQueueInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newQueueStore()
		gate := make(chan struct{})
		open := sync.OnceFunc(func() { close(gate) })
		defer open()
		var mu sync.Mutex
		names := map[string]string{} // token → waiter
		c := leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
		defer c.Close()
		s.beforeQueued = func(ctx context.Context, token string) {
			name, _ := ctx.Value(waiterName{}).(string)
			mu.Lock()
			names[token] = name
			mu.Unlock()
			if name == "A2" {
				<-gate
			}
		}
		const key = "queue:one-client-order"
		holder, err := leasehold.New(s).TryAcquire(t.Context(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]<-chan *leasehold.Lease{}
		for _, n := range []string{"A1", "A2", "A3"} {
			got[n] = acquireIn(t, t.Context(), c, key, n)
			synctest.Wait()
		}
		mu.Lock()
		order := s.queueOrder(key, names)
		mu.Unlock()
		if !slices.Equal(order, []string{"A1"}) {
			t.Fatalf("with A2's first attempt on its way, the store's queue is %v, want [A1]: A3 went ahead of A2", order)
		}
		open()
		synctest.Wait()
		mu.Lock()
		order = s.queueOrder(key, names)
		mu.Unlock()
		if want := []string{"A1", "A2", "A3"}; !slices.Equal(order, want) {
			t.Fatalf("the store's queue is %v, want %v", order, want)
		}
		for _, n := range []string{"A1", "A2", "A3"} {
			if err := holder.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			l, ok := received(got[n])
			if !ok || l == nil {
				t.Fatalf("%s was not served next", n)
			}
			holder = l
		}
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// failingQueue fails AcquireQueued while fail is set, starting onFail just
// before it answers.
type failingQueue struct {
	*queueStore
	fail   atomic.Bool
	onFail func()
}

func (s *failingQueue) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	if s.fail.Load() {
		go s.onFail()
		return 0, errors.New("store down")
	}
	return s.queueStore.AcquireQueued(ctx, key, token, ttl, stay)
}

// A release by the Client never hands the key to a waiter whose attempt has
// just failed: its Acquire returns the failure, and a key handed to its
// token would be held for a TTL by no one. The release lands at varying
// moments around the failed attempt's answer.
func TestNoHandOffToAWaiterWhoseAttemptFailed(t *testing.T) {
	s := &failingQueue{queueStore: newQueueStore()}
	c := leasehold.New(s)
	defer c.Close()
	orphans := 0
	const rounds = 3000
	for i := range rounds {
		key := fmt.Sprintf("orphan:%d", i)
		l1, err := c.TryAcquire(t.Context(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan error, 1)
		delay := time.Duration(i%40) * time.Microsecond
		s.onFail = func() {
			for start := time.Now(); time.Since(start) < delay; { // spins: a timer is too coarse
			}
			released <- l1.Release(context.Background())
		}
		s.fail.Store(true)
		_, aerr := c.Acquire(t.Context(), key, time.Minute)
		s.fail.Store(false)
		if aerr == nil {
			t.Fatal("an Acquire whose attempt failed returned a lease")
		}
		if err := <-released; err != nil {
			t.Fatal(err)
		}
		if info, err := s.Inspect(t.Context(), key); err != nil {
			t.Fatal(err)
		} else if info.Held {
			orphans++
		}
	}
	if orphans > 0 {
		t.Fatalf("%d of %d keys left held for a minute by the token of an Acquire that failed", orphans, rounds)
	}
}
