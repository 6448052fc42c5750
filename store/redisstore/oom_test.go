package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// On a full server (maxmemory reached, noeviction as the Store demands) a
// lock is still passed on: a release that grants the key to the queue's
// head, a hand-off to a named waiter and to the head, a renewal and a
// forced release all succeed, and the grant's word reaches the head. Only
// what grows memory is refused, with Redis's OOM error and nothing written:
// a new key, a new waiter's queue entry.
func TestPassingOnWorksOnAFullServer(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	ctx := t.Context()
	const ttl, stay = time.Minute, 5 * time.Second
	granted := heldWithWatchedWaiter(t, s, "granted", "w1", ttl, stay)
	handedOnRelease := heldWithWatchedWaiter(t, s, "handoff-other", "w2", ttl, stay)
	fences := map[string]int64{}
	for _, k := range []string{"handoff-named", "handoff-head", "renewed", "forced", "queued"} {
		f, err := s.Acquire(ctx, k, "holder", ttl)
		if err != nil {
			t.Fatal(err)
		}
		fences[k] = f
	}
	if _, err := s.AcquireQueued(ctx, "handoff-head", "w3", ttl, stay); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("w3 joins: %v", err)
	}
	get := func(k string) string {
		t.Helper()
		v, err := srv.Do("GET", k)
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		return v
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("SET", "probe", "x"); err == nil {
		t.Fatal("the server took a SET at maxmemory 1: nothing is tested")
	}

	if err := s.Release(ctx, "granted", "holder"); err != nil {
		t.Errorf("Release granting the key to its head on a full server: %v", err)
	} else if v := get("granted"); v != "w1" {
		t.Errorf("after the release that grants it, granted holds %q, want w1", v)
	}
	waitWord(t, granted)
	if f, err := s.AcquireQueued(ctx, "granted", "w1", ttl, stay); err != nil || f < 1 {
		t.Errorf("the head claims its grant on a full server: %d, %v", f, err)
	}

	if f, head, err := s.HandOff(ctx, "handoff-named", "holder", "next", ttl); err != nil || f <= fences["handoff-named"] || head != "" {
		t.Errorf("HandOff to a named waiter, no queue, on a full server: %d, %q, %v", f, head, err)
	} else if v := get("handoff-named"); v != "next" {
		t.Errorf("after the hand-off, handoff-named holds %q, want next", v)
	}
	if f, _, err := s.HandOff(ctx, "handoff-head", "holder", "w3", ttl); err != nil || f <= fences["handoff-head"] {
		t.Errorf("HandOff to the queue's head on a full server: %d, %v", f, err)
	} else if v := get("handoff-head"); v != "w3" {
		t.Errorf("after the hand-off, handoff-head holds %q, want w3", v)
	}
	if _, head, err := s.HandOff(ctx, "handoff-other", "holder", "not-queued", ttl); err != nil || head != "w2" {
		t.Errorf("HandOff to a waiter behind the head, granting the head instead, on a full server: %q, %v", head, err)
	} else if v := get("handoff-other"); v != "w2" {
		t.Errorf("after the hand-off's grant, handoff-other holds %q, want w2", v)
	}
	waitWord(t, handedOnRelease)

	if err := s.Renew(ctx, "renewed", "holder", 2*ttl); err != nil {
		t.Errorf("Renew on a full server: %v", err)
	}
	if _, err := s.ForceRelease(ctx, "forced", "stuck", "ops"); err != nil {
		t.Errorf("ForceRelease on a full server: %v", err)
	} else if v := get("forced"); v != "" {
		t.Errorf("after ForceRelease, forced holds %q", v)
	}

	if _, err := s.Acquire(ctx, "new", "a", ttl); err == nil {
		t.Error("Acquire of a new key on a full server succeeded")
	} else if v := get("new"); v != "" {
		t.Errorf("a refused Acquire left new holding %q", v)
	}
	if n, _ := srv.Do("EXISTS", redisstore.FenceKey("new")); n != "0" {
		t.Error("a refused Acquire wrote the fence counter")
	}
	if _, err := s.AcquireQueued(ctx, "queued", "late", ttl, stay); err == nil || errors.Is(err, driver.ErrNotAcquired) {
		t.Errorf("a new waiter on a full server: %v, want Redis's OOM error (its entry cannot be written)", err)
	}
	if n, _ := srv.Do("EXISTS", redisstore.QueueKey("queued")); n != "0" {
		t.Error("a refused waiter's entry was written")
	}
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "queued", "holder"); err != nil {
		t.Errorf("Release once memory is freed: %v", err)
	}
}

// Only Redis's OOM takes lh_put's path of a DEL then a SET: any other
// refusal of the SET (here an ACL without SET) fails the hand-off with
// nothing written, the key still its holder's.
func TestAHandOffRefusedForAnotherReasonWritesNothing(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	ctx := t.Context()
	if _, err := srv.Do("ACL", "SETUSER", "noset", "on", ">pw", "~*", "&*", "+@all", "-set"); err != nil {
		t.Fatal(err)
	}
	r := newStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "noset", Password: "pw"}))
	if _, err := s.Acquire(ctx, "k", "holder", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.HandOff(ctx, "k", "holder", "next", time.Minute); err == nil || !strings.Contains(err.Error(), "can't run this command") {
		t.Fatalf("HandOff by a user without SET: %v, want the server's refusal", err)
	}
	if v, _ := srv.Do("GET", "k"); v != "holder" {
		t.Fatalf("after a refused hand-off the key holds %q, want holder's", v)
	}
}
