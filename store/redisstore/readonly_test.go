package redisstore_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// TestInspectAndListForReadOnlyUser: a user granted @read only (no scripts,
// no writes) inspects and lists the same locks as the owner's client sees.
func TestInspectAndListForReadOnlyUser(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx := t.Context()
	admin := singleClient(srv.Addr())
	if err := admin.Do(ctx, "ACL", "SETUSER", "ro", "on", ">pw", "~*", "+@read", "-@write", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	rw := newStore(t, admin)
	held, err := rw.Acquire(ctx, "jobs:a", "tok-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Acquire(ctx, "jobs:b", "tok-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := rw.Release(ctx, "jobs:b", "tok-b"); err != nil {
		t.Fatal(err)
	}
	ro := newStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "ro", Password: "pw"}))

	// The user really may not run scripts.
	if err := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "ro", Password: "pw"}).Eval(ctx, "return 1", nil).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("EVAL as the read-only user: %v, want NOPERM", err)
	}
	info, err := ro.Inspect(ctx, "jobs:a")
	if err != nil {
		t.Fatalf("Inspect as a read-only user: %v", err)
	}
	if !info.Held || info.Token != "tok-a" || info.Fence != held || info.TTL <= 0 || info.TTL > time.Minute {
		t.Errorf("Inspect(jobs:a) = %+v, want held by tok-a with fence %d", info, held)
	}
	info, err = ro.Inspect(ctx, "jobs:b")
	if err != nil || info.Held || info.Fence == 0 {
		t.Errorf("Inspect(jobs:b) = %+v, %v, want free with a fence", info, err)
	}
	if info, err := ro.Inspect(ctx, "jobs:never"); err != nil || info.Held || info.Fence != 0 {
		t.Errorf("Inspect(jobs:never) = %+v, %v, want free without a fence", info, err)
	}
	if keys := listKeys(t, ro, "jobs:*"); !slices.Equal(keys, []string{"jobs:a"}) {
		t.Errorf("List as a read-only user = %q, want [jobs:a]", keys)
	}
}
