package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// listKeys lists pattern to the end and returns the keys, failing the test
// on an error.
func listKeys(t *testing.T, s *redisstore.Store, pattern string) []string {
	t.Helper()
	var keys []string
	after := ""
	for calls := 0; ; calls++ {
		if calls > 1000 {
			t.Fatalf("List(%q): no end after 1000 calls", pattern)
		}
		infos, next, err := s.List(t.Context(), pattern, after, 100)
		if err != nil {
			t.Fatalf("List(%q): %v", pattern, err)
		}
		for _, info := range infos {
			keys = append(keys, info.Key)
		}
		if next == "" {
			return keys
		}
		after = next
	}
}

// TestListLeavesOutWhatIsNotALock: in a keyspace of its own, only the held
// lock is listed: not an application string (no fence counter), nor one
// without an expiry, nor other types, nor a released lock, nor leasehold's
// own keys, even for a pattern that matches them.
func TestListLeavesOutWhatIsNotALock(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	ctx := t.Context()
	if _, err := s.Acquire(ctx, "app:lock", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "app:released", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "app:released", "tok"); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"SET", "app:plain", "v", "PX", "60000"},
		{"SET", "app:forever", "v"},
		{"SET", redisstore.FenceKey("app:forever"), "5"},
		{"HSET", "app:hash", "f", "v"},
		{"RPUSH", "app:list", "v"},
	} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	if keys := listKeys(t, s, "*"); len(keys) != 1 || keys[0] != "app:lock" {
		t.Errorf("List(*) = %q, want only app:lock", keys)
	}
	for _, pattern := range []string{driver.ReservedPrefix + "*", "*fence*", "?easehold:*"} {
		if keys := listKeys(t, s, pattern); len(keys) != 0 {
			t.Errorf("List(%q) = %q, want nothing: leasehold's own keys are not locks", pattern, keys)
		}
	}
}

// TestListBadFenceCounterIsAnError: a held key whose counter holds what
// leasehold never writes is reported, as Inspect reports it, not skipped.
func TestListBadFenceCounterIsAnError(t *testing.T) {
	srv := testserver.StartRedis(t)
	s := newStore(t, singleClient(srv.Addr()))
	if _, err := s.Acquire(t.Context(), "app:x", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("SET", redisstore.FenceKey("app:x"), "nan"); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.List(t.Context(), "app:*", "", 10)
	if err == nil || !strings.Contains(err.Error(), redisstore.FenceKey("app:x")) {
		t.Errorf("List over a bad fence counter: %v, want an error naming the counter", err)
	}
}
