// Package memstore is an in-process driver.Store: for tests, for
// single-process applications, and as the embedded default of the CLI.
//
// It gives every guarantee of the Store contract within one process: atomic
// compare-and-delete and compare-and-expire, and fences that rise strictly
// per key. A fence is max(the key's last fence + 1, the Store's clock in
// microseconds since the Unix epoch), as redisstore's, pgstore's and a new
// kubestore Lease's are on their clocks. A process that restarts loses its
// leases and their holders, but its new Store's fences start above those it
// issued before, so storage that keeps the highest fence it has seen goes on
// taking its writes, as it does after a move to one of those stores. A
// fence below that (the clock stepped back, or a key taken more than once
// a microsecond, whose fences run ahead of the clock: the Store alone does
// that in a tight loop; a Client cycled one key about 540,000 times a
// second on 2 cores) only makes the storage refuse writes until the clock
// passes it.
//
// Time comes from an injectable clock, so tests can move it instead of
// sleeping.
//
// Memory: one entry per key ever acquired, for the fence that must keep
// rising after release; expired leases are swept as the store is used.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// sweepEvery is how many acquires pass between sweeps of expired leases. The
// sweep is linear in the number of held keys, so spreading it this thin keeps
// its amortised cost per acquire small while bounding the garbage.
const sweepEvery = 1024

// Store is an in-process lock store. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu       sync.Mutex
	locks    map[string]entry
	fences   map[string]int64
	watches  *driver.Fanout // release watches, by key
	acquires int
	audit    []driver.AuditRecord // oldest first, at most maxAudit
}

// maxAudit is how many forced-release records a Store keeps, the newest:
// one Audit call's worth, a bounded memory for a process that lives long.
const maxAudit = driver.MaxAuditLimit

type entry struct {
	token   string
	expires time.Time
}

