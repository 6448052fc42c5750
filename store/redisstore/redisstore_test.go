package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// shared is one redis-server for the tests that only use keys of their own.
// Tests that restart or flush a server start their own.
var shared *testserver.RedisServer

func TestMain(m *testing.M) {
	srv, err := testserver.NewRedisServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	stopExamples, err := startExampleServers()
	if err != nil {
		_ = srv.Close()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stopExamples()
	_ = srv.Close()
	os.Exit(code)
}

func newStore(t testing.TB, client redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = client.Close()
	})
	return s
}

// singleClient and clusterClient are clients as an application makes them
// by default, without ContextTimeoutEnabled.
func singleClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr})
}

func clusterClient(addrs []string) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, singleClient(shared.Addr()))
	})
}

func TestConformanceContextTimeouts(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true}))
	})
}

func TestConformanceCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, clusterClient(cluster.Addrs()))
	})
}

// Keys whose hash tags are odd: with a fence key built naively, the script's
// two keys would land in different slots and the cluster would refuse it.
var oddKeys = []string{
	"jobs:1", "{tenant}:x", "a{b}c", "{}odd", "x}{y",
	"{", "}", "{}", "{{}}", "a{}{b}", "}{", "{a", "a}", "lock:ü:{日本}", "",
}

func TestNoCrossSlotOnCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	node := cluster.Node(0)
	keys := oddKeys[:len(oddKeys)-1]
	for i := range 300 {
		keys = append(keys, fmt.Sprintf("k%d:%s", i, leasehold.NewToken()[:i%7]))
	}
	for _, key := range keys {
		want, err := node.Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		got, err := node.Do("CLUSTER", "KEYSLOT", redisstore.FenceKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("key %q is in slot %s, its fence key %q in slot %s", key, want, redisstore.FenceKey(key), got)
		}
	}

	c := leasehold.New(newStore(t, clusterClient(cluster.Addrs())))
	ctx := t.Context()
	for _, key := range oddKeys[:len(oddKeys)-1] {
		l, err := c.TryAcquire(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", key, err)
		}
		if err := l.Renew(ctx, time.Minute); err != nil {
			t.Fatalf("Renew(%q): %v", key, err)
		}
		if info, err := c.Store().Inspect(ctx, key); err != nil || info.Fence != l.Fence() {
			t.Fatalf("Inspect(%q) = %+v, %v", key, info, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
	}
}

// A release on one cluster node wakes a waiter whose pub/sub connection may
// be on another: PUBLISH reaches every node.
func TestClusterWaiterIsWokenByRelease(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	for i, key := range []string{"runs:R1", "{tenant}:x", "x}{y"} {
		s := newStore(t, clusterClient(cluster.Addrs()))
		assertWokenByRelease(t, s, fmt.Sprintf("%s:%d", key, i))
	}
}

func TestWaiterIsWokenByRelease(t *testing.T) {
	assertWokenByRelease(t, newStore(t, singleClient(shared.Addr())), storetest.Key(t))
}

// assertWokenByRelease: with a backoff of an hour, only the release
// notification can hand the lock to the waiter before the deadline.
func assertWokenByRelease(t *testing.T, s *redisstore.Store, key string) {
	t.Helper()
	store := storetest.NewBusySignal(s)
	c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
	a, err := c.TryAcquire(t.Context(), key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, key, time.Hour)
		got <- err
	}()
	store.WaitBusy(t, 2) // the first attempt, and the second after the subscription was confirmed
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter on %q: %v", key, err)
	}
}

