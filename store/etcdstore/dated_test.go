package etcdstore_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest"
)

// A dated acquire on a lease kept alive moments ago sends its transaction
// alone, and reports the lease's term; Acquire still keeps the reused lease
// alive; past ttl/20 since the lease's last keep-alive, a dated acquire
// keeps it alive too, and its term is its own.
func TestDatedAcquireSkipsARecentKeepAlive(t *testing.T) {
	counter := &countRPCs{}
	s := newStore(t, newClient(t, shared.Endpoints(), counter.options()...))
	ctx, key := t.Context(), storetest.Key(t)
	var prevStart, prevEnd time.Time // the last call's: its grant or keep-alive was sent between them
	cycle := func(what string, ttl time.Duration, dated bool, wantLease int64) (from time.Time) {
		t.Helper()
		tok := leasehold.NewToken()
		before, lease := counter.n.Load(), counter.lease.Load()
		start := time.Now()
		var err error
		if dated {
			_, from, err = s.AcquireDated(ctx, key, tok, ttl, 0)
		} else {
			_, err = s.Acquire(ctx, key, tok, ttl)
		}
		end := time.Now()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		l := counter.lease.Load() - lease
		if got := counter.n.Load() - before - l; got != 1 || l != wantLease {
			t.Errorf("%s: %d requests and %d lease requests, want 1 and %d", what, got, l, wantLease)
		}
		if err := s.Release(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
		if wantLease > 0 {
			prevStart, prevEnd = start, end
		}
		return from
	}
	// A lease of a whole number of seconds, dated: its term began when the
	// last lease request for it was sent, during the call before.
	fromTheLast := func(what string, from time.Time) {
		t.Helper()
		if from.Before(prevStart) || from.After(prevEnd) {
			t.Fatalf("%s: the term began %v after the last keep-alive's call began, which took %v",
				what, from.Sub(prevStart), prevEnd.Sub(prevStart))
		}
	}
	cycle("first acquire (a grant)", time.Minute, false, 1)
	fromTheLast("dated acquire just after", cycle("dated acquire just after", time.Minute, true, 0))
	cycle("plain acquire just after", time.Minute, false, 1)
	fromTheLast("dated acquire after the plain one", cycle("dated acquire after the plain one", time.Minute, true, 0))

	// A lease of 1 s may be dated 50 ms back, no more.
	cycle("first acquire for 1 s", time.Second, false, 1)
	time.Sleep(60 * time.Millisecond) // a clock reading past the bound, not an event
	if from := cycle("dated acquire 60 ms later", time.Second, true, 1); !from.IsZero() {
		t.Fatalf("the dated acquire kept the lease alive, yet says its term began %v before it", time.Since(from))
	}
}
