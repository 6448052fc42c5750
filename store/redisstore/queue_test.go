package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
)

// The queue's two keys exist only while someone waits: taken, left and
// handed off, the queue leaves nothing behind in Redis.
func TestQueueLeavesNoKeysBehind(t *testing.T) {
	key := storetest.Key(t)
	ctx := t.Context()
	s := newStore(t, singleClient(shared.Addr()))
	if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"waiter", "second", "third"} {
		if _, err := s.AcquireQueued(ctx, key, w, time.Minute, time.Minute); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("%s joins: %v", w, err)
		}
	}
	if f, _, err := s.HandOff(ctx, key, "holder", "waiter", time.Minute); err != nil || f <= 0 {
		t.Fatalf("hand-off to the head: %d, %v", f, err)
	}
	if err := s.LeaveQueue(ctx, key, "second"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, "waiter"); err != nil {
		t.Fatal(err)
	}
	if f, err := s.AcquireQueued(ctx, key, "third", time.Minute, time.Minute); err != nil || f <= 0 {
		t.Fatalf("the last waiter: %d, %v", f, err)
	}
	if err := s.Release(ctx, key, "third"); err != nil {
		t.Fatal(err)
	}
	rc := singleClient(shared.Addr())
	defer rc.Close()
	if n, err := rc.Exists(ctx, redisstore.QueueKey(key), redisstore.QueueDeadlinesKey(key)).Result(); err != nil || n != 0 {
		t.Errorf("%d queue keys left behind (%v)", n, err)
	}
}

// The scripts publish a head's wake-up on TurnChannel(key, token), for odd
// keys and tokens too: a subscriber there hears the release.
func TestTurnChannelIsTheScripts(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, singleClient(shared.Addr()))
	rc := singleClient(shared.Addr())
	defer rc.Close()
	for _, key := range []string{storetest.Key(t), "x}{y:" + storetest.Key(t), "lock:ü:{日本}:" + storetest.Key(t)} {
		const token = "tok:with:colons~{x}"
		ps := rc.Subscribe(ctx, redisstore.TurnChannel(key, token))
		if _, err := ps.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireQueued(ctx, key, token, time.Minute, time.Minute); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatal(err)
		}
		if err := s.Release(ctx, key, "holder"); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := ps.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("key %q: no wake-up on %q: %v", key, redisstore.TurnChannel(key, token), err)
		}
		if err := s.LeaveQueue(ctx, key, token); err != nil {
			t.Fatal(err)
		}
		_ = ps.Close()
	}
}
