package main_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/store/redisstore/redisfence"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// auditJSON is one record of audit -o json and release -o json.
type auditJSON struct {
	Time   time.Time `json:"time"`
	Key    string    `json:"key"`
	Holder string    `json:"holder"`
	Token  string    `json:"token"`
	Fence  int64     `json:"fence"`
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	DryRun bool      `json:"dry_run"`
}

// forceReleaseCase runs the checks shared by every store.
func forceReleaseCase(t *testing.T, storeArgs []string, c *leasehold.Client) (old, next *leasehold.Lease) {
	t.Helper()
	ctx := context.Background()
	args := func(a ...string) []string { return append(slices.Clone(storeArgs), a...) }
	holder := leasehold.New(c.Store(), leasehold.WithIdentity("worker 9:77"))
	t.Cleanup(func() { holder.Close() })
	const ttl = 3 * time.Second // renewed every second; its local deadline is 2.7 s
	key := "runs:F1"
	l, err := holder.TryAcquire(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	ka, err := l.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Refused before the store is asked; the holder keeps the key.
	failsWith(t, 2, []string{"--force"}, args("release", key, "--reason", "r")...)
	failsWith(t, 2, []string{"--reason"}, args("release", key, "--force")...)
	failsWith(t, 2, []string{"--reason"}, args("release", key, "--force", "--reason", "")...)
	failsWith(t, 2, []string{"--reason", "control character"}, args("release", key, "--force", "--reason", "two\nlines")...)
	failsWith(t, 2, []string{"--reason", "longer than 512"}, args("release", key, "--force", "--reason", strings.Repeat("r", 513))...)
	failsWith(t, 2, []string{"--by", "empty"}, args("release", key, "--force", "--reason", "r", "--by", "")...)
	failsWith(t, 2, []string{"key"}, args("release", "leasehold:x", "--force", "--reason", "r")...)
	failsWith(t, 2, []string{"-o/--output"}, args("release", key, "--force", "--reason", "r", "-o", "yaml")...)

	var dry auditJSON
	decode(t, ok(t, args("release", key, "--force", "--reason", "look first", "--dry-run", "-o", "json")...), &dry)
	if !dry.DryRun || dry.Holder != "worker 9:77" || dry.Fence != l.Fence() || dry.Token != l.Token()[:10] {
		t.Fatalf("release --dry-run -o json = %+v, want a dry run naming worker 9:77, fence %d", dry, l.Fence())
	}
	var none []auditJSON
	decode(t, ok(t, args("audit", key, "-o", "json")...), &none)
	if none == nil || len(none) != 0 {
		t.Fatalf("audit after a dry run = %+v, want []", none)
	}
	if out := ok(t, args("audit", key)...); !strings.Contains(out, "no forced releases recorded") {
		t.Fatalf("audit table with no record: %q", out)
	}
	var view lockJSON
	decode(t, ok(t, args("inspect", key, "-o", "json")...), &view)
	if !view.Held || view.Holder != "worker 9:77" {
		t.Fatalf("inspect after the refused and dry-run releases = %+v, want held by worker 9:77", view)
	}

	reason := `worker wedged — INC-4411 "quoted" 'single' %s`
	var rec auditJSON
	decode(t, ok(t, args("release", key, "--force", "--reason", reason, "--by", "ops@bastion", "-o", "json")...), &rec)
	forcedAt := time.Now()
	if rec.DryRun || rec.Key != key || rec.Holder != "worker 9:77" || rec.Token != l.Token()[:10] || rec.Fence != l.Fence() ||
		rec.Reason != reason || rec.By != "ops@bastion" || time.Since(rec.Time) > time.Minute || rec.Time.Location() != time.UTC {
		t.Fatalf("release -o json = %+v, want the record of worker 9:77's fence %d", rec, l.Fence())
	}

	// The holder learns at its next renewal (within a renewal interval, 1 s)
	// that the store refused it: ErrNotOwned, not its local deadline.
	select {
	case <-ka.Context().Done():
		t.Logf("the holder saw the forced release after %v (renewal interval %v)", time.Since(forcedAt).Round(time.Millisecond), ttl/3)
	case <-time.After(ttl + loadSlack):
		t.Fatalf("the holder's KeepAlive did not end within the TTL %v (+ %v) of a forced release", ttl, loadSlack)
	}
	switch err := context.Cause(ka.Context()); {
	case errors.Is(err, leasehold.ErrNotOwned):
	case errors.Is(err, leasehold.ErrAbandoned):
		// A machine so loaded that the renewal came after the local
		// deadline (1.7 s late): the Renew below checks the refusal.
		t.Logf("the KeepAlive's cause = %v: the renewal was delayed past the local deadline", err)
	default:
		t.Fatalf("the KeepAlive's cause = %v, want ErrNotOwned: the renewal refused, before the local deadline", err)
	}
	if err := c.Store().Renew(ctx, key, l.Token(), ttl); !errors.Is(err, leasehold.ErrNotOwned) {
		t.Fatalf("the removed token's Renew = %v, want ErrNotOwned", err)
	}
	next, err = c.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("a new owner after the forced release: %v", err)
	}
	if next.Fence() <= l.Fence() {
		t.Fatalf("new fence %d, want above the removed %d", next.Fence(), l.Fence())
	}

	var recs []auditJSON
	decode(t, ok(t, args("audit", key, "-o", "json")...), &recs)
	if len(recs) != 1 || recs[0].Holder != rec.Holder || recs[0].Reason != reason || recs[0].Fence != rec.Fence || !recs[0].Time.Equal(rec.Time) {
		t.Fatalf("audit %s -o json = %+v, want [%+v]", key, recs, rec)
	}
	decode(t, ok(t, args("audit", "-o", "json", "--limit", "5")...), &recs)
	if len(recs) != 1 || recs[0].Key != key {
		t.Fatalf("audit -o json (every key) = %+v, want the one record", recs)
	}
	table := ok(t, args("audit")...)
	for _, want := range []string{"TIME", key, "worker 9:77", strconv.FormatInt(l.Fence(), 10), "ops@bastion", reason} {
		if !strings.Contains(table, want) {
			t.Errorf("audit table lacks %q:\n%s", want, table)
		}
	}
	failsWith(t, 2, []string{"--limit"}, args("audit", "--limit", "0")...)
	failsWith(t, 2, []string{"at most one argument"}, args("audit", "a", "b")...)

	// A key not held: exit 1, nothing recorded.
	failsWith(t, 1, []string{"jobs:free", "not held"}, args("release", "jobs:free", "--force", "--reason", "r")...)
	decode(t, ok(t, args("audit", "jobs:free", "-o", "json")...), &recs)
	if len(recs) != 0 {
		t.Fatalf("audit of a key never released by force = %+v", recs)
	}
	return l, next
}

