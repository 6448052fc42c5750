package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/driver"
)

// Renew implements driver.Store. When the Store knows the lease the lock is
// on (it acquired the lock, or renewed it last), it keeps that lease alive
// once and then reads the lock key: the renew succeeds only if the key
// still holds token on that lease after the keep-alive, so a renew never
// succeeds on a lease whose key was deleted meanwhile (a forced release
// between a read and the keep-alive) and then taken by another owner. Two
// round trips. When it does not know the lease, it reads the key first to
// learn it, then keeps it alive and reads again: three.
//
// When ttl differs from the lease's TTL, it grants a lease of the new TTL
// and moves the key onto it in a transaction that requires the key
// unchanged since it was read (its ModRevision): two round trips more. A
// move whose outcome is unknown (its reply lost) may still be applied
// later; until a later renew of the lock has written the key (so that the
// late move's ModRevision no longer matches), every renew of the lock moves
// it, even to the same TTL: a late move must never undo a later renew's
// keep-alive by putting the key back on a lease whose TTL began earlier.
//
// It returns driver.ErrNotOwned when the key is absent, holds another token,
// or its lease has expired.
func (s *Store) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return err
	}
	id := lockID{key: s.LockKey(key), token: token}
	err := s.renew(ctx, id, ttl)
	if errors.Is(err, errKeyMoved) {
		// Another renew of the same owner moved the key between this
		// one's read and its write, or a late move landed: once more, from
		// a fresh read.
		err = s.renew(ctx, id, ttl)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, driver.ErrNotOwned):
		s.locks.forget(id)
		return driver.ErrNotOwned
	}
	return fmt.Errorf("etcdstore: renew %q: %w", key, err)
}

// errKeyMoved: the lock key still holds the owner's token but is not as
// this renew read it.
var errKeyMoved = errors.New("the lock key changed under a concurrent renewal of its owner; try again")

// renew is one attempt of Renew.
func (s *Store) renew(ctx context.Context, id lockID, ttl time.Duration) error {
	lease, known, doubt := s.locks.lookup(id)
	if !known || doubt {
		// Learn the lease (and, for a move, the ModRevision) first.
		cur, err := s.readLock(ctx, id)
		if err != nil {
			return err
		}
		if doubt {
			return s.move(ctx, id, ttl, cur)
		}
		lease = cur.lease
	}
	sent := time.Now()
	ka, err := s.keepAlive(ctx, lease)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound) && !known:
		return driver.ErrNotOwned // expired since the read
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		// The lease the Store knew is gone: the lock expired, or was moved
		// by a renew whose outcome the Store missed. Read and try again.
		s.locks.unhint(id)
		return s.renew(ctx, id, ttl)
	case err != nil:
		return fmt.Errorf("keep lease alive: %w", err)
	}
	// After the keep-alive: the key must still hold token on that lease.
	kv, err := s.readLock(ctx, id)
	if err != nil {
		return err
	}
	if kv.lease != lease {
		if known {
			s.locks.unhint(id) // moved since: read and try again
			return s.renew(ctx, id, ttl)
		}
		return errKeyMoved
	}
	if ka == s.grantedTTL(ttl) {
		s.locks.put(id, lease, sent.Add(time.Duration(ka)*time.Second))
		return nil
	}
	return s.move(ctx, id, ttl, kv)
}

// lockKV is what renew reads of a lock key that holds the owner's token.
type lockKV struct {
	lease clientv3.LeaseID
	rev   int64 // its ModRevision
}

// readLock reads id's lock key: driver.ErrNotOwned when it is absent or
// holds another token.
func (s *Store) readLock(ctx context.Context, id lockID) (*lockKV, error) {
	get, err := s.client.Get(rpc(ctx), id.key)
	if err != nil {
		return nil, err
	}
	if len(get.Kvs) == 0 || string(get.Kvs[0].Value) != id.token {
		return nil, driver.ErrNotOwned
	}
	return &lockKV{lease: clientv3.LeaseID(get.Kvs[0].Lease), rev: get.Kvs[0].ModRevision}, nil
}

