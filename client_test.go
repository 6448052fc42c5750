package leasehold_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
	"github.com/leasehold/leasehold/storetest"
)

// bareStore hides a store's optional abilities (release notifications).
type bareStore struct{ driver.Store }

// lostReplyStore applies an acquire and then fails, like a store whose reply
// was lost on the way back.
type lostReplyStore struct {
	driver.Store
	mu       sync.Mutex
	released []string
}

var errLostReply = errors.New("connection reset")

func (s *lostReplyStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if _, err := s.Store.Acquire(ctx, key, token, ttl); err != nil {
		return 0, err
	}
	return 0, errLostReply
}

func (s *lostReplyStore) Release(ctx context.Context, key, token string) error {
	s.mu.Lock()
	s.released = append(s.released, token)
	s.mu.Unlock()
	return s.Store.Release(ctx, key, token)
}

func TestTryAcquireBusyReportsHolder(t *testing.T) {
	c := leasehold.New(memstore.New())
	if _, err := c.TryAcquire(t.Context(), "k", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := c.TryAcquire(t.Context(), "k", time.Minute)
	var held *leasehold.HeldError
	if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.As(err, &held) {
		t.Fatalf("error %v, want a *HeldError matching ErrNotAcquired", err)
	}
	if held.Key != "k" || held.Remaining <= 0 || held.Remaining > time.Minute {
		t.Fatalf("HeldError = %+v, want key k and remaining in (0, 1m]", held)
	}
}

// With a backoff of an hour, only the store's release notification can wake
// the waiter within the test's deadline.
func TestAcquireIsWokenByRelease(t *testing.T) {
	store := storetest.NewBusySignal(memstore.New())
	c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
	a, err := c.TryAcquire(t.Context(), "k", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		b, err := c.Acquire(ctx, "k", time.Hour)
		if err == nil && b.Fence() <= a.Fence() {
			err = errors.New("fence did not rise")
		}
		got <- err
	}()
	// The waiter's first attempt fails, it subscribes, its second fails:
	// only then is it certainly waiting.
	store.WaitBusy(t, 2)
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// Without notifications and with a backoff of an hour, only the holder's
// remaining TTL reported by the store can make the waiter retry in time.
func TestAcquireRetriesWhenHolderExpires(t *testing.T) {
	c := leasehold.New(bareStore{memstore.New()}, leasehold.WithBackoff(time.Hour, time.Hour))
	if _, err := c.TryAcquire(t.Context(), "k", 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Acquire(ctx, "k", time.Minute); err != nil {
		t.Fatalf("Acquire after the holder's expiry: %v", err)
	}
}

func TestAcquireGivesUpWithContext(t *testing.T) {
	c := leasehold.New(memstore.New())
	if _, err := c.TryAcquire(t.Context(), "k", time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, err := c.Acquire(ctx, "k", time.Minute)
	if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrNotAcquired joined with context.DeadlineExceeded", err)
	}
}

func TestAcquireWithCancelledContextCallsNoStore(t *testing.T) {
	store := memstore.New()
	c := leasehold.New(store)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Acquire(ctx, "k", time.Minute); !errors.Is(err, context.Canceled) || !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("Acquire: %v, want ErrNotAcquired joined with context.Canceled", err)
	}
	// One attempt makes no claim about the key: it is not "held by another owner".
	if _, err := c.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, context.Canceled) || errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v, want context.Canceled alone", err)
	}
	if info, _ := store.Inspect(t.Context(), "k"); info.Fence != 0 {
		t.Fatalf("store was written: %+v", info)
	}
}

// A store failure is returned as itself, never as "busy" and never as a
// lease; an acquire that may have been applied is released again.
func TestAmbiguousAcquireIsCleanedUp(t *testing.T) {
	mem := memstore.New()
	store := &lostReplyStore{Store: mem}
	c := leasehold.New(store)
	for _, acquire := range []func(context.Context, string, time.Duration) (*leasehold.Lease, error){c.TryAcquire, c.Acquire} {
		l, err := acquire(t.Context(), "k", time.Hour)
		if !errors.Is(err, errLostReply) || errors.Is(err, leasehold.ErrNotAcquired) || l != nil {
			t.Fatalf("got (%v, %v), want no lease and the store's error", l, err)
		}
		if info, _ := mem.Inspect(t.Context(), "k"); info.Held {
			t.Fatalf("the lost acquire still holds the key: %+v", info)
		}
	}
	if len(store.released) != 2 {
		t.Fatalf("%d clean-up releases, want 2", len(store.released))
	}
}

