package leasehold_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// stressBudget bounds each stress test in wall time, on top of its
// iteration count, so a slow machine under -race still finishes quickly.
const stressBudget = 10 * time.Second

// stressLease is one lease under attack and the KeepAlives started on it.
type stressLease struct {
	l        *leasehold.Lease
	mu       sync.Mutex
	keepers  []*leasehold.KeepAlive
	released atomic.Int32 // Release calls that returned nil
}

func (s *stressLease) add(k *leasehold.KeepAlive) {
	s.mu.Lock()
	s.keepers = append(s.keepers, k)
	s.mu.Unlock()
}

// last is the KeepAlive started last, or nil.
func (s *stressLease) last() *leasehold.KeepAlive {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.keepers) == 0 {
		return nil
	}
	return s.keepers[len(s.keepers)-1]
}

func (s *stressLease) all() []*leasehold.KeepAlive {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*leasehold.KeepAlive(nil), s.keepers...)
}

// renewFast makes KeepAlives renew every millisecond, so renewals are in
// flight while the other calls race them.
var renewFast = leasehold.WithRenewInterval(time.Millisecond)

// leaseOps are the public calls on one Lease and its KeepAlive.
var leaseOps = []struct {
	name string
	do   func(t *testing.T, s *stressLease)
}{
	{"Release", func(t *testing.T, s *stressLease) {
		switch err := s.l.Release(t.Context()); {
		case err == nil:
			s.released.Add(1)
		case !errors.Is(err, leasehold.ErrNotOwned):
			t.Errorf("Release: %v", err)
		}
	}},
	{"Renew", func(t *testing.T, s *stressLease) { _ = s.l.Renew(t.Context(), ttl) }},
	{"KeepAlive", func(t *testing.T, s *stressLease) {
		if k, err := s.l.KeepAlive(t.Context(), renewFast); err == nil {
			s.add(k)
		}
	}},
	{"KeepAlive until its ctx ends", func(t *testing.T, s *stressLease) {
		ctx, cancel := context.WithCancel(t.Context())
		if k, err := s.l.KeepAlive(ctx, renewFast); err == nil {
			s.add(k)
		}
		cancel()
	}},
	{"Stop", func(t *testing.T, s *stressLease) { s.last().Stop() }},
	{"Context", func(t *testing.T, s *stressLease) { _ = s.last().Context().Err() }},
	{"Cause", func(t *testing.T, s *stressLease) {
		if cause := context.Cause(s.last().Context()); errors.Is(cause, leasehold.ErrAbandoned) || errors.Is(cause, leasehold.ErrNotOwned) {
			t.Errorf("Context's cause: %v", cause)
		}
	}},
	{"String", func(t *testing.T, s *stressLease) { _ = s.l.String() }},
	{"accessors", func(t *testing.T, s *stressLease) {
		_, _, _, _ = s.l.Key(), s.l.Token(), s.l.Fence(), s.l.TTL()
		slog.New(slog.DiscardHandler).Info("x", "lease", s.l)
	}},
}

// Every pair of public calls on one lease (and its KeepAlive), run at once,
// many times, under -race: no panic, at most one Release succeeds, at most
// one KeepAlive runs at a time, no wrong-owner or abandon event (all the
// racing is the owner's own), one release event per released lease, and
// when another owner gets the key every KeepAlive of the old lease already
// has its Context cancelled.
func TestEveryPairOfLeaseCallsRaces(t *testing.T) {
	const rounds = 60 // per pair
	mem := memstore.New()
	rec := &recorder{}
	c := leasehold.New(yieldingNotifier{yieldingStore{mem}, mem}, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()))
	other := leasehold.New(mem, leasehold.WithLogger(quietLogger()))
	start, n := time.Now(), 0
	for i, a := range leaseOps {
		for _, b := range leaseOps[i:] {
			for round := 0; round < rounds && time.Since(start) < stressBudget; round++ {
				n++
				raceLeaseCalls(t, c, other, fmt.Sprintf("stress:%s:%s:%d", a.name, b.name, round), round%2 == 0, a.do, b.do)
				if t.Failed() {
					t.Fatalf("%s × %s, round %d", a.name, b.name, round)
				}
			}
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.notOwned) != 0 || len(rec.abandons) != 0 {
		t.Errorf("%d not-owned and %d abandon events from the owner's own calls", len(rec.notOwned), len(rec.abandons))
	}
	perLease := make(map[leasehold.Event]int)
	for _, e := range rec.releases {
		if perLease[e.Event]++; perLease[e.Event] > 1 {
			t.Errorf("%s fence %d: %d release events", e.Key, e.Fence, perLease[e.Event])
		}
	}
	if len(perLease) != n {
		t.Errorf("%d leases ended with a release event, want all %d", len(perLease), n)
	}
	t.Logf("%d rounds in %v", n, time.Since(start).Round(time.Millisecond))
}

