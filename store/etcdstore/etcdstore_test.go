package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clienttest"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// shared is one etcd for the tests that only use keys of their own. Tests
// that stop a server, or count what is in it, start their own.
var shared *testserver.EtcdServer

func TestMain(m *testing.M) {
	srv, err := testserver.NewEtcdServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := m.Run()
	_ = srv.Close()
	os.Exit(code)
}

func newClient(t testing.TB, endpoints []string, opts ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		DialOptions: opts,
		Logger:      zap.NewNop(), // failover tests make it warn, as it should
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a Store on client, closed before the client.
func newStore(t testing.TB, client *clientv3.Client, opts ...etcdstore.Option) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The Client's promises on etcd: every Client of a case has a Store and a
// clientv3 client of its own, as separate processes would.
func TestClient(t *testing.T) {
	clienttest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, newClient(t, shared.Endpoints()))
	})
}

// A store whose cluster is down: every call is an error of its own.
func TestUnreachableClusterIsAnError(t *testing.T) {
	storetest.RunUnreachable(t, func(t *testing.T) driver.Store {
		return newStore(t, newClient(t, []string{testserver.ClosedAddr(t)}))
	})
}

func TestConformance(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, client) })
}

func TestNewRefusesNilClient(t *testing.T) {
	s, err := etcdstore.New(nil)
	var ae *driver.ArgumentError
	if s != nil || !errors.As(err, &ae) || ae.Arg != "client" || !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Fatalf("New(nil) = %v, %v; want an *ArgumentError naming the client", s, err)
	}
	if !strings.Contains(err.Error(), "nil") {
		t.Errorf("New(nil): %q does not say the client is nil", err)
	}
}

// A nil option is skipped, as leasehold.New skips one, not a panic: the
// options around it still count.
func TestNilOptionIsSkipped(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	for _, tc := range []struct {
		name   string
		opts   []etcdstore.Option
		prefix string
	}{
		{"nil alone", []etcdstore.Option{nil}, etcdstore.DefaultPrefix},
		{"nil around WithPrefix", []etcdstore.Option{nil, etcdstore.WithPrefix("nil-option/"), nil}, "nil-option/"},
	} {
		s := newStore(t, client, tc.opts...)
		if got, want := s.LockKey("k"), tc.prefix+"lock/k"; got != want {
			t.Errorf("%s: LockKey = %q, want %q", tc.name, got, want)
		}
	}
}

func TestKeysAndFenceAreRevisions(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client, etcdstore.WithPrefix("keys-test/"))
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	if got, want := s.LockKey(key), "keys-test/lock/"+key; got != want {
		t.Fatalf("LockKey = %q, want %q", got, want)
	}
	if got, want := s.FenceKey(key), "keys-test/fence/"+key; got != want {
		t.Fatalf("FenceKey = %q, want %q", got, want)
	}
	if got := newStore(t, client).LockKey("k"); got != etcdstore.DefaultPrefix+"lock/k" {
		t.Fatalf("default LockKey(k) = %q", got)
	}

	fence, err := s.Acquire(ctx, key, tok, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := client.Get(ctx, s.LockKey(key))
	if err != nil || len(lock.Kvs) != 1 {
		t.Fatalf("lock key: %v, %v", lock, err)
	}
	kv := lock.Kvs[0]
	if string(kv.Value) != tok || kv.CreateRevision != fence || kv.Lease == 0 {
		t.Fatalf("lock key = %q created at %d on lease %x, want %q created at the fence %d on a lease",
			kv.Value, kv.CreateRevision, kv.Lease, tok, fence)
	}
	ttl, err := client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease), clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 60 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != s.LockKey(key) {
		t.Fatalf("lease %x: %+v, %v; want 60 s, with only the lock key", kv.Lease, ttl, err)
	}
	fk, err := client.Get(ctx, s.FenceKey(key))
	if err != nil || len(fk.Kvs) != 1 || fk.Kvs[0].ModRevision != fence || fk.Kvs[0].Lease != 0 {
		t.Fatalf("fence key: %+v, %v; want ModRevision %d and no lease", fk.Kvs, err, fence)
	}

	// A release removes the lock key and keeps its lease, with no key on it,
	// for the next acquire; the fence key stays.
	if err := s.Release(ctx, key, tok); err != nil {
		t.Fatal(err)
	}
	if ttl, err := client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease), clientv3.WithAttachedKeys()); err != nil || len(ttl.Keys) != 0 {
		t.Fatalf("lease %x after release: %+v, %v; want no key on it", kv.Lease, ttl, err)
	}
	if info, err := s.Inspect(ctx, key); err != nil || info.Held || info.Fence != fence {
		t.Fatalf("Inspect after release = %+v, %v; want not held, fence %d", info, err, fence)
	}
	// Close revokes the idle leases.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ttl, err := client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL >= 0 {
		t.Fatalf("idle lease %x still alive after Close: %+v", kv.Lease, ttl)
	}
}

