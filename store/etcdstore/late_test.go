package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/storetest"
)

// lateTxn holds back the next transaction that match picks (a Renew's
// move, an Acquire): it tells held, the caller's context then ends (a lost
// reply), and the request reaches etcd only when land is called, as a
// request delayed in the network or in raft across a leader change would.
type lateTxn struct {
	mu    sync.Mutex
	match func(*pb.TxnRequest) bool // nil: not armed
	held  chan *pb.TxnRequest
	go_   chan struct{}
	done  chan landed
}

type landed struct {
	resp *pb.TxnResponse
	err  error
}

func (m *lateTxn) arm(match func(*pb.TxnRequest) bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.match, m.held, m.go_, m.done = match, make(chan *pb.TxnRequest, 1), make(chan struct{}), make(chan landed, 1)
}

// land sends the held transaction now and returns etcd's answer.
func (m *lateTxn) land(t *testing.T) (*pb.TxnResponse, error) {
	t.Helper()
	close(m.go_)
	select {
	case l := <-m.done:
		return l.resp, l.err
	case <-time.After(10 * time.Second):
		t.Fatal("the late transaction did not land")
	}
	return nil, nil
}

func (m *lateTxn) options() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r, ok := req.(*pb.TxnRequest)
		m.mu.Lock()
		hold := ok && m.match != nil && m.match(r)
		if hold {
			m.match = nil
		}
		held, goCh, done := m.held, m.go_, m.done
		m.mu.Unlock()
		if !hold {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		held <- r
		go func() {
			select {
			case <-goCh:
			case <-time.After(20 * time.Second): // bounded; land fails the test first
				done <- landed{err: errors.New("never landed")}
				return
			}
			lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp := new(pb.TxnResponse)
			err := invoker(lctx, method, req, resp, cc, opts...)
			done <- landed{resp, err}
		}()
		<-ctx.Done()
		return ctx.Err()
	})}
}

// isMove picks a Renew's move: a put on a lease that asks for the previous
// key.
func isMove(r *pb.TxnRequest) bool {
	for _, op := range r.Success {
		if p := op.GetRequestPut(); p != nil && p.Lease != 0 && p.PrevKv {
			return true
		}
	}
	return false
}

// lostMove runs a Renew of key to ttl whose move is held back and whose
// caller gives up once it is: the renew's outcome is unknown. It returns
// the lease the held move puts the key on.
func lostMove(t *testing.T, m *lateTxn, s interface {
	Renew(context.Context, string, string, time.Duration) error
}, key, tok string, ttl time.Duration) clientv3.LeaseID {
	t.Helper()
	m.arm(isMove)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- s.Renew(ctx, key, tok, ttl) }()
	var req *pb.TxnRequest
	select {
	case req = <-m.held:
	case err := <-errc:
		cancel()
		t.Fatalf("the renew to %v sent no move: %v", ttl, err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the renew whose move was held: %v, want its context's end", err)
	}
	for _, op := range req.Success {
		if p := op.GetRequestPut(); p != nil {
			return clientv3.LeaseID(p.Lease)
		}
	}
	t.Fatal("no put in the held move")
	return 0
}

// A renew that moves the key to a new lease and whose reply is lost may be
// applied late: after a later renew of the same owner succeeded, or after
// its release. It must then change nothing: the key must not go back onto
// the lease whose TTL began with the lost renew (the owner would then lose
// the lock before the later renew's term ends), nor come back after a
// release. Until a renew has written the key again, every renew moves it,
// even when its TTL is the lease's.
func TestLateMoveChangesNothing(t *testing.T) {
	m := &lateTxn{}
	client := newClient(t, shared.Endpoints(), m.options()...)
	s := newStore(t, client)
	ctx := t.Context()
	leaseNow := func(key string) clientv3.LeaseID {
		t.Helper()
		resp, err := client.Get(ctx, s.LockKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return 0
		}
		return clientv3.LeaseID(resp.Kvs[0].Lease)
	}
	for _, tc := range []struct {
		name      string
		from, to  time.Duration // the lock's TTL, the lost renew's
		next      time.Duration // the next renew's TTL; 0: a release instead
		landFirst bool          // the lost move lands before the next renew
	}{
		{"after a renew to the same TTL", 3 * time.Second, 6 * time.Second, 6 * time.Second, false},
		{"after a renew that only kept the lease alive", 5 * time.Second, 2 * time.Second, 5 * time.Second, false},
		{"after a release", 5 * time.Second, 2 * time.Second, 0, false},
		{"before the next renew", 5 * time.Second, 2 * time.Second, 5 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, tok := storetest.Key(t), leasehold.NewToken()
			if _, err := s.Acquire(ctx, key, tok, tc.from); err != nil {
				t.Fatal(err)
			}
			lost := lostMove(t, m, s, key, tok, tc.to)
			if tc.landFirst {
				if r, err := m.land(t); err != nil || !r.Succeeded || leaseNow(key) != lost {
					t.Fatalf("the late move, landed first: %v, %v, key on %x; want it on %x", r, err, leaseNow(key), lost)
				}
			}
			if tc.next == 0 {
				if err := s.Release(ctx, key, tok); err != nil {
					t.Fatal(err)
				}
			} else if err := s.Renew(ctx, key, tok, tc.next); err != nil {
				t.Fatalf("the next renew: %v", err)
			}
			after := leaseNow(key)
			switch {
			case tc.next == 0 && after != 0:
				t.Fatalf("the key is on %x after its release", after)
			case tc.next != 0 && after == lost:
				t.Fatalf("the next renew left the key on %x, the lost renew's lease, which it did not keep alive", lost)
			}
			if !tc.landFirst {
				if r, err := m.land(t); err != nil || r.Succeeded {
					t.Errorf("the late move: %v, %v; want it refused, the key left on %x (it is on %x)", r, err, after, leaseNow(key))
				}
			}
			if got := leaseNow(key); got != after {
				t.Errorf("the key is on %x after the late move, %x before", got, after)
			}
			if tc.next != 0 {
				ttl, err := client.TimeToLive(ctx, after)
				if err != nil || time.Duration(ttl.TTL)*time.Second < tc.next-time.Second {
					t.Errorf("the key's lease has %v left (%v), want about %v", time.Duration(ttl.TTL)*time.Second, err, tc.next)
				}
				// No longer in doubt: the renew after it keeps the lease alive.
				if err := s.Renew(ctx, key, tok, tc.next); err != nil || leaseNow(key) != after {
					t.Errorf("a renew after: %v, key on %x, want it kept on %x", err, leaseNow(key), after)
				}
			}
		})
	}
}

