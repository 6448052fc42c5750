package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// New takes a client as the application made it, ContextTimeoutEnabled or
// not (calls are bounded either way, see silent_test.go), and refuses only
// what it cannot run safely, naming the argument and the option.
func TestNewRefusesUnsafeClients(t *testing.T) {
	addr := shared.Addr()
	accepted := map[string]redis.UniversalClient{
		"client as made by default":                       redis.NewClient(&redis.Options{Addr: addr}),
		"client with context timeouts":                    redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}),
		"client with no ReadTimeout but context timeouts": redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, ContextTimeoutEnabled: true}),
		"cluster as made by default":                      redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}),
		"failover client":                                 redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr}}),
	}
	for name, c := range accepted {
		if s, err := redisstore.New(c); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		} else {
			_ = s.Close()
		}
		_ = c.Close()
	}
	refused := map[string]struct {
		client redis.UniversalClient
		names  []string // what the error must name
	}{
		"nil":                      {nil, []string{"client", "nil"}},
		"nil *redis.Client":        {(*redis.Client)(nil), []string{"client", "nil *redis.Client"}},
		"nil *redis.ClusterClient": {(*redis.ClusterClient)(nil), []string{"client", "nil *redis.ClusterClient"}},
		"ring":                     {redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, ContextTimeoutEnabled: true}), []string{"client", "Ring"}},
		"no ReadTimeout": {redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1}),
			[]string{"client", "ReadTimeout", "-1", "ContextTimeoutEnabled"}},
		"no WriteTimeout": {redis.NewClient(&redis.Options{Addr: addr, WriteTimeout: -1}),
			[]string{"client", "WriteTimeout", "-1", "ContextTimeoutEnabled"}},
		"no read deadlines at all": {redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -2, ContextTimeoutEnabled: true}),
			[]string{"client", "ReadTimeout", "-2"}},
		"cluster with no ReadTimeout": {redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ReadTimeout: -1}),
			[]string{"client", "ReadTimeout", "-1", "ContextTimeoutEnabled"}},
		"cluster with no write deadlines at all": {redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, WriteTimeout: -2, ContextTimeoutEnabled: true}),
			[]string{"client", "WriteTimeout", "-2"}},
	}
	for name, c := range refused {
		s, err := redisstore.New(c.client)
		if err == nil || s != nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("%s: %v is not an invalid-argument error", name, err)
		}
		for _, want := range c.names {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %q", name, err, want)
			}
		}
		if !strings.HasPrefix(name, "nil") {
			_ = c.client.Close()
		}
	}
}

func quietClient(s *redisstore.Store) *leasehold.Client {
	return leasehold.New(s, leasehold.WithLogger(slog.New(slog.DiscardHandler)))
}

// warmUp runs one acquire/release cycle, so that the scripts are cached on
// the server and the connection is dialled: a reply cut after that belongs
// to the operation under test, not to a NOSCRIPT answer or a handshake.
func warmUp(t *testing.T, c *leasehold.Client) {
	t.Helper()
	l, err := c.TryAcquire(t.Context(), storetest.Key(t), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// A release applied by the server whose reply is lost must not be sent
// again (the second run would answer "not owned"). With go-redis's default of
// three retries, the release is still sent once; Hold reports no lost lease.
func TestLostReleaseReplyIsNotRetried(t *testing.T) {
	proxy := testserver.StartProxy(t, shared.Addr())
	c := quietClient(newStore(t, singleClient(proxy.Addr()))) // default retries
	warmUp(t, c)
	key := storetest.Key(t)
	err := c.Hold(t.Context(), key, time.Minute, func(ctx context.Context, l *leasehold.Lease) error {
		proxy.CutNextReply() // the release's reply
		return nil
	})
	if err != nil {
		t.Fatalf("Hold returned %v: a lost release reply was taken for a lost lease", err)
	}
	if n, _ := shared.Do("EXISTS", key); n != "0" {
		t.Fatal("the key is still there: the release did not happen")
	}
}

// An acquire applied by the server whose reply is lost is a store error, not
// "busy" (a retry would find the caller's own token), and is cleaned up.
func TestLostAcquireReplyIsCleanedUp(t *testing.T) {
	proxy := testserver.StartProxy(t, shared.Addr())
	c := quietClient(newStore(t, singleClient(proxy.Addr())))
	warmUp(t, c)
	key := storetest.Key(t)
	proxy.CutNextReply()
	l, err := c.TryAcquire(t.Context(), key, time.Minute)
	if err == nil || l != nil || errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("TryAcquire with a lost reply: (%v, %v), want a store error", l, err)
	}
	if n, _ := shared.Do("EXISTS", key); n != "0" {
		t.Fatal("the acquire whose reply was lost still blocks the key")
	}
	if _, err := c.TryAcquire(t.Context(), key, time.Minute); err != nil {
		t.Fatalf("the key is not free after the clean-up: %v", err)
	}
}

// pttl asks the server itself, on a clean connection, how long key has left.
func pttl(t *testing.T, key string) time.Duration {
	t.Helper()
	v, err := shared.Do("PTTL", key)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ms) * time.Millisecond
}

