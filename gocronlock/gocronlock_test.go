package gocronlock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/gocronlock"
	"github.com/leasehold/leasehold/store/memstore"
)

// wantArg fails the test unless err is an *ArgumentError naming arg.
func wantArg(t *testing.T, what string, err error, arg string) {
	t.Helper()
	var ae *leasehold.ArgumentError
	if !errors.As(err, &ae) || ae.Arg != arg || !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("%s: %v, want an *ArgumentError naming %s", what, err, arg)
	}
}

// Every bad argument is an *ArgumentError naming it, and nothing is written.
func TestBadArguments(t *testing.T) {
	store := memstore.New()
	c := leasehold.New(store)
	defer c.Close()
	ctx := t.Context()

	_, err := gocronlock.NewLocker(nil)
	wantArg(t, "NewLocker(nil)", err, "client")
	for _, tc := range []struct {
		name string
		opt  gocronlock.LockerOption
		arg  string
	}{
		{"WithMinHold(0)", gocronlock.WithMinHold(0), "WithMinHold"},
		{"WithMinHold(-1s)", gocronlock.WithMinHold(-time.Second), "WithMinHold"},
		{"WithMinHold(1ms)", gocronlock.WithMinHold(time.Millisecond), "WithMinHold"},
		{"WithMinHold(1m), longer than the TTL", gocronlock.WithMinHold(time.Minute), "WithMinHold"},
		{"WithTTL(0)", gocronlock.WithTTL(0), "WithTTL"},
		{"WithTTL(25h)", gocronlock.WithTTL(25 * time.Hour), "WithTTL"},
		{"WithKeyPrefix with a newline", gocronlock.WithKeyPrefix("jobs\n"), "WithKeyPrefix"},
		{"WithKeyPrefix(reserved)", gocronlock.WithKeyPrefix("leasehold:"), "WithKeyPrefix"},
		{"WithKeyPrefix(600 bytes)", gocronlock.WithKeyPrefix(strings.Repeat("k", 600)), "WithKeyPrefix"},
	} {
		_, err := gocronlock.NewLocker(c, tc.opt)
		wantArg(t, tc.name, err, tc.arg)
	}

	_, err = gocronlock.NewElector(nil, "leader")
	wantArg(t, "NewElector(nil, …)", err, "client")
	_, err = gocronlock.NewElector(c, "")
	wantArg(t, `NewElector(c, "")`, err, "key")
	_, err = gocronlock.NewElector(c, "leader", gocronlock.WithTTL(-time.Second))
	wantArg(t, "NewElector(WithTTL(-1s))", err, "WithTTL")

	var nilLocker *gocronlock.Locker
	_, err = nilLocker.Lock(ctx, "job")
	wantArg(t, "nil Locker: Lock", err, "Locker")
	lctx, _, err := nilLocker.Lease("job")
	wantArg(t, "nil Locker: Lease", err, "Locker")
	if lctx.Err() == nil {
		t.Error("nil Locker: Lease's context is not done")
	}
	var nilElector *gocronlock.Elector
	wantArg(t, "nil Elector: IsLeader", nilElector.IsLeader(ctx), "Elector")
	wantArg(t, "nil Elector: Close", nilElector.Close(), "Elector")

	l, err := gocronlock.NewLocker(c)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Lock(ctx, "")
	wantArg(t, `Lock(ctx, "")`, err, "job")
	_, err = l.Lock(nil, "job") //nolint:staticcheck // the nil context is the point
	wantArg(t, "Lock(nil, …)", err, "ctx")
	_, err = l.Lock(ctx, "job\x00")
	wantArg(t, `Lock(ctx, "job\x00")`, err, "key")
	_, _, err = l.Lease("")
	wantArg(t, `Lease("")`, err, "job")

	e, err := gocronlock.NewElector(c, "leader")
	if err != nil {
		t.Fatal(err)
	}
	lctx, _, err = e.Lease(nil) //nolint:staticcheck // the nil context is the point
	wantArg(t, "Elector.Lease(nil)", err, "ctx")
	if lctx.Err() == nil {
		t.Error("Elector.Lease(nil): the context is not done")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Nothing was written: no key but the Elector's, released at Close.
	for _, key := range []string{"gocron:job", "gocron:job\x00", "job"} {
		if info, err := store.Inspect(ctx, strings.ToValidUTF8(key, "")); err == nil && info.Fence != 0 {
			t.Errorf("%q was written: %+v", key, info)
		}
	}
}

// An Elector on a Client that can never lead (a bad option, or closed
// before the Elector) says why in IsLeader and Lease, not only that it is
// not the leader: Lead returned at once, and its error is kept.
func TestElectorReportsWhyItCannotLead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func() *leasehold.Client
		want   func(error) bool
	}{
		{"a bad option", func() *leasehold.Client {
			return leasehold.New(memstore.New(), leasehold.WithBackoff(0, 0))
		}, func(err error) bool {
			var ae *leasehold.ArgumentError
			return errors.As(err, &ae) && ae.Arg == "WithBackoff"
		}},
		{"a closed Client", func() *leasehold.Client {
			c := leasehold.New(memstore.New())
			_ = c.Close()
			return c
		}, func(err error) bool { return errors.Is(err, leasehold.ErrClosed) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := tc.client()
				defer c.Close()
				e, err := gocronlock.NewElector(c, "leader")
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the campaign has ended
				err = e.IsLeader(t.Context())
				if !tc.want(err) || !errors.Is(err, gocronlock.ErrNotLeader) {
					t.Errorf("IsLeader = %v, want an error matching ErrNotLeader and Lead's error", err)
				}
				if _, _, err := e.Lease(t.Context()); !tc.want(err) || !errors.Is(err, gocronlock.ErrNotLeader) {
					t.Errorf("Lease = %v, want an error matching ErrNotLeader and Lead's error", err)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
	// Close is no failure: an Elector closed on a good Client is only not
	// the leader.
	c := leasehold.New(memstore.New())
	defer c.Close()
	e, err := gocronlock.NewElector(c, "leader")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.IsLeader(t.Context()); !errors.Is(err, gocronlock.ErrNotLeader) || errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "stopped") {
		t.Errorf("IsLeader after Close = %v, want ErrNotLeader alone", err)
	}
}

// inspect returns what the store knows of key.
func inspect(t *testing.T, c *leasehold.Client, key string) driver.Info {
	t.Helper()
	info, err := c.Store().Inspect(t.Context(), key)
	if err != nil {
		t.Fatalf("inspect %q: %v", key, err)
	}
	return info
}

// eventually polls cond every 5 ms until it holds, or fails the test after
// limit: for states no event tells of (a TTL running out on the server).
func eventually(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		<-tick.C
	}
	return time.Since(start)
}

// A run that ends before its minimum hold leaves the key held until the
// hold has passed since Lock, and no longer; one that ends after it
// releases the key at once.
func TestMinHold(t *testing.T) {
	const hold, ttl = 300 * time.Millisecond, time.Minute
	b := redisBackend(t)
	a, o := newNode(t, b, 0), newNode(t, b, 1)
	la, err := gocronlock.NewLocker(a.client, gocronlock.WithMinHold(hold), gocronlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	lo, err := gocronlock.NewLocker(o.client, gocronlock.WithMinHold(hold), gocronlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	start := time.Now()
	lock, _, lease := lockRun(t, ctx, la, "short")
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	info := inspect(t, a.client, "gocron:short")
	elapsed := time.Since(start)
	switch {
	case !info.Held:
		t.Fatalf("released %v after Lock, before the minimum hold %v", elapsed, hold)
	case info.TTL > hold:
		t.Errorf("kept %v more after Unlock, longer than the minimum hold %v (the TTL is %v)", info.TTL, hold, ttl)
	case elapsed+info.TTL < hold-2*time.Millisecond: // Redis's PTTL counts whole ms
		t.Errorf("held %v in all, shorter than the minimum hold %v", elapsed+info.TTL, hold)
	}
	if _, err := lo.Lock(ctx, "short"); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Errorf("another scheduler's Lock within the minimum hold: %v, want ErrNotAcquired", err)
	}
	if _, _, err := la.Lease("short"); !errors.Is(err, gocronlock.ErrNoLease) {
		t.Errorf("Lease after Unlock: %v, want ErrNoLease", err)
	}
	eventually(t, "the key frees", hold+2*time.Second, func() bool { return !inspect(t, a.client, "gocron:short").Held })
	t.Logf("the key freed %v after Lock (minimum hold %v)", time.Since(start).Round(time.Millisecond), hold)
	next, _, nextLease := lockRun(t, ctx, lo, "short")
	if nextLease.Fence() <= lease.Fence() {
		t.Errorf("fence %d after %d", nextLease.Fence(), lease.Fence())
	}
	_ = next.Unlock(ctx)

	lock, _, _ = lockRun(t, ctx, la, "long")
	time.Sleep(hold) // the job runs past its minimum hold
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if info := inspect(t, a.client, "gocron:long"); info.Held {
		t.Errorf("a run longer than the minimum hold left its key held for %v", info.TTL)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Errorf("a second Unlock: %v", err)
	}
}

// An acquire the store answers later than half the minimum hold is not a
// lock: another scheduler may have run the slot and let its hold lapse.
func TestSlowAcquireRefused(t *testing.T) {
	const hold = 300 * time.Millisecond
	b := redisBackend(t)
	n := newNode(t, b, 0)
	locker, err := gocronlock.NewLocker(n.client, gocronlock.WithMinHold(hold))
	if err != nil {
		t.Fatal(err)
	}
	n.proxy.SetLatency(hold / 2) // on the connection newNode opened
	_, err = locker.Lock(t.Context(), "slow")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "half the minimum hold") {
		t.Fatalf("Lock over a round trip of %v: %v, want a refusal naming half the minimum hold", hold, err)
	}
	if _, _, err := locker.Lease("slow"); !errors.Is(err, gocronlock.ErrNoLease) {
		t.Errorf("Lease after a refused Lock: %v, want ErrNoLease", err)
	}
	n.proxy.SetLatency(0)
	// An acquire granted after the caller gave up is released by the store's
	// client, or expires with its TTL; here it must not be held by anyone.
	eventually(t, "the key is free", 5*time.Second, func() bool { return !inspect(t, n.client, "gocron:slow").Held })
	t.Logf("refused: %v", err)
}

// lockRun locks job as gocron would, with jobCtx, and returns the run's
// lock, context and lease.
func lockRun(t *testing.T, jobCtx context.Context, l *gocronlock.Locker, job string) (gocron.Lock, context.Context, *leasehold.Lease) {
	t.Helper()
	lock, err := l.Lock(jobCtx, job)
	if err != nil {
		t.Fatalf("Lock(%q): %v", job, err)
	}
	ctx, lease, err := l.Lease(job)
	if err != nil {
		t.Fatalf("Lease(%q): %v", job, err)
	}
	return lock, ctx, lease
}

// watched is a Locker whose Unlocks are told on a channel.
type watched struct {
	*gocronlock.Locker
	unlocked chan error
}

func (w watched) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	lock, err := w.Locker.Lock(ctx, job)
	if err != nil {
		return nil, err
	}
	return watchedLock{lock, w.unlocked}, nil
}

