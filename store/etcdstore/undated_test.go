package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// A Store's gRPC calls carry no deadline to etcd (grpc-timeout), whatever
// their contexts' deadlines: etcd would arm a timer a request for it. They
// still end at the deadline (TestKeepAliveStreamOpeningHonoursContexts, and
// below).
func TestCallsSendNoDeadline(t *testing.T) {
	var (
		mu     sync.Mutex
		calls  int
		withDL []string
	)
	note := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		calls++
		if _, ok := ctx.Deadline(); ok {
			withDL = append(withDL, method)
		}
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	s := newStore(t, newClient(t, shared.Endpoints(), grpc.WithChainUnaryInterceptor(note)))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	key, tok := "undated:"+leasehold.NewToken()[:10], leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, tok, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, key, tok, 3*time.Second); err != nil { // another TTL: a grant and a move
		t.Fatal(err)
	}
	if _, err := s.Inspect(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List(ctx, "undated:*", "", 10); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, tok); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AcquireDated(ctx, key, tok, 2*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	waiter := leasehold.NewToken()
	if _, err := s.AcquireQueued(ctx, key, waiter, 2*time.Second, 2*time.Second); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a waiter's acquire of a held key: %v, want ErrNotAcquired", err)
	}
	if err := s.LeaveQueue(ctx, key, waiter); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, key, "test", "undated"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Audit(ctx, key, 10); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls < 10 {
		t.Fatalf("the interceptor saw %d calls; want at least 10", calls)
	}
	if len(withDL) > 0 {
		t.Errorf("%d of %d calls reached gRPC with a deadline: %v", len(withDL), calls, withDL)
	}
}

// A release whose deadline passes while etcd does not answer still returns
// by it, with the deadline's error: the client cancels the call when the
// context ends, as gRPC's own deadline would have.
func TestReleaseEndsAtItsDeadlineWithoutSendingIt(t *testing.T) {
	p := testserver.StartProxy(t, strings.TrimPrefix(shared.Endpoints()[0], "http://"))
	s := newStore(t, newClient(t, []string{"http://" + p.Addr()}))
	key, tok := "undated:"+leasehold.NewToken()[:10], leasehold.NewToken()
	if _, err := s.Acquire(t.Context(), key, tok, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	defer p.Thaw()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Release(ctx, key, tok) }()
	// A loaded machine may be late by a lot, never by 10 s.
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Release through a silent connection: %v, want DeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release with a 300ms context has not returned after 10s")
	}
}
