package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest"
)

// replica is one process: its own connection and lock client.
func replica(t *testing.T, hooks ...*renewFaults) *leasehold.Client {
	t.Helper()
	client := singleClient(shared.Addr())
	for _, h := range hooks {
		if err := client.ScriptLoad(t.Context(), h.src).Err(); err != nil {
			t.Fatal(err)
		}
		client.AddHook(h)
	}
	return leasehold.New(newStore(t, client), leasehold.WithLogger(slog.New(slog.DiscardHandler)))
}

func TestHoldWithWaitBudgetOnRedis(t *testing.T) {
	t.Parallel()
	holderC, c := replica(t), replica(t)
	key := storetest.Key(t)
	holder, err := holderC.TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 200 * time.Millisecond
	start := time.Now()
	err = c.Hold(t.Context(), key, 10*time.Second, func(context.Context, *leasehold.Lease) error { return nil }, leasehold.WithWaitBudget(budget))
	waited := time.Since(start)
	if !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("Hold with a wait budget on a held key: %v", err)
	}
	if waited > budget+50*time.Millisecond {
		t.Errorf("busy answer after %v, want within the %v budget + 50ms", waited, budget)
	}

	// Released during the wait: acquired promptly, woken by the release.
	var released time.Time
	go func() {
		time.Sleep(100 * time.Millisecond)
		released = time.Now()
		_ = holder.Release(context.Background())
	}()
	err = c.Hold(t.Context(), key, 10*time.Second, func(context.Context, *leasehold.Lease) error {
		if lag := time.Since(released); lag > 50*time.Millisecond {
			t.Errorf("acquired %v after the release", lag)
		}
		return nil
	}, leasehold.WithWaitBudget(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
}

func TestRunLoopOnRedis(t *testing.T) {
	t.Parallel()
	const interval = 20 * time.Millisecond
	key := storetest.Key(t)
	var (
		mu   sync.Mutex
		runs []struct {
			replica    int
			fence      int64
			start, end time.Time
		}
		wg sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(t.Context(), 100*interval)
	defer cancel()
	for r := range 3 {
		c := replica(t)
		wg.Go(func() {
			_ = c.RunLoop(ctx, key, interval, func(ctx context.Context) error {
				l, _ := leasehold.LeaseFromContext(ctx)
				start := time.Now()
				time.Sleep(3 * time.Millisecond) // the tick's work
				mu.Lock()
				runs = append(runs, struct {
					replica    int
					fence      int64
					start, end time.Time
				}{r, l.Fence(), start, time.Now()})
				mu.Unlock()
				return nil
			})
		})
	}
	wg.Wait()
	if len(runs) < 20 {
		t.Fatalf("%d runs in 100 intervals", len(runs))
	}
	for i := 1; i < len(runs); i++ {
		if runs[i].start.Before(runs[i-1].end) || runs[i].fence <= runs[i-1].fence {
			t.Fatalf("run %d (replica %d, fence %d) overlaps or precedes run %d (replica %d, fence %d)",
				i, runs[i].replica, runs[i].fence, i-1, runs[i-1].replica, runs[i-1].fence)
		}
	}
	t.Logf("%d windows run by 3 replicas in 100 intervals, none twice", len(runs))
}

// The owner stops; another replica runs within 2 × interval. The interval is
// 250 ms so that the fixed costs beyond the lease (the 1 ms margin after the
// expiry Redis reports, a round trip, a scheduling delay on a loaded
// machine) stay a small share: allowed 25 ms.
func TestRunLoopTakeoverOnRedis(t *testing.T) {
	t.Parallel()
	const interval = 250 * time.Millisecond
	key := storetest.Key(t)
	owner := make(chan struct{}, 1)
	octx, kill := context.WithCancel(t.Context())
	go func() {
		_ = replica(t).RunLoop(octx, key, interval, func(context.Context) error {
			select {
			case owner <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	<-owner
	kill()
	killed := time.Now()
	next := make(chan time.Time, 1)
	nctx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() {
		_ = replica(t).RunLoop(nctx, key, interval, func(context.Context) error {
			select {
			case next <- time.Now():
			default:
			}
			return nil
		})
	}()
	moved := (<-next).Sub(killed)
	t.Logf("ownership moved %v after the owner stopped (interval %v)", moved, interval)
	if moved > 2*interval+25*time.Millisecond {
		t.Errorf("ownership moved %v after the owner stopped, want within 2 × %v (+25ms)", moved, interval)
	}
}

func TestLeaderOnRedis(t *testing.T) {
	t.Parallel()
	key := storetest.Key(t)
	cfg := leasehold.LeaderConfig{TTL: 600 * time.Millisecond, RetryPeriod: 100 * time.Millisecond, KeepLeaseOnShutdown: true}
	type cand struct {
		faults  *renewFaults
		broken  atomic.Bool
		leading atomic.Bool
		token   atomic.Value
		stopped chan struct{}
		started chan time.Time
		cancel  context.CancelFunc
	}
	cands := make([]*cand, 3)
	for i := range cands {
		cd := &cand{stopped: make(chan struct{}, 8), started: make(chan time.Time, 8)}
		cd.faults = newRenewFaults(t, func(int) string {
			if cd.broken.Load() {
				return "fail"
			}
			return ""
		})
		c := replica(t, cd.faults)
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
			cd.stopped <- struct{}{}
		}
		go func() { _ = c.Lead(ctx, key, cfg) }()
		cands[i] = cd
		defer cancel()
	}
	leader := func() *cand {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var found *cand
			n := 0
			for _, cd := range cands {
				if cd.leading.Load() {
					found, n = cd, n+1
				}
			}
			if n > 1 {
				t.Fatalf("%d leaders at once", n)
			}
			if found != nil {
				holder, _ := shared.Do("GET", key)
				if tok, _ := found.token.Load().(string); holder != tok && found.leading.Load() {
					t.Fatalf("a candidate believes it leads, Redis says the holder is %q", holder)
				}
				return found
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatal("no leader within 5 s")
		return nil
	}
	// Sample for a while: one leader, and Redis agrees.
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		leader()
	}

	// Break the leader's renewals: it steps down while Redis still holds its lease.
	l := leader()
	l.broken.Store(true)
	<-l.stopped
	if left := pttl(t, key); left <= 0 {
		t.Fatalf("the leader stepped down with PTTL %v: after its lease expired", left)
	}

	// Crash the next leader: a successor within TTL + retry period.
	var crashed *cand
	for crashed = leader(); crashed == l; crashed = leader() {
		time.Sleep(5 * time.Millisecond)
	}
	crashedAt := time.Now()
	crashed.cancel()
	for {
		var next time.Time
		for _, cd := range cands {
			if cd == crashed {
				continue
			}
			select {
			case at := <-cd.started:
				if at.After(crashedAt) {
					next = at
				}
			default:
			}
		}
		if !next.IsZero() {
			failover := next.Sub(crashedAt)
			t.Logf("failover after a crash: %v (TTL %v, retry %v)", failover, cfg.TTL, cfg.RetryPeriod)
			if failover > cfg.TTL+cfg.RetryPeriod {
				t.Fatalf("failover took %v, want ≤ %v", failover, cfg.TTL+cfg.RetryPeriod)
			}
			return
		}
		if time.Since(crashedAt) > 5*time.Second {
			t.Fatal("no successor within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two processes, each with local-first queues of 16 goroutines, on one key:
// exclusion holds across them.
func TestLocalFirstAcrossClientsOnRedis(t *testing.T) {
	t.Parallel()
	key := storetest.Key(t)
	var inside atomic.Int32
	var sections atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		lf := replica(t)
		for range 16 {
			wg.Go(func() {
				for range 10 {
					err := lf.Hold(t.Context(), key, time.Minute, func(context.Context, *leasehold.Lease) error {
						if n := inside.Add(1); n != 1 {
							t.Errorf("%d holders at once", n)
						}
						sections.Add(1)
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
	}
	wg.Wait()
	if sections.Load() != 320 {
		t.Fatalf("%d sections ran, want 320", sections.Load())
	}
}