// raceLeaseCalls runs a and b at once on a fresh lease of key (with a
// KeepAlive already running when withKeeper), while another Client waits
// for the key, then checks the invariants and cleans up.
func raceLeaseCalls(t *testing.T, c, other *leasehold.Client, key string, withKeeper bool, a, b func(*testing.T, *stressLease)) {
	l, err := c.TryAcquire(t.Context(), key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	s := &stressLease{l: l}
	if withKeeper {
		k, err := l.KeepAlive(t.Context(), renewFast)
		if err != nil {
			t.Fatal(err)
		}
		s.add(k)
	}
	// The next owner: woken by the release, it checks that every KeepAlive
	// of the old lease was told before it got the key.
	ictx, stopIntruder := context.WithCancel(t.Context())
	intruded := make(chan bool, 1)
	go func() {
		next, err := other.Acquire(ictx, key, ttl)
		if err != nil {
			intruded <- false
			return
		}
		for _, k := range s.all() {
			if k.Context().Err() == nil {
				t.Errorf("%s: a new owner holds the key while a KeepAlive of the old one is live", key)
			}
		}
		_ = next.Release(context.Background())
		intruded <- true
	}()

	var wg sync.WaitGroup
	ready := make(chan struct{})
	for _, op := range []func(*testing.T, *stressLease){a, b} {
		wg.Go(func() {
			<-ready
			op(t, s)
		})
	}
	close(ready)
	wg.Wait()

	released := s.released.Load()
	if released > 1 {
		t.Errorf("%s: %d Releases succeeded", key, released)
	}
	running := 0
	for _, k := range s.all() {
		if k.Context().Err() == nil {
			running++
		}
		if released == 1 && k.Context().Err() == nil {
			t.Errorf("%s: released, but a KeepAlive's Context is live", key)
		}
	}
	if running > 1 {
		t.Errorf("%s: %d KeepAlives running at once", key, running)
	}
	if released == 0 {
		if info, _ := c.Store().Inspect(t.Context(), key); info.Token != l.Token() {
			t.Errorf("%s: not released, but the key is %+v", key, info)
		}
	}
	for _, k := range s.all() {
		k.Stop()
	}
	if released == 0 {
		if err := l.Release(t.Context()); err != nil {
			t.Errorf("%s: the clean-up Release: %v", key, err)
		}
	}
	if !<-intruded {
		stopIntruder()
		t.Errorf("%s: the next owner never got the released key", key)
	}
	stopIntruder()
}

// yieldingNotifier is yieldingStore with the memstore's release
// notifications, so the next owner is woken the moment the key is freed.
type yieldingNotifier struct {
	yieldingStore
	n driver.ReleaseNotifier
}

func (y yieldingNotifier) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return y.n.WatchReleases(ctx, key)
}