type watchedLock struct {
	gocron.Lock
	unlocked chan error
}

func (w watchedLock) Unlock(ctx context.Context) error {
	err := w.Lock.Unlock(ctx)
	w.unlocked <- err
	return err
}

// A job that panics under gocron leaves its key held for the minimum hold,
// not for the lease's TTL.
func TestPanicInJob(t *testing.T) {
	const hold, ttl = 300 * time.Millisecond, time.Minute
	b := redisBackend(t)
	n := newNode(t, b, 0)
	locker, err := gocronlock.NewLocker(n.client, gocronlock.WithMinHold(hold), gocronlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	w := watched{locker, make(chan error, 1)}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(w))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()
	panicked := make(chan any, 1)
	var start time.Time
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()), gocron.NewTask(func() {
		_, lease, err := locker.Lease("boom")
		if err != nil {
			t.Errorf("Lease in the job: %v", err)
		}
		start = time.Now()
		panic(lease.Key())
	}), gocron.WithName("boom"), gocron.WithEventListeners(gocron.AfterJobRunsWithPanic(func(_ uuid.UUID, _ string, v any) { panicked <- v })))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if v := <-panicked; v != "gocron:boom" {
		t.Fatalf("the job panicked with %v", v)
	}
	if err := <-w.unlocked; err != nil {
		t.Fatalf("Unlock after the panic: %v", err)
	}
	switch info := inspect(t, n.client, "gocron:boom"); {
	case !info.Held && time.Since(start) < hold:
		t.Errorf("after the panic the key was released before the minimum hold %v", hold)
	case info.TTL > hold:
		t.Errorf("after the panic the key is held %v more, longer than the minimum hold %v (the TTL is %v)", info.TTL, hold, ttl)
	}
	if _, _, err := locker.Lease("boom"); !errors.Is(err, gocronlock.ErrNoLease) {
		t.Errorf("Lease after the panic: %v, want ErrNoLease", err)
	}
	eventually(t, "the key frees", hold+2*time.Second, func() bool { return !inspect(t, n.client, "gocron:boom").Held })
	t.Logf("the key freed %v after the panic (minimum hold %v, TTL %v)", time.Since(start).Round(time.Millisecond), hold, ttl)
}