// A lease freed by a release carries the next acquire of the same TTL,
// without a grant; an acquire of another TTL gets a lease of its own.
func TestReleasedLeaseIsReused(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client)
	ctx, key := t.Context(), storetest.Key(t)
	leaseOf := func(key string) clientv3.LeaseID {
		t.Helper()
		resp, err := client.Get(ctx, s.LockKey(key))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("lock key: %v, %v", resp, err)
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	if _, err := s.Acquire(ctx, key, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	first := leaseOf(key)
	if err := s.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, key, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if second := leaseOf(key); second != first {
		t.Fatalf("the second acquire is on lease %x, not on the freed %x", second, first)
	}
	if err := s.Release(ctx, key, "b"); err != nil {
		t.Fatal(err)
	}
	other := storetest.Key(t)
	if _, err := s.Acquire(ctx, other, "c", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	ttl, err := client.TimeToLive(ctx, leaseOf(other))
	if err != nil || ttl.GrantedTTL != 120 {
		t.Fatalf("an acquire for 2 min: %+v, %v; want a lease of 120 s", ttl, err)
	}
}

func TestRenewToAnotherTTLMovesTheLease(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client)
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	fence, err := s.Acquire(ctx, key, tok, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leaseOf := func() clientv3.LeaseID {
		t.Helper()
		resp, err := client.Get(ctx, s.LockKey(key))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("lock key: %v, %v", resp, err)
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	first := leaseOf()
	// The same TTL keeps the lease.
	if err := s.Renew(ctx, key, tok, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := leaseOf(); got != first {
		t.Fatalf("renew with the same TTL moved the key from lease %x to %x", first, got)
	}
	// Another TTL moves the key to a new lease and keeps the old one, with
	// no key on it, for reuse.
	if err := s.Renew(ctx, key, tok, time.Hour); err != nil {
		t.Fatal(err)
	}
	second := leaseOf()
	if second == first {
		t.Fatal("renew to 1h kept the 10 s lease")
	}
	if ttl, err := client.TimeToLive(ctx, first, clientv3.WithAttachedKeys()); err != nil || len(ttl.Keys) != 0 {
		t.Fatalf("old lease %x after the move: %+v, %v; want no key on it", first, ttl, err)
	}
	info, err := s.Inspect(ctx, key)
	if err != nil || !info.Held || info.Token != tok || info.Fence != fence || info.TTL < 59*time.Minute || info.TTL > time.Hour {
		t.Fatalf("Inspect after renew to 1h = %+v, %v; want held by %q, fence %d, TTL about 1h", info, err, tok, fence)
	}
	// A stale owner's renew changes nothing, whatever the TTL.
	if err := s.Renew(ctx, key, leasehold.NewToken(), time.Second); !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("stale renew: %v, want ErrNotOwned", err)
	}
	if got := leaseOf(); got != second {
		t.Fatalf("stale renew moved the key to lease %x", got)
	}
}

func TestTTLIsRoundedUpToSeconds(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	s := newStore(t, client)
	ctx := t.Context()
	for _, tc := range []struct {
		ttl  time.Duration
		want int64 // granted seconds
	}{
		{time.Millisecond, 1}, // the test server's minimum lease TTL is 1 s
		{1500 * time.Millisecond, 2},
		{2 * time.Second, 2},
		{2*time.Second + time.Nanosecond*1e6, 3},
	} {
		key := storetest.Key(t)
		if _, err := s.Acquire(ctx, key, "tok", tc.ttl); err != nil {
			t.Fatal(err)
		}
		resp, err := client.Get(ctx, s.LockKey(key))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("lock key: %v, %v", resp, err)
		}
		ttl, err := client.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
		if err != nil || ttl.GrantedTTL != tc.want {
			t.Fatalf("TTL %v: lease of %d s (%v), want %d s", tc.ttl, ttl.GrantedTTL, err, tc.want)
		}
	}
}

// An expiry deletes the lock key too, which wakes the watchers.
func TestExpiryWakesWatchers(t *testing.T) {
	s := newStore(t, newClient(t, shared.Endpoints()))
	key := storetest.Key(t)
	if _, err := s.Acquire(t.Context(), key, "tok", time.Second); err != nil {
		t.Fatal(err)
	}
	released, stop, err := s.WatchReleases(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up within 10 s of a 1 s lease")
	}
	if info, err := s.Inspect(t.Context(), key); err != nil || info.Held {
		t.Fatalf("Inspect after the wake-up = %+v, %v; want not held", info, err)
	}
}

func TestBadInputWritesNothingToEtcd(t *testing.T) {
	srv := testserver.StartEtcd(t)
	client := newClient(t, srv.Endpoints())
	s := newStore(t, client)
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
		func() error { _, err := s.Inspect(ctx, "k\x7f"); return err }(),
		func() error { _, _, err := s.WatchReleases(ctx, ""); return err }(),
		s.Renew(ctx, "k", "tok", 0),
		s.Renew(ctx, "k", strings.Repeat("t", 257), time.Second),
		s.Release(ctx, "k", ""),
	}
	for i, err := range calls {
		if !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("call %d: %v, want an invalid-argument error", i, err)
		}
	}
	keys, err := client.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil || keys.Count != 0 {
		t.Fatalf("%d keys (%v) after rejected calls, want 0", keys.Count, err)
	}
	leases, err := client.Leases(ctx)
	if err != nil || len(leases.Leases) != 0 {
		t.Fatalf("%d leases (%v) after rejected calls, want 0", len(leases.Leases), err)
	}
}

