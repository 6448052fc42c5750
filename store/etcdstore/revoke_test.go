package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// The TTL classes fillIdlePool leaves idle leases of, and how many of each.
const (
	lockTTL   = 10 * time.Second // 4 idle leases
	entryStay = 7 * time.Second  // 4 idle leases, of queue entries
	otherTTL  = 20 * time.Second // 1 idle lease
	idleAll   = 9
)

// fillIdlePool leaves s with idle leases of three TTLs, as locks and queue
// entries that come and go leave them: the state an operator who lists
// leases finds.
func fillIdlePool(t *testing.T, s *etcdstore.Store) {
	t.Helper()
	ctx, busy := t.Context(), storetest.Key(t)
	if _, err := s.Acquire(ctx, busy, "holder", otherTTL); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		tok := fmt.Sprintf("waiter-%d", i)
		if _, err := s.AcquireQueued(ctx, busy, tok, lockTTL, entryStay); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("queued attempt on a held key: %v, want ErrNotAcquired", err)
		}
	}
	for i := range 4 {
		if err := s.LeaveQueue(ctx, busy, fmt.Sprintf("waiter-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	keys := make([]string, 4)
	for i := range keys {
		keys[i] = storetest.Key(t)
		if _, err := s.Acquire(ctx, keys[i], "tok", lockTTL); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range append(keys, busy) {
		tok := "tok"
		if key == busy {
			tok = "holder"
		}
		if err := s.Release(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
	}
}

// revokeIdleLeases revokes every lease of the server that no key is on, from
// a client of its own, as an operator's etcdctl lease revoke would; it
// returns how many.
func revokeIdleLeases(t *testing.T, endpoints []string) int {
	t.Helper()
	ctx, op := t.Context(), newClient(t, endpoints)
	list, err := op.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range list.Leases {
		ttl, err := op.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL <= 0 || len(ttl.Keys) > 0 {
			continue
		}
		if _, err := op.Revoke(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// After an operator revokes the Store's idle leases, of every TTL it keeps,
// no acquire of a free key fails for it, and a waiter still joins the queue
// of a held key: a lease found gone is followed by a new one, never by the
// next idle lease, revoked too.
func TestAcquireAfterIdleLeasesRevoked(t *testing.T) {
	srv := testserver.StartEtcd(t)
	client := newClient(t, srv.Endpoints())
	// prepare returns a Store whose idle leases an operator just revoked.
	prepare := func(t *testing.T) *etcdstore.Store {
		s := newStore(t, client)
		fillIdlePool(t, s)
		if n := revokeIdleLeases(t, srv.Endpoints()); n != idleAll {
			t.Fatalf("%d idle leases revoked, want the %d fillIdlePool leaves", n, idleAll)
		}
		return s
	}
	held := func(t *testing.T, s *etcdstore.Store, key, tok string) {
		t.Helper()
		if info, err := s.Inspect(t.Context(), key); err != nil || !info.Held || info.Token != tok || info.TTL <= 0 {
			t.Fatalf("Inspect(%s) = %+v, %v; want held by %q on a live lease", key, info, err, tok)
		}
	}

	t.Run("TryAcquire", func(t *testing.T) {
		s := prepare(t)
		for i, ttl := range []time.Duration{lockTTL, lockTTL, lockTTL, lockTTL, lockTTL, entryStay, entryStay, otherTTL} {
			key := storetest.Key(t)
			if _, err := s.Acquire(t.Context(), key, "tok", ttl); err != nil {
				t.Fatalf("acquire %d of a free key (TTL %v): %v", i, ttl, err)
			}
			held(t, s, key, "tok")
		}
	})
	t.Run("AcquireQueued", func(t *testing.T) {
		s := prepare(t)
		for i := range 5 {
			key := storetest.Key(t)
			if _, err := s.AcquireQueued(t.Context(), key, "tok", lockTTL, entryStay); err != nil {
				t.Fatalf("queued acquire %d of a free key: %v", i, err)
			}
			held(t, s, key, "tok")
		}
	})
	t.Run("AcquireQueued joins", func(t *testing.T) {
		// The key is held by another Store, before the revoke: the waiters'
		// entries go on leases of the stay's TTL, all idle ones revoked.
		key := storetest.Key(t)
		if _, err := newStore(t, client).Acquire(t.Context(), key, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
		s := prepare(t)
		for i := range 5 {
			_, err := s.AcquireQueued(t.Context(), key, fmt.Sprintf("w%d", i), lockTTL, entryStay)
			if !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("queued attempt %d on a held key: %v, want ErrNotAcquired", i, err)
			}
		}
		q, err := client.Get(t.Context(), s.QueuePrefix(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || q.Count != 5 {
			t.Fatalf("%d entries in the queue (%v), want the 5 waiters'", q.Count, err)
		}
	})
	t.Run("AcquireQueued rejoins", func(t *testing.T) {
		// A waiter queued before the revoke, whose entry's lease the
		// operator revoked too, joins again at its next attempt.
		key := storetest.Key(t)
		if _, err := newStore(t, client).Acquire(t.Context(), key, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, client)
		fillIdlePool(t, s)
		if _, err := s.AcquireQueued(t.Context(), key, "w", lockTTL, entryStay); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("queued attempt on a held key: %v, want ErrNotAcquired", err)
		}
		ek := s.QueuePrefix(key) + "w"
		entry, err := client.Get(t.Context(), ek)
		if err != nil || len(entry.Kvs) != 1 {
			t.Fatalf("the waiter's entry: %v, %v", entry, err)
		}
		// One idle lease of the stay's TTL carries the entry now.
		if n := revokeIdleLeases(t, srv.Endpoints()); n != idleAll-1 {
			t.Fatalf("%d idle leases revoked, want %d", n, idleAll-1)
		}
		if _, err := client.Revoke(t.Context(), clientv3.LeaseID(entry.Kvs[0].Lease)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireQueued(t.Context(), key, "w", lockTTL, entryStay); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("queued attempt after the revoke: %v, want ErrNotAcquired", err)
		}
		again, err := client.Get(t.Context(), ek)
		if err != nil || len(again.Kvs) != 1 || again.Kvs[0].CreateRevision <= entry.Kvs[0].CreateRevision {
			t.Fatalf("the waiter's entry after the revoke: %v, %v; want it made again", again, err)
		}
	})
	t.Run("waiting Acquire", func(t *testing.T) {
		c := leasehold.New(prepare(t))
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		for i := range 3 {
			l, err := c.Acquire(ctx, storetest.Key(t), lockTTL)
			if err != nil {
				t.Fatalf("waiting acquire %d of a free key: %v", i, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// leaseFault revokes a lease from outside right after the Store's next
// request of one method is answered, and holds the Store's keep-alives back
// until then: the keep-alive that follows finds the lease gone, as when an
// operator's revoke lands between the two. Armed with armBefore, it revokes
// right before that request is sent instead, and holds nothing back.
type leaseFault struct {
	op *clientv3.Client // the operator's client, set before arm

	mu      sync.Mutex
	method  string           // the request after which to revoke; "" when not armed
	before  bool             // revoke before the request instead
	lease   clientv3.LeaseID // the lease to revoke
	revoked chan struct{}    // closed once it is revoked
	err     error            // the revoke's
}

func (f *leaseFault) arm(method string, lease clientv3.LeaseID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.method, f.before, f.lease, f.revoked = method, false, lease, make(chan struct{})
}

func (f *leaseFault) armBefore(method string, lease clientv3.LeaseID) {
	f.arm(method, lease)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.before = true
}

// fire revokes the armed lease if method is the armed one and when is
// when to.
func (f *leaseFault) fire(ctx context.Context, method string, before bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.method != "" && f.before == before && strings.HasSuffix(method, f.method) {
		f.method = ""
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, f.err = f.op.Revoke(rctx, f.lease)
		cancel()
		close(f.revoked)
	}
}

func (f *leaseFault) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			f.fire(ctx, method, true)
			err := invoker(ctx, method, req, reply, cc, opts...)
			f.fire(ctx, method, false)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if strings.HasSuffix(method, "/LeaseKeepAlive") {
				return heldSends{cs, f}, err
			}
			return cs, err
		}),
	}
}

// heldSends holds a keep-alive back while a fault is armed and not yet done.
type heldSends struct {
	grpc.ClientStream
	f *leaseFault
}

func (s heldSends) SendMsg(m any) error {
	s.f.mu.Lock()
	ch := s.f.revoked
	if s.f.method == "" || s.f.before {
		ch = nil // not armed, done, or armed to revoke before a request
	}
	s.f.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-time.After(10 * time.Second): // bounded: the test fails below if the fault never fired
		}
	}
	return s.ClientStream.SendMsg(m)
}

// leaseOf returns the lease the lock key of key is on.
func leaseOf(t *testing.T, client *clientv3.Client, s *etcdstore.Store, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := client.Get(t.Context(), s.LockKey(key))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("lock key of %s: %v, %v", key, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// An acquire whose transaction put the key on a reused lease, revoked before
// the keep-alive sent with it arrived, tries once more on a new lease, not
// on the next idle one (revoked too).
func TestAcquireAfterReusedLeaseRevokedMidway(t *testing.T) {
	fault := &leaseFault{}
	client := newClient(t, shared.Endpoints(), fault.options()...)
	fault.op = newClient(t, shared.Endpoints())
	s := newStore(t, client)
	ctx := t.Context()
	// Two idle leases of the lock's TTL: the older revoked already, the
	// newer (taken first) revoked between the transaction and its
	// keep-alive.
	keys := []string{storetest.Key(t), storetest.Key(t)}
	var ids []clientv3.LeaseID
	for _, key := range keys {
		if _, err := s.Acquire(ctx, key, "tok", lockTTL); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, leaseOf(t, client, s, key))
	}
	for _, key := range keys {
		if err := s.Release(ctx, key, "tok"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fault.op.Revoke(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	fault.arm("/Txn", ids[1])
	key := storetest.Key(t)
	if _, err := s.Acquire(ctx, key, "tok", lockTTL); err != nil {
		t.Fatalf("acquire of a free key: %v", err)
	}
	select {
	case <-fault.revoked:
	default:
		t.Fatal("the fault did not fire: the acquire was not on the reused lease")
	}
	if fault.err != nil {
		t.Fatal(fault.err)
	}
	if got := leaseOf(t, client, s, key); got == ids[0] || got == ids[1] {
		t.Fatalf("the key is on the revoked lease %x", got)
	}
}

// A lease revoked under a held lock ends the lock: the holder learns it at
// its next Renew and Release (ErrNotOwned), whether the revoke came before
// the renew, between its keep-alive and its read of the key (the Store
// knows the lease of a lock it acquired, keeps it alive, then reads), or,
// on a Store that did not acquire the lock, between its first read and the
// keep-alive; the key is free for the next owner, at a higher fence.
func TestHeldLeaseRevoked(t *testing.T) {
	fault := &leaseFault{}
	client := newClient(t, shared.Endpoints(), fault.options()...)
	fault.op = newClient(t, shared.Endpoints())
	s := newStore(t, client)
	other := newStore(t, client) // renews locks it did not acquire
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		ttl   time.Duration // of the renew
		mid   bool          // revoke between the renew's requests
		other bool          // the renew on the Store that did not acquire
	}{
		{"before renew", lockTTL, false, false},
		{"before renew to another TTL", otherTTL, false, false},
		{"between keep-alive and read", lockTTL, true, false},
		{"between read and keep-alive", lockTTL, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, tok := storetest.Key(t), leasehold.NewToken()
			fence, err := s.Acquire(ctx, key, tok, lockTTL)
			if err != nil {
				t.Fatal(err)
			}
			id := leaseOf(t, client, s, key)
			renewer := s
			switch {
			case tc.other:
				renewer = other
				fault.arm("/Range", id)
			case tc.mid:
				fault.armBefore("/Range", id)
			default:
				if _, err := fault.op.Revoke(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := renewer.Renew(ctx, key, tok, tc.ttl); !errors.Is(err, driver.ErrNotOwned) {
				t.Fatalf("Renew after the revoke: %v, want ErrNotOwned", err)
			}
			if tc.mid {
				select {
				case <-fault.revoked:
				default:
					t.Fatal("the fault did not fire")
				}
				if fault.err != nil {
					t.Fatal(fault.err)
				}
			}
			if err := s.Release(ctx, key, tok); !errors.Is(err, driver.ErrNotOwned) {
				t.Fatalf("Release after the revoke: %v, want ErrNotOwned", err)
			}
			next, err := s.Acquire(ctx, key, leasehold.NewToken(), lockTTL)
			if err != nil || next <= fence {
				t.Fatalf("next acquire: fence %d, %v; want a fence above %d", next, err, fence)
			}
		})
	}
}
