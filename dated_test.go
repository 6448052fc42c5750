package leasehold_test

import (
	"context"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// datedStore reports every acquire's term as begun at back before the call
// (driver.DatedAcquirer); back 0 reports the zero time.
type datedStore struct {
	driver.Store
	back  time.Duration
	calls atomic.Int64
	stays atomic.Int64 // calls with stay != 0
}

func (s *datedStore) AcquireDated(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, time.Time, error) {
	s.calls.Add(1)
	if stay != 0 {
		s.stays.Add(1)
	}
	var from time.Time
	if s.back != 0 {
		from = time.Now().Add(-s.back)
	}
	fence, err := s.Store.Acquire(ctx, key, token, ttl)
	return fence, from, err
}

// The Client acquires through a store's AcquireDated and counts the lease
// from the term it reports, when that began before the call: a store's word
// that the term began later (or at the zero time) is no reason to count
// longer than from the call.
func TestLeaseCountsFromTheDatedTerm(t *testing.T) {
	left := regexp.MustCompile(`\(([0-9.]+)s left\)`)
	for _, tc := range []struct {
		name     string
		back     time.Duration
		min, max float64 // seconds left, by String
	}{
		{"begun 4 s before", 4 * time.Second, 5, 6},
		{"begun in the future", -time.Hour, 9, 10},
		{"the zero time", 0, 9, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &datedStore{Store: memstore.New(), back: tc.back}
			c := leasehold.New(s)
			t.Cleanup(func() { c.Close() })
			l, err := c.TryAcquire(t.Context(), "k", 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if s.calls.Load() != 1 || s.stays.Load() != 0 {
				t.Fatalf("AcquireDated called %d times, %d with a stay; want once, without", s.calls.Load(), s.stays.Load())
			}
			m := left.FindStringSubmatch(l.String())
			if m == nil {
				t.Fatalf("String() = %q, want the time left", l)
			}
			if sec, _ := strconv.ParseFloat(m[1], 64); sec < tc.min || sec > tc.max {
				t.Fatalf("%s left, want %v to %v s", m[1], tc.min, tc.max)
			}
			if err := l.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
