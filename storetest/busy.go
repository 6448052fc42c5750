package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// BusySignal wraps a store for tests of waiting: every Acquire that finds the
// key held is signalled, never dropped, so a test can tell when a waiter is
// certainly waiting. A waiting Acquire makes one attempt, watches for
// releases, makes a second attempt and then waits: after two signals, with
// an hour of backoff, only a release notification can hand it the lock.
type BusySignal struct {
	driver.Store
	busy chan struct{}
}

// NewBusySignal wraps s. Its WatchReleases is s's, or an error if s has none.
func NewBusySignal(s driver.Store) *BusySignal {
	return &BusySignal{Store: s, busy: make(chan struct{}, 64)}
}

// Acquire is the store's Acquire, signalling a busy answer.
func (b *BusySignal) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	f, err := b.Store.Acquire(ctx, key, token, ttl)
	if errors.Is(err, driver.ErrNotAcquired) {
		b.busy <- struct{}{}
	}
	return f, err
}

// WatchReleases is the wrapped store's, when it has one.
func (b *BusySignal) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	n, ok := b.Store.(driver.ReleaseNotifier)
	if !ok {
		return nil, nil, errors.New("storetest: the wrapped store does not notify releases")
	}
	return n.WatchReleases(ctx, key)
}

// WaitBusy waits for n busy answers, failing the test after 10 s.
func (b *BusySignal) WaitBusy(t testing.TB, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-b.busy:
		case <-time.After(10 * time.Second):
			t.Fatalf("saw %d busy attempts in 10 s, want %d", i, n)
		}
	}
}
