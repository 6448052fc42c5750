package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold/driver"
)

// DefaultPrefix is the key prefix used when WithPrefix is not given. A prefix
// of its own keeps the lock keys apart from the application's keys, so that
// "etcdctl get --prefix leasehold/" lists every lock and nothing else, and a
// role with permission on that prefix alone is enough for the Store.
const DefaultPrefix = "leasehold/"

var (
	_ driver.Store           = (*Store)(nil)
	_ driver.ReleaseNotifier = (*Store)(nil)
	_ driver.Lister          = (*Store)(nil)
	_ driver.ForceReleaser   = (*Store)(nil)
	_ driver.Queuer          = (*Store)(nil)
	_ driver.DatedAcquirer   = (*Store)(nil)
)

// Option configures a Store. The zero set of options is valid.
type Option func(*Store)

// WithPrefix sets the prefix of every key the Store writes. Default:
// DefaultPrefix ("leasehold/"). Stores that share a prefix share their locks;
// give each independent set of locks its own prefix. The prefix is used as
// it is, so end it with a separator.
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// Store is a driver.Store on etcd v3. It is safe for concurrent use.
type Store struct {
	client *clientv3.Client
	prefix string

	// minTTL is the shortest lease, in seconds, that the server has granted
	// for a shorter request: its minimum lease TTL, learned from Grant's
	// answers. Renew uses it to tell an unchanged TTL from a new one.
	minTTL atomic.Int64

	queued entries   // the queue entries the Store made for its waiters
	leases leasePool // the leases the Store granted: in use, and idle for reuse
	locks  lockBook  // the leases of the locks it acquired or renewed, and moves in doubt

	kaMu sync.Mutex
	ka   *kaStream // the keep-alive stream; nil until the first, or after it broke

	ctx     context.Context // cancelled by Close: ends the turn watches
	cancel  context.CancelFunc
	watches *driver.Fanout // by lock key; one shared etcd watch per key
	mu      sync.Mutex
	closed  bool
	done    chan struct{}  // closed by Close
	wg      sync.WaitGroup // the watch goroutines
}

// New returns a Store that keeps its locks in the etcd cluster that client
// talks to. The Store does not own the client: Close the Store first, then
// the client.
//
// Requests are bounded by the contexts the caller passes, not by the
// client's DialTimeout; the client's default retries need no change (etcd's
// client never retries a write it may have sent).
//
// A nil client is an *driver.ArgumentError naming "client"; a nil option is
// skipped.
func New(client *clientv3.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, &driver.ArgumentError{Arg: "client", Reason: "nil *clientv3.Client"}
	}
	s := &Store{
		client: client,
		prefix: DefaultPrefix,
		done:   make(chan struct{}),
	}
	s.watches = driver.NewFanout(s.startWatch, errClosed)
	for _, opt := range opts {
		if opt != nil {
			opt(s)
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the watches that carry release notifications and waits for
// their goroutines. It does not close the client. Waiters still blocked on
// the Store fall back to their backoff; lock operations keep working.
// Calling Close again does nothing. It always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.cancel()
	s.mu.Unlock()
	s.watches.Close()
	s.wg.Wait()
	s.revokeIdle()
	return nil
}

// LockKey returns the etcd key that holds key's owner token, attached to the
// owner's lease: the prefix, "lock/", then key.
func (s *Store) LockKey(key string) string { return s.prefix + "lock/" + key }

// FenceKey returns the etcd key whose ModRevision is key's last fence: the
// prefix, "fence/", then key. It has an empty value, no lease, and is
// rewritten by every successful Acquire, so it outlives releases and
// expiries.
func (s *Store) FenceKey(key string) string { return s.prefix + "fence/" + key }

// remaining returns a lease's remaining time, rounded up to whole seconds
// (etcd reports it rounded down) but never above the lease's TTL less
// the lease's TTL; 0 for a lease that is gone.
func (s *Store) remaining(ctx context.Context, id clientv3.LeaseID) (time.Duration, error) {
	if id == 0 {
		return 0, nil
	}
	resp, err := s.client.TimeToLive(rpc(ctx), id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case resp.TTL < 0:
		return 0, nil
	}
	return time.Duration(min(resp.TTL+1, resp.GrantedTTL)) * time.Second, nil
}

// Acquire implements driver.Store in two round trips: a lease grant, then
// one transaction that puts the lock key on that lease and touches the fence
// key only if the lock key does not exist and key's waiter queue is empty
// (driver.Queuer: no barging). The fence is the revision of that
// transaction.
//
// When the key is held, or waiters are queued, it returns a
// *driver.HeldError with the holder's remaining TTL (0 when the key is
// free), after one more round trip in which the unused lease is revoked and
// the holder's lease is looked up at the same time. Any other error means
// etcd could not answer; the lease of an acquire whose outcome is unknown is
// then revoked when the context still allows it, which undoes the acquire if
// it was applied.
func (s *Store) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	return s.acquire(ctx, key, token, ttl, 0)
}