// move grants a lease for ttl and moves id's lock key onto it, if the key is
// still as cur read it; then it keeps the lease the key was on for reuse (or
// revokes it, when the Store did not grant it). A move whose outcome is
// unknown puts the lock in doubt (lockBook), and its new lease stays: the
// key may be on it.
func (s *Store) move(ctx context.Context, id lockID, ttl time.Duration, cur *lockKV) error {
	sent := time.Now()
	lease, err := s.grant(ctx, seconds(ttl))
	if err != nil {
		return err
	}
	resp, err := s.client.Txn(rpc(ctx)).
		If(clientv3.Compare(clientv3.Value(id.key), "=", id.token), clientv3.Compare(clientv3.ModRevision(id.key), "=", cur.rev)).
		Then(clientv3.OpPut(id.key, id.token, clientv3.WithLease(lease), clientv3.WithPrevKV())).
		Else(clientv3.OpGet(id.key)).
		Commit()
	if err != nil {
		s.locks.suspect(id)
		return fmt.Errorf("move to a new lease: %w", err)
	}
	if !resp.Succeeded {
		s.freeLease(lease) // no key was put on it
		if len(resp.Responses) == 1 {
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 && string(kvs[0].Value) == id.token {
				return errKeyMoved
			}
		}
		return driver.ErrNotOwned
	}
	s.locks.put(id, lease, sent.Add(time.Duration(seconds(ttl))*time.Second))
	// Free the lease the key was on just before the move. It is never the
	// key's current lease: every move takes one no key is on.
	if len(resp.Responses) == 1 {
		if prev := resp.Responses[0].GetResponsePut().GetPrevKv(); prev != nil {
			if old := clientv3.LeaseID(prev.Lease); old != 0 && !s.leases.free(old) {
				s.revoke(ctx, old)
			}
		}
	}
	return nil
}

// lockID is a lock as its owner knows it: its lock key and token.
type lockID struct{ key, token string }

// lockBook is what the Store knows of the locks it acquired or renewed:
// the lease each is on, a hint that saves Renew its first read (checked by
// the read after the keep-alive), and the locks whose move to a new lease
// has an unknown outcome (in doubt), which must be moved again before a
// renew may keep a lease alive. Entries go when their owner releases, when
// the lock is found gone, and, for hints, once their lease has surely run
// out (a sweep, when the book has doubled since the last).
type lockBook struct {
	mu      sync.Mutex
	leases  map[lockID]lockLease
	doubt   map[lockID]time.Time // when the move was sent
	sweepAt int
}

type lockLease struct {
	id    clientv3.LeaseID
	until time.Time // the lease lasts at most until then unless kept alive again
}

// lockBookSweepMin is the number of hints below which the book does not look
// for those of locks that ran out without a release.
const lockBookSweepMin = 1024

// doubtFor is how long a lock stays in doubt without a renew or release of
// its owner: far longer than any request takes to reach etcd, so that a late
// move cannot land after it; it bounds the book for owners that vanish.
const doubtFor = time.Hour

// lookup returns the lease the Store knows id is on, and whether id is in
// doubt.
func (b *lockBook) lookup(id lockID) (lease clientv3.LeaseID, known, doubt bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, known := b.leases[id]
	_, doubt = b.doubt[id]
	return l.id, known, doubt
}

// put records that id is on lease until until, and out of doubt.
func (b *lockBook) put(id lockID, lease clientv3.LeaseID, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.leases == nil {
		b.leases = make(map[lockID]lockLease)
	}
	delete(b.doubt, id)
	b.leases[id] = lockLease{id: lease, until: until}
	if len(b.leases) >= max(b.sweepAt, lockBookSweepMin) {
		now := time.Now()
		for id, l := range b.leases {
			if now.After(l.until) {
				delete(b.leases, id)
			}
		}
		for id, at := range b.doubt {
			if now.Sub(at) > doubtFor {
				delete(b.doubt, id)
			}
		}
		b.sweepAt = 2 * len(b.leases)
	}
}

// suspect puts id in doubt: a move of its key was sent and its outcome is
// unknown.
func (b *lockBook) suspect(id lockID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.doubt == nil {
		b.doubt = make(map[lockID]time.Time)
	}
	delete(b.leases, id)
	b.doubt[id] = time.Now()
}

// forget drops what the Store knows of id: its owner released it, or it is
// gone. A late move of a lock in doubt cannot land on a key deleted since
// its read: its ModRevision no longer matches.
func (b *lockBook) forget(id lockID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.leases, id)
	delete(b.doubt, id)
}

// unhint drops the lease the Store knew id to be on (found wrong).
func (b *lockBook) unhint(id lockID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.leases, id)
}
