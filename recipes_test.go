package leasehold_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

func TestHoldGivesUpAfterItsWaitBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		c := leasehold.New(mem, leasehold.WithLogger(quietLogger()))
		if _, err := c.TryAcquire(t.Context(), "approvals:7", time.Hour); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		called := false
		err := c.Hold(t.Context(), "approvals:7", 10*time.Second, func(context.Context, *leasehold.Lease) error {
			called = true
			return nil
		}, leasehold.WithWaitBudget(2*time.Second))
		if !errors.Is(err, leasehold.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Hold with a wait budget on a held key: %v, want ErrNotAcquired and no context error", err)
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Errorf("gave up after %v, want the 2s budget", waited)
		}
		if called {
			t.Error("fn ran without the lock")
		}
	})
}

func TestHoldAcquiresWhenReleasedDuringTheWaitBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := leasehold.New(memstore.New())
		holder, err := c.TryAcquire(t.Context(), "approvals:7", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(500 * time.Millisecond)
			_ = holder.Release(context.Background())
		}()
		start := time.Now()
		err = c.Hold(t.Context(), "approvals:7", 10*time.Second, func(context.Context, *leasehold.Lease) error {
			if at := time.Since(start); at != 500*time.Millisecond {
				t.Errorf("acquired %v after the start, want at the release (500ms)", at)
			}
			return nil
		}, leasehold.WithWaitBudget(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
	})
}

type run struct {
	replica    int
	fence      int64
	start, end time.Time
}

// Three replicas tick every 30 s for 100 intervals: every window is run by
// one replica, windows never overlap, and fences rise with them.
func TestRunLoopOneReplicaPerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 30 * time.Second
		c := leasehold.New(memstore.New())
		var (
			mu   sync.Mutex
			runs []run
			wg   sync.WaitGroup
		)
		ctx, cancel := context.WithTimeout(t.Context(), 100*interval)
		defer cancel()
		for r := range 3 {
			wg.Go(func() {
				err := c.RunLoop(ctx, "loops:sweep", interval, func(ctx context.Context, l *leasehold.Lease) error {
					start := time.Now()
					time.Sleep(5 * time.Second) // the tick's work
					mu.Lock()
					runs = append(runs, run{replica: r, fence: l.Fence(), start: start, end: time.Now()})
					mu.Unlock()
					return nil
				})
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("RunLoop returned %v", err)
				}
			})
		}
		wg.Wait()
		checkWindows(t, runs)
		// One run per lock window of 2 intervals.
		if len(runs) < 45 || len(runs) > 51 {
			t.Errorf("%d runs in 100 intervals, want about 50 (one per 2-interval window)", len(runs))
		}
	})
}

func checkWindows(t *testing.T, runs []run) {
	t.Helper()
	for i := 1; i < len(runs); i++ {
		prev, cur := runs[i-1], runs[i]
		if cur.start.Before(prev.end) {
			t.Fatalf("replica %d ran from %v while replica %d ran until %v", cur.replica, cur.start, prev.replica, prev.end)
		}
		if cur.fence <= prev.fence {
			t.Fatalf("fence %d after %d", cur.fence, prev.fence)
		}
	}
}

// The owner stops (a crash: it just stops calling); another replica runs the
// loop within two intervals of the owner's last acquisition.
func TestRunLoopOwnershipMovesWhenTheOwnerStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 30 * time.Second
		c := leasehold.New(memstore.New())
		owner := make(chan time.Time, 1)
		ownerCtx, killOwner := context.WithCancel(t.Context())
		go func() {
			_ = c.RunLoop(ownerCtx, "loops:replay", interval, func(context.Context, *leasehold.Lease) error {
				select {
				case owner <- time.Now():
				default:
				}
				return nil
			})
		}()
		acquiredAt := <-owner
		killOwner()
		next := make(chan time.Time, 1)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		for range 2 {
			go func() {
				_ = c.RunLoop(ctx, "loops:replay", interval, func(context.Context, *leasehold.Lease) error {
					select {
					case next <- time.Now():
					default:
					}
					return nil
				})
			}()
		}
		if moved := (<-next).Sub(acquiredAt); moved > 2*interval+time.Millisecond {
			t.Fatalf("ownership moved %v after the owner's acquisition, want within 2 × interval", moved)
		}
		cancel()
	})
}

