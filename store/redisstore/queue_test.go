package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
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

// Every script that wakes a queue's head (a release, a hand-off to nobody,
// a forced release, the leave of the waiter before it, an attempt refused
// on a free key) wakes it through the turn channel of the Store that queued
// it, for odd keys and tokens too, and wakes no other waiter.
func TestTurnWakesTheHeadAlone(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, singleClient(shared.Addr()))
	waiters := newStore(t, singleClient(shared.Addr())) // another process's
	release := func(key string) error { return s.Release(ctx, key, "holder") }
	for _, tc := range []struct {
		name string
		wake func(key string) error // with "holder" holding key, "head" and "next" queued
		// again, if set, wakes the head once more, the key free by then,
		// with a "newcomer" queued behind it
		again func(key string) error
	}{
		{name: "release", wake: release},
		{name: "hand-off to nobody", wake: func(key string) error {
			_, _, err := s.HandOff(ctx, key, "holder", "", time.Minute)
			return err
		}},
		{name: "forced release", wake: func(key string) error {
			_, err := s.ForceRelease(ctx, key, "test", "ops")
			return err
		}},
		{name: "refused on a free key", wake: release, again: func(key string) error {
			if _, err := s.AcquireQueued(ctx, key, "newcomer", time.Minute, time.Minute); !errors.Is(err, driver.ErrNotAcquired) {
				return fmt.Errorf("a newcomer's attempt: %v, want refused", err)
			}
			return nil
		}},
	} {
		for _, key := range []string{storetest.Key(t), "x}{y: a space " + storetest.Key(t), "lock:ü:{日本}:" + storetest.Key(t)} {
			const head, next = "tok:with:colons~{x}", "next~{y}"
			if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
				t.Fatal(err)
			}
			// Joined before their turns are watched, they ask for no grant
			// (TestReleaseGrantsTheWatchedHead): a release wakes the head.
			for _, tok := range []string{head, next} {
				if _, err := waiters.AcquireQueued(ctx, key, tok, time.Minute, time.Minute); !errors.Is(err, driver.ErrNotAcquired) {
					t.Fatal(err)
				}
			}
			turn, stop, err := waiters.WatchTurn(ctx, key, head)
			if err != nil {
				t.Fatal(err)
			}
			nextTurn, stopNext, err := waiters.WatchTurn(ctx, key, next)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.wake(key); err != nil {
				t.Fatalf("%s of %q: %v", tc.name, key, err)
			}
			waitTurn := func(what string) {
				t.Helper()
				select {
				case <-turn:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s of %q: no wake-up of the head %s", tc.name, key, what)
				}
			}
			waitTurn("")
			if tc.again != nil {
				if err := tc.again(key); err != nil {
					t.Fatal(err)
				}
				waitTurn("a second time")
				if err := s.LeaveQueue(ctx, key, "newcomer"); err != nil {
					t.Fatal(err)
				}
			}
			// One connection carries both watches, in order: a wake-up of
			// next sent with the head's would be here by now.
			select {
			case <-nextTurn:
				t.Errorf("%s of %q woke a waiter behind the head", tc.name, key)
			default:
			}
			if err := waiters.LeaveQueue(ctx, key, head); err != nil {
				t.Fatal(err)
			}
			select {
			case <-nextTurn:
			case <-time.After(5 * time.Second):
				t.Fatalf("%q: the head's leave did not wake the next waiter", key)
			}
			if err := waiters.LeaveQueue(ctx, key, next); err != nil {
				t.Fatal(err)
			}
			stop()
			stopNext()
		}
	}
}

// Once the Store's turn channel is confirmed, a turn watch takes no round
// trip: it is returned at once, even for a context already done; before,
// a done context fails at once.
func TestWatchTurnOnceConfirmed(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, singleClient(shared.Addr()))
	done, cancel := context.WithCancel(ctx)
	cancel()
	key := storetest.Key(t)
	if _, _, err := s.WatchTurn(done, key, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchTurn with a done context before the channel is confirmed: %v", err)
	}
	_, stop, err := s.WatchTurn(ctx, key, "a")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	for _, tok := range []string{"a", "b"} {
		_, stop, err := s.WatchTurn(done, key, tok)
		if err != nil {
			t.Fatalf("WatchTurn with a done context once confirmed: %v", err)
		}
		stop()
		stop() // twice does nothing
	}
}

// A waiter queued behind another process's head, on a Store whose turn
// channel is up, waits for its turn without a second look: its refused
// attempt and its granted one, two round trips (before the Store's turn
// channel, the refused attempt set up a watch and the waiter looked again
// at each backoff step: 10, 20, 40 ms…).
func TestQueuedBehindWaitsForItsTurnWithoutPolling(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	holder := leasehold.New(newStore(t, singleClient(shared.Addr())))
	first := leasehold.New(newStore(t, singleClient(shared.Addr())))
	bClient := singleClient(shared.Addr())
	hook := &countHook{}
	bClient.AddHook(hook)
	bStore := newStore(t, bClient)
	b := leasehold.New(bStore, leasehold.WithBackoff(10*time.Millisecond, 5*time.Second))
	// Warm b's Store: the eviction policy read, and its turn channel up.
	if l, err := b.TryAcquire(ctx, key+":warm", time.Minute); err != nil || l.Release(ctx) != nil {
		t.Fatal(err)
	}
	_, stop, err := bStore.WatchTurn(ctx, key+":warm", "x")
	if err != nil {
		t.Fatal(err)
	}
	stop()

	held, err := holder.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rc := singleClient(shared.Addr())
	defer rc.Close()
	queued := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			if got, err := rc.ZCard(ctx, redisstore.QueueKey(key)).Result(); err == nil && got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d waiters never queued", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	done := make(chan error, 2)
	go func() {
		l, err := first.Acquire(ctx, key, time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	queued(1)
	before := hook.n.Load()
	got := make(chan int64, 1)
	go func() {
		l, err := b.Acquire(ctx, key, time.Minute)
		got <- hook.n.Load() - before
		if err == nil {
			err = l.Release(ctx)
		}
		done <- err
	}()
	queued(2)
	// The waiter waits a while behind the head, as under a real holder:
	// the old code's backoff would look several times meanwhile.
	time.Sleep(200 * time.Millisecond)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != 2 {
			t.Errorf("the waiter behind took %d round trips to get its turn, want 2 (refused, then granted)", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter behind never got the key")
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
