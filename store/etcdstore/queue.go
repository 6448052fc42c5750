package etcdstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/driver"
)

// QueuePrefix returns the prefix of key's waiter queue (driver.Queuer): the
// Store's prefix, "queue/", the key's length, ':' and the key, then '/'. A
// waiter's entry is that prefix followed by its token, with an empty value,
// attached to a lease of its own of about the waiter's stay; its place is
// its CreateRevision. The length keeps one key's queue apart from that of a
// longer key that starts with it, and "queue/" keeps every entry apart from
// the lock, fence and audit keys.
func (s *Store) QueuePrefix(key string) string {
	return s.prefix + "queue/" + strconv.Itoa(len(key)) + ":" + key + "/"
}

// queueEntry is what the Store knows of an entry it made for a waiter: its
// place and its lease. The Store remembers it from the attempt that made it
// to the one that takes the key, to LeaveQueue, or to the attempt that finds
// it gone, so that an attempt needs no read of its own entry first.
type queueEntry struct {
	rev   int64            // the entry's CreateRevision
	lease clientv3.LeaseID // the entry's own lease
	until time.Time        // when the entry is gone for sure unless refreshed (local clock)
}

// entries are the queue entries the Store made, by entry key.
type entries struct {
	mu      sync.Mutex
	byKey   map[string]queueEntry
	sweepAt int // the size at which the next insert drops entries past their until
}

// entrySweepMin is the size of the entry map below which no insert sweeps
// it: entries are removed one by one by the calls that end them, and a
// sweep only collects those whose LeaveQueue failed.
const entrySweepMin = 64

func (es *entries) get(ek string) (queueEntry, bool) {
	es.mu.Lock()
	defer es.mu.Unlock()
	e, ok := es.byKey[ek]
	return e, ok
}

func (es *entries) put(ek string, e queueEntry) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.byKey == nil {
		es.byKey = make(map[string]queueEntry)
	}
	es.byKey[ek] = e
	if len(es.byKey) >= max(es.sweepAt, entrySweepMin) {
		now := time.Now()
		for k, e := range es.byKey {
			if now.After(e.until) {
				delete(es.byKey, k)
			}
		}
		es.sweepAt = 2 * len(es.byKey)
	}
}

// rev returns the place of ek's entry, 0 when the Store does not know it.
func (es *entries) rev(ek string) int64 {
	e, _ := es.get(ek)
	return e.rev
}

// forget removes ek's entry, returning it.
func (es *entries) forget(ek string) (queueEntry, bool) {
	es.mu.Lock()
	defer es.mu.Unlock()
	e, ok := es.byKey[ek]
	delete(es.byKey, ek)
	return e, ok
}

// touch moves ek's until forward, if the Store still knows the entry rev.
func (es *entries) touch(ek string, rev int64, until time.Time) {
	es.mu.Lock()
	defer es.mu.Unlock()
	if e, ok := es.byKey[ek]; ok && e.rev == rev {
		e.until = until
		es.byKey[ek] = e
	}
}

// AcquireQueued implements driver.Queuer in one transaction, as Acquire:
// the key is taken only if the lock key is free, token's entry exists at
// the place the Store knows, and no entry of the queue was created before
// it; the entry is deleted in the same transaction. Refused, a waiter the
// Store has no entry for is put at the back of the queue in that same
// transaction, on a lease of its own of stay (rounded up to seconds, as
// every etcd lease); a waiter with an entry has the entry's lease kept
// alive once, which keeps its place (a keep-alive does not write the key).
// The head is told the holder's remaining time; a waiter behind it gets a
// *driver.HeldError whose Remaining is 0. A stay is capped at
// driver.MaxQueueStay; one below driver.MinTTL is an *driver.ArgumentError.
func (s *Store) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	stay, err := driver.QueueStay(stay)
	if err != nil {
		return 0, err
	}
	return s.acquire(ctx, key, token, ttl, stay)
}

// LeaveQueue implements driver.Queuer: one request deletes token's entry
// (its lease, which no key is on any more, is kept for reuse), and the
// watch of the waiter behind it sees the deletion. Leaving without an
// entry deletes nothing and is no error.
func (s *Store) LeaveQueue(ctx context.Context, key, token string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	ek := s.QueuePrefix(key) + token
	e, known := s.queued.forget(ek)
	resp, err := s.client.Delete(rpc(ctx), ek, clientv3.WithPrevKV())
	if err != nil {
		if known {
			s.revokeLater(e.lease) // which deletes the entry, if the delete did not
		}
		return fmt.Errorf("etcdstore: leave the queue of %q: %w", key, err)
	}
	if known {
		if len(resp.PrevKvs) == 1 && clientv3.LeaseID(resp.PrevKvs[0].Lease) == e.lease {
			s.freeLease(e.lease) // no key is on it any more
		} else {
			s.leases.forget(e.lease) // expired, or the entry is on another
		}
	}
	return nil
}

