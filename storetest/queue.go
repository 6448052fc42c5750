package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// queuer returns s's driver.Queuer, or skips the test.
func queuer(t *testing.T, s driver.Store) driver.Queuer {
	t.Helper()
	q, ok := s.(driver.Queuer)
	if !ok {
		t.Skip("store does not implement driver.Queuer")
	}
	return q
}

// refused checks that err is ErrNotAcquired, a *HeldError whose Remaining
// is positive when wantRemaining and 0 when not.
func refused(t *testing.T, what string, err error, wantRemaining bool) {
	t.Helper()
	var held *driver.HeldError
	switch {
	case !errors.As(err, &held):
		t.Fatalf("%s: %v, want a *HeldError", what, err)
	case wantRemaining && held.Remaining <= 0:
		t.Fatalf("%s: Remaining %v, want the holder's remaining time", what, held.Remaining)
	case !wantRemaining && held.Remaining != 0:
		t.Fatalf("%s: Remaining %v, want 0 (behind the head)", what, held.Remaining)
	}
}

// testQueueOrder: queued waiters take a free key in arrival order; a
// newcomer, queued or not, cannot take it while a live waiter is queued;
// the winner's entry goes with its acquire; leaving is idempotent.
func testQueueOrder(t *testing.T, s driver.Store) {
	q := queuer(t, s)
	ctx := t.Context()
	key := Key(t)
	first := acquire(t, s, key, "holder", longTTL)
	_, err := q.AcquireQueued(ctx, key, "a", longTTL, longTTL)
	refused(t, "the head's attempt on a held key", err, true)
	_, err = q.AcquireQueued(ctx, key, "b", longTTL, longTTL)
	refused(t, "the second waiter's attempt on a held key", err, false)
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Acquire(ctx, key, "newcomer", longTTL)
	refused(t, "a newcomer's Acquire of a free key with waiters queued", err, false)
	_, err = q.AcquireQueued(ctx, key, "b", longTTL, longTTL)
	refused(t, "the second waiter's attempt on a free key", err, false)
	fa, err := q.AcquireQueued(ctx, key, "a", longTTL, longTTL)
	if err != nil || fa <= first {
		t.Fatalf("the head's attempt on the free key: fence %d, %v; want above %d", fa, err, first)
	}
	if err := s.Release(ctx, key, "a"); err != nil {
		t.Fatal(err)
	}
	fb, err := q.AcquireQueued(ctx, key, "b", longTTL, longTTL)
	if err != nil || fb <= fa {
		t.Fatalf("the next head's attempt: fence %d, %v; want above %d", fb, err, fa)
	}
	if err := s.Release(ctx, key, "b"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := q.LeaveQueue(ctx, key, "b"); err != nil {
			t.Fatalf("leaving after the acquire took the entry: %v", err)
		}
	}
	if err := s.Release(ctx, key, acquireTok(t, s, key)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.AcquireQueued(ctx, key, "c", longTTL, 0); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Errorf("a stay of 0: %v, want ErrInvalidArgument", err)
	}
}

// acquireTok takes the free key with a fresh token and returns the token.
func acquireTok(t *testing.T, s driver.Store, key string) string {
	t.Helper()
	tok := token()
	acquire(t, s, key, tok, longTTL)
	return tok
}

// testQueueExpiredHead: a head that stops refreshing its entry holds the
// key up until the entry's stay has passed, then is skipped.
func testQueueExpiredHead(t *testing.T, s driver.Store) {
	q := queuer(t, s)
	ctx := t.Context()
	key := Key(t)
	acquire(t, s, key, "holder", longTTL)
	const stay = 200 * time.Millisecond
	_, err := q.AcquireQueued(ctx, key, "dead", longTTL, stay)
	refused(t, "the head's attempt on a held key", err, true)
	joined := time.Now()
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := q.AcquireQueued(ctx, key, "live", longTTL, longTTL)
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatal(err)
		}
		if time.Since(joined) > stay+5*time.Second {
			t.Fatalf("the expired head still holds the queue %v after it joined for %v", time.Since(joined), stay)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(joined); took < stay-5*time.Millisecond {
		t.Errorf("the waiter behind a live head got the key after %v, before the head's stay of %v", took, stay)
	}
	if err := s.Release(ctx, key, "live"); err != nil {
		t.Fatal(err)
	}
}

// testQueueWakesTheHead: a release wakes the head's WatchTurn.
func testQueueWakesHead(t *testing.T, s driver.Store) {
	q := queuer(t, s)
	ctx := t.Context()
	key := Key(t)
	acquire(t, s, key, "holder", longTTL)
	_, err := q.AcquireQueued(ctx, key, "head", longTTL, longTTL)
	refused(t, "the head's attempt on a held key", err, true)
	turn, stop, err := q.WatchTurn(ctx, key, "head")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-turn:
	case <-time.After(5 * time.Second):
		t.Fatal("the head was not woken by the release")
	}
	if _, err := q.AcquireQueued(ctx, key, "head", longTTL, longTTL); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, "head"); err != nil {
		t.Fatal(err)
	}
}
