package clienttest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// holdIn starts c.Hold of k as waiter name, whose fn records its turn in o.
func holdIn(t *testing.T, ctx context.Context, c *leasehold.Client, k, name string, o *order, done chan<- got) {
	go func() {
		var fence int64
		err := c.Hold(named(ctx, name), k, ttl, func(ctx context.Context, l *leasehold.Lease) error {
			fence = l.Fence()
			o.enter(t, name, l.Fence())
			time.Sleep(5 * time.Millisecond)
			o.leave()
			return nil
		})
		done <- got{name: name, fence: fence, err: err, at: time.Now()}
	}()
}

// A Client's goroutines, arriving 30 ms apart while another Client holds the
// key, all calling Hold, are served in arrival order, round after round.
func testHoldOrderOneClient(t *testing.T, newStore func(*testing.T) driver.Store) {
	j := newJoins()
	c := client(t, newStore(t), longBackoff, j.observer(), leasehold.WithObserver(leasehold.Observer{
		OnAcquireStart: func(ctx context.Context, _ leasehold.Event) {
			if name, _ := ctx.Value(waiterName{}).(string); name != "" {
				close(j.ch("start " + name))
			}
		}}))
	holder := client(t, newStore(t))
	k := key(t)
	for round := range 3 {
		h, err := holder.TryAcquire(t.Context(), k, ttl)
		fatalIf(t, "TryAcquire", err)
		o := &order{}
		done := make(chan got, 3)
		names := []string{"G1", "G2", "G3"}
		for _, n := range names {
			name := n + "-" + string(rune('a'+round))
			holdIn(t, t.Context(), c, k, name, o, done)
			<-j.ch("start " + name)
			time.Sleep(30 * time.Millisecond)
		}
		fatalIf(t, "holder's Release", h.Release(t.Context()))
		for range names {
			if r := <-done; r.err != nil {
				t.Fatalf("round %d: %s: %v", round, r.name, r.err)
			}
		}
		want := []string{"G1-" + string(rune('a'+round)), "G2-" + string(rune('a'+round)), "G3-" + string(rune('a'+round))}
		if got := o.got(); !sameOrder(got, want) {
			t.Fatalf("round %d: served %v, want arrival order %v", round, got, want)
		}
	}
}

