package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseReuseMargin is how long before its TTL runs out, counted from the
// send time of its grant or last keep-alive, an idle lease is no longer
// reused: it may be gone by the time the acquire reaches etcd, which would
// cost the acquire a retry. A quarter of a second covers a few round trips
// on a loaded machine; etcd's TTLs are whole seconds.
const leaseReuseMargin = 250 * time.Millisecond

// leaseDateDivisor bounds how long before an acquire the term of a lock on
// a reused lease may have begun, for a caller that counts from it
// (AcquireDated, which the Client uses): ttl/20. A lease kept alive less
// than that before the acquire is not kept alive again. That keep-alive,
// sent alongside the acquire's transaction, was the largest piece of
// etcd's work a cycle after the transactions (399 of 403 µs of CPU against
// 353 without it, 16 goroutines, docs/design.md §9); with the bound, a
// lease reused at any rate is kept alive at most 20 times a TTL. The price:
// a lock nobody renews lasts at least 95 % of its TTL from its acquire, and
// its owner counts it from the lease's last keep-alive, so it knows.
const leaseDateDivisor = 20

// Bounds of the idle leases a Store keeps for reuse: 256 per TTL is more
// than the concurrency one Store sees in practice, and 16 TTLs more than an
// application uses. A lease beyond them is revoked.
const (
	poolPerTTL = 256
	poolTTLs   = 16
)

// ownedSweepMin is the number of leases the Store tracks below which it does
// not look for dead ones: a lease leaves the map when it is freed, revoked or
// found stale, and a sweep only collects those of locks that expired or were
// force-released.
const ownedSweepMin = 1024

// seconds rounds a TTL up to whole seconds, the unit of etcd leases, so that
// the server never holds a lease for less time than its owner believes.
func seconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// leaseInfo is what the Store knows of a lease it granted.
type leaseInfo struct {
	ttl   int64     // the TTL asked for, whole seconds
	fresh time.Time // when the grant or keep-alive that last reset it was sent
	idle  bool      // in the pool: no key is on it
}

// leasePool holds the leases the Store granted and has not revoked or given
// up: those its locks and queue entries are on, and idle ones, with no key,
// kept for reuse. Reusing a lease makes an acquire one transaction (and a
// keep-alive of the lease, sent alongside, which etcd's leader answers
// without a raft write), and a release one transaction, where a lease per
// acquire costs a grant and a revoke more: two raft writes.
type leasePool struct {
	mu      sync.Mutex
	owned   map[clientv3.LeaseID]leaseInfo
	idle    map[int64][]clientv3.LeaseID // by the TTL asked for, most recently freed last
	sweepAt int
}

// take returns an idle lease for ttl seconds that is surely still alive,
// and when its grant or last keep-alive was sent, dropping those it meets
// that may have run out (etcd expires them by itself).
func (p *leasePool) take(ttl int64, now time.Time) (clientv3.LeaseID, time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := p.idle[ttl]
	for len(ids) > 0 {
		id := ids[len(ids)-1]
		ids = ids[:len(ids)-1]
		info, ok := p.owned[id]
		if ok && now.Sub(info.fresh) < time.Duration(ttl)*time.Second-leaseReuseMargin {
			info.idle = false
			p.owned[id] = info
			p.setIdle(ttl, ids)
			return id, info.fresh, true
		}
		delete(p.owned, id)
	}
	p.setIdle(ttl, ids)
	return 0, time.Time{}, false
}

func (p *leasePool) setIdle(ttl int64, ids []clientv3.LeaseID) {
	if len(ids) == 0 {
		delete(p.idle, ttl)
		return
	}
	p.idle[ttl] = ids
}

// add records a lease just granted.
func (p *leasePool) add(id clientv3.LeaseID, info leaseInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owned == nil {
		p.owned = make(map[clientv3.LeaseID]leaseInfo)
		p.idle = make(map[int64][]clientv3.LeaseID)
	}
	p.owned[id] = info
	if len(p.owned) >= max(p.sweepAt, ownedSweepMin) {
		// Leases past their TTL are gone from etcd: locks that expired or
		// were force-released. Idle ones among them are skipped by take.
		now := time.Now()
		for id, info := range p.owned {
			if now.Sub(info.fresh) > time.Duration(info.ttl)*time.Second {
				delete(p.owned, id)
			}
		}
		p.sweepAt = 2 * len(p.owned)
	}
}