// A job's context ends when its lock is lost (the store cut off), with a
// cause matching ErrAbandoned, and when gocron ends the job's context.
func TestLostLockEndsJobContext(t *testing.T) {
	const ttl = time.Second
	b := redisBackend(t)
	n, o := newNode(t, b, 0), newNode(t, b, 1)
	locker, err := gocronlock.NewLocker(n.client, gocronlock.WithMinHold(300*time.Millisecond), gocronlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	other, err := gocronlock.NewLocker(o.client, gocronlock.WithMinHold(300*time.Millisecond), gocronlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}

	jobCtx, endJob := context.WithCancelCause(t.Context())
	lock, ctx, _ := lockRun(t, jobCtx, locker, "cancelled")
	shutdown := errors.New("scheduler shut down")
	endJob(shutdown)
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), shutdown) {
		t.Errorf("after the job's context ended, the cause is %v", context.Cause(ctx))
	}
	if err := lock.Unlock(jobCtx); err != nil { // gocron unlocks with the job's (cancelled) context
		t.Errorf("Unlock with a cancelled context: %v", err)
	}

	lock, ctx, lease := lockRun(t, t.Context(), locker, "lost")
	n.proxy.Freeze()
	frozen := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(10 * ttl):
		t.Fatalf("the job's context still live %v after the store was cut off", 10*ttl)
	}
	lost := time.Since(frozen)
	if !errors.Is(context.Cause(ctx), leasehold.ErrAbandoned) {
		t.Errorf("cause %v, want one matching ErrAbandoned", context.Cause(ctx))
	}
	unlocked := time.Now()
	if err := lock.Unlock(t.Context()); err == nil {
		t.Error("Unlock through a frozen connection: no error")
	}
	t.Logf("the job's context ended %v after the freeze (TTL %v): %v; Unlock gave up after %v",
		lost.Round(time.Millisecond), ttl, context.Cause(ctx), time.Since(unlocked).Round(time.Millisecond))
	var next gocron.Lock
	eventually(t, "another scheduler takes the key", 5*ttl, func() bool {
		next, err = other.Lock(t.Context(), "lost")
		return err == nil
	})
	_, nextLease, _ := other.Lease("lost")
	if nextLease.Fence() <= lease.Fence() {
		t.Errorf("fence %d after %d", nextLease.Fence(), lease.Fence())
	}
	_ = next.Unlock(t.Context())
}