// acquire is Acquire, and AcquireQueued when stay > 0.
func (s *Store) acquire(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	fence, _, err := s.acquireOnce(ctx, key, token, ttl, stay, false, false)
	return fence, err
}

// AcquireDated implements driver.DatedAcquirer: it is Acquire when stay is
// 0 and AcquireQueued when stay > 0, except that a lock put on a reused
// lease kept alive less than ttl/leaseDateDivisor before (by the acquire
// that last used it, or a renewal) is not kept alive again: the lock's term
// is the lease's, reported as from, which lies at most ttl/20 before the
// call. That saves the keep-alive sent alongside the transaction, about a
// tenth of etcd's work a cycle, on every acquire of a key reused at a
// steady rate but one per ttl/20.
func (s *Store) AcquireDated(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, time.Time, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, time.Time{}, err
	}
	if stay != 0 {
		var err error
		if stay, err = driver.QueueStay(stay); err != nil {
			return 0, time.Time{}, err
		}
	}
	return s.acquireOnce(ctx, key, token, ttl, stay, true, false)
}

// acquireOnce is acquire, and AcquireDated when dated is set; retried: this
// is the one more attempt made after a lease was found gone, on new leases,
// never idle ones (likely gone too).
func (s *Store) acquireOnce(ctx context.Context, key, token string, ttl, stay time.Duration, dated, retried bool) (int64, time.Time, error) {
	fail := func(err error) (int64, time.Time, error) {
		return 0, time.Time{}, fmt.Errorf("etcdstore: acquire %q: %w", key, err)
	}
	lk, qp := s.LockKey(key), s.QueuePrefix(key)
	ek := qp + token
	var (
		entry      queueEntry
		known      bool             // the Store made token's entry: it is at entry.rev, unless gone
		entryLease clientv3.LeaseID // the lease of the entry this attempt makes when refused
	)
	if stay > 0 {
		entry, known = s.queued.get(ek)
	}
	lease, refresh, from, err := s.takeLease(ctx, ttl, retried, dated)
	if err != nil {
		return fail(err)
	}
	refreshEntry := false
	if stay > 0 && !known {
		if entryLease, refreshEntry, _, err = s.takeLease(ctx, stay, retried, false); err != nil {
			s.freeLease(lease)
			return fail(err)
		}
	}

	// Free, and no waiter ahead: the queue is empty, or its first entry by
	// CreateRevision is token's own (all entries were created at or after
	// it; the range is not empty, since token's entry is in it).
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)}
	then := []clientv3.Op{clientv3.OpPut(lk, token, clientv3.WithLease(lease)), clientv3.OpPut(s.FenceKey(key), "")}
	if known {
		cmps = append(cmps,
			clientv3.Compare(clientv3.CreateRevision(ek), "=", entry.rev),
			clientv3.Compare(clientv3.CreateRevision(qp), ">", entry.rev-1).WithPrefix())
		then = append(then, clientv3.OpDelete(ek))
	} else {
		// An empty range compares as one key of CreateRevision 0.
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix())
	}
	// Refused: the holder, token's entry (put first when it is new), and
	// then the queue's head.
	els := []clientv3.Op{clientv3.OpGet(lk, clientv3.WithKeysOnly())}
	if entryLease != 0 {
		els = append(els, clientv3.OpPut(ek, "", clientv3.WithLease(entryLease)))
	}
	if stay > 0 {
		els = append(els, clientv3.OpGet(ek, clientv3.WithKeysOnly()),
			clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...))
	}
	// A reused lease is kept alive at the same time as the transaction is
	// sent: whichever etcd handles first, the lease then lasts its TTL from
	// after this moment, the start of the lock in its owner's view, as a
	// lease granted now would.
	var (
		kas               sync.WaitGroup
		kaErr, entryKAErr error
	)
	if refresh {
		kas.Go(func() { _, kaErr = s.keepAlive(ctx, lease) })
	}
	if refreshEntry {
		kas.Go(func() { _, entryKAErr = s.keepAlive(ctx, entryLease) })
	}
	sent := time.Now()
	resp, err := s.client.Txn(rpc(ctx)).If(cmps...).Then(then...).Else(els...).Commit()
	kas.Wait()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) && !retried {
		// An idle lease expired or was revoked from outside (etcdctl lease
		// revoke): nothing was written. Drop the idle leases of its TTL,
		// likely revoked too, and try once more on new leases.
		s.leaseGone(lease)
		s.leaseGone(entryLease)
		return s.acquireOnce(ctx, key, token, ttl, stay, dated, true)
	}
	if err != nil {
		// The outcome is unknown: revoking undoes the acquire, and the
		// join, if they were applied.
		s.revoke(ctx, lease)
		s.revoke(ctx, entryLease)
		return fail(err)
	}
	if resp.Succeeded && kaErr != nil {
		// The lock is on a lease whose TTL may not have been reset: the
		// lease expired right after the transaction (the lock went with
		// it), or etcd's answer was lost. Undo, and try once more, with a
		// new lease, or give up.
		s.revoke(ctx, lease)
		if entryKAErr == nil {
			s.freeLease(entryLease)
		}
		if e, ok := s.queued.forget(ek); known && ok && e.lease == entry.lease {
			s.freeLease(entry.lease) // the transaction deleted the entry
		}
		if errors.Is(kaErr, rpctypes.ErrLeaseNotFound) && !retried {
			return s.acquireOnce(ctx, key, token, ttl, stay, dated, true)
		}
		return fail(fmt.Errorf("keep the reused lease alive: %w", kaErr))
	}
	if entryKAErr != nil {
		s.leases.forget(entryLease) // not reused: its TTL is in doubt
	}
	if resp.Succeeded {
		if e, ok := s.queued.forget(ek); known && ok && e.lease == entry.lease {
			s.freeLease(entry.lease) // the transaction deleted the entry
		}
		if entryKAErr == nil {
			s.freeLease(entryLease)
		}
		s.locks.put(lockID{key: lk, token: token}, lease, sent.Add(time.Duration(s.grantedTTL(ttl))*time.Second))
		return resp.Header.Revision, from, nil
	}
	if kaErr == nil {
		s.freeLease(lease) // no key was put on it
	} else {
		s.leases.forget(lease) // not reused: its TTL is in doubt
	}
	if len(resp.Responses) != len(els) {
		return fail(fmt.Errorf("%d answers in the transaction, want %d", len(resp.Responses), len(els)))
	}

	var holder clientv3.LeaseID
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		holder = clientv3.LeaseID(kvs[0].Lease)
	}
	behind := false                  // token's entry is behind the queue's head
	keepEntry := clientv3.LeaseID(0) // the known entry's lease, kept alive below
	if stay > 0 {
		gets := resp.Responses[len(els)-2:]
		var mine, head int64
		if kvs := gets[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
			mine = kvs[0].CreateRevision
		}
		if kvs := gets[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
			head = kvs[0].CreateRevision
		}
		switch {
		case mine == 0:
			// The entry the Store knew is gone (its lease expired, or was
			// revoked): join again, at the back, in one more attempt.
			s.queued.forget(ek)
			s.leaseGone(entry.lease)
			return s.acquireOnce(ctx, key, token, ttl, stay, dated, retried)
		case entryLease != 0 && errors.Is(entryKAErr, rpctypes.ErrLeaseNotFound):
			// The new entry's reused lease had run out: the entry went
			// with it, and the next attempt joins again.
		case entryLease != 0:
			s.queued.put(ek, queueEntry{rev: mine, lease: entryLease, until: sent.Add(stay)})
		default:
			keepEntry = entry.lease
		}
		behind = head != mine
	}

	var (
		wg         sync.WaitGroup
		refreshErr error
	)
	if keepEntry != 0 {
		wg.Go(func() {
			// Keeps the entry's place: a keep-alive does not write the key.
			sent := time.Now()
			if _, refreshErr = s.keepAlive(ctx, keepEntry); refreshErr == nil {
				s.queued.touch(ek, entry.rev, sent.Add(stay))
			}
		})
	}
	var left time.Duration
	if holder != 0 && !behind {
		// The holder's TTL is a hint for the head; not knowing it is no error.
		left, _ = s.remaining(ctx, holder)
	}
	wg.Wait()
	if errors.Is(refreshErr, rpctypes.ErrLeaseNotFound) {
		s.queued.forget(ek) // expired since the transaction: the next attempt joins again
	}
	return 0, time.Time{}, &driver.HeldError{Key: key, Remaining: left}
}

