package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
)

// renewals passes a Client's renew calls' answers to renewed.
type renewals struct{ renewed chan error }

func newRenewals() *renewals { return &renewals{renewed: make(chan error, 16)} }

func (c *renewals) observer() leasehold.Option {
	return leasehold.WithObserver(leasehold.Observer{OnStoreCall: func(_ context.Context, ev leasehold.StoreCallEvent) {
		if ev.Op == "renew" {
			select {
			case c.renewed <- ev.Err:
			default:
			}
		}
	}})
}

// waitGrantAsked waits until a waiter in key's queue has asked for a grant
// (queue.lua's "  " field), polling the queue, at most 5 s.
func waitGrantAsked(t *testing.T, key string) {
	t.Helper()
	rc := singleClient(shared.Addr())
	defer rc.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		fields, err := rc.HKeys(t.Context(), redisstore.QueueDeadlinesKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fields {
			if strings.HasPrefix(f, "  ") {
				return
			}
		}
		time.Sleep(2 * time.Millisecond) // polling the server's state, not standing in for it
	}
	t.Fatalf("no waiter of %q asked for a grant within 5 s", key)
}

// answer is an Acquire's answer.
type answer struct {
	l   *leasehold.Lease
	err error
}

// acquiring is an Acquire running on a goroutine of its own.
type acquiring chan answer

// acquireAsync starts c.Acquire(ctx, key, ttl) on a goroutine.
func acquireAsync(ctx context.Context, c *leasehold.Client, key string, ttl time.Duration) acquiring {
	got := make(acquiring, 1)
	go func() {
		l, err := c.Acquire(ctx, key, ttl)
		got <- answer{l, err}
	}()
	return got
}

// lease waits at most 10 s for the Acquire's lease, failing the test on
// an error or when there is none by then.
func (got acquiring) lease(t *testing.T) *leasehold.Lease {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.l
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the key within 10 s of the release")
		return nil
	}
}

// countedAttempts is a real Store that counts the attempts made on it as
// they start: an Observer hears of a call only once it is answered, which
// may be after the server saw it.
type countedAttempts struct {
	*redisstore.Store
	started atomic.Int64
}

func (s *countedAttempts) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	s.started.Add(1)
	return s.Store.Acquire(ctx, key, token, ttl)
}

func (s *countedAttempts) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	s.started.Add(1)
	return s.Store.AcquireQueued(ctx, key, token, ttl, stay)
}

// A waiter of another Client takes the key its holder releases from the
// release's grant, with no attempt of its own after it, and its lease is
// renewed to its TTL at once (the grant held it for the stay at most).
func TestClientTakesAGrantWithoutAnAttempt(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	const ttl = 10 * time.Second // > the waiter's stay (2.5 s by default)
	sa := newStore(t, singleClient(shared.Addr()))
	a := leasehold.New(sa)
	defer a.Close()
	calls := newRenewals()
	sb := &countedAttempts{Store: newStore(t, singleClient(shared.Addr()))}
	b := leasehold.New(sb, calls.observer())
	defer b.Close()
	held, err := a.Acquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, b, key, ttl)
	waitGrantAsked(t, key) // the server has seen the attempt that asked
	attempts := sb.started.Load()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := got.lease(t)
	defer l.Release(context.WithoutCancel(ctx))
	if n := sb.started.Load(); n != attempts {
		t.Errorf("the waiter made %d attempts after the release, want none: the grant gives it the key", n-attempts)
	}
	if l.Fence() <= held.Fence() {
		t.Errorf("the grant's fence %d is not above the holder's %d", l.Fence(), held.Fence())
	}
	select {
	case err := <-calls.renewed:
		if err != nil {
			t.Fatalf("the grant's confirming renewal: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no confirming renewal within 10 s of the grant")
	}
	info, err := sa.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != l.Fence() || info.TTL <= 5*time.Second {
		t.Errorf("after the confirming renewal: %+v; want held with fence %d and a TTL near %v", info, l.Fence(), ttl)
	}
}

// countedRenews is a real Store that counts the Renew calls made on it as
// they start.
type countedRenews struct {
	*redisstore.Store
	started atomic.Int64
}

func (s *countedRenews) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	s.started.Add(1)
	return s.Store.Renew(ctx, key, token, ttl)
}

// A lease taken by a grant and released at once, or whose Client closed at
// once, is never confirmed: its confirming renewal waits 10 ms after
// Acquire returns, and a release or Close before then makes it moot. So a
// short critical section costs a transfer across processes two round trips
// (the release that grants, the releaser's next join), not three.
func TestGrantReleasedOrClosedAtOnceSendsNoConfirmation(t *testing.T) {
	for _, end := range []string{"released", "closed"} {
		t.Run(end, func(t *testing.T) {
			ctx := t.Context()
			key := storetest.Key(t)
			const ttl = 10 * time.Second // > the waiter's stay: a grant's term is shorter than its TTL
			sa := newStore(t, singleClient(shared.Addr()))
			a := leasehold.New(sa)
			defer a.Close()
			sb := &countedRenews{Store: newStore(t, singleClient(shared.Addr()))}
			b := leasehold.New(sb)
			defer b.Close()
			held, err := a.Acquire(ctx, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			got := acquireAsync(ctx, b, key, ttl)
			waitGrantAsked(t, key)
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l := got.lease(t)
			if end == "released" {
				if err := l.Release(ctx); err != nil {
					t.Fatalf("release of the granted lease: %v", err)
				}
			} else {
				b.Close()
				defer sb.Store.Release(context.WithoutCancel(ctx), key, l.Token())
			}
			// The confirmation's timer (10 ms, the Client's
			// grantConfirmDelay) has fired well before this one; a slow
			// machine can only let a late confirmation pass unseen.
			<-time.After(500 * time.Millisecond)
			if n := sb.started.Load(); n != 0 {
				t.Errorf("%d renewals after a grant %s at once, want none", n, end)
			}
		})
	}
}

// lostWords is a Store whose grants' words never arrive, and which cancels
// a waiter's context when it looks for one, once armed.
type lostWords struct {
	*redisstore.Store
	armed  atomic.Bool
	cancel context.CancelFunc
	mu     sync.Mutex
	tokens []string
}

func (s *lostWords) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	s.mu.Lock()
	s.tokens = append(s.tokens, token)
	s.mu.Unlock()
	return s.Store.AcquireQueued(ctx, key, token, ttl, stay)
}