// Only one of two Electors leads; when the leader is cut off, the job's
// context ends (ErrAbandoned) and the other leads with a larger fence.
// Close releases the leader's key and leaves no goroutine behind.
func TestElectorTakeoverAndClose(t *testing.T) {
	const ttl = time.Second
	b := redisBackend(t)
	ns := []*node{newNode(t, b, 0), newNode(t, b, 1)}
	var es []*gocronlock.Elector
	for _, n := range ns {
		e, err := gocronlock.NewElector(n.client, "leader", gocronlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	leader := func() int {
		l := -1
		for i, e := range es {
			if err := e.IsLeader(t.Context()); err == nil {
				if l >= 0 {
					t.Fatalf("Electors %d and %d both lead", l, i)
				}
				l = i
			} else if !errors.Is(err, gocronlock.ErrNotLeader) {
				t.Fatalf("IsLeader: %v", err)
			}
		}
		return l
	}
	eventually(t, "a leader", 5*ttl, func() bool { return leader() >= 0 })
	first := leader()
	jobCtx, endJob := context.WithCancel(t.Context())
	defer endJob()
	ctx, lease, err := es[first].Lease(jobCtx)
	if err != nil {
		t.Fatal(err)
	}
	if again, _, _ := es[first].Lease(jobCtx); again != ctx {
		t.Error("a job's second Lease in one term gave another context")
	}
	if _, _, err := es[1-first].Lease(jobCtx); !errors.Is(err, gocronlock.ErrNotLeader) {
		t.Errorf("the follower's Lease: %v, want ErrNotLeader", err)
	}

	ns[first].proxy.Freeze()
	frozen := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(10 * ttl):
		t.Fatalf("the leader's job context still live %v after the cut", 10*ttl)
	}
	if !errors.Is(context.Cause(ctx), leasehold.ErrAbandoned) {
		t.Errorf("cause %v, want one matching ErrAbandoned", context.Cause(ctx))
	}
	lost := time.Since(frozen)
	took := eventually(t, "the other leads", 10*ttl, func() bool { return leader() == 1-first })
	_, next, err := es[1-first].Lease(jobCtx)
	if err != nil {
		t.Fatal(err)
	}
	if next.Fence() <= lease.Fence() {
		t.Errorf("the new term's fence %d after %d", next.Fence(), lease.Fence())
	}
	t.Logf("leader cut off: its job's context ended %v later, the other led %v later (TTL %v)",
		lost.Round(time.Millisecond), (lost + took).Round(time.Millisecond), ttl)

	ns[first].proxy.Thaw() // so that Close can release what the cut one holds
	for _, e := range es {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := e.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
		if !errors.Is(e.IsLeader(t.Context()), gocronlock.ErrNotLeader) {
			t.Error("IsLeader after Close: leads")
		}
	}
	if info := inspect(t, ns[1-first].client, "leader"); info.Held {
		t.Errorf("the leader's key is still held after Close (%v left)", info.TTL)
	}
	noneLeft(t)
}

// noneLeft fails the test if a goroutine of this package, of gocron, or of
// a Lead campaign is still running after a bounded wait.
func noneLeft(t *testing.T) {
	t.Helper()
	marks := []string{"leasehold/gocronlock.", "go-co-op/gocron/v2.", "leasehold.(*Client).Lead"}
	var left string
	ok := func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for g := range strings.SplitSeq(string(buf), "\n\n") {
			for _, m := range marks {
				if strings.Contains(g, m) {
					left = g
					return false
				}
			}
		}
		return true
	}
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("a goroutine is left after 5 s:\n%s", left)
		}
		<-tick.C
	}
}