// refreshed records a keep-alive of id sent at sent.
func (p *leasePool) refreshed(id clientv3.LeaseID, sent time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if info, ok := p.owned[id]; ok && sent.After(info.fresh) {
		info.fresh = sent
		p.owned[id] = info
	}
}

// free makes id, which no key is attached to any more, idle, and reports
// whether it was kept; a lease the Store does not know, or beyond the pool's
// bounds, is not, and is no longer tracked.
func (p *leasePool) free(id clientv3.LeaseID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	info, ok := p.owned[id]
	switch {
	case !ok:
		return false
	case info.idle:
		return true // freed twice: once in the pool is enough
	}
	ids, ok := p.idle[info.ttl]
	if len(ids) >= poolPerTTL || (!ok && len(p.idle) >= poolTTLs) {
		delete(p.owned, id)
		return false
	}
	p.idle[info.ttl] = append(ids, id)
	info.idle = true
	p.owned[id] = info
	return true
}

// forget stops tracking id (revoked, or found gone).
func (p *leasePool) forget(id clientv3.LeaseID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.owned, id)
}

// gone stops tracking id, found gone, and the idle leases of its TTL, which
// it returns: a lease revoked from outside seldom goes alone (an operator
// revokes what etcdctl lease list shows), and each one reused would cost an
// acquire a failed transaction.
func (p *leasePool) gone(id clientv3.LeaseID) []clientv3.LeaseID {
	p.mu.Lock()
	defer p.mu.Unlock()
	info, ok := p.owned[id]
	if !ok {
		return nil // already found gone, or not the Store's
	}
	delete(p.owned, id)
	ids := p.idle[info.ttl]
	for _, id := range ids {
		delete(p.owned, id)
	}
	delete(p.idle, info.ttl)
	return ids
}

// drain empties the pool, returning the idle leases.
func (p *leasePool) drain() []clientv3.LeaseID {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []clientv3.LeaseID
	for _, l := range p.idle {
		ids = append(ids, l...)
	}
	p.idle = nil
	p.owned = nil
	return ids
}

// takeLease returns a lease for ttl on which no key is: an idle one, else a
// new one; always a new one when grant is set (a lease was just found gone).
// refresh: the lease is an idle one that may have less than ttl left, so the
// caller must keep it alive, sent no earlier than the request that puts a
// key on it, before it counts on the key (the rounding of ttl up to seconds
// can spare that for a lease reused soon enough). dated: the caller counts
// the key's term from an earlier time (AcquireDated), so a lease whose term
// of ttl began less than ttl/leaseDateDivisor before now needs no refresh
// either, and from is when that term began; zero otherwise.
func (s *Store) takeLease(ctx context.Context, ttl time.Duration, grant, dated bool) (id clientv3.LeaseID, refresh bool, from time.Time, err error) {
	want := seconds(ttl)
	now := time.Now()
	if grant {
		id, err = s.grant(ctx, want)
		return id, false, time.Time{}, err
	}
	if id, fresh, ok := s.leases.take(want, now); ok {
		// The lease lasts at least until fresh + want: etcd resets it on
		// receiving the grant or keep-alive sent at fresh.
		start := fresh.Add(time.Duration(want)*time.Second - ttl)
		switch {
		case !now.After(start):
			return id, false, time.Time{}, nil // ttl from now is covered
		case dated && now.Sub(start) <= ttl/leaseDateDivisor:
			return id, false, start, nil
		}
		return id, true, time.Time{}, nil
	}
	id, err = s.grant(ctx, want)
	return id, false, time.Time{}, err
}

// grant creates a lease of want seconds (raised by the server to its
// minimum TTL) and tracks it.
func (s *Store) grant(ctx context.Context, want int64) (clientv3.LeaseID, error) {
	sent := time.Now()
	ask := want
	resp, err := s.client.Grant(rpc(ctx), ask)
	if err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	if resp.TTL > ask {
		for cur := s.minTTL.Load(); resp.TTL > cur && !s.minTTL.CompareAndSwap(cur, resp.TTL); cur = s.minTTL.Load() {
		}
	}
	s.leases.add(resp.ID, leaseInfo{ttl: want, fresh: sent})
	return resp.ID, nil
}