// candidate is one process campaigning for leadership.
type candidate struct {
	id      int
	store   *faultyStore
	cancel  context.CancelFunc
	leading atomic.Bool
	token   atomic.Value // string: the lease token of the current term
	stopped chan time.Time
	started chan time.Time
}

func startCandidates(t *testing.T, mem *memstore.Store, n int, opts ...leasehold.HoldOption) []*candidate {
	cands := make([]*candidate, n)
	for i := range cands {
		cd := &candidate{id: i, store: &faultyStore{Store: mem}, stopped: make(chan time.Time, 16), started: make(chan time.Time, 16)}
		c := leasehold.New(cd.store)
		ctx, cancel := context.WithCancel(t.Context())
		cd.cancel = cancel
		go func() {
			_ = c.Lead(ctx, "leader:main", func(ctx context.Context, l *leasehold.Lease) {
				cd.token.Store(l.Token())
				cd.leading.Store(true)
				cd.started <- time.Now()
				<-ctx.Done()
				cd.leading.Store(false)
				cd.stopped <- time.Now()
			}, opts...)
		}()
		cands[i] = cd
	}
	return cands
}

// checkOneLeader: at most one candidate believes it leads, and when one does,
// the store agrees it holds the lease.
func checkOneLeader(t *testing.T, mem *memstore.Store, cands []*candidate) {
	t.Helper()
	info, _ := mem.Inspect(context.Background(), "leader:main")
	leaders := 0
	for _, cd := range cands {
		if cd.leading.Load() {
			leaders++
			if tok, _ := cd.token.Load().(string); !info.Held || info.Token != tok {
				t.Fatalf("candidate %d believes it leads, the store says %+v", cd.id, info)
			}
		}
	}
	if leaders > 1 {
		t.Fatalf("%d leaders at once", leaders)
	}
}

func TestLeaderElection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		const ttl = 10 * time.Second
		cands := startCandidates(t, mem, 3, leasehold.WithTTL(ttl))
		defer func() {
			for _, cd := range cands {
				cd.cancel()
			}
		}()
		// Watch the whole run: never two leaders, the store always agrees.
		for range 600 {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			checkOneLeader(t, mem, cands)
		}
		leader := leaderOf(t, cands)

		// Renewals start failing on the leader: it steps down while the store
		// still holds its lease.
		leader.store.mu.Lock()
		leader.store.fault = always(errRenewDown)
		leader.store.mu.Unlock()
		<-leader.stopped
		if info, _ := mem.Inspect(context.Background(), "leader:main"); !info.Held || info.TTL <= 0 {
			t.Fatalf("the leader stepped down after its lease expired: %+v", info)
		}
		for range 200 {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			checkOneLeader(t, mem, cands)
		}

		// The new leader crashes (stops without releasing); a successor leads
		// within TTL + one backoff cap.
		crashed := leaderOf(t, cands)
		crashed.store.mu.Lock()
		crashed.store.crashed = true
		crashed.store.mu.Unlock()
		crashedAt := time.Now()
		crashed.cancel()
		var successor time.Time
		for successor.IsZero() {
			for _, cd := range cands {
				select {
				case at := <-cd.started:
					if cd != crashed && at.After(crashedAt) {
						successor = at
					}
				default:
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if failover := successor.Sub(crashedAt); failover > ttl+leasehold.DefaultMaxBackoff {
			t.Fatalf("failover took %v, want ≤ TTL + backoff cap (%v)", failover, ttl+leasehold.DefaultMaxBackoff)
		} else {
			t.Logf("failover after a crash: %v (TTL %v)", failover, ttl)
		}
	})
}

func leaderOf(t *testing.T, cands []*candidate) *candidate {
	t.Helper()
	for _, cd := range cands {
		if cd.leading.Load() {
			return cd
		}
	}
	t.Fatal("no leader")
	return nil
}

// countingStore counts acquire attempts.
type countingStore struct {
	driver.Store
	acquires atomic.Int64
}

