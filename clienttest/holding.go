package clienttest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// faulty is a store (without its optional abilities) whose calls a case can
// break: an acquire whose reply is lost after the store applied it, or
// renewals that fail.
type faulty struct {
	driver.Store
	loseAcquireReply atomic.Bool
	failRenew        atomic.Bool
}

var errLost = errors.New("clienttest: the reply was lost")

func (s *faulty) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	f, err := s.Store.Acquire(context.WithoutCancel(ctx), key, token, ttl)
	if err == nil && s.loseAcquireReply.Load() {
		return 0, errLost
	}
	return f, err
}

func (s *faulty) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if s.failRenew.Load() {
		return errLost
	}
	return s.Store.Renew(ctx, key, token, ttl)
}

// An acquire the store applied but whose reply was lost gives no lease,
// and the Client gives the key back: it is not blocked for a TTL.
func testLostAcquireReply(t *testing.T, newStore func(*testing.T) driver.Store) {
	raw := newStore(t)
	fs := &faulty{Store: newStore(t)}
	fs.loseAcquireReply.Store(true)
	c := client(t, fs)
	k := key(t)
	l, err := c.TryAcquire(t.Context(), k, ttl)
	if l != nil || err == nil || errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a lost reply: (%v, %v), want no lease and the store's error", l, err)
	}
	if info := inspect(t, raw, k); info.Held {
		t.Fatalf("the key is held after a lost acquire reply: %+v", info)
	}
	other := client(t, newStore(t))
	l, err = other.TryAcquire(t.Context(), k, ttl)
	fatalIf(t, "TryAcquire after the lost reply", err)
	fatalIf(t, "Release", l.Release(t.Context()))
}

// Twenty leases kept alive for three renewals each stay held; on a store
// that renews in batches (driver.BatchRenewer) they share store calls.
func testBatchedRenewal(t *testing.T, newStore func(*testing.T) driver.Store) {
	const n = 20
	s := newStore(t)
	var calls, items atomic.Int64
	c := client(t, s, leasehold.WithObserver(leasehold.Observer{OnStoreCall: func(_ context.Context, ev leasehold.StoreCallEvent) {
		if ev.Op == "renew" || ev.Op == "renew_batch" {
			calls.Add(1)
			items.Add(int64(ev.Items))
		}
	}}))
	var leases []*leasehold.Lease
	var keepers []*leasehold.KeepAlive
	for i := range n {
		l, err := c.TryAcquire(t.Context(), key(t)+string(rune('a'+i)), shortTTL)
		fatalIf(t, "TryAcquire", err)
		k, err := l.KeepAlive(t.Context())
		fatalIf(t, "KeepAlive", err)
		leases, keepers = append(leases, l), append(keepers, k)
	}
	time.Sleep(shortTTL + shortTTL/2)
	for i, l := range leases {
		if err := keepers[i].Context().Err(); err != nil {
			t.Fatalf("lease %d: renewal ended: %v", i, context.Cause(keepers[i].Context()))
		}
		if info := inspect(t, s, l.Key()); !info.Held || info.Token != l.Token() {
			t.Fatalf("lease %d lost on the store after %v: %+v", i, shortTTL+shortTTL/2, info)
		}
	}
	for i, l := range leases {
		keepers[i].Stop()
		fatalIf(t, "Release", l.Release(t.Context()))
	}
	t.Logf("%d leases renewed %d times in %d store calls", n, items.Load(), calls.Load())
	if _, batch := s.(driver.BatchRenewer); batch && calls.Load() >= items.Load() {
		t.Errorf("%d renewal calls for %d renewals: the store renews in batches, the Client did not", calls.Load(), items.Load())
	}
	if items.Load() < 2*n {
		t.Errorf("%d renewals of %d leases in 1.5 TTLs, want at least 2 each", items.Load(), n)
	}
}

