package main_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// startRedis starts a redis-server for one test and returns its URL for
// --redis and a Client on it, as an application would have.
func startRedis(t *testing.T) (string, *redis.Client, *leasehold.Client) {
	t.Helper()
	srv := testserver.StartRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	st, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		_ = rc.Close()
	})
	return "redis://" + srv.Addr() + "/0", rc, leasehold.New(st)
}

// acquire takes key for ttl or fails the test.
func acquire(t *testing.T, c *leasehold.Client, key string, ttl time.Duration) *leasehold.Lease {
	t.Helper()
	l, err := c.TryAcquire(context.Background(), key, ttl)
	if err != nil {
		t.Fatalf("acquire %q: %v", key, err)
	}
	return l
}

func TestRedisInspectAndLs(t *testing.T) {
	ctx := context.Background()
	url, rc, c := startRedis(t)

	run1 := acquire(t, c, "runs:R1", time.Minute)
	loop := acquire(t, c, "loops:sweep", time.Minute)
	leader := acquire(t, c, "leader:main", time.Minute)
	job := acquire(t, c, "jobs:J1", time.Minute)
	if err := job.Release(ctx); err != nil {
		t.Fatal(err)
	}
	acquire(t, c, "approvals:expired", 20*time.Millisecond)
	acquire(t, c, "tenant-42", time.Minute) // does not match *:*
	// Application keys that match the pattern but are not leasehold locks.
	if err := rc.Set(ctx, "config:main", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, "cache:main", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // approvals:expired expires

	t.Run("inspect text", func(t *testing.T) {
		f := fields(t, ok(t, "inspect", "--redis", url, run1.Key()))
		want := map[string]string{
			"key": run1.Key(), "state": "held", "token": short(run1.Token()), "holder": testHolder, "fence": strconv.FormatInt(run1.Fence(), 10),
			"namespace": "runs", "class": "per-item", "store": "redis " + strings.TrimPrefix(url, "redis://"),
		}
		for k, v := range want {
			if f[k] != v {
				t.Errorf("inspect %s = %q, want %q", k, f[k], v)
			}
		}
		if ttl, err := time.ParseDuration(f["ttl"]); err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("inspect ttl = %q (%v), want a duration in (0, 1m]", f["ttl"], err)
		}
	})

	t.Run("inspect json", func(t *testing.T) {
		for _, tc := range []struct {
			l                *leasehold.Lease
			namespace, class string
		}{
			{run1, "runs", "per-item"},
			{loop, "loops", "per-loop"},
			{leader, "leader", "leader"},
		} {
			var got lockJSON
			decode(t, ok(t, "inspect", "--json", "--redis", url, tc.l.Key()), &got)
			if got.Key != tc.l.Key() || !got.Held || got.Token != short(tc.l.Token()) || got.Holder != testHolder || got.Fence != tc.l.Fence() ||
				got.Namespace != tc.namespace || got.Class != tc.class || got.TTLSeconds <= 0 || got.TTLSeconds > 60 {
				t.Errorf("inspect --json %s = %+v, want held by %s with fence %d, namespace %s, class %s, TTL in (0, 60]",
					tc.l.Key(), got, tc.l.Token(), tc.l.Fence(), tc.namespace, tc.class)
			}
		}
	})

	t.Run("inspect a released key", func(t *testing.T) {
		var got lockJSON
		decode(t, ok(t, "inspect", "--json", "--redis", url, job.Key()), &got)
		if got.Held || got.Token != "" || got.Holder != "" || got.TTLSeconds != 0 || got.Fence != job.Fence() || got.Class != "per-item" || got.Namespace != "jobs" {
			t.Errorf("inspect --json of a released key = %+v, want free with the last fence %d", got, job.Fence())
		}
		f := fields(t, ok(t, "inspect", "--redis", url, job.Key()))
		if f["state"] != "free" || f["token"] != "-" || f["holder"] != "-" || f["fence"] != strconv.FormatInt(job.Fence(), 10) {
			t.Errorf("inspect of a released key: %v", f)
		}
	})

	t.Run("inspect a key never taken", func(t *testing.T) {
		var got lockJSON
		decode(t, ok(t, "inspect", "--json", "--redis", url, "jobs:never"), &got)
		if got.Held || got.Fence != 0 {
			t.Errorf("inspect --json of a key never taken = %+v", got)
		}
	})

	held := []*leasehold.Lease{leader, loop, run1} // in key order

	t.Run("ls table", func(t *testing.T) {
		out := ok(t, "ls", "--redis", url, "*:*")
		keys := tableKeys(t, out)
		if want := []string{leader.Key(), loop.Key(), run1.Key()}; !slices.Equal(keys, want) {
			t.Errorf("ls '*:*' listed %q, want exactly the held locks %q\n%s", keys, want, out)
		}
		for _, l := range held {
			if !strings.Contains(out, l.Token()[:10]+"…") || strings.Contains(out, l.Token()) {
				t.Errorf("ls table should show %s's token as its first 10 characters:\n%s", l.Key(), out)
			}
			if !strings.Contains(out, strconv.FormatInt(l.Fence(), 10)) {
				t.Errorf("ls table lacks %s's fence %d:\n%s", l.Key(), l.Fence(), out)
			}
		}
	})

	t.Run("ls json", func(t *testing.T) {
		var got []lockJSON
		decode(t, ok(t, "ls", "--json", "--redis", url, "*:*"), &got)
		if len(got) != len(held) {
			t.Fatalf("ls --json listed %d locks, want %d: %+v", len(got), len(held), got)
		}
		for i, l := range held {
			g := got[i]
			if g.Key != l.Key() || !g.Held || g.Token != short(l.Token()) || g.Fence != l.Fence() || g.TTLSeconds <= 0 {
				t.Errorf("ls --json [%d] = %+v, want %s held by %s, fence %d", i, g, l.Key(), l.Token(), l.Fence())
			}
		}
		if got[0].Class != "leader" || got[1].Class != "per-loop" || got[2].Class != "per-item" {
			t.Errorf("ls --json classes: %+v", got)
		}
	})

	t.Run("ls limit", func(t *testing.T) {
		r := run(t, "ls", "--json", "--limit", "2", "--redis", url, "*:*")
		var got []lockJSON
		decode(t, r.stdout, &got)
		if r.code != 0 || len(got) != 2 {
			t.Errorf("ls --limit 2: exit %d, %d locks", r.code, len(got))
		}
		checkOneLine(t, r.stderr, []string{"ls", "--limit", "2"})
		if !strings.Contains(r.stderr, "--limit 2") {
			t.Errorf("ls --limit 2 did not say it stopped: %q", r.stderr)
		}
	})

	t.Run("ls no match", func(t *testing.T) {
		if out := ok(t, "ls", "--redis", url, "nothing:*"); !strings.Contains(out, "no held locks match") {
			t.Errorf("ls of no match printed %q", out)
		}
		if out := strings.TrimSpace(ok(t, "ls", "--json", "--redis", url, "nothing:*")); out != "[]" {
			t.Errorf("ls --json of no match printed %q, want []", out)
		}
	})

	t.Run("ls star skips leasehold's own keys", func(t *testing.T) {
		var got []lockJSON
		decode(t, ok(t, "ls", "--json", "--redis", url, "*"), &got)
		var keys []string
		for _, g := range got {
			keys = append(keys, g.Key)
		}
		if want := []string{leader.Key(), loop.Key(), run1.Key(), "tenant-42"}; !slices.Equal(keys, want) {
			t.Errorf("ls '*' listed %q, want %q", keys, want)
		}
	})
}

