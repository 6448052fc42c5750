package leasehold_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// badFenceStore is a store that takes the key but answers with a fence
// that breaks the contract.
type badFenceStore struct {
	*memstore.Store
	fence int64
}

func (s badFenceStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if _, err := s.Store.Acquire(ctx, key, token, ttl); err != nil {
		return 0, err
	}
	return s.fence, nil
}

// The Client checks every fence a store returns: one that is not positive
// gives an error, never a lease, and the key the store took is given back.
func TestNonPositiveFenceIsNoLease(t *testing.T) {
	for _, f := range []int64{0, -1, math.MinInt64} {
		mem := memstore.New()
		c := leasehold.New(badFenceStore{mem, f}, leasehold.WithLogger(quietLogger()))
		for name, acquire := range map[string]func(context.Context, string, time.Duration) (*leasehold.Lease, error){
			"TryAcquire": c.TryAcquire, "Acquire": c.Acquire,
		} {
			l, err := acquire(t.Context(), "jobs:1", time.Minute)
			if l != nil || err == nil || errors.Is(err, leasehold.ErrNotAcquired) {
				t.Fatalf("fence %d, %s: (%v, %v), want a store error", f, name, l, err)
			}
			if info, _ := mem.Inspect(t.Context(), "jobs:1"); info.Held {
				t.Fatalf("fence %d, %s: the key is still held after the refusal", f, name)
			}
		}
		err := c.Hold(t.Context(), "jobs:1", time.Minute, func(context.Context, *leasehold.Lease) error {
			t.Fatal("fn ran under a lease with a bad fence")
			return nil
		})
		if err == nil {
			t.Fatalf("fence %d: Hold returned nil", f)
		}
	}
}