func TestBusyReportsHolderTTL(t *testing.T) {
	c := leasehold.New(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	if _, err := c.TryAcquire(t.Context(), key, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := c.TryAcquire(t.Context(), key, time.Minute)
	var held *leasehold.HeldError
	if !errors.As(err, &held) || held.Remaining <= 0 || held.Remaining > time.Minute {
		t.Fatalf("error %v, want a *HeldError with the holder's remaining TTL", err)
	}
}

func TestFencesRiseAfterFlushAll(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	ctx, key := t.Context(), "jobs:1"
	var last int64
	for round := range 5 {
		for range 20 {
			f, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if f <= last {
				t.Fatalf("round %d: fence %d after %d", round, f, last)
			}
			last = f
			if _, err := srv.Do("DEL", key); err != nil { // a lock lost without release
				t.Fatal(err)
			}
		}
		if _, err := srv.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFencesRiseAfterRestartWithoutPersistence(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	ctx, key := t.Context(), "runs:R1"
	before, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The old lease is gone with the data; the client reconnects by itself.
	var after int64
	for attempt := 0; ; attempt++ {
		after, err = s.Acquire(ctx, key, leasehold.NewToken(), time.Hour)
		if err == nil || attempt == 10 {
			break
		}
	}
	if err != nil {
		t.Fatalf("Acquire after restart: %v", err)
	}
	if after <= before {
		t.Fatalf("fence after restart %d, want > %d", after, before)
	}
}

// countHook counts the commands sent, one per round trip for single commands.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

func TestOneRoundTripPerOperation(t *testing.T) {
	srv := testserver.StartRedis(t)
	client := singleClient(srv.Addr())
	ctx := t.Context()
	// Dial first: the connection's handshake (HELLO, CLIENT SETINFO) also
	// passes through hooks, and is not part of any lock operation.
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	hook := &countHook{}
	client.AddHook(hook)
	c := leasehold.New(newStore(t, client))

	count := func(what string, want int64, op func() error) {
		t.Helper()
		before := hook.n.Load()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := hook.n.Load() - before; got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
	}
	var l *leasehold.Lease
	acquire := func() (err error) { l, err = c.TryAcquire(ctx, "job:1", time.Minute); return err }
	cycle := func() {
		count("acquire", 1, acquire)
		count("busy acquire", 1, func() error {
			if _, err := c.TryAcquire(ctx, "job:1", time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
				return fmt.Errorf("got %v, want busy", err)
			}
			return nil
		})
		count("renew", 1, func() error { return l.Renew(ctx, time.Minute) })
		count("inspect", 1, func() error { _, err := c.Store().Inspect(ctx, "job:1"); return err })
		count("release", 1, func() error { return l.Release(ctx) })
	}
	// The first call of each script finds it missing (EVALSHA, then EVAL);
	// the Store's first acquire also reads the eviction policy and the
	// primary's replicas (none here: no WAIT), once.
	count("first acquire, script not cached yet", 4, acquire)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx, time.Minute); !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatal(err)
	}
	if _, err := c.Store().Inspect(ctx, "job:1"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		cycle()
	}
}

func TestBadInputWritesNothingToRedis(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	c := leasehold.New(s)
	ctx := t.Context()
	calls := []error{
		func() error { _, err := s.Acquire(ctx, "", "tok", time.Second); return err }(),
		func() error { _, err := s.Acquire(ctx, "a\nb", "tok", time.Second); return err }(),
		func() error { _, err := s.Acquire(ctx, strings.Repeat("k", 513), "tok", time.Second); return err }(),
		func() error { _, err := s.Acquire(ctx, "k", "", time.Second); return err }(),
		func() error { _, err := s.Acquire(ctx, "k", "tok", 0); return err }(),
		func() error { _, err := s.Acquire(ctx, "k", "tok", 999*time.Microsecond); return err }(),
		func() error { _, err := s.Acquire(ctx, "k", "tok", 25*time.Hour); return err }(),
		func() error { _, err := c.TryAcquire(ctx, "k\x00", time.Second); return err }(),
		func() error { _, err := c.Acquire(ctx, "k", -time.Second); return err }(),
		s.Renew(ctx, "k", "tok", 0),
		s.Release(ctx, "k", ""),
	}
	for i, err := range calls {
		if !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("call %d: %v, want an invalid-argument error", i, err)
		}
	}
	if n, err := srv.Do("DBSIZE"); err != nil || n != "0" {
		t.Fatalf("DBSIZE = %q (%v) after rejected calls, want 0", n, err)
	}
}

// A down server is an error, never a false "acquired" and never "busy".
func TestUnreachableServerIsAnError(t *testing.T) {
	addr := testserver.ClosedAddr(t)
	quiet := slog.New(slog.DiscardHandler) // the clean-up after each failure warns, as it should
	c := leasehold.New(newStore(t, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})), leasehold.WithLogger(quiet))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for name, acquire := range map[string]func(context.Context, string, time.Duration) (*leasehold.Lease, error){
		"TryAcquire": c.TryAcquire, "Acquire": c.Acquire,
	} {
		lease, err := acquire(ctx, "job:1", time.Minute)
		if lease != nil || err == nil || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("%s on a down server: (%v, %v), want a backend error", name, lease, err)
		}
		if !strings.Contains(err.Error(), "redisstore: acquire") {
			t.Errorf("%s error %q does not say where it failed", name, err)
		}
	}
}

