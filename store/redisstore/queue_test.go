package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// countedStore counts the queued attempts and the turn watches of one
// Client's store; it embeds the *redisstore.Store, so every ability stays.
type countedStore struct {
	*redisstore.Store
	attempts, watches *atomic.Int64
}

func (s countedStore) WatchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	turn, stop, err := s.Store.WatchTurn(ctx, key, token)
	if err == nil {
		s.watches.Add(1)
	}
	return turn, stop, err
}

func (s countedStore) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	s.attempts.Add(1)
	return s.Store.AcquireQueued(ctx, key, token, ttl, stay)
}

// queueLen is the number of waiters in key's queue, read with a client of
// its own.
func queueLen(t *testing.T, rc redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := rc.ZCard(t.Context(), redisstore.QueueKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitQueueLen waits until key's queue holds n waiters.
func waitQueueLen(t *testing.T, rc redis.UniversalClient, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for queueLen(t, rc, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("key's queue holds %d waiters, want %d", queueLen(t, rc, key), n)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// releaseWhenWoken waits up to 10 s for a waiter's lease on got (nil: the
// waiter failed and said so) and releases it; else it fails with msg.
func releaseWhenWoken(t *testing.T, got <-chan *leasehold.Lease, msg string) {
	t.Helper()
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}

// Eight Clients, each with its own Store and go-redis client as separate
// processes would have, queue for one key one after another: they get it in
// arrival order, and each hand-off is one attempt, by the head alone (the
// backoff is an hour, so only a wake-up can move a waiter). The queue's keys
// are gone at the end.
func TestQueueIsFIFOAcrossClients(t *testing.T) {
	key := storetest.Key(t)
	rc := singleClient(shared.Addr())
	defer rc.Close()
	var attempts, watches atomic.Int64
	const n = 8
	clients := make([]*leasehold.Client, n+1)
	for i := range clients {
		s := countedStore{newStore(t, singleClient(shared.Addr())), &attempts, &watches}
		clients[i] = leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	holder, err := clients[n].TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]chan *leasehold.Lease, n)
	for i := range n {
		got[i] = make(chan *leasehold.Lease, 1)
		wg.Go(func() {
			l, err := clients[i].Acquire(ctx, key, time.Minute)
			if err != nil && ctx.Err() == nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			got[i] <- l
		})
		// Each waiter is in the queue before the next one starts.
		waitQueueLen(t, rc, key, int64(i+1))
		time.Sleep(time.Millisecond)
	}
	// Every waiter watches its turn. The head made its first attempt and
	// one after its watch; the others, told they are behind the head, only
	// their first.
	for watches.Load() < n || attempts.Load() < n+1 {
		if ctx.Err() != nil {
			t.Fatalf("%d watches and %d attempts, want %d and %d", watches.Load(), attempts.Load(), n, n+1)
		}
		time.Sleep(time.Millisecond)
	}
	before := attempts.Load()
	var order []int
	for range n {
		if err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("hand-off %d not done; order so far %v", len(order), order)
		case l := <-anyOf(got):
			holder = l.lease
			order = append(order, l.i)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(order, want) {
		t.Errorf("served in order %v, want %v", order, want)
	}
	if calls := attempts.Load() - before; calls != n {
		t.Errorf("%d hand-offs made %d attempts, want one each", n, calls)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{redisstore.QueueKey(key), redisstore.QueueDeadlinesKey(key)} {
		if n, err := rc.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Errorf("%s left behind (%d, %v)", k, n, err)
		}
	}
}

type indexed struct {
	i     int
	lease *leasehold.Lease
}

// anyOf returns a channel that receives the first lease of any of chs.
func anyOf(chs []chan *leasehold.Lease) <-chan indexed {
	out := make(chan indexed, 1)
	go func() {
		for {
			for i, ch := range chs {
				select {
				case l := <-ch:
					if l != nil {
						out <- indexed{i, l}
						return
					}
				default:
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	return out
}

// A head that stops refreshing its entry (a crashed or paused process) holds
// the queue up until its entry expires, then the waiter behind it gets the
// key within its own backoff step; not before the entry expires (no one
// jumps a live head), not much after.
func TestQueueSkipsADeadHead(t *testing.T) {
	key := storetest.Key(t)
	ctx := t.Context()
	s := newStore(t, singleClient(shared.Addr()))
	holder := leasehold.New(s)
	l, err := holder.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The dead head: queued once, for stay, and never again.
	const stay = 400 * time.Millisecond
	if _, err := s.AcquireQueued(ctx, key, "dead-head", time.Minute, stay); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("queued attempt on a held key: %v, want ErrNotAcquired", err)
	}
	joined := time.Now()
	const maxBackoff = 100 * time.Millisecond
	c := leasehold.New(newStore(t, singleClient(shared.Addr())), leasehold.WithBackoff(10*time.Millisecond, maxBackoff))
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, key, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	rc := singleClient(shared.Addr())
	defer rc.Close()
	waitQueueLen(t, rc, key, 2)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l = <-got
	if l == nil {
		t.FailNow()
	}
	took := time.Since(joined)
	t.Logf("the waiter behind a dead head got the key %v after the head joined (stay %v, backoff cap %v)", took, stay, maxBackoff)
	if took < stay-5*time.Millisecond {
		t.Errorf("the waiter got the key %v after a head that stays %v joined: it jumped a live head", took, stay)
	}
	// The bound is stay plus a backoff step; the slack is for a busy machine.
	if bound := stay + maxBackoff + time.Second; took > bound {
		t.Errorf("the waiter got the key %v after the dead head joined, over the bound %v", took, bound)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter that gives up leaves the queue at once, so the waiter behind it
// is the head: the next release wakes it (an hour of backoff: only a wake-up
// moves it).
func TestQueueWaiterThatGivesUpLeaves(t *testing.T) {
	key := storetest.Key(t)
	ctx := t.Context()
	rc := singleClient(shared.Addr())
	defer rc.Close()
	var attempts, watches atomic.Int64
	newClient := func() *leasehold.Client {
		s := countedStore{newStore(t, singleClient(shared.Addr())), &attempts, &watches}
		return leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
	}
	holder, err := newClient().TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	quitter := newClient()
	qctx, quit := context.WithCancel(ctx)
	quitted := make(chan error, 1)
	go func() {
		_, err := quitter.Acquire(qctx, key, time.Minute)
		quitted <- err
	}()
	waitQueueLen(t, rc, key, 1)
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := newClient().Acquire(ctx, key, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueueLen(t, rc, key, 2)
	for watches.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	quit()
	if err := <-quitted; !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v", err)
	}
	if n := queueLen(t, rc, key); n != 1 {
		t.Fatalf("%d waiters queued after one of two gave up", n)
	}
	if quitter.Waiting(key) != 0 {
		t.Errorf("the Client that gave up counts %d waiters", quitter.Waiting(key))
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	releaseWhenWoken(t, got, "the waiter behind the one that gave up was not woken")
}

// A forced release wakes the head of the key's queue on its own channel, as
// a release does: with an hour's backoff, only that wake-up can move it.
func TestQueueForceReleaseWakesTheHead(t *testing.T) {
	key := storetest.Key(t)
	ctx := t.Context()
	rc := singleClient(shared.Addr())
	defer rc.Close()
	var attempts, watches atomic.Int64
	operator := newStore(t, singleClient(shared.Addr()))
	holder, err := leasehold.New(operator).TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiter := leasehold.New(countedStore{newStore(t, singleClient(shared.Addr())), &attempts, &watches},
		leasehold.WithBackoff(time.Hour, time.Hour))
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitQueueLen(t, rc, key, 1)
	deadline := time.Now().Add(20 * time.Second)
	for watches.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if _, err := operator.ForceRelease(ctx, key, "test: stuck holder", "queue_test"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the head was not woken by the forced release")
	}
	if !errors.Is(holder.Release(ctx), leasehold.ErrNotOwned) {
		t.Error("the forced-out holder still owns the key")
	}
}

// A newcomer's TryAcquire does not take a free key a live waiter is queued
// for; the waiter does, and its entry goes in the same step.
func TestQueueNoBarging(t *testing.T) {
	key := storetest.Key(t)
	ctx := t.Context()
	s := newStore(t, singleClient(shared.Addr()))
	if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	var held *leasehold.HeldError
	if _, err := s.AcquireQueued(ctx, key, "waiter", time.Minute, time.Minute); !errors.As(err, &held) || held.Remaining <= 0 {
		t.Fatalf("the head's refused attempt: %v, want a HeldError with the holder's remaining time", err)
	}
	if _, err := s.AcquireQueued(ctx, key, "second", time.Minute, time.Minute); !errors.As(err, &held) || held.Remaining != 0 {
		t.Fatalf("the second waiter's refused attempt: %v, want a HeldError with no remaining time", err)
	}
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, key, "newcomer", time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a newcomer's acquire of a free key with a queued waiter: %v, want ErrNotAcquired", err)
	}
	if _, err := s.AcquireQueued(ctx, key, "second", time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("the second waiter, not the head: %v, want ErrNotAcquired", err)
	}
	f, err := s.AcquireQueued(ctx, key, "waiter", time.Minute, time.Minute)
	if err != nil || f <= 0 {
		t.Fatalf("the head's attempt on the free key: %d, %v", f, err)
	}
	if err := s.LeaveQueue(ctx, key, "second"); err != nil {
		t.Fatal(err)
	}
	if err := s.LeaveQueue(ctx, key, "second"); err != nil {
		t.Fatalf("leaving twice: %v", err)
	}
	if err := s.Release(ctx, key, "waiter"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, key, "newcomer", time.Minute); err != nil {
		t.Fatalf("a newcomer once no one waits: %v", err)
	}
	if err := s.Release(ctx, key, "newcomer"); err != nil {
		t.Fatal(err)
	}
	rc := singleClient(shared.Addr())
	defer rc.Close()
	if n, err := rc.Exists(ctx, redisstore.QueueKey(key), redisstore.QueueDeadlinesKey(key)).Result(); err != nil || n != 0 {
		t.Errorf("%d queue keys left behind (%v)", n, err)
	}
	if _, err := s.AcquireQueued(ctx, key, "w", time.Minute, 0); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("a stay of 0: %v, want ErrInvalidArgument", err)
	}
}

// No wait is lost: Clients of four goroutines each, every goroutine taking
// the key several times, all finish; the queue is empty at the end.
func TestQueueNoWaitLost(t *testing.T) {
	key := storetest.Key(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const clients, goroutines, rounds = 6, 4, 5
	var wg sync.WaitGroup
	var inside atomic.Int32
	for range clients {
		c := leasehold.New(newStore(t, singleClient(shared.Addr())), leasehold.WithBackoff(5*time.Millisecond, 200*time.Millisecond))
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					l, err := c.Acquire(ctx, key, 10*time.Second)
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						t.Error("two holders at once")
					}
					time.Sleep(100 * time.Microsecond)
					inside.Add(-1)
					if err := l.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	rc := singleClient(shared.Addr())
	defer rc.Close()
	if n := queueLen(t, rc, key); n != 0 {
		t.Errorf("%d waiters left in the queue", n)
	}
}

// The queue's keys are in the lock key's cluster slot for any key, and the
// queue works on a cluster: a queued waiter is woken by a release and served
// before a newcomer.
func TestQueueOnCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	node := cluster.Node(0)
	keys := oddKeys[:len(oddKeys)-1]
	for _, key := range keys {
		want, err := node.Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{redisstore.QueueKey(key), redisstore.QueueDeadlinesKey(key)} {
			if got, err := node.Do("CLUSTER", "KEYSLOT", k); err != nil || got != want {
				t.Fatalf("key %q is in slot %v, its queue key %q in slot %v (%v)", key, want, k, got, err)
			}
		}
	}
	ctx := t.Context()
	holders := leasehold.New(newStore(t, clusterClient(cluster.Addrs())))
	waiters := leasehold.New(newStore(t, clusterClient(cluster.Addrs())), leasehold.WithBackoff(time.Hour, time.Hour))
	newcomer := newStore(t, clusterClient(cluster.Addrs()))
	rc := clusterClient(cluster.Addrs())
	defer rc.Close()
	for _, key := range keys {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			l, err := holders.TryAcquire(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *leasehold.Lease, 1)
			go func() {
				l, err := waiters.Acquire(ctx, key, time.Minute)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			waitQueueLen(t, rc, key, 1)
			// Released through the Store, so the newcomer's attempt comes
			// right after, before the waiter's.
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := newcomer.Acquire(ctx, key, "newcomer", time.Minute); err == nil {
				t.Error("a newcomer took a key a waiter was woken for")
				_ = newcomer.Release(ctx, key, "newcomer")
			}
			releaseWhenWoken(t, got, "the queued waiter was not woken")
		})
	}
}

// The scripts publish a head's wake-up on TurnChannel(key, token), for odd
// keys and tokens too: a subscriber there hears the release.
func TestTurnChannelIsTheScripts(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, singleClient(shared.Addr()))
	rc := singleClient(shared.Addr())
	defer rc.Close()
	for _, key := range []string{storetest.Key(t), "x}{y:" + storetest.Key(t), "lock:ü:{日本}:" + storetest.Key(t)} {
		const token = "tok:with:colons~{x}"
		ps := rc.Subscribe(ctx, redisstore.TurnChannel(key, token))
		if _, err := ps.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireQueued(ctx, key, token, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatal(err)
		}
		if err := s.Release(ctx, key, "holder"); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := ps.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("key %q: no wake-up on %q: %v", key, redisstore.TurnChannel(key, token), err)
		}
		_ = msg
		if err := s.LeaveQueue(ctx, key, token); err != nil {
			t.Fatal(err)
		}
		_ = ps.Close()
	}
}
