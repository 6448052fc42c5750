package leasehold_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// lateCtx is a context whose deadline has passed on the clock while it has
// not noticed yet: the moment between a deadline and its timer firing, in
// which a socket read bounded by the same deadline already failed.
type lateCtx struct {
	context.Context
	deadline time.Time
}

func (c lateCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// errSocketTimeout is what go-redis returns when the socket deadline it took
// from the context passes: a bare "read tcp: i/o timeout".
var errSocketTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// socketTimeoutStore answers Acquire like a client whose socket deadline is
// the context's: it waits out the deadline, optionally applies the acquire
// (the request got through, the reply did not), and fails with a socket
// timeout.
type socketTimeoutStore struct {
	driver.Store
	apply bool
	calls atomic.Int32
}

func (s *socketTimeoutStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	s.calls.Add(1)
	dl, ok := ctx.Deadline()
	if !ok {
		return s.Store.Acquire(ctx, key, token, ttl)
	}
	if s.apply {
		if _, err := s.Store.Acquire(context.Background(), key, token, ttl); err != nil {
			return 0, err
		}
	}
	time.Sleep(time.Until(dl) + time.Microsecond)
	return 0, errSocketTimeout
}

func (r *recorder) results() []leasehold.AcquireResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []leasehold.AcquireResult
	for _, e := range r.acquires {
		out = append(out, e.Result)
	}
	return out
}

// A socket timeout at the caller's deadline is the deadline: Acquire returns
// ErrNotAcquired joined with context.DeadlineExceeded, TryAcquire
// context.DeadlineExceeded (one attempt says nothing about the key), and
// the Observer counts both as timeouts, not store failures. An acquire
// applied before the reply was lost is cleaned up.
func TestSocketTimeoutAtTheDeadlineIsADeadline(t *testing.T) {
	for _, apply := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			mem := memstore.New()
			store := &socketTimeoutStore{Store: mem, apply: apply}
			rec := &recorder{}
			c := leasehold.New(store, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
			late := func() context.Context {
				return lateCtx{Context: context.Background(), deadline: time.Now().Add(time.Millisecond)}
			}

			_, err := c.Acquire(late(), key, ttl)
			if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Acquire: %v, want ErrNotAcquired joined with context.DeadlineExceeded", err)
			}
			_, err = c.TryAcquire(late(), key, ttl)
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, leasehold.ErrNotAcquired) {
				t.Errorf("TryAcquire: %v, want context.DeadlineExceeded and not ErrNotAcquired", err)
			}
			err = c.Hold(late(), key, ttl, func(context.Context, *leasehold.Lease) error {
				t.Error("fn ran")
				return nil
			})
			if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Hold: %v, want ErrNotAcquired joined with context.DeadlineExceeded", err)
			}
			for i, r := range rec.results() {
				if r != leasehold.TimedOut {
					t.Errorf("acquire event %d: result %q, want %q", i, r, leasehold.TimedOut)
				}
			}
			if info, _ := mem.Inspect(t.Context(), key); info.Held {
				t.Errorf("apply=%v: the key is held after every attempt failed: %+v", apply, info)
			}
		})
	}
}

// A deadline that has passed on the clock before the call, while the
// context has not noticed yet: no attempt is made at all.
func TestPassedDeadlineMakesNoAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &socketTimeoutStore{Store: memstore.New()}
		rec := &recorder{}
		c := leasehold.New(store, leasehold.WithObserver(observerOf(rec)))
		ctx := lateCtx{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
		if _, err := c.Acquire(ctx, key, ttl); !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Acquire: %v, want ErrNotAcquired joined with context.DeadlineExceeded", err)
		}
		if _, err := c.TryAcquire(ctx, key, ttl); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Errorf("TryAcquire: %v, want context.DeadlineExceeded alone", err)
		}
		if n := store.calls.Load(); n != 0 {
			t.Errorf("%d store calls after the deadline, want 0", n)
		}
		for i, r := range rec.results() {
			if r != leasehold.TimedOut {
				t.Errorf("acquire event %d: result %q, want %q", i, r, leasehold.TimedOut)
			}
		}
	})
}

// cancelOnAcquire cancels a context right after each acquire it lets
// through: the acquire succeeds just as its caller's context ends.
type cancelOnAcquire struct {
	driver.Store
	cancel context.CancelFunc
}

func (s cancelOnAcquire) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	f, err := s.Store.Acquire(ctx, key, token, ttl)
	s.cancel()
	return f, err
}

// Lead's acquire succeeds as its context ends: Lead returns without a term,
// and gives the lease back instead of leaving it blocked for its TTL.
func TestLeadReleasesALeaseAcquiredAsItsContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(t.Context())
		c := leasehold.New(cancelOnAcquire{mem, cancel}, leasehold.WithLogger(quietLogger()))
		err := c.Lead(ctx, "leader:main", func(context.Context, *leasehold.Lease) { t.Error("a term started after ctx ended") })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lead: %v, want context.Canceled", err)
		}
		if info, _ := mem.Inspect(t.Context(), "leader:main"); info.Held {
			t.Fatalf("the lease acquired as ctx ended is still held: %+v", info)
		}
	})
}
