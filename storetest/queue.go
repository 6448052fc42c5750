package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// queuer returns s's driver.Queuer (Run runs these cases only for a Queuer).
func queuer(t *testing.T, s driver.Store) driver.Queuer {
	t.Helper()
	return s.(driver.Queuer)
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
	headIsWoken(t, s, "release", func(key string) error { return s.Release(t.Context(), key, "holder") })
}

// headIsWoken checks that end, ending the holder's lease, wakes the head of
// the key's queue, which then takes the key.
func headIsWoken(t *testing.T, s driver.Store, what string, end func(key string) error) {
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
	if err := end(key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-turn:
	case <-time.After(5 * time.Second):
		t.Fatalf("the head was not woken by the %s", what)
	}
	if _, err := q.AcquireQueued(ctx, key, "head", longTTL, longTTL); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, "head"); err != nil {
		t.Fatal(err)
	}
}

// testQueueStayBounded: a stay longer than driver.MaxQueueStay is taken,
// and the entry lives no longer than that bound: a waiter that crashed with
// a long stay holds the key up for at most driver.MaxQueueStay.
func testQueueStayBounded(t *testing.T, s driver.Store) {
	q := queuer(t, s)
	ctx := t.Context()
	key := Key(t)
	acquire(t, s, key, "holder", longTTL)
	_, err := q.AcquireQueued(ctx, key, "crashed", longTTL, 12*time.Hour)
	refused(t, "a 12-hour stay", err, true)
	joined := time.Now()
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	for {
		tok := token()
		_, err := s.Acquire(ctx, key, tok, longTTL)
		if err == nil {
			if err := s.Release(ctx, key, tok); err != nil {
				t.Fatal(err)
			}
			break
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatal(err)
		}
		if time.Since(joined) > driver.MaxQueueStay+5*time.Second {
			t.Fatalf("a waiter that asked for 12 h holds the key up %v after it joined", time.Since(joined))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the entry of a 12 h stay lasted %v (bound %v)", time.Since(joined), driver.MaxQueueStay)
}

// testForceReleaseWakesHead: an operator's forced release wakes the head of
// the key's queue, as a release does.
func testForceReleaseWakesHead(t *testing.T, s driver.Store) {
	f := forceReleaser(t, s)
	headIsWoken(t, s, "forced release", func(key string) error {
		_, err := f.ForceRelease(t.Context(), key, "storetest: stuck holder", "storetest")
		return err
	})
}

// testHandOff: HandOff gives the key to the waiter it names only when that
// waiter is the live head (or no one waits), with a higher fence and its
// entry gone; otherwise it releases and names the head it woke; it changes
// nothing for a token that does not hold the key, and refuses bad input.
func testHandOff(t *testing.T, s driver.Store) {
	q, h := queuer(t, s), s.(driver.HandOffer)
	ctx := t.Context()
	key := Key(t)
	f0 := acquire(t, s, key, "holder", longTTL)
	for _, w := range []string{"w1", "w2"} {
		_, err := q.AcquireQueued(ctx, key, w, longTTL, longTTL)
		wantErr(t, w+" joins", err, driver.ErrNotAcquired)
	}
	turn, stop, err := q.WatchTurn(ctx, key, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, _, err := h.HandOff(ctx, key, "nobody", "w1", longTTL); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("a hand-off by a token that holds nothing: %v, want ErrNotOwned", err)
	}
	wantHeldBy(t, s, key, "holder")
	for name, args := range map[string][3]string{"token": {"", "w1"}, "next": {"holder", "bad token"}, "key": {"holder", "w1", ""}} {
		k := key
		if name == "key" {
			k = ""
		}
		_, _, err := h.HandOff(ctx, k, args[0], args[1], longTTL)
		var ae *driver.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != name {
			t.Errorf("a bad %s: %v, want an *ArgumentError naming it", name, err)
		}
	}
	if _, _, err := h.HandOff(ctx, key, "holder", "w1", 0); !errors.Is(err, driver.ErrInvalidArgument) {
		t.Errorf("a TTL of 0: %v, want ErrInvalidArgument", err)
	}
	wantHeldBy(t, s, key, "holder")

	// w2 is not the head: a release, naming w1, who is woken.
	f, head, err := h.HandOff(ctx, key, "holder", "w2", longTTL)
	if err != nil || f != 0 || head != "w1" {
		t.Fatalf("a hand-off to a waiter behind the head: (%d, %q, %v), want a release naming w1", f, head, err)
	}
	if info := inspect(t, s, key); info.Held {
		t.Fatalf("after the hand-off became a release the key is %+v", info)
	}
	select {
	case <-turn:
	case <-time.After(5 * time.Second):
		t.Fatal("the head was not woken by the hand-off that released")
	}
	f1, err := q.AcquireQueued(ctx, key, "w1", longTTL, longTTL)
	if err != nil || f1 <= f0 {
		t.Fatalf("w1 takes the free key: %d, %v; want a fence above %d", f1, err, f0)
	}
	// w2 is the head now: handed over, with a higher fence, its entry gone.
	f2, head, err := h.HandOff(ctx, key, "w1", "w2", longTTL)
	if err != nil || f2 <= f1 || head != "" {
		t.Fatalf("a hand-off to the head: (%d, %q, %v); want a fence above %d", f2, head, err, f1)
	}
	if info := wantHeldBy(t, s, key, "w2"); info.Fence != f2 || info.TTL <= 0 {
		t.Fatalf("after the hand-off: %+v, want fence %d and a TTL", info, f2)
	}
	// No one waits: a release names no head, and a newcomer may take the key.
	if f, head, err := h.HandOff(ctx, key, "w2", "", longTTL); err != nil || f != 0 || head != "" {
		t.Fatalf("a hand-off to no one: (%d, %q, %v), want a plain release", f, head, err)
	}
	acquire(t, s, key, "newcomer", longTTL)
	// No one waits: the key goes to whom the holder names.
	if f, _, err := h.HandOff(ctx, key, "newcomer", "named", longTTL); err != nil || f <= f2 {
		t.Fatalf("a hand-off with an empty queue: (%d, %v)", f, err)
	}
	wantHeldBy(t, s, key, "named")
	if err := s.Release(ctx, key, "named"); err != nil {
		t.Fatal(err)
	}
}

// testHandOffAtomic: while other callers keep trying to take the key, every
// hand-off to a waiter gives it the key in the same step as the release:
// no one else ever holds it between the two, and fences rise.
func testHandOffAtomic(t *testing.T, s driver.Store) {
	h := s.(driver.HandOffer)
	ctx := t.Context()
	key := Key(t)
	holder := token()
	last := acquire(t, s, key, holder, longTTL)
	stop := make(chan struct{})
	var stolen atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tok := token()
				if _, err := s.Acquire(ctx, key, tok, longTTL); err == nil {
					stolen.Add(1)
					_ = s.Release(ctx, key, tok)
				}
			}
		})
	}
	for i := range 100 {
		next := token()
		f, _, err := h.HandOff(ctx, key, holder, next, longTTL)
		if err != nil || f <= last {
			close(stop)
			wg.Wait()
			t.Fatalf("hand-off %d: (%d, %v), want a fence above %d", i, f, err, last)
		}
		holder, last = next, f
	}
	close(stop)
	wg.Wait()
	if n := stolen.Load(); n != 0 {
		t.Fatalf("another caller took the key %d times between a release and its hand-off", n)
	}
	if err := s.Release(ctx, key, holder); err != nil {
		t.Fatal(err)
	}
}