const holdTTL = 600 * time.Millisecond // renew every 200 ms, deadline at 540 ms

// A silent partition between the holder and Redis: renewals get no answer.
// The holder's critical section is cancelled while the server still holds
// the key for it, so no second owner could have taken it yet.
func TestHoldFencesDuringSilentPartition(t *testing.T) {
	proxy := testserver.StartProxy(t, shared.Addr())
	c := quietClient(newStore(t, singleClient(proxy.Addr())))
	other := leasehold.New(newStore(t, singleClient(shared.Addr())))
	key := storetest.Key(t)
	defer proxy.Thaw()
	err := c.Hold(t.Context(), key, holdTTL, func(ctx context.Context, l *leasehold.Lease) error {
		proxy.Freeze()
		<-ctx.Done()
		if left := pttl(t, key); left <= 0 {
			t.Errorf("PTTL at the fence = %v, want > 0", left)
		}
		if _, err := other.TryAcquire(t.Context(), key, holdTTL); !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Errorf("a second owner acquired before the fence: %v", err)
		}
		return nil
	})
	if !errors.Is(err, leasehold.ErrAbandoned) {
		t.Fatalf("Hold returned %v, want ErrAbandoned", err)
	}
}

// An ACL user without pub/sub rights (Redis 7's default for new users):
// releases still succeed, and waiters still get the lock, on their backoff.
func TestNoPubSubPermission(t *testing.T) {
	srv := testserver.StartRedis(t)
	if _, err := srv.Do("ACL", "SETUSER", "app", "on", ">secret", "~*", "resetchannels", "+@all"); err != nil {
		t.Fatal(err)
	}
	newClient := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret", ContextTimeoutEnabled: true})
	}
	holder := quietClient(newStore(t, newClient()))
	waiter := quietClient(newStore(t, newClient()))
	key := "approvals:7"
	l, err := holder.TryAcquire(t.Context(), key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, key, time.Minute)
		got <- err
	}()
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release with PUBLISH forbidden: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

// ForceRelease never deletes an application's key that is not a leasehold
// lock: one without an expiry, or without a fence counter.
func TestForceReleaseLeavesApplicationKeys(t *testing.T) {
	ctx := t.Context()
	rc := singleClient(shared.Addr())
	s := newStore(t, rc)
	base := storetest.Key(t)
	noTTL, noFence, hash := base+":config", base+":cache", base+":hash"
	if err := rc.Set(ctx, noTTL, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, noFence, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, hash, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{noTTL, noFence, hash} {
		if _, err := s.ForceRelease(ctx, k, "r", "ops"); err == nil {
			t.Errorf("ForceRelease of the application key %q succeeded", k)
		}
		if n, err := rc.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("%q after a refused ForceRelease: exists %d, %v", k, n, err)
		}
		if n, _ := rc.Exists(ctx, redisstore.AuditKey(k)).Result(); n != 0 {
			t.Errorf("a refused ForceRelease of %q left an audit record", k)
		}
	}
	// A lock without an expiry: a fence counter alone does not make it one.
	if err := rc.Set(ctx, redisstore.FenceKey(noTTL), "7", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, noTTL, "r", "ops"); err == nil || !strings.Contains(err.Error(), "not a leasehold lock") {
		t.Errorf("ForceRelease of a key without expiry = %v, want it refused as not a lock", err)
	}
}