func (s *countingStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	s.acquires.Add(1)
	return s.Store.Acquire(ctx, key, token, ttl)
}

func (s *countingStore) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.Store.(driver.ReleaseNotifier).WatchReleases(ctx, key)
}

// 64 goroutines of one Client, 1,000 critical sections on one key: the
// store sees about one acquire per section, whether they Hold or Acquire and
// Release by hand, since the Client queues its waiters and a release of its
// own lease wakes only the head (when every waiter was woken, this run made
// about 28,000 calls). Two Clients (two processes' worth) on one store still
// exclude, and no key is left in a Client's lines.
func TestOneClientsWaitersCutStoreTraffic(t *testing.T) {
	const goroutines, sections = 64, 1000
	mem := memstore.New()
	run := func(hold func(ctx context.Context, key string, ttl time.Duration, fn func(context.Context, *leasehold.Lease) error, opts ...leasehold.HoldOption) error, inside *atomic.Int32) {
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(sections)
		for range goroutines {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					err := hold(t.Context(), "runs:R1", time.Minute, func(context.Context, *leasehold.Lease) error {
						if n := inside.Add(1); n != 1 {
							t.Errorf("%d holders at once", n)
						}
						inside.Add(-1)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}

	var inside atomic.Int32
	holding := &countingStore{Store: mem}
	hc := leasehold.New(holding)
	run(hc.Hold, &inside)

	byHand := &countingStore{Store: mem}
	bc := leasehold.New(byHand)
	run(func(ctx context.Context, key string, ttl time.Duration, fn func(context.Context, *leasehold.Lease) error, _ ...leasehold.HoldOption) error {
		l, err := bc.Acquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		defer l.Release(ctx)
		return fn(ctx, l)
	}, &inside)

	t.Logf("store acquire calls for %d sections by %d goroutines: Hold %d, Acquire and Release %d",
		sections, goroutines, holding.acquires.Load(), byHand.acquires.Load())
	// A line that starts over (it emptied while a goroutine was between two
	// sections) costs two calls: the busy attempt and the one after the
	// release. Twice the sections is far above that and far below a herd.
	for name, n := range map[string]int64{"Hold": holding.acquires.Load(), "Acquire": byHand.acquires.Load()} {
		if n < sections || n >= 2*sections {
			t.Errorf("%s: %d acquire calls, want about one per section (%d to %d)", name, n, sections, 2*sections-1)
		}
	}
	if n := leasehold.Lines(hc) + leasehold.Lines(bc); n != 0 {
		t.Errorf("%d idle keys left in the Clients' lines", n)
	}

	// Two processes' Clients on the same store, at the same time.
	a, b := leasehold.New(mem), leasehold.New(mem)
	var wg sync.WaitGroup
	for _, c := range []*leasehold.Client{a, b} {
		wg.Go(func() { run(c.Hold, &inside) })
	}
	wg.Wait()
}

func TestHoldWaitEndsWithContextAndBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := leasehold.New(memstore.New())
		inFn := make(chan struct{})
		release := make(chan struct{})
		go func() {
			_ = c.Hold(context.Background(), "k", time.Minute, func(context.Context, *leasehold.Lease) error {
				close(inFn)
				<-release
				return nil
			})
		}()
		<-inFn
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := c.Hold(ctx, "k", time.Minute, func(context.Context, *leasehold.Lease) error { return nil })
		if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting past the context: %v", err)
		}
		err = c.Hold(t.Context(), "k", time.Minute, func(context.Context, *leasehold.Lease) error { return nil }, leasehold.WithWaitBudget(time.Second))
		if !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("waiting past the budget: %v", err)
		}
		close(release)
		synctest.Wait()
		if n := leasehold.Lines(c); n != 0 {
			t.Fatalf("%d keys left", n)
		}
	})
}