func TestRedisForceRelease(t *testing.T) {
	url, rc, c := startRedis(t)
	old, next := forceReleaseCase(t, []string{"--redis", url}, c)
	// The fenced storage refuses the removed holder once the next owner wrote.
	w, err := redisfence.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Set(ctx, "data:F1", next.Fence(), "new owner"); err != nil {
		t.Fatalf("the new owner's fenced write: %v", err)
	}
	if err := w.Set(ctx, "data:F1", old.Fence(), "removed holder"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the removed holder's fenced write = %v, want fence.ErrStale", err)
	}
	if v, _ := rc.Get(ctx, "data:F1").Result(); v != "new owner" {
		t.Fatalf("data:F1 = %q, want the new owner's write", v)
	}
	// An application's key is not a lock: refused, left as it is.
	if err := rc.Set(ctx, "config:main", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	failsWith(t, 1, []string{"not a leasehold lock"}, "release", "--redis", url, "config:main", "--force", "--reason", "r")
	failsWith(t, 1, []string{"not a leasehold lock"}, "release", "--redis", url, "config:main", "--force", "--reason", "r", "--dry-run")
	if v, err := rc.Get(ctx, "config:main").Result(); err != nil || v != "v" {
		t.Fatalf("config:main after refused releases = %q, %v", v, err)
	}
}

func TestEtcdForceRelease(t *testing.T) {
	srv, _, st := startEtcdStore(t)
	old, next := forceReleaseCase(t, []string{"--etcd", strings.Join(srv.Endpoints(), ",")}, leasehold.New(st))
	checkMemFence(t, old, next)
}

func TestPostgresForceRelease(t *testing.T) {
	srv := testserver.StartPostgres(t)
	old, next := forceReleaseCase(t, []string{"--postgres", srv.DSN()}, leasehold.New(migratedStore(t, srv.DSN())))
	checkMemFence(t, old, next)
}

// checkMemFence checks a fence register refuses old once next wrote.
func checkMemFence(t *testing.T, old, next *leasehold.Lease) {
	t.Helper()
	reg := fence.NewMemRegister()
	ctx := context.Background()
	if err := reg.Write(ctx, "data:F1", next.Fence(), []byte("new owner")); err != nil {
		t.Fatalf("the new owner's fence: %v", err)
	}
	if err := reg.Write(ctx, "data:F1", old.Fence(), []byte("removed holder")); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("the removed holder's fence = %v, want fence.ErrStale", err)
	}
}
