package redisstore_test

// Regression tests on a real redis-server for the core's handling of one
// lease: manual renewals racing a KeepAlive, deadlines that end in socket
// timeouts, nil leases, the order of cancel and release, lost releases, and
// a panicking critical section (issue 13, core items).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// faultStore is the Redis store with faults scripted at its boundary: each
// hook, when set, decides what happens to the nth call of its operation,
// and call makes the real call to Redis. Faults are injected around the
// store rather than in go-redis, so the tests do not depend on the scripts'
// sources. Its other abilities (release notifications) are the store's.
type faultStore struct {
	*redisstore.Store
	acquire func(n int, call func() (int64, error)) (int64, error)
	release func(n int, call func() error) error
	renew   func(n int, ttl time.Duration, call func() error) error

	mu     sync.Mutex
	counts map[string]int
}

func (s *faultStore) next(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = make(map[string]int)
	}
	s.counts[op]++
	return s.counts[op]
}

func (s *faultStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[op]
}

func (s *faultStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	call := func() (int64, error) { return s.Store.Acquire(ctx, key, token, ttl) }
	if n := s.next("acquire"); s.acquire != nil {
		return s.acquire(n, call)
	}
	return call()
}

func (s *faultStore) Release(ctx context.Context, key, token string) error {
	call := func() error { return s.Store.Release(ctx, key, token) }
	if n := s.next("release"); s.release != nil {
		return s.release(n, call)
	}
	return call()
}

func (s *faultStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	call := func() error { return s.Store.Renew(ctx, key, token, ttl) }
	if n := s.next("renew"); s.renew != nil {
		return s.renew(n, ttl, call)
	}
	return call()
}

var errDropped = errors.New("injected: connection reset")

// dropFirst loses the first call's request: it never reaches Redis.
func dropFirst(n int, call func() error) error {
	if n == 1 {
		return errDropped
	}
	return call()
}

// newFaultStore wraps a Store on the shared server.
func newFaultStore(t *testing.T) *faultStore {
	return &faultStore{Store: newStore(t, singleClient(shared.Addr()))}
}

// clientOf is a Client on s reporting to obs and logging to logs (both
// optional).
func clientOf(s driver.Store, obs *events, logs slog.Handler) *leasehold.Client {
	if logs == nil {
		logs = slog.DiscardHandler
	}
	opts := []leasehold.Option{leasehold.WithLogger(slog.New(logs))}
	if obs != nil {
		opts = append(opts, leasehold.WithObserver(obs.observer()))
	}
	return leasehold.New(s, opts...)
}

// events records what the core reports.
type events struct {
	mu       sync.Mutex
	results  map[leasehold.AcquireResult]int
	notOwned int
	releases int
	abandons int
	failures int
}

func (e *events) OnAcquire(ev leasehold.AcquireEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.results == nil {
		e.results = make(map[leasehold.AcquireResult]int)
	}
	e.results[ev.Result]++
}
func (e *events) OnNotOwned(leasehold.NotOwnedEvent) { e.mu.Lock(); e.notOwned++; e.mu.Unlock() }
func (e *events) OnRelease(leasehold.ReleaseEvent)   { e.mu.Lock(); e.releases++; e.mu.Unlock() }
func (e *events) OnAbandon(leasehold.AbandonEvent)   { e.mu.Lock(); e.abandons++; e.mu.Unlock() }
func (e *events) OnReleaseFailure(leasehold.ReleaseFailureEvent) {
	e.mu.Lock()
	e.failures++
	e.mu.Unlock()
}

// observer wires e's methods into an Observer.
func (e *events) observer() leasehold.Observer {
	return leasehold.Observer{
		OnAcquire:        func(_ context.Context, ev leasehold.AcquireEvent) { e.OnAcquire(ev) },
		OnNotOwned:       func(_ context.Context, ev leasehold.NotOwnedEvent) { e.OnNotOwned(ev) },
		OnRelease:        func(_ context.Context, ev leasehold.ReleaseEvent) { e.OnRelease(ev) },
		OnAbandon:        func(_ context.Context, ev leasehold.AbandonEvent) { e.OnAbandon(ev) },
		OnReleaseFailure: func(_ context.Context, ev leasehold.ReleaseFailureEvent) { e.OnReleaseFailure(ev) },
	}
}