var (
	_ driver.Store           = (*Store)(nil)
	_ driver.ReleaseNotifier = (*Store)(nil)
	_ driver.BatchRenewer    = (*Store)(nil)
	_ driver.Lister          = (*Store)(nil)
	_ driver.ForceReleaser   = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that decides expiry and floors the fences.
// Default: time.Now. Fences rise across a restart only on a wall clock.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// New returns an empty Store; a nil option is skipped.
func New(opts ...Option) *Store {
	s := &Store{
		now:     time.Now,
		locks:   make(map[string]entry),
		fences:  make(map[string]int64),
		watches: driver.NewFanout(nil, nil),
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// held returns the live entry for key, dropping it if it has expired.
// s.mu must be held.
func (s *Store) held(key string, now time.Time) (entry, bool) {
	e, ok := s.locks[key]
	if ok && !now.Before(e.expires) {
		delete(s.locks, key)
		return entry{}, false
	}
	return e, ok
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if e, ok := s.held(key, now); ok {
		return 0, &driver.HeldError{Key: key, Remaining: e.expires.Sub(now)}
	}
	s.acquires++
	if s.acquires%sweepEvery == 0 {
		for k := range s.locks {
			s.held(k, now)
		}
	}
	last := s.fences[key]
	if last == math.MaxInt64 {
		return 0, fmt.Errorf("memstore: acquire %q: its fence is at %d and cannot rise; nothing was written", key, int64(math.MaxInt64))
	}
	fence := max(last+1, clockFloor(now))
	s.fences[key] = fence
	s.locks[key] = entry{token: token, expires: now.Add(ttl)}
	return fence, nil
}

// clockFloor is the least fence an acquire at now may issue: now in
// microseconds since the Unix epoch, or 0 for a clock before 1970 or past
// what int64 microseconds hold (a test's clock): the fences then count on
// from the last.
func clockFloor(now time.Time) int64 {
	if sec := now.Unix(); sec < 0 || sec >= math.MaxInt64/1_000_000 {
		return 0
	}
	return now.UnixMicro()
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.held(key, s.now()); !ok || e.token != token {
		return driver.ErrNotOwned
	}
	delete(s.locks, key)
	s.wake(key)
	return nil
}

// wake tells key's watchers it was released.
func (s *Store) wake(key string) { s.watches.Wake(key) }

// ForceRelease implements driver.ForceReleaser. The Store keeps the newest
// 10 000 records, in memory.
func (s *Store) ForceRelease(ctx context.Context, key, reason, by string) (driver.AuditRecord, error) {
	if err := driver.ValidateForceRelease(key, reason, by); err != nil {
		return driver.AuditRecord{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.AuditRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e, ok := s.held(key, now)
	if !ok {
		return driver.AuditRecord{}, driver.ErrNotOwned
	}
	delete(s.locks, key)
	rec := driver.NewAuditRecord(now, key, e.token, s.fences[key], reason, by)
	if len(s.audit) == maxAudit {
		s.audit = slices.Delete(s.audit, 0, 1)
	}
	s.audit = append(s.audit, rec)
	s.wake(key)
	return rec, nil
}

// Audit implements driver.ForceReleaser.
func (s *Store) Audit(ctx context.Context, key string, limit int) ([]driver.AuditRecord, error) {
	if err := driver.ValidateAudit(key, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := []driver.AuditRecord{}
	for i := len(s.audit) - 1; i >= 0 && len(recs) < limit; i-- {
		if key == "" || s.audit[i].Key == key {
			recs = append(recs, s.audit[i])
		}
	}
	return recs, nil
}

// Renew implements driver.Store.
func (s *Store) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if e, ok := s.held(key, now); !ok || e.token != token {
		return driver.ErrNotOwned
	}
	s.locks[key] = entry{token: token, expires: now.Add(ttl)}
	return nil
}

// RenewBatch implements driver.BatchRenewer: every item is checked and
// renewed as by Renew, all under one lock and one reading of the clock.
func (s *Store) RenewBatch(ctx context.Context, items []driver.RenewItem) []error {
	errs := make([]error, len(items))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for i, it := range items {
		if err := driver.ValidateAcquire(it.Key, it.Token, it.TTL); err != nil {
			errs[i] = err
			continue
		}
		if e, ok := s.held(it.Key, now); !ok || e.token != it.Token {
			errs[i] = driver.ErrNotOwned
			continue
		}
		s.locks[it.Key] = entry{token: it.Token, expires: now.Add(it.TTL)}
	}
	return errs
}

// Inspect implements driver.Store.
func (s *Store) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	info := driver.Info{Key: key, Fence: s.fences[key]}
	if e, ok := s.held(key, now); ok {
		info.Held, info.Token, info.TTL = true, e.token, e.expires.Sub(now)
	}
	return info, nil
}

// WatchReleases implements driver.ReleaseNotifier.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return s.watches.Watch(ctx, key)
}

// List implements driver.Lister in key order (bytewise) across calls: next
// is the last key returned, and each call returns limit locks unless it is
// the last. It sorts the matching held keys, so a call costs O(n log n) for
// n held keys.
func (s *Store) List(ctx context.Context, pattern, after string, limit int) ([]driver.Info, string, error) {
	g, err := driver.ValidateList(pattern, limit)
	if err != nil {
		return nil, "", err
	}
	if err := driver.ValidateAfterKey(after); err != nil {
		return nil, "", err
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	infos := []driver.Info{}
	for k := range s.locks {
		if k <= after || !g.Match(k) {
			continue
		}
		if e, ok := s.held(k, now); ok {
			infos = append(infos, driver.Info{Key: k, Held: true, Token: e.token, TTL: e.expires.Sub(now), Fence: s.fences[k]})
		}
	}
	slices.SortFunc(infos, func(a, b driver.Info) int { return cmp.Compare(a.Key, b.Key) })
	if len(infos) <= limit {
		return infos, "", nil
	}
	return infos[:limit], infos[limit-1].Key, nil
}