// An acquire whose reply is lost revokes its lease, though its caller's
// context has ended: the transaction, applied late, then puts nothing (its
// lease is gone), and the key is free, not held for a TTL by no one.
func TestLateAcquireLeavesTheKeyFree(t *testing.T) {
	m := &lateTxn{}
	client := newClient(t, shared.Endpoints(), m.options()...)
	s := newStore(t, client)
	key := storetest.Key(t)
	m.arm(func(r *pb.TxnRequest) bool { return len(r.Compare) > 0 && string(r.Compare[0].Key) == s.LockKey(key) })
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute); errc <- err }()
	select {
	case <-m.held:
	case err := <-errc:
		cancel()
		t.Fatalf("the acquire sent no transaction: %v", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the acquire whose transaction was held: %v, want its context's end", err)
	}
	if _, err := m.land(t); err == nil {
		t.Error("the late acquire was applied on its lease")
	}
	resp, err := client.Get(t.Context(), s.LockKey(key))
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the lock key after the late acquire: %v, %v; want none", resp.Kvs, err)
	}
}

// A renew that kept the lease alive after the lock was force-released and
// taken by another owner (the forced release deletes the key, then revokes
// the lease) does not succeed: the key is read after the keep-alive. Both
// on the Store that acquired the lock (which knows its lease) and on one
// that did not (which reads the key first, too).
func TestRenewAfterForcedReleaseAndNewOwner(t *testing.T) {
	for _, renewerAcquired := range []bool{true, false} {
		kaHeld := make(chan struct{}, 8)
		kaGo := make(chan struct{})
		c1 := newClient(t, shared.Endpoints(), grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if strings.HasSuffix(method, "/LeaseKeepAlive") {
				return gatedSends{cs, kaGo, kaHeld}, err
			}
			return cs, err
		}))
		revoking := make(chan struct{}, 1)
		revokeGo := make(chan struct{})
		c2 := newClient(t, shared.Endpoints(), grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if strings.HasSuffix(method, "/LeaseRevoke") {
				revoking <- struct{}{}
				select {
				case <-revokeGo:
				case <-time.After(10 * time.Second):
				}
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
		owner, operator := newStore(t, newClient(t, shared.Endpoints())), newStore(t, c2)
		renewer := newStore(t, c1)
		ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
		if renewerAcquired {
			owner = renewer // on a lease it grants: no keep-alive before the renew's
		}
		if _, err := owner.Acquire(ctx, key, tok, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		renewed := make(chan error, 1)
		go func() { renewed <- renewer.Renew(ctx, key, tok, 5*time.Second) }()
		<-kaHeld
		forced := make(chan error, 1)
		go func() { _, err := operator.ForceRelease(ctx, key, "stuck", "ops"); forced <- err }()
		<-revoking // the forced release deleted the key; its revoke waits
		if _, err := newStore(t, newClient(t, shared.Endpoints())).Acquire(ctx, key, leasehold.NewToken(), 5*time.Second); err != nil {
			t.Fatalf("the new owner's acquire: %v", err)
		}
		close(kaGo) // the renew's keep-alive reaches etcd now: the lease still lives
		err := <-renewed
		close(revokeGo)
		if ferr := <-forced; ferr != nil {
			t.Fatal(ferr)
		}
		if !errors.Is(err, driver.ErrNotOwned) {
			t.Errorf("renew on the Store that acquired the lock %v: %v, want ErrNotOwned: another owner holds the key", renewerAcquired, err)
		}
	}
}

// gatedSends holds every message sent on a stream until gate is closed
// (bounded), telling sent first.
type gatedSends struct {
	grpc.ClientStream
	gate <-chan struct{}
	sent chan<- struct{}
}

func (s gatedSends) SendMsg(m any) error {
	select {
	case s.sent <- struct{}{}:
	default:
	}
	select {
	case <-s.gate:
	case <-time.After(10 * time.Second): // bounded: the test fails if it waited for this
	}
	return s.ClientStream.SendMsg(m)
}