func (e *events) snapshot() events {
	e.mu.Lock()
	defer e.mu.Unlock()
	return events{notOwned: e.notOwned, releases: e.releases, abandons: e.abandons, failures: e.failures}
}

// warnLog keeps the messages logged at WARN and above.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnLog) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}
func (w *warnLog) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnLog) WithGroup(string) slog.Handler      { return w }
func (w *warnLog) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

func exists(t *testing.T, key string) bool {
	t.Helper()
	n, err := shared.Do("EXISTS", key)
	if err != nil {
		t.Fatal(err)
	}
	return n != "0"
}

// Item 7. A manual Renew to a short TTL is held on its way to Redis while a
// KeepAlive starts. Whichever order they land in, once the short TTL has run
// out Redis must not hand the key to another owner while the KeepAlive's
// Context says it is still ours.
func TestManualRenewDoesNotRaceAKeepAliveOnRedis(t *testing.T) {
	t.Parallel()
	const short = 300 * time.Millisecond
	arrived, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs := newFaultStore(t)
	fs.renew = func(n int, ttl time.Duration, call func() error) error {
		if ttl == short { // the manual renewal, held on its way to Redis
			once.Do(func() {
				close(arrived)
				<-gate
			})
		}
		return call()
	}
	obs := &events{}
	c := clientOf(fs, obs, nil)
	other := quietClient(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	l, err := c.TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	renewed := make(chan error, 1)
	go func() { renewed <- l.Renew(t.Context(), short) }()
	<-arrived
	started := make(chan *leasehold.KeepAlive, 1)
	go func() {
		k, err := l.KeepAlive(t.Context())
		if err != nil {
			t.Error(err)
		}
		started <- k
	}()
	// Open the gate once the KeepAlive has started (it did not wait for the
	// renewal: the old bug) or after a moment (it waits, as it must). The
	// moment only gives the old bug its chance; the check below holds
	// whichever comes first.
	var k *leasehold.KeepAlive
	select {
	case k = <-started:
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	if err := <-renewed; err != nil {
		t.Fatalf("manual Renew: %v", err)
	}
	if k == nil {
		k = <-started
	}
	defer k.Stop()
	// Another client waits for the key for three short TTLs (it is woken
	// when the holder's TTL runs out): the key must stay ours.
	actx, cancel := context.WithTimeout(t.Context(), 3*short)
	defer cancel()
	if next, err := other.Acquire(actx, key, time.Minute); err == nil {
		if k.Context().Err() == nil {
			t.Fatal("another owner took the key while the KeepAlive's Context said it was still ours")
		}
		_ = next.Release(t.Context())
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if ev := obs.snapshot(); ev.abandons != 0 || ev.notOwned != 0 {
		t.Errorf("%d abandons and %d not-owned events: the KeepAlive renewed on the wrong TTL", ev.abandons, ev.notOwned)
	}
}

// Item 8. Three thousand acquires with deadlines of 0 to 2 ms: a socket
// timeout at the deadline must never come back bare. Acquire gives
// ErrNotAcquired joined with context.DeadlineExceeded, TryAcquire
// context.DeadlineExceeded (never ErrNotAcquired: no answer says nothing
// about the key), and the Observer counts no store failure.
func TestShortDeadlinesNeverReturnASocketErrorOnRedis(t *testing.T) {
	t.Parallel()
	const calls = 3000
	obs := &events{}
	c := leasehold.New(newStore(t, singleClient(shared.Addr())), leasehold.WithObserver(obs.observer()), leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	base := storetest.Key(t)
	start, acquired, timedOut := time.Now(), 0, 0
	for i := 0; i < calls && time.Since(start) < time.Minute; i++ {
		key := fmt.Sprintf("%s:%d", base, i)
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i%2001)*time.Microsecond)
		var (
			l   *leasehold.Lease
			err error
		)
		if i%2 == 0 {
			l, err = c.Acquire(ctx, key, time.Minute)
		} else {
			l, err = c.TryAcquire(ctx, key, time.Minute)
		}
		cancel()
		switch {
		case err == nil:
			acquired++
			if rerr := l.Release(t.Context()); rerr != nil {
				t.Fatalf("call %d: Release: %v", i, rerr)
			}
		case i%2 == 0 && errors.Is(err, leasehold.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
			timedOut++
		case i%2 == 1 && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, leasehold.ErrNotAcquired):
			timedOut++
		default:
			t.Fatalf("call %d (%s, deadline %v): %v", i, map[bool]string{true: "Acquire", false: "TryAcquire"}[i%2 == 0],
				time.Duration(i%2001)*time.Microsecond, err)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if n := obs.results[leasehold.StoreFailed]; n != 0 {
		t.Errorf("%d acquires counted as store failures", n)
	}
	if obs.results[leasehold.TimedOut] != timedOut || obs.results[leasehold.Acquired] != acquired {
		t.Errorf("observer counted %v, want %d acquired and %d timeouts", obs.results, acquired, timedOut)
	}
	t.Logf("%d acquired, %d timed out", acquired, timedOut)
}

// Item 9. The nil lease of an acquire that found the key held: every
// method answers, none panics, and the holder's key is untouched.
func TestNilLeaseOnRedis(t *testing.T) {
	t.Parallel()
	c := quietClient(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	holder, err := c.TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(t.Context(), key, time.Minute)
	if l != nil || !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: (%v, %v)", l, err)
	}
	if err := l.Release(t.Context()); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("Release: %v", err)
	}
	if err := l.Renew(t.Context(), time.Second); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("Renew: %v", err)
	}
	k, err := l.KeepAlive(t.Context())
	if k != nil || err == nil {
		t.Errorf("KeepAlive: (%v, %v)", k, err)
	}
	k.Stop()
	if k.Context().Err() == nil || k.Err() == nil || l.Key() != "" || l.Fence() != 0 {
		t.Error("a nil lease or KeepAlive looks live")
	}
	if info, err := c.Store().Inspect(t.Context(), key); err != nil || info.Token != holder.Token() {
		t.Fatalf("the holder's key is %+v (%v)", info, err)
	}
}

// Item 10. Release of a lease under a KeepAlive: the moment Redis has
// deleted the key (before Release has returned), another client takes the
// key, and the old holder's Context is already cancelled. Release is given
// the KeepAlive's own Context.
func TestReleaseCancelsTheKeepAliveBeforeTheKeyIsFreeOnRedis(t *testing.T) {
	t.Parallel()
	other := quietClient(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	var (
		k       *leasehold.KeepAlive
		checked bool
	)
	fs := newFaultStore(t)
	fs.release = func(n int, call func() error) error {
		err := call()
		if n == 1 && err == nil {
			checked = true
			next, aerr := other.TryAcquire(context.Background(), key, time.Minute)
			if aerr != nil {
				t.Errorf("the next owner could not take the released key: %v", aerr)
			} else {
				_ = next.Release(context.Background())
			}
			if k.Context().Err() == nil {
				t.Error("another owner holds the key while the old holder's Context is live")
			}
		}
		return err
	}
	c := clientOf(fs, nil, nil)
	l, err := c.TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if k, err = l.KeepAlive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(k.Context()); err != nil {
		t.Fatalf("Release with the KeepAlive's Context: %v", err)
	}
	if !checked {
		t.Fatal("the release never ran")
	}
}

// Item 11. The first release is lost, its request (failed before it reaches
// Redis) or its reply (the proxy cuts it after Redis ran the script).
// Release retries, returns nil, the key is free when it returns, and
// nothing is reported as a wrong-owner release.
func TestLostReleaseIsRetriedOnRedis(t *testing.T) {
	t.Parallel()
	t.Run("request lost", func(t *testing.T) {
		fs := newFaultStore(t)
		fs.release = dropFirst
		obs, logs := &events{}, &warnLog{}
		c := clientOf(fs, obs, logs)
		key := storetest.Key(t)
		l, err := c.TryAcquire(t.Context(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if exists(t, key) {
			t.Fatal("the key is still held after Release returned")
		}
		if ev := obs.snapshot(); fs.count("release") != 2 || ev.notOwned != 0 || ev.releases != 1 {
			t.Errorf("%d release attempts, %d not-owned and %d release events; want 2, 0, 1", fs.count("release"), ev.notOwned, ev.releases)
		}
		if w := logs.list(); len(w) != 0 {
			t.Errorf("warnings: %q", w)
		}
	})
	t.Run("reply lost", func(t *testing.T) {
		proxy := testserver.StartProxy(t, shared.Addr())
		obs, logs := &events{}, &warnLog{}
		c := leasehold.New(newStore(t, singleClient(proxy.Addr())), leasehold.WithObserver(obs.observer()), leasehold.WithLogger(slog.New(logs)))
		warmUp(t, c)
		key := storetest.Key(t)
		l, err := c.TryAcquire(t.Context(), key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		proxy.CutNextReply()
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("Release whose reply was lost: %v", err)
		}
		if exists(t, key) {
			t.Fatal("the key is still held after Release returned")
		}
		if ev := obs.snapshot(); ev.notOwned != 0 || ev.releases != 2 { // warmUp's and ours
			t.Errorf("%d not-owned and %d release events; want 0 and 2", ev.notOwned, ev.releases)
		}
		if w := logs.list(); len(w) != 0 {
			t.Errorf("warnings: %q", w)
		}
	})
	t.Run("Hold", func(t *testing.T) {
		fs := newFaultStore(t)
		fs.release = dropFirst
		obs := &events{}
		c := clientOf(fs, obs, nil)
		key := storetest.Key(t)
		if err := c.Hold(t.Context(), key, time.Minute, func(context.Context, *leasehold.Lease) error { return nil }); err != nil {
			t.Fatalf("Hold: %v", err)
		}
		if exists(t, key) {
			t.Fatal("the key is still held after Hold returned")
		}
		if ev := obs.snapshot(); ev.failures != 0 || ev.notOwned != 0 {
			t.Errorf("%d release failures and %d not-owned events, want none", ev.failures, ev.notOwned)
		}
	})
	// The clean-up after an acquire whose reply was lost: its own first
	// release is lost too, and is retried.
	t.Run("acquire clean-up", func(t *testing.T) {
		fs := newFaultStore(t)
		fs.acquire = func(n int, call func() (int64, error)) (int64, error) {
			if _, err := call(); err != nil || n > 1 {
				return 0, err
			}
			return 0, errDropped // applied by Redis, the reply lost
		}
		fs.release = dropFirst
		logs := &warnLog{}
		c := clientOf(fs, nil, logs)
		key := storetest.Key(t)
		if l, err := c.TryAcquire(t.Context(), key, time.Minute); l != nil || !errors.Is(err, errDropped) {
			t.Fatalf("TryAcquire whose reply was lost: (%v, %v), want the store's error", l, err)
		}
		if exists(t, key) {
			t.Fatal("the acquire whose reply was lost still blocks the key")
		}
		if fs.count("release") != 2 {
			t.Errorf("%d clean-up release attempts, want 2", fs.count("release"))
		}
		if w := logs.list(); len(w) != 0 {
			t.Errorf("warnings: %q", w)
		}
	})
}

// A critical section that panics on Redis: the key is released at once,
// not left for its TTL, and the panic reaches Hold's caller.
func TestHoldFnPanicReleasesOnRedis(t *testing.T) {
	t.Parallel()
	c := quietClient(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	v := func() (v any) {
		defer func() { v = recover() }()
		_ = c.Hold(t.Context(), key, time.Minute, func(context.Context, *leasehold.Lease) error { panic("boom") })
		return nil
	}()
	if v != "boom" {
		t.Fatalf("recovered %v, want fn's panic", v)
	}
	if exists(t, key) {
		t.Fatal("the key is still held after fn panicked")
	}
}