// Release implements driver.Store in one round trip: one transaction
// deletes the lock key only if it still holds token (never by key alone).
// The owner's lease, which no key is on any more, is kept for reuse when the
// Store granted it, and revoked otherwise. It returns driver.ErrNotOwned
// when the key is absent or holds another token.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	lk := s.LockKey(key)
	resp, err := s.client.Txn(rpc(ctx)).
		If(clientv3.Compare(clientv3.Value(lk), "=", token)).
		Then(clientv3.OpDelete(lk, clientv3.WithPrevKV())).
		Commit()
	if err != nil {
		return fmt.Errorf("etcdstore: release %q: %w", key, err)
	}
	s.locks.forget(lockID{key: lk, token: token})
	if !resp.Succeeded {
		return driver.ErrNotOwned
	}
	if len(resp.Responses) == 1 {
		for _, kv := range resp.Responses[0].GetResponseDeleteRange().GetPrevKvs() {
			if id := clientv3.LeaseID(kv.Lease); id != 0 && !s.leases.free(id) {
				s.revoke(ctx, id)
			}
		}
	}
	return nil
}

// Inspect implements driver.Store: one transaction reads the lock key and
// the fence key together, and when the key is held a second round trip asks
// for its lease's remaining time (whole seconds, rounded up, at most the
// lease's TTL).
func (s *Store) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	info := driver.Info{Key: key}
	resp, err := s.client.Txn(rpc(ctx)).Then(clientv3.OpGet(s.LockKey(key)), clientv3.OpGet(s.FenceKey(key))).Commit()
	if err != nil {
		return info, fmt.Errorf("etcdstore: inspect %q: %w", key, err)
	}
	if len(resp.Responses) != 2 {
		return info, fmt.Errorf("etcdstore: inspect %q: %d answers in the transaction, want 2", key, len(resp.Responses))
	}
	if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
		info.Fence = kvs[0].ModRevision
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return info, nil
	}
	info.Held, info.Token = true, string(kvs[0].Value)
	if info.TTL, err = s.remaining(ctx, clientv3.LeaseID(kvs[0].Lease)); err != nil {
		return info, fmt.Errorf("etcdstore: inspect %q: lease: %w", key, err)
	}
	return info, nil
}

