package leasehold_test

import (
	"context"
	"errors"
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
				err := c.RunLoop(ctx, "loops:sweep", interval, func(ctx context.Context) error {
					l, ok := leasehold.LeaseFromContext(ctx)
					if !ok {
						t.Error("no lease in the tick's context")
					}
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
			_ = c.RunLoop(ownerCtx, "loops:replay", interval, func(ctx context.Context) error {
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
				_ = c.RunLoop(ctx, "loops:replay", interval, func(ctx context.Context) error {
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

func startCandidates(t *testing.T, mem *memstore.Store, n int, cfg leasehold.LeaderConfig) []*candidate {
	cands := make([]*candidate, n)
	for i := range cands {
		cd := &candidate{id: i, store: &faultyStore{Store: mem}, stopped: make(chan time.Time, 16), started: make(chan time.Time, 16)}
		c := leasehold.New(cd.store, leasehold.WithLogger(quietLogger()))
		ctx, cancel := context.WithCancel(t.Context())
		cd.cancel = cancel
		cfg := cfg
		cfg.OnStartedLeading = func(ctx context.Context, l *leasehold.Lease) {
			cd.token.Store(l.Token())
			cd.leading.Store(true)
			cd.started <- time.Now()
			<-ctx.Done()
		}
		cfg.OnStoppedLeading = func() {
			cd.leading.Store(false)
			cd.stopped <- time.Now()
		}
		go func() { _ = c.Lead(ctx, "leader:main", cfg) }()
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
		cfg := leasehold.LeaderConfig{TTL: 10 * time.Second, RetryPeriod: 2 * time.Second, KeepLeaseOnShutdown: true}
		cands := startCandidates(t, mem, 3, cfg)
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
		// within TTL + one retry period.
		crashed := leaderOf(t, cands)
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
		if failover := successor.Sub(crashedAt); failover > cfg.TTL+cfg.RetryPeriod {
			t.Fatalf("failover took %v, want ≤ TTL + retry period (%v)", failover, cfg.TTL+cfg.RetryPeriod)
		} else {
			t.Logf("failover after a crash: %v (TTL %v)", failover, cfg.TTL)
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

// 64 goroutines, 1,000 critical sections on one key: through LocalFirst the
// store sees one acquire per section. As 64 independent waiters of one
// Client it sees about as few, since the Client queues its waiters and a
// release wakes only the head (when every waiter was woken, this run made
// about 28,000 calls). Two LocalFirsts (two processes' worth) on one store
// still exclude.
func TestLocalFirstCutsStoreTraffic(t *testing.T) {
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
	local := &countingStore{Store: mem}
	lf := localFirst{leasehold.New(local)}
	run(lf.Hold, &inside)

	// Independent waiters: Acquire and Release by hand, no local turn.
	independent := &countingStore{Store: mem}
	indep := leasehold.New(independent)
	run(func(ctx context.Context, key string, ttl time.Duration, fn func(context.Context, *leasehold.Lease) error, _ ...leasehold.HoldOption) error {
		l, err := indep.Acquire(ctx, key, ttl)
		if err != nil {
			return err
		}
		defer l.Release(ctx)
		return fn(ctx, l)
	}, &inside)

	t.Logf("store acquire calls for %d sections by %d goroutines: local-first %d, independent %d",
		sections, goroutines, local.acquires.Load(), independent.acquires.Load())
	if local.acquires.Load() != sections {
		t.Errorf("local-first made %d acquire calls, want exactly one per section (%d)", local.acquires.Load(), sections)
	}
	// A queue that starts over (it emptied while a goroutine was between
	// two sections) costs two calls: the busy attempt and the one after
	// its watch. Twice the sections is far above that and far below a herd.
	if n := independent.acquires.Load(); n < sections || n >= 2*sections {
		t.Errorf("independent waiters of one Client made %d acquire calls, want about one per section (%d to %d)", n, sections, 2*sections-1)
	}
	if lf.Len() != 0 {
		t.Errorf("%d idle keys left in the local queue", lf.Len())
	}

	// Two processes' LocalFirsts on the same store, at the same time.
	a, b := localFirst{leasehold.New(mem)}, localFirst{leasehold.New(mem)}
	var wg sync.WaitGroup
	for _, lf := range []localFirst{a, b} {
		wg.Go(func() { run(lf.Hold, &inside) })
	}
	wg.Wait()
}

func TestLocalFirstWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lf := localFirst{leasehold.New(memstore.New())}
		inFn := make(chan struct{})
		release := make(chan struct{})
		go func() {
			_ = lf.Hold(context.Background(), "k", time.Minute, func(context.Context, *leasehold.Lease) error {
				close(inFn)
				<-release
				return nil
			})
		}()
		<-inFn
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := lf.Hold(ctx, "k", time.Minute, func(context.Context, *leasehold.Lease) error { return nil })
		if !errors.Is(err, leasehold.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting for the local turn past the context: %v", err)
		}
		err = lf.Hold(t.Context(), "k", time.Minute, func(context.Context, *leasehold.Lease) error { return nil }, leasehold.WithWaitBudget(time.Second))
		if !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("waiting for the local turn past the budget: %v", err)
		}
		close(release)
		synctest.Wait()
		if lf.Len() != 0 {
			t.Fatalf("%d keys left", lf.Len())
		}
	})
}

func TestRecipesRejectBadInput(t *testing.T) {
	c := leasehold.New(memstore.New())
	tick := func(context.Context) error { return nil }
	cases := map[string]error{
		"interval":         c.RunLoop(t.Context(), "k", 0, tick),
		"tick":             c.RunLoop(t.Context(), "k", time.Second, nil),
		"key":              c.RunLoop(t.Context(), "", time.Second, tick),
		"OnStartedLeading": c.Lead(t.Context(), "k", leasehold.LeaderConfig{}),
		"release timeout": c.Lead(t.Context(), "k", leasehold.LeaderConfig{
			OnStartedLeading: func(context.Context, *leasehold.Lease) {}, ReleaseTimeout: -time.Second}),
		"wait budget": c.Hold(t.Context(), "k", time.Second, func(context.Context, *leasehold.Lease) error { return nil },
			leasehold.WithWaitBudget(-1)),
	}
	for arg, err := range cases {
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != arg {
			t.Errorf("%s: %v, want an *ArgumentError naming it", arg, err)
		}
	}
}
