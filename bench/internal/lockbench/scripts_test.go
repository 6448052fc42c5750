package lockbench

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// The scripts the scripts-on-rueidis row reads from the repository are the
// ones redisstore runs, the check says so, and it refuses any other.
func TestLeaseholdScriptsAreRedisstores(t *testing.T) {
	srv := testserver.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = admin.Close() })
	store, err := redisstore.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ls, err := readLeaseholdScripts()
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.check(t.Context(), store, admin, "check"); err != nil {
		t.Fatalf("check of the repository's scripts: %v", err)
	}

	// A handle built on them takes, renews and releases like redisstore,
	// and a second token is refused while the first holds the key.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	h, other := newScriptsHandle(ls, rc, "k"), newScriptsHandle(ls, rc, "k")
	if err := h.acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := other.acquire(t.Context()); err == nil || !strings.Contains(err.Error(), "not obtained") {
		t.Fatalf("second acquire of a held key: %v, want not obtained", err)
	}
	if err := h.renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if fence, err := admin.Get(t.Context(), redisstore.FenceKey("k")).Int64(); err != nil || fence <= 0 {
		t.Fatalf("fence counter after the acquire: %d, %v; want a positive fence", fence, err)
	}
	if err := h.release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := h.release(t.Context()); err == nil {
		t.Fatal("second release: no error, want not owned")
	}

	ls.sums["release"] = redis.NewScript("return 1 -- not redisstore's").Hash()
	err = ls.check(t.Context(), store, admin, "check")
	if err == nil || !strings.Contains(err.Error(), "not the one redisstore runs") {
		t.Fatalf("check with a script redisstore does not run: %v, want a refusal", err)
	}
}