// Renewals that keep failing fence the critical section before the lease
// can expire: fn's context is cancelled with ErrAbandoned while the store
// still holds the lease, and Hold does not release it.
func testRenewalFailureFences(t *testing.T, newStore func(*testing.T) driver.Store) {
	raw := newStore(t)
	fs := &faulty{Store: newStore(t)}
	fs.failRenew.Store(true)
	c := client(t, fs)
	k := key(t)
	var atCancel driver.Info
	var token string
	err := c.Hold(t.Context(), k, shortTTL, func(ctx context.Context, l *leasehold.Lease) error {
		token = l.Token()
		select {
		case <-ctx.Done():
		case <-time.After(2 * shortTTL):
			t.Error("fn's context outlived the lease")
		}
		atCancel = inspect(t, raw, k)
		if !errors.Is(context.Cause(ctx), leasehold.ErrAbandoned) {
			t.Errorf("fn's cause %v, want ErrAbandoned", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, leasehold.ErrAbandoned) {
		t.Fatalf("Hold: %v, want ErrAbandoned", err)
	}
	if !atCancel.Held || atCancel.Token != token {
		t.Fatalf("when fn's context was cancelled the store showed %+v: the fence came after the expiry", atCancel)
	}
	t.Logf("fenced with %v of the lease left on the store", atCancel.TTL)
}

// A caller that cancels during Hold while fn runs on, ignoring its context,
// for 2.5 TTLs: fn's context ends at once with a cause that says the caller
// cancelled, the lease is renewed until fn returns (no other Client gets
// the key), then released.
func testHoldAfterCallerCancels(t *testing.T, newStore func(*testing.T) driver.Store) {
	c := client(t, newStore(t))
	other := client(t, newStore(t))
	k := key(t)
	ctx, cancel := context.WithCancel(t.Context())
	var (
		fnDone    atomic.Bool
		stolen    atomic.Int64
		cancelled = make(chan time.Duration, 1)
		wg        sync.WaitGroup
	)
	inFn := make(chan struct{})
	holdDone := make(chan error, 1)
	go func() {
		holdDone <- c.Hold(ctx, k, shortTTL, func(fctx context.Context, l *leasehold.Lease) error {
			close(inFn)
			start := time.Now()
			go func() {
				<-fctx.Done()
				if !errors.Is(context.Cause(fctx), context.Canceled) {
					t.Errorf("fn's cause %v, want one matching context.Canceled (the caller's)", context.Cause(fctx))
				}
				cancelled <- time.Since(start)
			}()
			time.Sleep(shortTTL*5/2 + shortTTL/4) // ignores its context
			fnDone.Store(true)
			return nil
		})
	}()
	<-inFn
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Go(func() {
		for !fnDone.Load() {
			if l, err := other.TryAcquire(t.Context(), k, shortTTL); err == nil {
				if !fnDone.Load() {
					stolen.Add(1)
				}
				_ = l.Release(t.Context())
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	wg.Wait()
	if err := <-holdDone; err != nil {
		t.Fatalf("Hold: %v, want nil (fn returned nil, the lease was kept)", err)
	}
	if n := stolen.Load(); n > 0 {
		t.Fatalf("another Client acquired the key %d times while fn ran after its caller cancelled", n)
	}
	select {
	case d := <-cancelled:
		t.Logf("fn's context ended %v into fn (the caller cancelled at 100ms)", d)
	case <-time.After(wakeBound):
		t.Fatal("fn's context never ended after the caller cancelled")
	}
	l, err := other.Acquire(t.Context(), k, shortTTL)
	fatalIf(t, "Acquire after Hold returned", err)
	fatalIf(t, "Release", l.Release(t.Context()))
}

// Close cancels the Context of every kept-alive lease with ErrClosed and
// releases none: the keys stay held until released by hand or expired.
func testCloseCancelsKeepAlives(t *testing.T, newStore func(*testing.T) driver.Store) {
	s := newStore(t)
	c := leasehold.New(s)
	var leases []*leasehold.Lease
	var keepers []*leasehold.KeepAlive
	for i := range 5 {
		l, err := c.TryAcquire(t.Context(), key(t)+string(rune('a'+i)), ttl)
		fatalIf(t, "TryAcquire", err)
		k, err := l.KeepAlive(t.Context())
		fatalIf(t, "KeepAlive", err)
		leases, keepers = append(leases, l), append(keepers, k)
	}
	fatalIf(t, "Close", c.Close())
	for i, k := range keepers {
		if cause := context.Cause(k.Context()); !errors.Is(cause, leasehold.ErrClosed) {
			t.Errorf("lease %d: cause %v, want ErrClosed", i, cause)
		}
		if info := inspect(t, s, leases[i].Key()); !info.Held {
			t.Errorf("lease %d released by Close", i)
		}
	}
	if _, err := c.TryAcquire(t.Context(), key(t), ttl); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("TryAcquire after Close: %v, want ErrClosed", err)
	}
	for _, l := range leases {
		fatalIf(t, "Release after Close", l.Release(t.Context()))
	}
}

// Hold with a wait budget on a held key returns ErrNotAcquired once the
// budget is spent, without running fn.
func testWaitBudget(t *testing.T, newStore func(*testing.T) driver.Store) {
	holder := client(t, newStore(t))
	c := client(t, newStore(t))
	k := key(t)
	h, err := holder.TryAcquire(t.Context(), k, ttl)
	fatalIf(t, "TryAcquire", err)
	start := time.Now()
	err = c.Hold(t.Context(), k, ttl, func(context.Context, *leasehold.Lease) error {
		t.Error("fn ran on a held key")
		return nil
	}, leasehold.WithWaitBudget(300*time.Millisecond))
	if !errors.Is(err, driver.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Hold past its budget: %v, want ErrNotAcquired alone", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before its 300ms budget", took)
	}
	fatalIf(t, "Release", h.Release(t.Context()))
}

// Three replicas run a loop every second: each window is run by one
// replica, ticks never overlap, and fences rise with them.
func testRunLoop(t *testing.T, newStore func(*testing.T) driver.Store) {
	const interval = time.Second
	k := key(t)
	o := &order{}
	ctx, cancel := context.WithTimeout(t.Context(), 6*interval)
	defer cancel()
	var wg sync.WaitGroup
	var ticks atomic.Int64
	for r := range 3 {
		c := client(t, newStore(t))
		wg.Go(func() {
			err := c.RunLoop(ctx, k, interval, func(ctx context.Context, l *leasehold.Lease) error {
				o.enter(t, string(rune('A'+r)), l.Fence())
				ticks.Add(1)
				time.Sleep(100 * time.Millisecond)
				o.leave()
				return nil
			})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("RunLoop: %v", err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d ticks in %v by 3 replicas: %v", ticks.Load(), 6*interval, o.got())
	if ticks.Load() == 0 {
		t.Fatal("no tick ran")
	}
}

// Three candidates: one leads at a time, with rising fences; when the
// leader stops, another leads within the lease's TTL and a backoff step.
func testLead(t *testing.T, newStore func(*testing.T) driver.Store) {
	k := key(t)
	o := &order{}
	var (
		mu      sync.Mutex
		leading = map[int]context.CancelFunc{}
		started = make(chan int, 16)
	)
	var wg sync.WaitGroup
	stopAll := make([]context.CancelFunc, 3)
	for i := range 3 {
		c := client(t, newStore(t))
		ctx, cancel := context.WithCancel(t.Context())
		stopAll[i] = cancel
		wg.Go(func() {
			_ = c.Lead(ctx, k, func(lctx context.Context, l *leasehold.Lease) {
				o.enter(t, string(rune('A'+i)), l.Fence())
				mu.Lock()
				leading[i] = cancel
				mu.Unlock()
				started <- i
				<-lctx.Done()
				mu.Lock()
				delete(leading, i)
				mu.Unlock()
				o.leave()
			}, leasehold.WithTTL(shortTTL))
		})
	}
	first := <-started
	stopAll[first]() // the leader steps down; a successor takes over
	select {
	case next := <-started:
		if next == first {
			t.Fatalf("the stopped candidate %d led again", first)
		}
	case <-time.After(shortTTL + wakeBound):
		t.Fatalf("no successor within %v of the leader stopping", shortTTL+wakeBound)
	}
	for _, stop := range stopAll {
		stop()
	}
	wg.Wait()
	t.Logf("terms: %v", o.got())
}
