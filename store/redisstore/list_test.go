package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
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

// An audit stream entry another tool wrote, which does not parse, is listed
// as unreadable, for its key and in the listing of every key, beside the
// readable records: it neither fails Audit nor hides the others.
func TestUnreadableAuditEntry(t *testing.T) {
	c := singleClient(shared.Addr())
	s := newStore(t, c)
	ctx := t.Context()
	key := storetest.Key(t)
	good := key + ":good"
	if _, err := s.Acquire(ctx, good, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceRelease(ctx, good, "stuck", "op"); err != nil {
		t.Fatal(err)
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: redisstore.AuditKey(key), Values: []string{"foo", "bar"}}).Err(); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Audit(ctx, key, 10)
	if err != nil || len(recs) != 1 || recs[0].Key != key || !strings.HasPrefix(recs[0].Reason, "[unreadable audit record") || recs[0].Time.IsZero() {
		t.Errorf("Audit(%q) = %+v, %v; want one unreadable record with the entry's time", key, recs, err)
	}
	all, err := s.Audit(ctx, "", 1000)
	if err != nil {
		t.Fatalf("Audit of every key: %v", err)
	}
	seen := 0
	for _, r := range all {
		if r.Key == good && r.Reason == "stuck" || r.Key == "" && strings.HasPrefix(r.Reason, "[unreadable audit record") {
			seen++
		}
	}
	if seen < 2 {
		t.Errorf("Audit of every key: %+v; want the good record and the unreadable one", all)
	}
}