func TestRecipesRejectBadInput(t *testing.T) {
	c := leasehold.New(memstore.New())
	tick := func(context.Context, *leasehold.Lease) error { return nil }
	lead := func(context.Context, *leasehold.Lease) {}
	cases := map[string]error{
		"interval":           c.RunLoop(t.Context(), "k", 0, tick),
		"tick":               c.RunLoop(t.Context(), "k", time.Second, nil),
		"key":                c.RunLoop(t.Context(), "", time.Second, tick),
		"FenceAfter":         c.RunLoop(t.Context(), "k", time.Second, tick, leasehold.FenceAfter(2)),
		"lead":               c.Lead(t.Context(), "k", nil),
		"WithReleaseTimeout": c.Lead(t.Context(), "k", lead, leasehold.WithReleaseTimeout(-time.Second)),
		"WithWaitBudget":     c.Lead(t.Context(), "k", lead, leasehold.WithWaitBudget(time.Second)),
		"WithTTL":            c.Lead(t.Context(), "k", lead, leasehold.WithTTL(48*time.Hour)),
		"WithTTL ":           c.Lead(t.Context(), "k", lead, leasehold.WithTTL(time.Nanosecond)),
		"WithTTL  ":          c.RunLoop(t.Context(), "k", time.Second, tick, leasehold.WithTTL(2*time.Nanosecond)),
		"interval ":          c.RunLoop(t.Context(), "k", math.MaxInt64, tick),
		"interval  ":         c.RunLoop(t.Context(), "k", math.MaxInt64/2+1, tick),
		// Its TTL, two intervals, is under driver.MinTTL: RunLoop has no
		// ttl argument to blame.
		"interval   ": c.RunLoop(t.Context(), "k", 100*time.Microsecond, tick),
	}
	cases["WithWaitBudget "] = c.Hold(t.Context(), "k", time.Second, func(context.Context, *leasehold.Lease) error { return nil },
		leasehold.WithWaitBudget(-1))
	for arg, err := range cases {
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != strings.TrimSpace(arg) {
			t.Errorf("%s: %v, want an *ArgumentError naming it", arg, err)
		}
	}
}

// Lead and RunLoop return at once on a closed Client or one made with a bad
// option, as every other call does, instead of retrying until ctx ends.
func TestRecipesOnAnUnusableClient(t *testing.T) {
	closed := leasehold.New(memstore.New())
	closed.Close()
	bad := leasehold.New(memstore.New(), leasehold.WithBatchSize(0))
	tick := func(context.Context, *leasehold.Lease) error { return nil }
	lead := func(context.Context, *leasehold.Lease) {}
	for name, c := range map[string]*leasehold.Client{"closed": closed, "bad option": bad, "nil store": leasehold.New(nil)} {
		// ctx bounds the test if a call retries anyway; a call that
		// returns ctx's error is what this test fails on.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		for call, err := range map[string]error{
			"Lead":    c.Lead(ctx, "k", lead),
			"RunLoop": c.RunLoop(ctx, "k", time.Millisecond, tick),
		} {
			want := leasehold.ErrClosed
			if name != "closed" {
				want = leasehold.ErrInvalidArgument
			}
			if !errors.Is(err, want) {
				t.Errorf("%s on a %s Client: %v, want %v", call, name, err, want)
			}
		}
		cancel()
	}
}

// RunLoop and Lead, between ticks or attempts, return at Close, not at their
// next tick an hour on.
func TestRecipesReturnAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := leasehold.New(memstore.New())
		held, err := leasehold.New(c.Store()).TryAcquire(t.Context(), "close:lead", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(context.Background())
		loop, lead := make(chan error, 1), make(chan error, 1)
		go func() {
			loop <- c.RunLoop(t.Context(), "close:loop", time.Hour, func(context.Context, *leasehold.Lease) error { return nil })
		}()
		go func() { lead <- c.Lead(t.Context(), "close:lead", func(context.Context, *leasehold.Lease) {}) }()
		synctest.Wait() // the loop ran its first tick; the leader waits
		start := time.Now()
		c.Close()
		for name, ch := range map[string]chan error{"RunLoop": loop, "Lead": lead} {
			if err := <-ch; !errors.Is(err, leasehold.ErrClosed) || time.Since(start) != 0 {
				t.Errorf("%s after Close: %v, %v later", name, err, time.Since(start))
			}
		}
	})
}
