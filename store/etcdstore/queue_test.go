package etcdstore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// The comparisons the acquire transaction relies on, on a real etcd: a
// CreateRevision compare over a key range is true when every key in the
// range passes it, and an empty range compares as one key of CreateRevision
// 0; so "= 0" means "no key", and "> r" is false on an empty range.
func TestRangeComparesAsTheAcquireNeeds(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	ctx, pfx := t.Context(), "range-compare/"+storetest.Key(t)+"/"
	holds := func(cmp clientv3.Cmp) bool {
		t.Helper()
		resp, err := client.Txn(ctx).If(cmp).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	if !holds(clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()) {
		t.Error(`"= 0" on an empty range is false`)
	}
	if holds(clientv3.Compare(clientv3.CreateRevision(pfx), ">", 0).WithPrefix()) {
		t.Error(`"> 0" on an empty range is true`)
	}
	first, err := client.Put(ctx, pfx+"a", "")
	if err != nil {
		t.Fatal(err)
	}
	second, err := client.Put(ctx, pfx+"b", "")
	if err != nil {
		t.Fatal(err)
	}
	r1, r2 := first.Header.Revision, second.Header.Revision
	if holds(clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()) {
		t.Error(`"= 0" on a range of two keys is true`)
	}
	if !holds(clientv3.Compare(clientv3.CreateRevision(pfx), ">", r1-1).WithPrefix()) {
		t.Error(`"> first-1" is false though every key was created at or after first`)
	}
	if holds(clientv3.Compare(clientv3.CreateRevision(pfx), ">", r2-1).WithPrefix()) {
		t.Error(`"> second-1" is true though a key was created before second`)
	}
	// A put in a transaction is seen by a read after it in the same branch.
	resp, err := client.Txn(ctx).Then(clientv3.OpPut(pfx+"c", ""), clientv3.OpGet(pfx+"c")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) != 1 || kvs[0].CreateRevision != resp.Header.Revision {
		t.Errorf("read after a put in one transaction: %v, want the key created at %d", kvs, resp.Header.Revision)
	}
	if _, err := client.Delete(ctx, pfx, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// queueLen is the number of entries in key's queue.
func queueLen(t *testing.T, client *clientv3.Client, s *etcdstore.Store, key string) int64 {
	t.Helper()
	resp, err := client.Get(t.Context(), s.QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// waitQueueLen waits until key's queue holds n entries.
func waitQueueLen(t *testing.T, client *clientv3.Client, s *etcdstore.Store, key string, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for queueLen(t, client, s, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("key's queue holds %d entries, want %d", queueLen(t, client, s, key), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// countedStore counts the queued attempts and the turn watches of one
// Client's store; it embeds the *etcdstore.Store, so every ability stays.
type countedStore struct {
	*etcdstore.Store
	attempts, watches *atomic.Int64
	answered          *atomic.Int64 // attempts that returned; nil: not counted
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
	fence, err := s.Store.AcquireQueued(ctx, key, token, ttl, stay)
	if s.answered != nil {
		s.answered.Add(1)
	}
	return fence, err
}

type indexed struct {
	i     int
	lease *leasehold.Lease
}

// Eight Clients, each with its own Store and clientv3 client as separate
// processes would have, queue for one key one after another: they get it in
// arrival order, and each hand-off is one attempt, by the head alone (the
// backoff is an hour, so only a wake-up can move a waiter). The queue is
// empty at the end.
func TestQueueIsFIFOAcrossClients(t *testing.T) {
	key := storetest.Key(t)
	reader := newClient(t, shared.Endpoints())
	rs := newStore(t, reader)
	var attempts, watches atomic.Int64
	const n = 8
	clients := make([]*leasehold.Client, n+1)
	for i := range clients {
		s := countedStore{newStore(t, newClient(t, shared.Endpoints())), &attempts, &watches, nil}
		clients[i] = leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	holder, err := clients[n].TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan indexed, n)
	for i := range n {
		wg.Go(func() {
			l, err := clients[i].Acquire(ctx, key, time.Minute)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				return
			}
			got <- indexed{i, l}
		})
		// Each waiter is in the queue before the next one starts.
		waitQueueLen(t, reader, rs, key, int64(i+1))
	}
	// Every waiter watches its turn: the head made its first attempt and
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
		case l := <-got:
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
	if k := queueLen(t, reader, rs, key); k != 0 {
		t.Errorf("%d entries left in the queue", k)
	}
}

// A head that crashed (its entry's lease no longer kept alive: here the
// lease is revoked, as its expiry would) holds the queue up no longer: the
// waiter behind it watches the entry, and takes the key as soon as the entry
// is gone, without waiting for its backoff (an hour here).
func TestQueueSkipsACrashedHead(t *testing.T) {
	key := storetest.Key(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client)
	holder := leasehold.New(s)
	l, err := holder.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The crashed head: a Store of its own, queued once, then gone.
	dead := newStore(t, newClient(t, shared.Endpoints()))
	if _, err := dead.AcquireQueued(ctx, key, "dead-head", time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("queued attempt on a held key: %v, want ErrNotAcquired", err)
	}
	entry, err := client.Get(ctx, s.QueuePrefix(key)+"dead-head")
	if err != nil || len(entry.Kvs) != 1 || entry.Kvs[0].Lease == 0 {
		t.Fatalf("the dead head's entry: %v, %v; want one key on a lease", entry, err)
	}
	c := leasehold.New(newStore(t, newClient(t, shared.Endpoints())), leasehold.WithBackoff(time.Hour, time.Hour))
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, key, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueueLen(t, client, s, key, 2)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("the waiter jumped a live head")
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := client.Revoke(ctx, clientv3.LeaseID(entry.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		t.Logf("the waiter behind the crashed head got the key %v after its entry went", time.Since(crashed))
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind a crashed head was not woken when its entry went")
	}
}

// An entry that is not kept alive expires by itself: the waiter behind it
// gets the key within the entry's lease (the stay rounded up to seconds: 1
// s) plus etcd's expiry timer, and not before the stay.
func TestQueueEntryExpires(t *testing.T) {
	key := storetest.Key(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client)
	if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	const stay = 500 * time.Millisecond
	dead := newStore(t, newClient(t, shared.Endpoints()))
	if _, err := dead.AcquireQueued(ctx, key, "paused", time.Minute, stay); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("queued attempt on a held key: %v, want ErrNotAcquired", err)
	}
	joined := time.Now()
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	c := leasehold.New(newStore(t, newClient(t, shared.Endpoints())), leasehold.WithBackoff(time.Hour, time.Hour))
	l, err := c.Acquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(joined)
	t.Logf("the waiter behind an entry of stay %v got the key %v after it joined", stay, took)
	if took < stay {
		t.Errorf("got the key %v after the entry of stay %v was made", took, stay)
	}
	// 1 s of lease, etcd's expiry timer of 0.5 s, and slack for a loaded machine.
	if bound := time.Second + 500*time.Millisecond + 3*time.Second; took > bound {
		t.Errorf("got the key %v after the entry was made, over the bound %v", took, bound)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter that gives up leaves the queue at once, so the waiter behind it
// is the head: the next release wakes it (an hour of backoff: only a
// wake-up moves it).
func TestQueueWaiterThatGivesUpLeaves(t *testing.T) {
	key := storetest.Key(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reader := newClient(t, shared.Endpoints())
	rs := newStore(t, reader)
	var attempts, watches atomic.Int64
	newLH := func() *leasehold.Client {
		s := countedStore{newStore(t, newClient(t, shared.Endpoints())), &attempts, &watches, nil}
		return leasehold.New(s, leasehold.WithBackoff(time.Hour, time.Hour))
	}
	holder, err := newLH().TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	quitter := newLH()
	qctx, quit := context.WithCancel(ctx)
	quitted := make(chan error, 1)
	go func() {
		_, err := quitter.Acquire(qctx, key, time.Minute)
		quitted <- err
	}()
	waitQueueLen(t, reader, rs, key, 1)
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := newLH().Acquire(ctx, key, time.Minute)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitQueueLen(t, reader, rs, key, 2)
	for watches.Load() < 2 {
		if ctx.Err() != nil {
			t.Fatal("the waiters did not watch their turns")
		}
		time.Sleep(time.Millisecond)
	}
	quit()
	if err := <-quitted; !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v", err)
	}
	if n := queueLen(t, reader, rs, key); n != 1 {
		t.Fatalf("%d waiters queued after one of two gave up", n)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter behind the one that gave up was not woken")
	}
}

// No wait is lost: Clients of four goroutines each, every goroutine taking
// the key several times, all finish; the queue is empty at the end.
func TestQueueNoWaitLost(t *testing.T) {
	key := storetest.Key(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	reader := newClient(t, shared.Endpoints())
	rs := newStore(t, reader)
	const clients, goroutines, rounds = 4, 3, 3
	var wg sync.WaitGroup
	var inside atomic.Int32
	for range clients {
		c := leasehold.New(newStore(t, newClient(t, shared.Endpoints())), leasehold.WithBackoff(5*time.Millisecond, 200*time.Millisecond))
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
	if n := queueLen(t, reader, rs, key); n != 0 {
		t.Errorf("%d waiters left in the queue", n)
	}
}

// The queue's keys cannot meet another key's: a key that is a prefix of
// another, or contains "/", has a queue prefix of its own, apart from every
// lock and fence key.
func TestQueuePrefixIsApart(t *testing.T) {
	s := newStore(t, newClient(t, shared.Endpoints()), etcdstore.WithPrefix("p/"))
	if got, want := s.QueuePrefix("a/b"), "p/queue/3:a/b/"; got != want {
		t.Fatalf("QueuePrefix(a/b) = %q, want %q", got, want)
	}
	keys := []string{"a", "a/", "a/b", "ab", "queue/1:a", "1:a"}
	for _, k := range keys {
		for _, other := range keys {
			q := s.QueuePrefix(k)
			for _, theirs := range []string{s.LockKey(other), s.FenceKey(other)} {
				if len(theirs) >= len(q) && theirs[:len(q)] == q {
					t.Errorf("%q of key %q is under the queue of %q", theirs, other, k)
				}
			}
			if oq := s.QueuePrefix(other); k != other && len(oq) >= len(q) && oq[:len(q)] == q {
				t.Errorf("the queue of %q is under the queue of %q", other, k)
			}
		}
	}
}

// A turn watch outlives an etcd restart: the watch breaks while the server
// is down and is made again after a fresh read, so the head (with an hour
// of backoff: only a wake-up moves it) is woken by the first release after
// the restart.
func TestQueueWakesTheHeadAfterARestart(t *testing.T) {
	srv := testserver.StartEtcd(t)
	key := storetest.Key(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	client := newClient(t, srv.Endpoints())
	s := newStore(t, client)
	if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	var attempts, watches, answered atomic.Int64
	wc := newClient(t, srv.Endpoints())
	c := leasehold.New(countedStore{newStore(t, wc), &attempts, &watches, &answered}, leasehold.WithBackoff(time.Hour, time.Hour))
	got := make(chan *leasehold.Lease, 1)
	go func() {
		l, err := c.Acquire(ctx, key, time.Minute)
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		got <- l
	}()
	// Its first attempt, its watch, and the attempt after the watch, all
	// answered: the server stops while the waiter only watches.
	for watches.Load() < 1 || answered.Load() < 2 {
		if ctx.Err() != nil {
			t.Fatal("the waiter did not watch its turn")
		}
		time.Sleep(time.Millisecond)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The waiter's client is connected again before the release, so that
	// the attempt the wake-up makes does not meet the broken connection
	// (etcd's client does not retry a write; the wait would end with the
	// error, as a store failure ends any wait).
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		_, err := wc.Get(rctx, "reconnected?")
		rcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the waiter's client did not reconnect: %v", err)
		}
	}
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.FailNow()
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the head was not woken by a release after the restart")
	}
}