// A stopped server is an error, never a false "acquired" and never "busy";
// once it is back, the same Store works again.
func TestStoppedServerIsAnError(t *testing.T) {
	srv := testserver.StartEtcd(t)
	s := newStore(t, newClient(t, srv.Endpoints()))
	quiet := slog.New(slog.DiscardHandler) // the clean-up after each failure warns, as it should
	c := leasehold.New(s, leasehold.WithLogger(quiet))
	held, err := c.TryAcquire(t.Context(), "job:1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A renewal opens the Store's keep-alive stream, which the stop breaks.
	if err := held.Renew(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	// The store's answer, and the Client's TryAcquire, which passes it on.
	// (A waiting Acquire whose context ends reports ErrNotAcquired joined
	// with the context's error, by its contract: etcd's client rides out
	// an outage until the context ends.)
	// The Client's clean-up release after a failed acquire takes up to its
	// own 2 s more.
	bounds := map[string]time.Duration{"Store.Acquire": 3 * time.Second, "Client.TryAcquire": 5 * time.Second}
	for name, acquire := range map[string]func(context.Context) error{
		"Store.Acquire": func(ctx context.Context) error {
			_, err := s.Acquire(ctx, "job:2", leasehold.NewToken(), time.Minute)
			return err
		},
		"Client.TryAcquire": func(ctx context.Context) error {
			lease, err := c.TryAcquire(ctx, "job:2", time.Minute)
			if lease != nil {
				return errors.New("got a lease")
			}
			return err
		},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		start := time.Now()
		err := acquire(ctx)
		cancel()
		if err == nil || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("%s on a stopped server: %v, want a backend error", name, err)
		}
		if !strings.Contains(err.Error(), "etcdstore: acquire") {
			t.Errorf("%s error %q does not say where it failed", name, err)
		}
		if took := time.Since(start); took > bounds[name] {
			t.Errorf("%s took %v with a 2 s context, want <= %v", name, took, bounds[name])
		}
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), time.Second)
	defer cancel2()
	if err := s.Renew(ctx2, "job:1", held.Token(), time.Minute); err == nil || errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("Renew on a stopped server: %v, want a backend error", err)
	}
	if err := s.Release(ctx2, "job:1", held.Token()); err == nil || errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("Release on a stopped server: %v, want a backend error", err)
	}
	if _, err := s.Inspect(ctx2, "job:1"); err == nil {
		t.Fatal("Inspect on a stopped server succeeded")
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The client reconnects by itself; the lock survived in etcd's data.
	ctx3, cancel3 := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel3()
	if err := held.Release(ctx3); err != nil {
		t.Fatalf("Release after the server came back: %v", err)
	}
	// The next lock reuses the released lease, and keeps it alive on a new
	// keep-alive stream.
	again, err := c.TryAcquire(ctx3, "job:3", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after the server came back: %v", err)
	}
	if err := again.Renew(ctx3, time.Minute); err != nil {
		t.Fatalf("Renew after the server came back: %v", err)
	}
	if err := again.Release(ctx3); err != nil {
		t.Fatal(err)
	}
}

