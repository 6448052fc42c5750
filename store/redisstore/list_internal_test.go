package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// listStore is a Store on a redis-server of the test's own, whose keyspace
// holds n locks job:000, job:001, … (and their fence counters) and nothing else.
func listStore(t *testing.T, n int) *Store {
	t.Helper()
	srv := testserver.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = client.Close()
	})
	for i := range n {
		if _, err := s.Acquire(t.Context(), fmt.Sprintf("job:%03d", i), leasehold.NewToken(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestListSplitsAStep: at limit 1, SCAN steps that find several locks are
// given out over several calls, each key exactly once in a keyspace that
// does not change.
func TestListSplitsAStep(t *testing.T) {
	const n = 300
	s := listStore(t, n)
	seen := map[string]int{}
	splits := 0
	after := ""
	for calls := 0; ; calls++ {
		if calls > 10*n {
			t.Fatalf("no end after %d calls", calls)
		}
		infos, next, err := s.List(t.Context(), "job:*", after, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) > 1 {
			t.Fatalf("%d locks at limit 1", len(infos))
		}
		for _, info := range infos {
			seen[info.Key]++
		}
		if next == "" {
			break
		}
		pos, err := parseListPos(next)
		if err != nil {
			t.Fatalf("next %q does not parse: %v", next, err)
		}
		if pos.split {
			splits++
		}
		after = next
	}
	if len(seen) != n {
		t.Errorf("listed %d of %d locks", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("%q listed %d times in a keyspace that did not change", k, c)
		}
	}
	// 600 keys in about as many buckets: many buckets hold two locks.
	if splits == 0 {
		t.Error("no SCAN step found two locks at once: the split path went untested")
	}
}

// TestListRestartsAChangedStep: when a shared-out step ends elsewhere on
// the next call, its keys are given out from the start again, a bounded
// number of times.
func TestListRestartsAChangedStep(t *testing.T) {
	s := listStore(t, 50)
	// The first step that holds locks (a step may hold fence counters only).
	var (
		start           listPos
		first           []driver.Info
		firstNext, from string
	)
	for calls := 0; len(first) == 0; calls++ {
		if calls > 200 {
			t.Fatal("no SCAN step with a lock in 200 calls")
		}
		var err error
		if start, err = parseListPos(from); err != nil {
			t.Fatal(err)
		}
		if first, firstNext, err = s.List(t.Context(), "job:*", from, 3); err != nil {
			t.Fatal(err)
		}
		from = firstNext
	}
	// That step "ended" at a cursor no 128-bucket table has, after the
	// largest key: without the restart, nothing of the step would be listed.
	changed := listPos{node: singleNode, cursor: start.cursor, split: true, end: 1 << 40, last: "job:999"}
	again, next, err := s.List(t.Context(), "job:*", changed.String(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if k, want := listedKeys(again), listedKeys(first); !slices.Equal(k, want) {
		t.Errorf("the restarted step listed %q, want the step's start %q", k, want)
	}
	if pos, _ := parseListPos(next); pos.split && pos.retries != 1 {
		t.Errorf("next %q after one restart, want its retries at 1", next)
	} else if !pos.split && next != firstNext {
		t.Errorf("next %q after the restart, want %q", next, firstNext)
	}

	changed.retries = maxStepRetries
	_, _, err = s.List(t.Context(), "job:*", changed.String(), 3)
	if err == nil || errors.Is(err, leasehold.ErrInvalidArgument) || !strings.Contains(err.Error(), "changed") {
		t.Errorf("a step changed %d times: %v, want an error saying so", maxStepRetries+1, err)
	}
}

func TestListPositions(t *testing.T) {
	for _, p := range []listPos{
		{node: singleNode, cursor: 42},
		{node: "10.0.0.1:6379", cursor: 1<<64 - 1},
		{node: singleNode, cursor: 7, split: true, end: 9, retries: 2, last: "a key with  spaces {x}"},
	} {
		got, err := parseListPos(p.String())
		if err != nil || got != p {
			t.Errorf("parseListPos(%q) = %+v, %v; want %+v", p.String(), got, err, p)
		}
	}
	for _, after := range []string{
		"x", "scan", "scan -", "scan - x", "scan  5", "scan - -1", "scan - 1 2",
		"split - 1 2 0", "split - 1 2 9 k", "split - 1 x 0 k", "split - 1 2 0 bad\nkey", "split - 1 2 0 leasehold:k",
	} {
		var ae *leasehold.ArgumentError
		if _, err := parseListPos(after); !errors.As(err, &ae) || ae.Arg != "after" {
			t.Errorf("parseListPos(%q) = %v, want an *ArgumentError for after", after, err)
		}
	}
}

// On a cluster, a position names a primary: a single node's position is
// refused, and a primary that is gone is an error, not a silent restart.
func TestListPositionsOnCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		_ = client.Close()
	})
	var ae *leasehold.ArgumentError
	if _, _, err := s.List(t.Context(), "*", "scan - 0", 10); !errors.As(err, &ae) || ae.Arg != "after" {
		t.Errorf("a single node's position on a cluster: %v, want an *ArgumentError for after", err)
	}
	_, _, err = s.List(t.Context(), "*", "scan 127.0.0.1:1 0", 10)
	if err == nil || errors.Is(err, leasehold.ErrInvalidArgument) || !strings.Contains(err.Error(), "no longer a primary") {
		t.Errorf("a primary that is gone: %v, want an error saying so", err)
	}
	// A listing walks the primaries in address order, each from cursor 0.
	_, next, err := s.List(t.Context(), "*", "", 10)
	for calls := 0; err == nil && next != ""; calls++ {
		if calls > 1000 {
			t.Fatal("no end after 1000 calls")
		}
		_, next, err = s.List(t.Context(), "*", next, 10)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func listedKeys(infos []driver.Info) []string {
	var keys []string
	for _, info := range infos {
		keys = append(keys, info.Key)
	}
	return keys
}
