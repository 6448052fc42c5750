package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// gatedStore holds the first Renew of TTL gated at the store until the test
// opens the gate, after saying that it arrived: a manual renewal that passed
// its checks and is on the wire.
type gatedStore struct {
	driver.Store
	gated   time.Duration
	arrived chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (s *gatedStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if ttl == s.gated {
		s.once.Do(func() {
			s.arrived <- struct{}{}
			<-s.gate
		})
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

// A manual Renew to a shorter TTL is on the wire when a KeepAlive starts.
// The KeepAlive must count from that renewal: with the acquire's minute it
// would renew at 20 s while the store expires the key at 3 s, and another
// owner could take it under a live Context.
func TestManualRenewInFlightDoesNotShortenAKeepAlive(t *testing.T) {
	for _, kp := range keepers {
		t.Run(kp.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const short = 3 * time.Second
				mem := memstore.New()
				store := &gatedStore{Store: mem, gated: short, arrived: make(chan struct{}), gate: make(chan struct{})}
				var s driver.Store = store
				if kp.batch {
					s = &batchStore{faultyStore: &faultyStore{Store: store}, start: time.Now()}
				}
				rec := &recorder{}
				c := leasehold.New(s, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
				l, err := c.TryAcquire(t.Context(), key, ttl)
				if err != nil {
					t.Fatal(err)
				}
				renewed := make(chan error, 1)
				go func() { renewed <- l.Renew(t.Context(), short) }()
				<-store.arrived
				type started struct {
					k   *leasehold.KeepAlive
					err error
				}
				got := make(chan started, 1)
				go func() {
					k, err := l.KeepAlive(t.Context())
					got <- started{k, err}
				}()
				synctest.Wait()
				close(store.gate)
				if err := <-renewed; err != nil {
					t.Fatalf("manual Renew: %v", err)
				}
				st := <-got
				if st.err != nil {
					t.Fatalf("KeepAlive: %v", st.err)
				}
				defer st.k.Stop()
				time.Sleep(2 * short)
				if _, err := mem.Acquire(t.Context(), key, "intruder", ttl); err == nil && st.k.Context().Err() == nil {
					t.Fatal("another owner took the key while the KeepAlive's Context said it was still ours")
				}
				st.k.Stop()
				rec.mu.Lock()
				defer rec.mu.Unlock()
				if len(rec.abandons) != 0 || len(rec.notOwned) != 0 {
					t.Errorf("%d abandons, %d not-owned events: the KeepAlive renewed on the wrong TTL", len(rec.abandons), len(rec.notOwned))
				}
			})
		})
	}
}

// yieldingStore gives other goroutines a chance inside each call, so that
// two public calls on one lease interleave at the store, not only before it.
type yieldingStore struct{ driver.Store }

func (s yieldingStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	runtime.Gosched()
	err := s.Store.Renew(ctx, key, token, ttl)
	runtime.Gosched()
	return err
}

func (s yieldingStore) Release(ctx context.Context, key, token string) error {
	runtime.Gosched()
	err := s.Store.Release(ctx, key, token)
	runtime.Gosched()
	return err
}

// Renew (to a shorter TTL) and KeepAlive raced on one lease, many times, on
// fake time: whichever way they interleave, the key is never free for
// another owner while the KeepAlive's Context is live.
func TestManualRenewRacingKeepAliveNeverShortensTheLease(t *testing.T) {
	const rounds = 300
	synctest.Test(t, func(t *testing.T) {
		const short = 3 * time.Second
		mem := memstore.New()
		c := leasehold.New(yieldingStore{mem}, leasehold.WithLogger(quietLogger()))
		for i := range rounds {
			k := fmt.Sprintf("jobs:%d", i)
			l, err := c.TryAcquire(t.Context(), k, ttl)
			if err != nil {
				t.Fatal(err)
			}
			var (
				wg       sync.WaitGroup
				ka       *leasehold.KeepAlive
				renewErr error
			)
			wg.Go(func() { renewErr = l.Renew(t.Context(), short) })
			wg.Go(func() { ka, _ = l.KeepAlive(t.Context()) })
			wg.Wait()
			if ka == nil {
				t.Fatalf("round %d: KeepAlive failed (renew: %v)", i, renewErr)
			}
			time.Sleep(2 * short)
			if _, err := mem.Acquire(t.Context(), k, "intruder", ttl); err == nil && ka.Context().Err() == nil {
				t.Fatalf("round %d: another owner took the key under a live KeepAlive (renew: %v)", i, renewErr)
			} else if err != nil && !errors.Is(err, leasehold.ErrNotAcquired) {
				t.Fatal(err)
			}
			ka.Stop()
		}
	})
}

// A KeepAlive stopped after many renewals, then started again: the new one
// counts its deadline from the last renewal that landed, not from the
// acquire (which would give the lease up at once, on a key still ours).
func TestKeepAliveAfterStopCountsFromTheLastRenewal(t *testing.T) {
	for _, kp := range keepers {
		t.Run(kp.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(nil)
				var s driver.Store = f.store
				if kp.batch {
					s = &batchStore{faultyStore: f.store, start: time.Now()}
				}
				rec := &recorder{}
				c := leasehold.New(s, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
				l, err := c.TryAcquire(t.Context(), key, ttl)
				if err != nil {
					t.Fatal(err)
				}
				k, err := l.KeepAlive(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(5*ttl + ttl/2) // renewed every ttl/3; the last at 5 TTLs
				k.Stop()
				if k, err = l.KeepAlive(t.Context()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(ttl)
				synctest.Wait()
				select {
				case <-k.Context().Done():
					t.Fatalf("the second KeepAlive gave a live lease up: %v", context.Cause(k.Context()))
				default:
				}
				k.Stop()
				if info, _ := f.mem.Inspect(t.Context(), key); info.Token != l.Token() {
					t.Fatalf("the key is %+v, want still ours", info)
				}
			})
		})
	}
}

// A renewal answered "not owned" cancels the KeepAlive's Context with a
// cause that says so, every time: the one loss signal carries its reason.
func TestLossCancelsTheContextWithItsCause(t *testing.T) {
	const rounds = 200
	for _, kp := range keepers {
		t.Run(kp.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(always(leasehold.ErrNotOwned))
				var s driver.Store = f.store
				if kp.batch {
					s = &batchStore{faultyStore: f.store, start: time.Now()}
				}
				c := leasehold.New(s)
				for i := range rounds {
					l, err := c.TryAcquire(t.Context(), fmt.Sprintf("jobs:%d", i), ttl)
					if err != nil {
						t.Fatal(err)
					}
					k, err := l.KeepAlive(t.Context())
					if err != nil {
						t.Fatal(err)
					}
					<-k.Context().Done()
					if cause := context.Cause(k.Context()); !errors.Is(cause, leasehold.ErrAbandoned) || !errors.Is(cause, leasehold.ErrNotOwned) {
						t.Fatalf("round %d: cause %v, want ErrAbandoned and ErrNotOwned", i, cause)
					}
					k.Stop()
				}
			})
		})
	}
}