// countRPCs counts the requests a client sends, unary calls and streams,
// and the lease grants and keep-alives among them.
type countRPCs struct{ n, lease atomic.Int64 }

func (c *countRPCs) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.n.Add(1)
			if strings.HasSuffix(method, "/LeaseGrant") {
				c.lease.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if strings.HasSuffix(method, "/LeaseKeepAlive") {
				// The Store's keep-alive stream stays open: each
				// keep-alive is a message on it.
				return countSends{cs, c}, err
			}
			c.n.Add(1)
			return cs, err
		}),
	}
}

// countSends counts each message sent on a keep-alive stream as a lease
// request.
type countSends struct {
	grpc.ClientStream
	c *countRPCs
}

func (s countSends) SendMsg(m any) error {
	s.c.n.Add(1)
	s.c.lease.Add(1)
	return s.ClientStream.SendMsg(m)
}

// The round trips documented in doc.go, counted as requests on the wire:
// other requests, and lease requests (grants and keep-alives, which etcd's
// leader answers without a raft write), apart. An acquire makes one lease
// request: a grant when no idle lease is at hand (the first time), a
// keep-alive of the idle one it reuses.
func TestRequestsPerOperation(t *testing.T) {
	counter := &countRPCs{}
	s := newStore(t, newClient(t, shared.Endpoints(), counter.options()...))
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	count := func(what string, want, wantLease int64, op func() error) {
		t.Helper()
		before, lease := counter.n.Load(), counter.lease.Load()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		l := counter.lease.Load() - lease
		if got := counter.n.Load() - before - l; got != want || l != wantLease {
			t.Errorf("%s: %d requests and %d lease requests, want %d and %d", what, got, l, want, wantLease)
		}
	}
	for range 2 {
		count("acquire", 1, 1, func() error { _, err := s.Acquire(ctx, key, tok, time.Minute); return err })
		count("busy acquire", 2, 1, func() error {
			if _, err := s.Acquire(ctx, key, "other", time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
				return fmt.Errorf("got %v, want busy", err)
			}
			return nil
		})
		count("renew", 1, 1, func() error { return s.Renew(ctx, key, tok, time.Minute) })
		count("renew to another TTL", 2, 2, func() error { return s.Renew(ctx, key, tok, 2*time.Minute) })
		count("renew back", 2, 2, func() error { return s.Renew(ctx, key, tok, time.Minute) })
		count("inspect held", 2, 0, func() error { _, err := s.Inspect(ctx, key); return err })
		count("release", 1, 0, func() error { return s.Release(ctx, key, tok) })
		count("inspect free", 1, 0, func() error { _, err := s.Inspect(ctx, key); return err })
		count("stale release", 1, 0, func() error {
			if err := s.Release(ctx, key, tok); !errors.Is(err, leasehold.ErrNotOwned) {
				return fmt.Errorf("got %v, want ErrNotOwned", err)
			}
			return nil
		})
	}
}

// An audit record another tool wrote under the store's prefix, which does
// not parse, is listed as unreadable, not an error that hides the others.
func TestUnreadableAuditRecord(t *testing.T) {
	client := newClient(t, shared.Endpoints())
	prefix := "audit-" + leasehold.NewToken()[:8] + "/"
	s := newStore(t, client, etcdstore.WithPrefix(prefix))
	ctx := t.Context()
	if _, err := s.Acquire(ctx, "k:good", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, "k:good", "stuck", "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, prefix+"audit/5:k:bad/1", "{not json"); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Audit(ctx, "k:bad", 10)
	if err != nil || len(recs) != 1 || recs[0].Key != "k:bad" || !strings.HasPrefix(recs[0].Reason, "[unreadable audit record") {
		t.Errorf("Audit(k:bad) = %+v, %v; want one unreadable record", recs, err)
	}
	all, err := s.Audit(ctx, "", 10)
	if err != nil || len(all) != 2 {
		t.Errorf("Audit of every key = %+v, %v; want the good record and the unreadable one", all, err)
	}
}