// Waiters of six Clients (six processes' worth), each arriving at least
// 1 ms after the one before had joined the store's queue, are served in
// arrival order; each is woken by the release before its turn (an hour of
// backoff: nothing else moves them).
func testAcquireOrderAcrossClients(t *testing.T, newStore func(*testing.T) driver.Store) {
	const n = 6
	j := newJoins()
	holder := client(t, newStore(t))
	k := key(t)
	h, err := holder.TryAcquire(t.Context(), k, ttl)
	fatalIf(t, "TryAcquire", err)
	o := &order{}
	done := make(chan got, n)
	var want []string
	for i := range n {
		name := string(rune('A' + i))
		want = append(want, name)
		c := client(t, newStore(t), longBackoff, j.observer())
		go func() {
			l, err := c.Acquire(named(t.Context(), name), k, ttl)
			if err != nil {
				done <- got{name: name, err: err}
				return
			}
			o.enter(t, name, l.Fence())
			time.Sleep(5 * time.Millisecond)
			o.leave()
			done <- got{name: name, fence: l.Fence(), err: l.Release(t.Context()), at: time.Now()}
		}()
		j.wait(t, name)
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	fatalIf(t, "holder's Release", h.Release(t.Context()))
	for range n {
		select {
		case r := <-done:
			if r.err != nil {
				t.Fatalf("%s: %v", r.name, r.err)
			}
		case <-time.After(wakeBound):
			t.Fatalf("served %v in %v, then none: a wake-up was lost", o.got(), wakeBound)
		}
	}
	if got := o.got(); !sameOrder(got, want) {
		t.Fatalf("served %v, want arrival order %v", got, want)
	}
	t.Logf("%d hand-offs across Clients in %v", n, time.Since(start))
}

// Client A's two goroutines and Client B's one, arriving A1, A2, B3 30 ms
// apart while a fourth Client holds the key, all calling Hold, get it in
// arrival order in every round: A's second goroutine does not wait behind
// its first in process while B's joins the store's queue.
func testHoldOrderAcrossClients(t *testing.T, newStore func(*testing.T) driver.Store) {
	j := newJoins()
	a := client(t, newStore(t), longBackoff, j.observer())
	b := client(t, newStore(t), longBackoff, j.observer())
	holder := client(t, newStore(t))
	k := key(t)
	for round := range 4 {
		h, err := holder.TryAcquire(t.Context(), k, ttl)
		fatalIf(t, "TryAcquire", err)
		o := &order{}
		done := make(chan got, 3)
		sfx := "-" + string(rune('a'+round))
		want := []string{"A1" + sfx, "A2" + sfx, "B3" + sfx}
		for i, c := range []*leasehold.Client{a, a, b} {
			holdIn(t, t.Context(), c, k, want[i], o, done)
			j.wait(t, want[i])
			time.Sleep(30 * time.Millisecond)
		}
		fatalIf(t, "holder's Release", h.Release(t.Context()))
		for range want {
			select {
			case r := <-done:
				if r.err != nil {
					t.Fatalf("round %d: %s: %v", round, r.name, r.err)
				}
			case <-time.After(wakeBound):
				t.Fatalf("round %d: served %v, then none in %v: a wake-up was lost", round, o.got(), wakeBound)
			}
		}
		if got := o.got(); !sameOrder(got, want) {
			t.Fatalf("round %d: served %v, want arrival order %v", round, got, want)
		}
	}
}

// A waiter that crashed while queued (its entry made by the store call a
// Client would make, then never refreshed nor taken out) holds the queue
// up for at most its stay: the live waiter behind it gets the key.
func testDeadHead(t *testing.T, newStore func(*testing.T) driver.Store) {
	const stay = time.Second
	raw := newStore(t)
	q := raw.(driver.Queuer)
	holder := client(t, newStore(t))
	k := key(t)
	h, err := holder.TryAcquire(t.Context(), k, ttl)
	fatalIf(t, "TryAcquire", err)
	if _, err := q.AcquireQueued(t.Context(), k, leasehold.NewToken(), ttl, stay); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("the dead waiter's join: %v, want ErrNotAcquired", err)
	}
	j := newJoins()
	live := client(t, newStore(t), j.observer())
	done := make(chan got, 1)
	go func() {
		l, err := live.Acquire(named(t.Context(), "live"), k, ttl)
		if err == nil {
			err = l.Release(t.Context())
		}
		done <- got{err: err, at: time.Now()}
	}()
	j.wait(t, "live")
	start := time.Now()
	fatalIf(t, "holder's Release", h.Release(t.Context()))
	select {
	case r := <-done:
		fatalIf(t, "the live waiter", r.err)
		t.Logf("the live waiter got the key %v after the release (the dead head's stay: %v)", r.at.Sub(start), stay)
	case <-time.After(wakeBound):
		t.Fatalf("the live waiter behind a dead head had no key %v after the release", wakeBound)
	}
}

// crashable is a store that a test can cut off, as a crashed process is:
// every call after the cut fails at once without reaching the server.
type crashable struct {
	driver.Store
	dead atomic.Bool
}

var errCrashed = errors.New("clienttest: the process crashed")

func (s *crashable) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if s.dead.Load() {
		return 0, errCrashed
	}
	return s.Store.Acquire(ctx, key, token, ttl)
}

func (s *crashable) Release(ctx context.Context, key, token string) error {
	if s.dead.Load() {
		return errCrashed
	}
	return s.Store.Release(ctx, key, token)
}

func (s *crashable) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	if s.dead.Load() {
		return 0, errCrashed
	}
	return s.Store.(driver.Queuer).AcquireQueued(ctx, key, token, ttl, stay)
}

func (s *crashable) WatchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	return s.Store.(driver.Queuer).WatchTurn(ctx, key, token)
}

func (s *crashable) LeaveQueue(ctx context.Context, key, token string) error {
	if s.dead.Load() {
		return errCrashed
	}
	return s.Store.(driver.Queuer).LeaveQueue(ctx, key, token)
}

func (s *crashable) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.Store.(driver.ReleaseNotifier).WatchReleases(ctx, key)
}