// grantedTTL is the TTL, in seconds, that a grant for ttl gets from the
// server, as far as the Store has learned the server's minimum.
func (s *Store) grantedTTL(ttl time.Duration) int64 {
	return max(seconds(ttl), s.minTTL.Load())
}

// freeLease takes back a lease of the Store's that no key is attached to any
// more, for reuse; one it cannot keep is revoked later.
func (s *Store) freeLease(id clientv3.LeaseID) {
	if id != 0 && !s.leases.free(id) {
		s.revokeLater(id)
	}
}

// keepAlive keeps id alive once, and records it: its TTL in seconds.
func (s *Store) keepAlive(ctx context.Context, id clientv3.LeaseID) (int64, error) {
	sent := time.Now()
	ka, err := s.keepAliveTTL(ctx, id)
	switch {
	case err == nil:
		s.leases.refreshed(id, sent)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		s.leaseGone(id)
	}
	return ka, err
}

// leaseGone stops tracking id, found gone (revoked from outside, or expired),
// and revokes, on a goroutine of its own, the idle leases of its TTL, which
// were likely revoked with it; those that were not are no longer reused.
func (s *Store) leaseGone(id clientv3.LeaseID) {
	ids := s.leases.gone(id)
	if len(ids) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return // they expire by themselves
	}
	s.wg.Go(func() {
		ctx, cancel := context.WithTimeout(s.ctx, revokeLaterTimeout)
		defer cancel()
		s.revokeAll(ctx, ids)
	})
}

// revoke revokes a lease that no key of a current owner is attached to. It
// is best effort: a lease that is not revoked expires by itself. It is not
// cut short by the end of ctx (a caller's deadline that failed its call is
// the common reason to revoke), only by revokeLaterTimeout: a lease left
// would keep what an unknown outcome may have put on it (an acquire applied
// late) for its whole TTL.
func (s *Store) revoke(ctx context.Context, id clientv3.LeaseID) {
	if id != 0 {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeLaterTimeout)
		defer cancel()
		s.revokeNow(ctx, id)
	}
}

// revokeNow is revoke within ctx.
func (s *Store) revokeNow(ctx context.Context, id clientv3.LeaseID) {
	s.leases.forget(id)
	_, _ = s.client.Revoke(rpc(ctx), id)
}

// revokeLater revokes a lease that no key is attached to any more, on a
// goroutine of its own bounded by revokeLaterTimeout, so that the caller
// does not wait for it. The Store waits for it in Close.
func (s *Store) revokeLater(id clientv3.LeaseID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return // expires by itself
	}
	s.wg.Go(func() {
		ctx, cancel := context.WithTimeout(s.ctx, revokeLaterTimeout)
		defer cancel()
		s.revokeNow(ctx, id)
	})
}

// revokeLaterTimeout bounds a revoke made after the call that freed the
// lease, one that undoes a call whose outcome is unknown (whatever the
// caller's context), and Close's revokes of the idle leases: a lease that is not
// revoked expires by itself, so a few round trips on a loaded cluster are
// enough.
const revokeLaterTimeout = 2 * time.Second

// closeRevokes bounds the idle leases Close (or leaseGone) revokes at once:
// up to 4096 idle leases go in a few hundred round trips' time without
// opening thousands of requests at once against a cluster other clients use
// too.
const closeRevokes = 16

// revokeIdle revokes the idle leases, closeRevokes at a time, within
// revokeLaterTimeout in all.
func (s *Store) revokeIdle() {
	ids := s.leases.drain()
	ctx, cancel := context.WithTimeout(context.Background(), revokeLaterTimeout)
	defer cancel()
	s.revokeAll(ctx, ids)
}

// revokeAll revokes ids, leases no key is on, closeRevokes at a time.
func (s *Store) revokeAll(ctx context.Context, ids []clientv3.LeaseID) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, closeRevokes)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, _ = s.client.Revoke(rpc(ctx), id)
		})
	}
	wg.Wait()
}
