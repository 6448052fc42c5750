package redisstore_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
)

// A waiter whose last attempt asked for no grant (its turn was not watched
// when it attempted) must not be granted the key: "Who asks. A waiter whose
// turn its Store watches when it attempts" (design §5). lh_join must not
// leave the "  "..token field of an earlier watched attempt in place, or
// the release grants the key to a waiter that cannot hear of it.
func TestGrantFieldOutlivesTheWatch(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	s := newStore(t, singleClient(shared.Addr()))
	if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, stop, err := s.WatchTurn(ctx, key, "w")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireQueued(ctx, key, "w", time.Minute, 5*time.Second); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("joins: %v", err)
	}
	stop() // no longer watched: its next attempt asks for nothing
	if _, err := s.AcquireQueued(ctx, key, "w", time.Minute, 5*time.Second); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("refreshes: %v", err)
	}
	rc := singleClient(shared.Addr())
	defer rc.Close()
	fields, _ := rc.HKeys(ctx, redisstore.QueueDeadlinesKey(key)).Result()
	t.Logf("queue hash fields after the unwatched attempt: %q", fields)
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	info, err := s.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held && info.Token == "w" {
		t.Errorf("granted to a waiter whose last attempt asked for no grant and whose Store cannot hear of it: %+v", info)
	}
}

// A head whose grant's word was lost finds the grant by its next
// AcquireQueued (driver.Granter) also when the fence counter is gone
// (deleted, as the error messages advise for a bad one): it was refused by
// its own key, re-joined the queue at the back, and a pending word would
// have been dated from that refusal, after the grant, which ends sooner.
func TestGrantFoundByAttemptWithoutCounter(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	s := newStore(t, singleClient(shared.Addr()))
	const ttl, stay = time.Minute, time.Second
	turn := heldWithWatchedWaiter(t, s, key, "w", ttl, stay)
	time.Sleep(600 * time.Millisecond) // ages the entry: the grant is shorter than its stay
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	waitWord(t, turn)
	rc := singleClient(shared.Addr())
	defer rc.Close()
	if err := rc.Del(ctx, redisstore.FenceKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	f, err := s.AcquireQueued(ctx, key, "w", ttl, stay)
	t.Logf("the head's attempt after the grant: fence %d, %v", f, err)
	if err != nil {
		g, _, ok := s.Granted(key, "w")
		info, _ := s.Inspect(ctx, key)
		t.Errorf("the head's attempt on the key granted to it was refused (%v); Granted then reports fence %d (%v), to be counted from this refused attempt for min(ttl, stay) = %v, but the key's TTL is %v",
			err, g, ok, min(ttl, stay)-time.Since(sent), info.TTL)
	}
}

// Fences of grants near 2^53 and at the int64 edge: each grant's fence is
// the next, and the head's own attempt answers it, the last fence too.
func TestGrantFenceEdges(t *testing.T) {
	ctx := t.Context()
	rc := singleClient(shared.Addr())
	defer rc.Close()
	s := newStore(t, singleClient(shared.Addr()))
	for _, start := range []string{"9007199254740991", "9007199254740992", "8999999999999999", "9223372036854775806"} {
		key := storetest.Key(t) + start
		turn := heldWithWatchedWaiter(t, s, key, "w", time.Minute, time.Minute)
		if err := rc.Set(ctx, redisstore.FenceKey(key), start, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, key, "holder"); err != nil {
			t.Fatal(err)
		}
		waitWord(t, turn)
		n, _ := strconv.ParseInt(start, 10, 64)
		g, _, ok := s.Granted(key, "w")
		info, _ := s.Inspect(ctx, key)
		if !ok || g != n+1 || info.Fence != n+1 || info.Token != "w" {
			t.Errorf("from %s: word %d %v, key %+v; want fence %d", start, g, ok, info, n+1)
		}
		f, err := s.AcquireQueued(ctx, key, "w", time.Minute, time.Minute)
		if err != nil || f != n+1 {
			t.Errorf("from %s: own-token attempt %d %v, want %d", start, f, err, n+1)
		}
	}
}

// Granted forgets the attempts it was asked about: a word naming one of
// them that arrives later is dropped (a waiter that asks to forget a grant,
// having given its key back, must not take one still on its way), and the
// waiter's next attempt finds the grant instead.
func TestGrantWordAfterForgetIsDropped(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	s := newStore(t, singleClient(shared.Addr()))
	turn := heldWithWatchedWaiter(t, s, key, "w", time.Minute, time.Minute)
	if _, _, ok := s.Granted(key, "w"); ok {
		t.Fatal("a word before any grant")
	}
	if err := s.Release(ctx, key, "holder"); err != nil {
		t.Fatal(err)
	}
	waitWord(t, turn)
	if f, _, ok := s.Granted(key, "w"); ok {
		t.Fatalf("a word naming an attempt forgotten before it came was kept (fence %d)", f)
	}
	info, err := s.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := s.AcquireQueued(ctx, key, "w", time.Minute, time.Minute); err != nil || f != info.Fence {
		t.Fatalf("the waiter's next attempt: %d, %v; want the grant's fence %d", f, err, info.Fence)
	}
}

// A queued attempt and a Decline on a key that holds another type (no lock)
// fail or pass as they did before grants: the attempt is refused as held
// by an unreadable holder, not failed by the own-token check's GET, and
// Decline leaves the key alone.
func TestGrantChecksOnAKeyOfAnotherType(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	s := newStore(t, singleClient(shared.Addr()))
	rc := singleClient(shared.Addr())
	defer rc.Close()
	if err := rc.HSet(ctx, key, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireQueued(ctx, key, "w", time.Minute, time.Minute); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a queued attempt on a hash: %v, want ErrNotAcquired", err)
	}
	if err := s.Decline(ctx, key, "w"); err != nil {
		t.Fatalf("Decline on a hash: %v", err)
	}
	if typ, err := rc.Type(ctx, key).Result(); err != nil || typ != "hash" {
		t.Fatalf("the key after Decline: %q, %v; want the hash left alone", typ, err)
	}
}

// heldWithWatchedWaiter has "holder" take key for a minute and tok join its
// queue with its turn watched, so that it asks for a grant; it returns the
// watch, stopped when the test ends.
func heldWithWatchedWaiter(t *testing.T, s *redisstore.Store, key, tok string, ttl, stay time.Duration) <-chan struct{} {
	t.Helper()
	ctx := t.Context()
	if _, err := s.Acquire(ctx, key, "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	turn, stop, err := s.WatchTurn(ctx, key, tok)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if _, err := s.AcquireQueued(ctx, key, tok, ttl, stay); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("%s joins: %v", tok, err)
	}
	return turn
}

// waitWord waits, at most 5 s, for the word on a turn watch.
func waitWord(t *testing.T, turn <-chan struct{}) {
	t.Helper()
	select {
	case <-turn:
	case <-time.After(5 * time.Second):
		t.Fatal("no word of the turn within 5 s")
	}
}