// turnState is what a turn watch reads: the entry just before the waiter's
// (by CreateRevision; "" when the waiter is the head), whether the lock key
// is held, and the revision of the read.
type turnState struct {
	pred string
	held bool
	rev  int64
}

// readTurn reads the waiter's predecessor in the queue at prefix qp (none
// asked when rev is 0: a waiter whose entry the Store does not know watches
// the lock key alone) and whether lk is held, in one transaction.
func (s *Store) readTurn(ctx context.Context, lk, qp string, rev int64) (turnState, error) {
	ops := []clientv3.Op{clientv3.OpGet(lk, clientv3.WithKeysOnly())}
	if rev > 0 {
		ops = append(ops, clientv3.OpGet(qp, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithMaxCreateRev(rev-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(1)))
	}
	resp, err := s.client.Txn(rpc(ctx)).Then(ops...).Commit()
	if err != nil {
		return turnState{}, err
	}
	if len(resp.Responses) != len(ops) {
		return turnState{}, fmt.Errorf("%d answers in the transaction, want %d", len(resp.Responses), len(ops))
	}
	st := turnState{rev: resp.Header.Revision, held: len(resp.Responses[0].GetResponseRange().GetKvs()) > 0}
	if rev > 0 {
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
			st.pred = string(kvs[0].Key)
		}
	}
	return st, nil
}

// WatchTurn implements driver.Queuer without a thundering herd: each waiter
// watches one key, the entry just before its own (by CreateRevision), and
// only the head watches the lock key. When the predecessor is deleted (it
// took the key, left, or its lease expired) the waiter reads its new
// predecessor; with none, it is the head, and is woken at once if the key
// is free, then at each deletion of the lock key (a release, an expiry, a
// ForceRelease). A release therefore wakes one waiter in all the processes.
//
// It returns after one read, from whose revision on the watches start, so
// no deletion after it is missed; it fails when ctx ends first, or when the
// Store is closed, and at once, reading nothing, when ctx is already done
// (every turn watch takes a read). A watch that breaks, or whose revision
// was compacted, is made again after a fresh read.
func (s *Store) WatchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateRelease(key, token); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("etcdstore: watch the turn of %q: %w", key, context.Cause(ctx))
	}
	lk, qp := s.LockKey(key), s.QueuePrefix(key)
	ek := qp + token
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil, errClosed
	}
	wctx, cancel := context.WithCancel(s.ctx)
	s.wg.Add(1)
	s.mu.Unlock()

	st, err := s.readTurn(ctx, lk, qp, s.queued.rev(ek))
	if err != nil {
		cancel()
		s.wg.Done()
		if s.ctx.Err() != nil {
			return nil, nil, errClosed
		}
		return nil, nil, fmt.Errorf("etcdstore: watch the turn of %q: %w", key, err)
	}
	ch := make(chan struct{}, 1)
	go s.watchTurn(wctx, ch, lk, qp, ek, st)
	var once sync.Once
	return ch, func() { once.Do(cancel) }, nil
}

// watchTurn follows one waiter's place until ctx is cancelled (by the
// waiter's stop, or by Close): it watches its predecessor's entry until the
// waiter is the head, then the lock key, and sends on ch, without blocking,
// whenever the key may be free with the waiter at the head. ek is the
// waiter's entry; its place is read from the Store's entries each time, so
// a waiter that joined again is followed at its new place.
func (s *Store) watchTurn(ctx context.Context, ch chan<- struct{}, lk, qp, ek string, st turnState) {
	defer s.wg.Done()
	pause := time.Duration(0)
	for {
		if st.pred == "" && !st.held {
			wakeOne(ch)
		}
		target := lk
		if st.pred != "" {
			target = st.pred
		}
		// From the revision after the read: nothing in between is missed.
		// WithRequireLeader: a member cut off from its cluster ends the
		// watch instead of keeping it silently.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := s.client.Watch(wctx, target, clientv3.WithRev(st.rev+1), clientv3.WithFilterPut())
		gone := false // the predecessor was deleted
		for resp := range wch {
			if len(resp.Events) == 0 {
				continue // created, progress, or canceled (the channel closes next)
			}
			if st.pred != "" {
				gone = true
				break
			}
			pause = 0
			wakeOne(ch) // the lock key was deleted, and the waiter is the head
		}
		cancel()
		// Read the place again: at once when the predecessor is gone, after
		// a pause when the watch broke (lost leader, compacted revision) or
		// the read failed, so that neither is repeated in a spin.
		for {
			if !gone {
				pause = min(max(2*pause, minRewatchPause), maxRewatchPause)
				select {
				case <-ctx.Done():
					return
				case <-time.After(pause):
				}
			}
			next, err := s.readTurn(ctx, lk, qp, s.queued.rev(ek))
			if err == nil {
				st = next
				break
			}
			if ctx.Err() != nil {
				return
			}
			gone = false
		}
	}
}

// wakeOne gives ch a pending wake-up, without blocking.
func wakeOne(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default: // a wake-up is already pending
	}
}
