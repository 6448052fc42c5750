package etcdstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// A keep-alive stream that cannot be opened (the connection dropped and
// its reconnect hangs in the handshake: a member that accepts and never
// answers) holds up no call past its context. Before, Acquire of a key
// released recently (its idle lease reused, kept alive alongside) and every
// Renew waited for the stream for about 20 s, gRPC's connect timeout,
// whatever their contexts said.
func TestKeepAliveStreamOpeningHonoursContexts(t *testing.T) {
	p := testserver.StartProxy(t, strings.TrimPrefix(shared.Endpoints()[0], "http://"))
	s := newStore(t, newClient(t, []string{"http://" + p.Addr()}))
	c := leasehold.New(s)
	defer c.Close()
	ctx := t.Context()
	key := "hang:" + leasehold.NewToken()[:10]
	held, err := c.TryAcquire(ctx, key+":held", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil { // its lease is idle now, kept for reuse
		t.Fatal(err)
	}
	p.Freeze()
	p.Drop()
	// A call that has the client reconnect, into the silent handshake.
	ictx, icancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, _ = s.Inspect(ictx, key)
	icancel()
	for _, call := range []struct {
		name string
		f    func(context.Context) error
	}{
		{"TryAcquire", func(ctx context.Context) error {
			l, err := c.TryAcquire(ctx, key, 5*time.Second)
			if err == nil {
				_ = l.Release(ctx)
			}
			return err
		}},
		{"Renew", func(ctx context.Context) error { return held.Renew(ctx, 5*time.Second) }},
		{"Store.Renew", func(ctx context.Context) error { return s.Renew(ctx, key+":held", held.Token(), 5*time.Second) }},
	} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := call.f(cctx)
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Errorf("%s through a silent connection succeeded", call.name)
		}
		// A loaded machine may be late by a lot, never by 20 s.
		if took > 5*time.Second {
			t.Errorf("%s with a 300ms context returned after %v: %v", call.name, took.Round(time.Millisecond), err)
		}
	}
	p.Thaw()
}