func (s *lostWords) Granted(key, token string) (int64, time.Time, bool) {
	if s.armed.Load() {
		s.cancel()
	}
	return 0, time.Time{}, false
}

// A waiter that gives up after a grant was made to it, unseen, gives the key
// back as it leaves (driver.Granter's Decline), to the next waiter, instead
// of leaving it held by its token for its stay.
func TestWaiterThatLeavesDeclinesAGrant(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	const ttl = 10 * time.Second
	sa := newStore(t, singleClient(shared.Addr()))
	a := leasehold.New(sa)
	defer a.Close()
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ls := &lostWords{Store: newStore(t, singleClient(shared.Addr())), cancel: cancel}
	b := leasehold.New(ls)
	defer b.Close()
	c := leasehold.New(newStore(t, singleClient(shared.Addr())))
	defer c.Close()
	held, err := a.Acquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() {
		l, err := b.Acquire(bctx, key, ttl)
		if l != nil {
			err = errors.Join(errors.New("b got the key"), l.Release(ctx))
		}
		bDone <- err
	}()
	waitGrantAsked(t, key)
	cGot := make(chan *leasehold.Lease, 1)
	var cErr atomic.Value
	go func() {
		l, err := c.Acquire(ctx, key, ttl)
		if err != nil {
			cErr.Store(err)
		}
		cGot <- l
	}()
	ls.armed.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-bDone:
		if !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("the waiter whose context ended: %v, want ErrNotAcquired", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not return within 10 s of its context's end")
	}
	info, err := sa.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	ls.mu.Lock()
	bTokens := ls.tokens
	ls.mu.Unlock()
	for _, tok := range bTokens {
		if info.Held && info.Token == tok {
			t.Fatalf("after the waiter left, the key is still held by its token (%+v)", info)
		}
	}
	select {
	case l := <-cGot:
		if l == nil {
			t.Fatalf("the next waiter: %v", cErr.Load())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second): // under the grant's 2.5 s term: the key was given back
		t.Fatal("the next waiter did not get the key within 2 s of the first one leaving")
	}
}

// Grants keep one holder at a time: Clients of their own (a Store each, so
// every transfer between them is a release's grant or an attempt) take one
// key in turns; a shared register admits a holder only with a fence above
// the last one and counts holders, and at least some turns must have come
// from grants.
func TestGrantsKeepOneHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	key := storetest.Key(t)
	const clients, turns = 6, 40
	var (
		mu        sync.Mutex
		last      int64
		holders   atomic.Int32
		attempted atomic.Int64 // attempts the store granted
		failures  = make(chan error, clients)
		wg        sync.WaitGroup
	)
	for range clients {
		c := leasehold.New(newStore(t, singleClient(shared.Addr())), leasehold.WithObserver(leasehold.Observer{
			OnStoreCall: func(_ context.Context, ev leasehold.StoreCallEvent) {
				if ev.Op == "acquire" && ev.Err == nil {
					attempted.Add(1)
				}
			},
		}))
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range turns {
				l, err := c.Acquire(ctx, key, 10*time.Second)
				if err != nil {
					failures <- err
					return
				}
				if n := holders.Add(1); n != 1 {
					failures <- errors.New("two holders at once")
				}
				mu.Lock()
				if l.Fence() <= last {
					failures <- errors.New("a fence not above the last holder's")
				}
				last = l.Fence()
				mu.Unlock()
				holders.Add(-1)
				if err := l.Release(ctx); err != nil {
					failures <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	if granted := clients*turns - int(attempted.Load()); granted <= 0 {
		t.Errorf("no turn came from a grant (%d attempts granted of %d turns)", attempted.Load(), clients*turns)
	} else {
		t.Logf("%d of %d turns came from grants", granted, clients*turns)
	}
}

// A release whose fence counter stops a new fence (not a decimal) still
// releases, grants nothing, and wakes the head, whose own attempt then
// reports the counter.
func TestReleaseGrantsNothingPastABadCounter(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	s := newStore(t, singleClient(shared.Addr()))
	turn := heldWithWatchedWaiter(t, s, key, "head", time.Minute, time.Minute)
	rc := singleClient(shared.Addr())
	defer rc.Close()
	if err := rc.Set(ctx, redisstore.FenceKey(key), "not a number", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatalf("release past a bad counter: %v", err)
	}
	waitWord(t, turn)
	if f, _, ok := s.Granted(key, "head"); ok {
		t.Fatalf("a grant past a bad counter (fence %d)", f)
	}
	if n, err := rc.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Fatalf("the key after the release: exists %d, %v; want it free", n, err)
	}
	if _, err := s.AcquireQueued(ctx, key, "head", time.Minute, time.Minute); err == nil || !strings.Contains(err.Error(), "not a decimal") {
		t.Fatalf("the head's attempt: %v, want the counter reported", err)
	}
}