// testGrant: a release grants the key to the live head whose turn was
// watched when it joined, with a higher fence, for no longer than its
// stay; the word comes once (or is withheld), and the head's next attempt
// finds the grant, renews it to its TTL and answers its fence; LeaveQueue
// never releases a key the leaver holds, Decline does, granting the next
// head in turn, and running twice changes nothing more.
func testGrant(t *testing.T, s driver.Store) {
	g := s.(driver.Granter)
	ctx := t.Context()
	key := Key(t)
	const stay = 2 * time.Second // < longTTL: the grant's term is the stay's
	f0 := acquire(t, s, key, "holder", longTTL)
	turns := map[string]<-chan struct{}{}
	var joined [2]time.Time // around w1's attempt
	for i, w := range []string{"w1", "w2"} {
		turn, stop, err := g.WatchTurn(ctx, key, w)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		turns[w] = turn
		if i == 0 {
			joined[0] = time.Now()
		}
		_, err = g.AcquireQueued(ctx, key, w, longTTL, stay)
		if i == 0 {
			joined[1] = time.Now()
		}
		refused(t, w+" joins", err, i == 0)
	}
	waitTurn := func(w string) {
		t.Helper()
		select {
		case <-turns[w]:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no word of its turn within 5 s", w)
		}
	}
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	waitTurn("w1")
	info := wantHeldBy(t, s, key, "w1")
	if info.Fence <= f0 || info.TTL <= 0 || info.TTL > stay {
		t.Fatalf("granted to the head: %+v; want a fence above %d and a TTL within the stay %v", info, f0, stay)
	}
	if f, from, ok := g.Granted(key, "w1"); ok && (f != info.Fence || from.Before(joined[0]) || from.After(joined[1])) {
		t.Fatalf("the word of the grant: fence %d from %v; want %d from the send of w1's attempt, between %v and %v",
			f, from, info.Fence, joined[0], joined[1])
	}
	if f, _, ok := g.Granted(key, "w1"); ok {
		t.Fatalf("the word of the grant came twice (fence %d)", f)
	}
	if f, _, ok := g.Granted(key, "w2"); ok {
		t.Fatalf("a waiter behind the head was told of a grant (fence %d)", f)
	}
	_, err := s.Acquire(ctx, key, "newcomer", longTTL)
	refused(t, "a newcomer's Acquire of a granted key", err, true)
	// The head whose word was lost: its attempt answers the grant's fence
	// and renews the key to its TTL.
	f1, err := g.AcquireQueued(ctx, key, "w1", longTTL, stay)
	if err != nil || f1 != info.Fence {
		t.Fatalf("the granted head's attempt: %d, %v; want the grant's fence %d", f1, err, info.Fence)
	}
	if info := wantHeldBy(t, s, key, "w1"); info.TTL <= stay || info.Fence != f1 {
		t.Fatalf("after the granted head's attempt: %+v; want its TTL renewed past the stay %v", info, stay)
	}
	// Released by w1: granted to w2, who declines it.
	if err := s.Release(ctx, key, "w1"); err != nil {
		t.Fatal(err)
	}
	waitTurn("w2")
	info = wantHeldBy(t, s, key, "w2")
	if info.Fence <= f1 {
		t.Fatalf("granted to w2: %+v; want a fence above %d", info, f1)
	}
	if err := g.LeaveQueue(ctx, key, "w2"); err != nil {
		t.Fatal(err)
	}
	wantHeldBy(t, s, key, "w2") // LeaveQueue never releases
	for i := range 2 {
		if err := g.Decline(ctx, key, "w2"); err != nil {
			t.Fatalf("Decline #%d: %v", i+1, err)
		}
		if info := inspect(t, s, key); info.Held {
			t.Fatalf("after Decline #%d the key is %+v", i+1, info)
		}
	}
	// Nobody queued now: the next acquire takes it, with a higher fence.
	if f := acquire(t, s, key, "after", longTTL); f <= info.Fence {
		t.Fatalf("the acquire after the decline: fence %d, want above %d", f, info.Fence)
	}
	if err := g.Decline(ctx, key, "w2"); err != nil {
		t.Fatal(err)
	}
	wantHeldBy(t, s, key, "after") // a Decline by a token that holds nothing changes nothing
	for name, k := range map[string]string{"key": "", "token": key} {
		tok := "w2"
		if name == "token" {
			tok = ""
		}
		var ae *driver.ArgumentError
		if err := g.Decline(ctx, k, tok); !errors.As(err, &ae) || ae.Arg != name {
			t.Errorf("Decline with a bad %s: %v, want an *ArgumentError naming it", name, err)
		}
	}
}