// After a server restart the pub/sub connection comes back by itself and
// wake-ups resume.
func TestWakeupsResumeAfterRestart(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	ctx := t.Context()
	released, stop, err := s.WatchReleases(ctx, "job:1")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Until the connection is back a release goes unheard, so release again
	// until one is heard; the attempts are bounded.
	for attempt := range 100 {
		tok := leasehold.NewToken()
		if _, err := s.Acquire(ctx, "job:1", tok, time.Minute); err == nil {
			_ = s.Release(ctx, "job:1", tok)
		}
		select {
		case <-released:
			return
		case <-time.After(100 * time.Millisecond):
		}
		if attempt == 99 {
			t.Fatal("no wake-up within 100 releases after the restart")
		}
	}
}

func TestClosedStoreRefusesWatches(t *testing.T) {
	s, err := redisstore.New(singleClient(shared.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	if _, stop, err := s.WatchReleases(t.Context(), "k"); err != nil {
		t.Fatal(err)
	} else {
		stop()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, _, err := s.WatchReleases(t.Context(), "k"); err == nil {
		t.Fatal("WatchReleases on a closed store succeeded")
	}
	// Lock operations do not need the pub/sub connection.
	if _, err := s.Acquire(t.Context(), storetest.Key(t), "tok", time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestOddKeysAreValid(t *testing.T) {
	for _, k := range oddKeys {
		if err := driver.ValidateKey(k); (err != nil) != (k == "") {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	if !slices.Contains(oddKeys, "x}{y") {
		t.Fatal("the issue's keys must be in the list")
	}
}

// 100 chained hand-offs with an hour of backoff: only the release
// notification can wake each waiter. Reports the median the README quotes.
func TestHandOffLatency(t *testing.T) {
	store := storetest.NewBusySignal(newStore(t, singleClient(shared.Addr())))
	c := leasehold.New(store, leasehold.WithBackoff(time.Hour, time.Hour))
	key := storetest.Key(t)
	holder, err := c.TryAcquire(t.Context(), key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	took := make([]time.Duration, 0, 100)
	for range 100 {
		got := make(chan *leasehold.Lease, 1)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		go func() {
			l, err := c.Acquire(ctx, key, time.Hour)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		// The waiter is waiting after its second busy attempt (the one after
		// its subscription was confirmed); with the hour-long backoff, only a
		// wake-up can hand it the lock.
		store.WaitBusy(t, 2)
		start := time.Now()
		if err := holder.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		next := <-got
		took = append(took, time.Since(start))
		cancel()
		if next == nil {
			t.FailNow()
		}
		holder = next
	}
	slices.Sort(took)
	median := took[len(took)/2]
	t.Logf("release → next owner over %d hand-offs: median %v, p99 %v, max %v", len(took), median, took[98], took[99])
	if median > 50*time.Millisecond || took[99] > 5*time.Second {
		t.Fatalf("median %v (want <= 50ms), max %v (want far below the hour of backoff)", median, took[99])
	}
}