// Many goroutines of one Client mix every way of taking a few keys
// (TryAcquire, Acquire, Hold, Hold with a wait budget, with and without a
// Renewer) and of giving them back (Release, KeepAlive then Release, Hold's
// own release), under -race: one owner per key at a time, fences rising per
// key, every ownership ended with exactly one release event, no wrong-owner
// event, and no goroutine left behind.
func TestOneClientUnderConcurrentUse(t *testing.T) {
	const workers, rounds = 8, 1000
	keys := []string{"jobs:1", "jobs:2", "jobs:3"}
	mem := memstore.New()
	rec := &recorder{}
	c := leasehold.New(mem, leasehold.WithObserver(observerOf(rec)), leasehold.WithLogger(quietLogger()),
		leasehold.WithBackoff(time.Millisecond, 5*time.Millisecond))
	var (
		inside [3]atomic.Int32
		fences [3]atomic.Int64
		owned  atomic.Int64
		wg     sync.WaitGroup
	)
	ctx, start := t.Context(), time.Now()
	enter := func(i int, l *leasehold.Lease) {
		if n := inside[i].Add(1); n != 1 {
			t.Errorf("%s: %d owners at once", keys[i], n)
		}
		if f := fences[i].Swap(l.Fence()); f >= l.Fence() {
			t.Errorf("%s: fence %d after %d", keys[i], l.Fence(), f)
		}
		owned.Add(1)
	}
	leave := func(i int) { inside[i].Add(-1) }
	critical := func(i int) func(context.Context, *leasehold.Lease) error {
		return func(_ context.Context, l *leasehold.Lease) error {
			enter(i, l)
			leave(i)
			return nil
		}
	}
	for w := range workers {
		wg.Go(func() {
			for round := range rounds {
				if time.Since(start) > stressBudget {
					return
				}
				i := (w + round) % len(keys)
				var err error
				switch (w + round) % 6 {
				case 0:
					var l *leasehold.Lease
					if l, err = c.TryAcquire(ctx, keys[i], ttl); err == nil {
						enter(i, l)
						leave(i)
						err = l.Release(ctx)
					} else if errors.Is(err, leasehold.ErrNotAcquired) {
						err = nil
					}
				case 1:
					var l *leasehold.Lease
					if l, err = c.Acquire(ctx, keys[i], ttl); err == nil {
						enter(i, l)
						k, kerr := l.KeepAlive(ctx, renewFast)
						leave(i)
						// Release may be given the KeepAlive's own Context.
						err = errors.Join(kerr, l.Release(k.Context()))
					}
				case 2:
					err = c.Hold(ctx, keys[i], ttl, critical(i), renewFast)
				case 3:
					err = c.Hold(ctx, keys[i], ttl, critical(i), leasehold.WithWaitBudget(stressBudget))
				case 4:
					err = c.Hold(ctx, keys[i], ttl, critical(i), renewFast)
				case 5:
					var l *leasehold.Lease
					if l, err = c.Acquire(ctx, keys[i], ttl); err == nil {
						enter(i, l)
						kctx, cancel := context.WithCancel(ctx)
						_, kerr := l.KeepAlive(kctx, renewFast)
						cancel() // ends the KeepAlive
						leave(i)
						err = errors.Join(kerr, l.Release(ctx))
					}
				}
				if err != nil {
					t.Errorf("worker %d round %d: %v", w, round, err)
				}
			}
		})
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// A KeepAlive's goroutine that closed its done channel may still be on
	// its way out; give it a bounded moment, as goleak does.
	n := renewalGoroutines()
	for i := 0; i < 100 && n > 0; i++ {
		time.Sleep(time.Millisecond)
		n = renewalGoroutines()
	}
	if n != 0 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d renewal goroutines left:\n%s", n, buf[:runtime.Stack(buf, true)])
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.notOwned) != 0 || len(rec.abandons) != 0 {
		t.Errorf("%d not-owned and %d abandon events", len(rec.notOwned), len(rec.abandons))
	}
	if int64(len(rec.releases)) != owned.Load() {
		t.Errorf("%d ownerships, %d release events", owned.Load(), len(rec.releases))
	}
	t.Logf("%d ownerships", owned.Load())
}