// After a scheduler's Shutdown no run holds a lock: Lease finds none, and
// the key frees within the minimum hold; no goroutine is left.
func TestShutdownLeavesNothing(t *testing.T) {
	const hold = 300 * time.Millisecond
	b := redisBackend(t)
	n := newNode(t, b, 0)
	locker, err := gocronlock.NewLocker(n.client, gocronlock.WithMinHold(hold))
	if err != nil {
		t.Fatal(err)
	}
	w := watched{locker, make(chan error, 10)}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(w))
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	_, err = s.NewJob(gocron.DurationJob(time.Hour), gocron.NewTask(func(ctx context.Context) {
		ctx, _, err := locker.Lease("slow")
		if err != nil {
			t.Errorf("Lease: %v", err)
			return
		}
		close(running)
		<-ctx.Done() // until Shutdown ends the job's context
	}), gocron.WithName("slow"), gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	<-running
	if err := s.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := <-w.unlocked; err != nil {
		t.Errorf("Unlock at Shutdown: %v", err)
	}
	if _, _, err := locker.Lease("slow"); !errors.Is(err, gocronlock.ErrNoLease) {
		t.Errorf("Lease after Shutdown: %v, want ErrNoLease", err)
	}
	if info := inspect(t, n.client, "gocron:slow"); info.TTL > hold {
		t.Errorf("after Shutdown the key is held %v more, longer than the minimum hold %v", info.TTL, hold)
	}
	eventually(t, "the key frees", hold+2*time.Second, func() bool { return !inspect(t, n.client, "gocron:slow").Held })
	noneLeft(t)
}
