package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clienttest"
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

// The Client's promises on Redis: every Client of a case has a Store and a
// connection pool of its own, as separate processes would.
func TestClient(t *testing.T) {
	clienttest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, singleClient(shared.Addr()))
	})
}

func TestClientCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	clienttest.Run(t, func(t *testing.T) driver.Store {
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

// A nil option is skipped, as leasehold.New skips one, not a panic: the
// options around it still count.
func TestNilOptionIsSkipped(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []redisstore.Option
		arg  string // the bad argument New must name, "" for none
	}{
		{"nil alone", []redisstore.Option{nil}, ""},
		{"nil around a good option", []redisstore.Option{nil, redisstore.WithoutBatching(), nil}, ""},
		{"nil before a bad option", []redisstore.Option{nil, redisstore.WithReplicaAcks(0, time.Second)}, "replicas"},
	} {
		s, err := redisstore.New(singleClient(shared.Addr()), tc.opts...)
		var ae *driver.ArgumentError
		switch {
		case tc.arg == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.arg != "" && (!errors.As(err, &ae) || ae.Arg != tc.arg):
			t.Errorf("%s: %v, want an *ArgumentError naming %q", tc.name, err, tc.arg)
		}
		if s != nil {
			_ = s.Close()
		}
	}
}

// A store whose server is down: every call is an error of its own.
func TestUnreachableServerIsAnError(t *testing.T) {
	storetest.RunUnreachable(t, func(t *testing.T) driver.Store {
		return newStore(t, redis.NewClient(&redis.Options{Addr: testserver.ClosedAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true}))
	})
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
	// until one is heard; the attempts are bounded. A waiter is queued
	// first: a release of a key nobody queues for publishes nothing.
	waiter := leasehold.NewToken()
	for attempt := range 100 {
		tok := leasehold.NewToken()
		if _, err := s.Acquire(ctx, "job:1", tok, time.Minute); err == nil {
			_, _ = s.AcquireQueued(ctx, "job:1", waiter, time.Minute, time.Minute)
			_ = s.Release(ctx, "job:1", tok)
			_ = s.LeaveQueue(ctx, "job:1", waiter) // the next attempt's acquire is not refused for it
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