// Bounds of one List call's reads. etcd refuses a transaction of more than
// --max-txn-ops operations (128 by default); 64 fence reads stay under any
// setting near it. 16 lease lookups in flight keep a page of 10 000 locks
// to some 600 round-trip times without flooding the member.
const (
	listFenceReads = 64
	listLeaseReads = 16
)

// List implements driver.Lister in key order (bytewise) across calls;
// next is the last lock key read. A call reads up to limit lock keys with
// their owners in one range request, from LockKey of the pattern's literal
// prefix; then, for the keys that match, their fence keys at the same
// revision (transactions of 64 reads) and their leases' remaining time (16
// lookups at a time, the round trip Inspect makes too). A lock whose lease
// ended meanwhile is left out. Keys under the lock prefix that are not valid
// lock keys are skipped and never given as next: next is the last valid
// lock key read, and a call whose range request read none reads on.
func (s *Store) List(ctx context.Context, pattern, after string, limit int) ([]driver.Info, string, error) {
	g, err := driver.ValidateList(pattern, limit)
	if err != nil {
		return nil, "", err
	}
	if err := driver.ValidateAfterKey(after); err != nil {
		return nil, "", err
	}
	fail := func(err error) ([]driver.Info, string, error) {
		return nil, "", fmt.Errorf("etcdstore: list %q: %w", pattern, err)
	}
	lockPrefix := s.LockKey("")
	lockKey := func(etcdKey []byte) (string, bool) {
		key := strings.TrimPrefix(string(etcdKey), lockPrefix)
		return key, driver.ValidateKey(key) == nil
	}
	start := s.LockKey(g.Prefix())
	end := clientv3.GetPrefixRangeEnd(start)
	if a := s.LockKey(after) + "\x00"; after != "" && a > start {
		start = a
	}
	if start >= end {
		return []driver.Info{}, "", nil
	}
	var resp *clientv3.GetResponse
	next := ""
	for next == "" {
		resp, err = s.client.Get(rpc(ctx), start, clientv3.WithRange(end), clientv3.WithLimit(int64(limit)),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return fail(err)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		for i := len(resp.Kvs) - 1; i >= 0 && next == ""; i-- {
			if key, ok := lockKey(resp.Kvs[i].Key); ok {
				next = key
			}
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	infos := []driver.Info{}
	var leases []clientv3.LeaseID
	for _, kv := range resp.Kvs {
		key, ok := lockKey(kv.Key)
		if !ok || !g.Match(key) {
			continue
		}
		infos = append(infos, driver.Info{Key: key, Held: true, Token: string(kv.Value)})
		leases = append(leases, clientv3.LeaseID(kv.Lease))
	}
	if err := s.readFences(ctx, resp.Header.Revision, infos); err != nil {
		return fail(err)
	}
	gone, err := s.readTTLs(ctx, leases, infos)
	if err != nil {
		return fail(err)
	}
	held := infos[:0]
	for i, info := range infos {
		if !gone[i] {
			held = append(held, info)
		}
	}
	return held, next, nil
}

// readFences sets each info's Fence from its fence key at revision rev, the
// revision its owner was read at.
func (s *Store) readFences(ctx context.Context, rev int64, infos []driver.Info) error {
	for lo := 0; lo < len(infos); lo += listFenceReads {
		part := infos[lo:min(lo+listFenceReads, len(infos))]
		ops := make([]clientv3.Op, len(part))
		for i, info := range part {
			ops[i] = clientv3.OpGet(s.FenceKey(info.Key), clientv3.WithRev(rev))
		}
		resp, err := s.client.Txn(rpc(ctx)).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("fences: %w", err)
		}
		if len(resp.Responses) != len(part) {
			return fmt.Errorf("fences: %d answers in the transaction, want %d", len(resp.Responses), len(part))
		}
		for i, r := range resp.Responses {
			if kvs := r.GetResponseRange().GetKvs(); len(kvs) == 1 {
				part[i].Fence = kvs[0].ModRevision
			}
		}
	}
	return nil
}

// readTTLs sets each info's TTL from its lease, listLeaseReads lookups at a
// time, and reports the infos whose lease is gone. A key without a lease
// keeps TTL 0, as Inspect reports it.
func (s *Store) readTTLs(ctx context.Context, leases []clientv3.LeaseID, infos []driver.Info) ([]bool, error) {
	gone := make([]bool, len(infos))
	errs := make([]error, len(infos))
	var (
		wg    sync.WaitGroup
		taken atomic.Int64 // the next index to look up, for the workers
	)
	for range min(listLeaseReads, len(infos)) {
		wg.Go(func() {
			for i := int(taken.Add(1)) - 1; i < len(infos); i = int(taken.Add(1)) - 1 {
				if leases[i] == 0 {
					continue
				}
				infos[i].TTL, errs[i] = s.remaining(ctx, leases[i])
				gone[i] = errs[i] == nil && infos[i].TTL == 0
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("lease: %w", err) // the first: the others are likely the same
		}
	}
	return gone, nil
}

var errClosed = errors.New("etcdstore: store closed")

// WatchReleases implements driver.ReleaseNotifier with an etcd watch on
// the lock key for DELETE events: a release, and also an expiry (etcd
// deletes the key when it revokes the expired lease), so waiters take over
// an expired lock at once too. One watch per key is shared by all of the
// Store's waiters on that key, and every watch of the Store shares one gRPC
// stream.
//
// It returns once etcd has confirmed the watch, so a release after that is
// not missed unless the watch breaks; it fails when ctx ends first, or when
// the Store is closed. A broken watch (the member lost its leader, the
// cluster is unreachable) is re-established by the Store, which then wakes
// the waiters once, since a release may have been missed in between.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	ch, stop, err := s.watches.Watch(ctx, s.LockKey(key))
	if err != nil && err != errClosed {
		err = fmt.Errorf("etcdstore: watch %q: %w", key, err)
	}
	return ch, stop, err
}

// startWatch starts the etcd watch of lock key lk, for the Fanout; the func
// it returns ends it.
func (s *Store) startWatch(lk string) func() {
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.watch(ctx, lk)
	return cancel
}

// Bounds of the pause before a broken watch is made again: short enough
// that wake-ups resume soon after the cluster does, long enough that a
// cluster that stays down is not asked in a spin.
const (
	minRewatchPause = 10 * time.Millisecond
	maxRewatchPause = time.Second
)

// watch runs the etcd watch of one lock key until ctx is cancelled (by the
// key's last waiter, or by Close), making it again whenever it breaks.
func (s *Store) watch(ctx context.Context, lk string) {
	defer s.wg.Done()
	established := false
	pause := time.Duration(0)
	for {
		// WithRequireLeader: a member cut off from its cluster ends the
		// watch instead of keeping it silently, so it is made again
		// through a member that can see the releases.
		wch := s.client.Watch(clientv3.WithRequireLeader(ctx), lk,
			clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		for resp := range wch {
			switch {
			case resp.Canceled:
				// The channel closes next.
			case resp.Created:
				pause = 0
				if !established {
					established = true
					s.watches.Ready(lk)
				} else {
					s.watches.Wake(lk) // a release may have gone unseen while it was down
				}
			case len(resp.Events) > 0:
				s.watches.Wake(lk)
			}
		}
		if ctx.Err() != nil {
			return
		}
		pause = min(max(2*pause, minRewatchPause), maxRewatchPause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}
