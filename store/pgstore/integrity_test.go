package pgstore_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest"
)

// Fences are bigint: exact to MaxInt64, and an acquire that would pass it
// is an error that writes nothing.
func TestFencesAreExactInt64(t *testing.T) {
	s := newStore(t, pool)
	ctx, key := t.Context(), storetest.Key(t)
	if _, err := pool.Exec(ctx, `INSERT INTO leasehold_leases (key, fence) VALUES ($1, $2)`, key, int64(math.MaxInt64-2)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int64{math.MaxInt64 - 1, math.MaxInt64} {
		tok := leasehold.NewToken()
		f, err := s.Acquire(ctx, key, tok, time.Minute)
		if err != nil || f != want {
			t.Fatalf("Acquire = (%d, %v), want fence %d", f, err, want)
		}
		if err := s.Release(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
	}
	f, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
	if err == nil || f != 0 || errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("Acquire past MaxInt64 = (%d, %v), want an error", f, err)
	}
	if info, err := s.Inspect(ctx, key); err != nil || info.Held || info.Fence != math.MaxInt64 {
		t.Fatalf("after the refused acquire: (%+v, %v), want free with fence MaxInt64", info, err)
	}
}