// A waiter of a Client with a 12-hour backoff crashes while queued, and an
// older Client's waiter asks the store for a 12-hour stay: neither holds the
// key up for longer than driver.MaxQueueStay after its last attempt, so
// another process's TryAcquire gets the free key within that bound.
func testCrashedWaiterLongBackoff(t *testing.T, newStore func(*testing.T) driver.Store) {
	raw := newStore(t)
	holder := client(t, newStore(t))
	k := key(t)
	h, err := holder.TryAcquire(t.Context(), k, ttl)
	fatalIf(t, "TryAcquire", err)
	// An older Client: the stay it asks for is the store's to bound.
	if _, err := raw.(driver.Queuer).AcquireQueued(t.Context(), k, leasehold.NewToken(), ttl, 12*time.Hour); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a 12-hour stay: %v, want ErrNotAcquired (queued)", err)
	}
	cs := &crashable{Store: newStore(t)}
	j := newJoins()
	crashing := client(t, cs, leasehold.WithBackoff(12*time.Hour, 12*time.Hour), j.observer())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := crashing.Acquire(named(ctx, "crashing"), k, ttl)
		done <- err
	}()
	j.wait(t, "crashing")
	joined := time.Now()
	cs.dead.Store(true) // its leave will not reach the store
	cancel()
	<-done
	fatalIf(t, "holder's Release", h.Release(t.Context()))
	other := client(t, newStore(t))
	bound := driver.MaxQueueStay + 5*time.Second // the stay, then a loaded machine's slack
	var l *leasehold.Lease
	eventually(t, time.Until(joined.Add(bound)), "TryAcquire past the crashed waiters", func() bool {
		l, err = other.TryAcquire(t.Context(), k, ttl)
		if err != nil && !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("TryAcquire: %v", err)
		}
		return err == nil
	})
	t.Logf("the key was free %v after the crashed waiter joined (stays are bounded at %v)", time.Since(joined), driver.MaxQueueStay)
	fatalIf(t, "Release", l.Release(t.Context()))
}

// A live waiter with a 12-hour backoff keeps its place while the holder
// holds for longer than driver.MaxQueueStay: it refreshes its entry, so a
// later waiter of another Client does not pass it.
func testLongBackoffKeepsPlace(t *testing.T, newStore func(*testing.T) driver.Store) {
	j := newJoins()
	holder := client(t, newStore(t))
	patient := client(t, newStore(t), leasehold.WithBackoff(12*time.Hour, 12*time.Hour), j.observer())
	later := client(t, newStore(t), j.observer())
	k := key(t)
	h, err := holder.TryAcquire(t.Context(), k, ttl)
	fatalIf(t, "TryAcquire", err)
	o := &order{}
	done := make(chan got, 2)
	for _, w := range []struct {
		c    *leasehold.Client
		name string
	}{{patient, "patient"}, {later, "later"}} {
		go func() {
			l, err := w.c.Acquire(named(t.Context(), w.name), k, ttl)
			if err == nil {
				o.enter(t, w.name, l.Fence())
				o.leave()
				err = l.Release(t.Context())
			}
			done <- got{name: w.name, err: err}
		}()
		j.wait(t, w.name)
	}
	time.Sleep(driver.MaxQueueStay + 2*time.Second)
	fatalIf(t, "holder's Release", h.Release(t.Context()))
	for range 2 {
		select {
		case r := <-done:
			fatalIf(t, r.name, r.err)
		case <-time.After(2 * wakeBound):
			t.Fatalf("served %v, then none", o.got())
		}
	}
	if got := o.got(); !sameOrder(got, []string{"patient", "later"}) {
		t.Fatalf("served %v: the waiter with a long backoff lost its place", got)
	}
}