// TestRedisLsAcrossScanPages lists 500 locks among 1,000 keys (each lock has
// its fence counter) 50 keys per SCAN: the listing must walk many pages,
// never call KEYS, and stop at --limit.
func TestRedisLsAcrossScanPages(t *testing.T) {
	ctx := context.Background()
	url, rc, c := startRedis(t)
	const n = 500
	want := map[string]int64{}
	for i := range n {
		l := acquire(t, c, fmt.Sprintf("bulk:item:%03d", i), time.Minute)
		want[l.Key()] = l.Fence()
	}
	released := acquire(t, c, "bulk:item:released", time.Minute)
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	var got []lockJSON
	decode(t, ok(t, "ls", "--json", "--page-size", "50", "--redis", url, "bulk:*"), &got)
	if len(got) != n {
		t.Fatalf("ls listed %d locks, want %d", len(got), n)
	}
	for i, g := range got {
		if i > 0 && got[i-1].Key >= g.Key {
			t.Errorf("ls output is not sorted by key: %q before %q", got[i-1].Key, g.Key)
		}
		if f, ok := want[g.Key]; !ok || f != g.Fence || !g.Held {
			t.Errorf("ls listed %+v, want a held lock with fence %d", g, f)
		}
	}

	stats, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	scans := commandCalls(stats, "scan")
	if scans < 1001/50 {
		t.Errorf("ls made %d SCAN calls for 1,001 keys at COUNT 50, want at least 20:\n%s", scans, stats)
	}
	if k := commandCalls(stats, "keys"); k != 0 {
		t.Errorf("ls called KEYS %d times", k)
	}

	r := run(t, "ls", "--json", "--page-size", "50", "--limit", "120", "--redis", url, "bulk:*")
	var limited []lockJSON
	decode(t, r.stdout, &limited)
	if r.code != 0 || len(limited) != 120 {
		t.Errorf("ls --limit 120: exit %d, %d locks", r.code, len(limited))
	}
	seen := map[string]bool{}
	for _, g := range limited {
		if _, ok := want[g.Key]; !ok || seen[g.Key] {
			t.Errorf("ls --limit 120 listed %q (duplicate or unknown)", g.Key)
		}
		seen[g.Key] = true
	}
	if !strings.Contains(r.stderr, "stopped at --limit 120") {
		t.Errorf("ls --limit 120 stderr = %q", r.stderr)
	}
}

// commandCalls reads the calls of cmd from INFO commandstats.
func commandCalls(stats, cmd string) int {
	for line := range strings.SplitSeq(stats, "\n") {
		rest, found := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if !found {
			continue
		}
		n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		return n
	}
	return 0
}