func TestClientRejectsBadInputWithoutWriting(t *testing.T) {
	store := memstore.New()
	c := leasehold.New(store)
	ctx := t.Context()
	cases := []struct {
		name string
		call func() error
		arg  string
	}{
		{"TryAcquire empty key", func() error { _, err := c.TryAcquire(ctx, "", time.Second); return err }, "key"},
		{"Acquire long key", func() error { _, err := c.Acquire(ctx, strings.Repeat("x", 513), time.Second); return err }, "key"},
		{"Acquire zero ttl", func() error { _, err := c.Acquire(ctx, "k", 0); return err }, "ttl"},
		{"TryAcquire 25h", func() error { _, err := c.TryAcquire(ctx, "k", 25*time.Hour); return err }, "ttl"},
	}
	for _, tc := range cases {
		err := tc.call()
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg || !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("%s: error %v, want an *ArgumentError naming %q", tc.name, err, tc.arg)
		}
	}
	if info, _ := store.Inspect(ctx, "k"); info.Fence != 0 || info.Held {
		t.Fatalf("bad acquires wrote to the store: %+v", info)
	}
	l, err := c.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, -time.Second); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("Renew with a negative ttl: %v", err)
	}
	if info, _ := store.Inspect(ctx, "k"); info.Fence != l.Fence() || info.TTL > time.Minute {
		t.Errorf("bad calls wrote to the store: %+v", info)
	}
}

func TestNilStoreIsAnErrorNotAPanic(t *testing.T) {
	_, err := leasehold.New(nil).TryAcquire(t.Context(), "k", time.Second)
	var ae *leasehold.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != "store" {
		t.Fatalf("TryAcquire on a nil store: %v, want an *ArgumentError naming store", err)
	}
}

func TestTokensAreUniqueAndLongEnough(t *testing.T) {
	seen := make(map[string]bool)
	for range 10000 {
		tok := leasehold.NewToken()
		// 26 base32 characters carry 130 bits.
		if len(tok) != 26 || seen[tok] {
			t.Fatalf("token %q: length %d, seen before %v", tok, len(tok), seen[tok])
		}
		seen[tok] = true
	}
}

// Many waiters on one key: never two owners at once, and each new owner's
// fence is above the previous one's.
func TestContendedAcquireExcludesAndFencesRise(t *testing.T) {
	const workers, rounds = 8, 50
	// A clock standing still: the fences count up by one from its floor.
	t0 := time.Unix(1_700_000_000, 0)
	c := leasehold.New(memstore.New(memstore.WithClock(func() time.Time { return t0 })))
	var (
		inside    atomic.Int32
		lastFence int64 // written only by the owner
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range workers {
		wg.Go(func() {
			for range rounds {
				l, err := c.Acquire(ctx, "contended", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d owners at once", n)
				}
				if l.Fence() <= lastFence {
					t.Errorf("fence %d after %d", l.Fence(), lastFence)
				}
				lastFence = l.Fence()
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if want := t0.UnixMicro() + workers*rounds - 1; lastFence != want {
		t.Fatalf("last fence %d, want %d (one per critical section)", lastFence, want)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// stuckWatchStore's release notifications never become active: the watch
// waits for a confirmation that does not come (a pub/sub channel the ACL
// forbids, a proxy without pub/sub).
type stuckWatchStore struct{ *memstore.Store }

func (stuckWatchStore) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	<-ctx.Done()
	return nil, nil, ctx.Err()
}

// A watch that never confirms must not hold a waiter past the holder's
// expiry: notifications are an optimisation, never a dependency.
func TestAcquireDoesNotDependOnNotifications(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := leasehold.New(stuckWatchStore{memstore.New()}, leasehold.WithLogger(quietLogger()))
		if _, err := c.TryAcquire(t.Context(), "k", 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := c.Acquire(t.Context(), "k", time.Minute); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited > 60*time.Millisecond {
			t.Errorf("acquired after %v; the holder expired at 50ms", waited)
		}
	})
}