// A waiter whose context ends leaves the store's queue: the waiter behind
// it (an hour of backoff) is woken by the next release.
func testWaiterGivesUp(t *testing.T, newStore func(*testing.T) driver.Store) {
	j := newJoins()
	var left atomic.Int64
	quitter := client(t, newStore(t), j.observer(), leasehold.WithObserver(leasehold.Observer{
		OnStoreCall: func(_ context.Context, ev leasehold.StoreCallEvent) {
			if ev.Op == "leave" && ev.Err == nil {
				left.Add(1)
			}
		}}))
	patient := client(t, newStore(t), longBackoff, j.observer())
	holder := client(t, newStore(t))
	k := key(t)
	h, err := holder.TryAcquire(t.Context(), k, ttl)
	fatalIf(t, "TryAcquire", err)
	ctx, cancel := context.WithCancel(t.Context())
	quit := make(chan error, 1)
	go func() {
		_, err := quitter.Acquire(named(ctx, "quitter"), k, ttl)
		quit <- err
	}()
	j.wait(t, "quitter")
	done := make(chan got, 1)
	go func() {
		l, err := patient.Acquire(named(t.Context(), "patient"), k, ttl)
		if err == nil {
			err = l.Release(t.Context())
		}
		done <- got{err: err, at: time.Now()}
	}()
	j.wait(t, "patient")
	cancel()
	if err := <-quit; !errors.Is(err, driver.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the quitter: %v, want ErrNotAcquired and context.Canceled", err)
	}
	if left.Load() != 1 {
		t.Fatalf("the quitter left the store's queue %d times, want 1", left.Load())
	}
	start := time.Now()
	fatalIf(t, "holder's Release", h.Release(t.Context()))
	select {
	case r := <-done:
		fatalIf(t, "the waiter behind", r.err)
		t.Logf("the waiter behind the one that left got the key %v after the release", r.at.Sub(start))
	case <-time.After(wakeBound):
		t.Fatalf("the waiter behind one that left was not woken in %v", wakeBound)
	}
}

// Thirty hand-offs from one Client's lease to another Client's waiter (an
// hour of backoff), each release a random 0 to 3 ms after the waiter
// started, so some land while it is still setting up its watch: every one
// is handed over by a wake-up.
func testNoWakeUpLost(t *testing.T, newStore func(*testing.T) driver.Store) {
	holder := client(t, newStore(t))
	waiter := client(t, newStore(t), longBackoff)
	k := key(t)
	var took []time.Duration
	for i := range 30 {
		h, err := holder.TryAcquire(t.Context(), k, ttl)
		fatalIf(t, "TryAcquire", err)
		done := make(chan got, 1)
		go func() {
			l, err := waiter.Acquire(t.Context(), k, ttl)
			if err == nil {
				err = l.Release(t.Context())
			}
			done <- got{err: err, at: time.Now()}
		}()
		time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
		start := time.Now()
		fatalIf(t, "Release", h.Release(t.Context()))
		select {
		case r := <-done:
			fatalIf(t, "waiter", r.err)
			took = append(took, r.at.Sub(start))
		case <-time.After(wakeBound):
			t.Fatalf("hand-off %d: the waiter was not woken in %v", i, wakeBound)
		}
	}
	t.Logf("release → waiter's lease, 30 hand-offs: %v", summary(took))
}

// Eight goroutines of one Client (an hour of backoff) take turns on a key
// for 200 critical sections: each hand-off is made in process by the
// releasing Client, never by the backoff, at about one store acquire (or
// hand-off) a section.
func testLocalHandOff(t *testing.T, newStore func(*testing.T) driver.Store) {
	const goroutines, sections = 8, 200
	var calls atomic.Int64
	c := client(t, newStore(t), longBackoff, leasehold.WithObserver(leasehold.Observer{
		OnStoreCall: func(_ context.Context, ev leasehold.StoreCallEvent) {
			if ev.Op == "acquire" || ev.Op == "handoff" {
				calls.Add(1)
			}
		}}))
	k := key(t)
	var (
		left   atomic.Int64
		wg     sync.WaitGroup
		inside atomic.Int32
	)
	left.Store(sections)
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 4*wakeBound)
	defer cancel()
	for range goroutines {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				err := c.Hold(ctx, k, ttl, func(context.Context, *leasehold.Lease) error {
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders at once", n)
					}
					inside.Add(-1)
					return nil
				})
				if err != nil {
					t.Errorf("Hold: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	n := calls.Load()
	t.Logf("%d sections by %d goroutines of one Client in %v: %.2f store acquires and hand-offs a section",
		sections, goroutines, took, float64(n)/sections)
	if n > 3*sections {
		t.Errorf("%d store acquires and hand-offs for %d sections: the waiters went through the store", n, sections)
	}
}

// summary is the median and the largest of ds.
func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := append([]time.Duration(nil), ds...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return "median " + s[len(s)/2].String() + ", max " + s[len(s)-1].String()
}
