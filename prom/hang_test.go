package prom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/prom"
	"github.com/leasehold/leasehold/store/memstore"
)

// hangingStore never answers an acquire: its call ends with the caller's
// context, as a store that accepts and never answers does.
type hangingStore struct{ *memstore.Store }

func (hangingStore) Acquire(ctx context.Context, _, _ string, _ time.Duration) (int64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// A store that stops answering callers who have deadlines shows: their
// acquires count as timeouts (acquire_total), and their store calls as
// failures (store_call_failures_total, which LeaseholdStoreCallsFailing
// alerts on). A busy key and a caller's own cancellation are no failures.
func TestUnansweringStoreCountsStoreCallFailures(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := leasehold.New(hangingStore{memstore.New()}, leasehold.WithObserver(m.Observer()))
	defer c.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		_, _ = c.TryAcquire(ctx, "approvals:1", 10*time.Second)
		cancel()
	}
	cctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, _ = c.TryAcquire(cctx, "approvals:2", 10*time.Second)
	if got := testutil.ToFloat64(m.StoreFailuresCounter("acquire", "prom_test")); got != 3 {
		t.Errorf("store_call_failures_total{op=acquire} = %v, want 3 (the cancelled call is no failure)", got)
	}

	mem := memstore.New()
	c2 := leasehold.New(mem, leasehold.WithObserver(m.Observer()))
	defer c2.Close()
	l, err := c2.TryAcquire(t.Context(), "approvals:3", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c2.TryAcquire(t.Context(), "approvals:3", time.Minute) // busy: an answer
	_ = l.Release(t.Context())
	_ = l.Release(t.Context()) // not owned: an answer
	if got := testutil.ToFloat64(m.StoreFailuresCounter("acquire", "memstore")) + testutil.ToFloat64(m.StoreFailuresCounter("release", "memstore")); got != 0 {
		t.Errorf("store_call_failures_total for a busy key and a repeated release = %v, want 0", got)
	}
}
