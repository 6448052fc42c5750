package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/driver"
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
// is down and is made again after a fresh read, so the head is woken by the
// first release after the restart.
func TestQueueWakesTheHeadAfterARestart(t *testing.T) {
	srv := testserver.StartEtcd(t)
	key := storetest.Key(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s := newStore(t, newClient(t, srv.Endpoints()))
	if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	wc := newClient(t, srv.Endpoints())
	w := newStore(t, wc)
	if _, err := w.AcquireQueued(ctx, key, "head", time.Minute, time.Minute); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("the head joins: %v", err)
	}
	turn, stop, err := w.WatchTurn(ctx, key, "head")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	// The waiter makes no attempt but on a wake-up; a wake-up the watch
	// made again after the restart sends on its own finds the key held.
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-turn:
		case <-deadline:
			t.Fatal("the head was not woken by a release after the restart")
		}
		if _, err := w.AcquireQueued(ctx, key, "head", time.Minute, time.Minute); err == nil {
			return
		} else if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatal(err)
		}
	}
}
