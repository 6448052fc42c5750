package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// documentedACL is the least-privilege user docs/backends.md gives, rule for
// rule: the scripts and the commands they run (Redis checks a script's
// commands against the caller's ACL), the pub/sub commands, the Store's own
// reads, the keys and the two channel patterns.
var documentedACL = []string{"on", ">secret", "resetkeys", "~*", "resetchannels",
	"&leasehold:released:*", "&leasehold:turns:*", "-@all",
	"+eval", "+evalsha",
	"+get", "+set", "+del", "+exists", "+type", "+pttl", "+pexpire", "+time", "+publish",
	"+hget", "+hmget", "+hset", "+hdel", "+hincrby", "+zadd", "+zrem", "+zrange", "+zcard", "+zscore", "+xadd",
	"+subscribe", "+unsubscribe", "+ping", "+info", "+scan", "+xrevrange"}

// A user with exactly the documented ACL can do everything the Store does:
// acquire, watch releases and turns, queue, renew, inspect, list, release
// granting the key to the queue's head (whose word arrives on the Store's
// turn channel), hand off, force release and read the audit, with nothing
// logged.
func TestTheDocumentedACLServesEveryOperation(t *testing.T) {
	srv := testserver.StartRedis(t)
	if _, err := srv.Do(append([]string{"ACL", "SETUSER", "app"}, documentedACL...)...); err != nil {
		t.Fatal(err)
	}
	var logged lockedLog
	s := newStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret"}),
		redisstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s under the documented ACL: %v", name, err)
		}
	}
	_, err := s.Acquire(ctx, "k", "holder", time.Minute)
	step("Acquire", err)
	released, stopReleases, err := s.WatchReleases(ctx, "k")
	step("WatchReleases", err)
	defer stopReleases()
	turn, stopTurn, err := s.WatchTurn(ctx, "k", "w")
	step("WatchTurn", err)
	defer stopTurn()
	if _, err := s.AcquireQueued(ctx, "k", "w", time.Minute, 5*time.Second); !errors.Is(err, driver.ErrNotAcquired) {
		step("AcquireQueued", err)
	}
	step("Renew", s.Renew(ctx, "k", "holder", time.Minute))
	_, err = s.Inspect(ctx, "k")
	step("Inspect", err)
	_, _, err = s.List(ctx, "*", "", 10)
	step("List", err)
	step("Release", s.Release(ctx, "k", "holder"))
	waitWord(t, turn)
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("no release word within 5 s")
	}
	if f, _, ok := s.Granted("k", "w"); !ok || f < 1 {
		t.Fatalf("the grant's word on the turn channel: fence %d, %v", f, ok)
	}
	_, _, err = s.HandOff(ctx, "k", "w", "x", time.Minute)
	step("HandOff", err)
	_, err = s.ForceRelease(ctx, "k", "stuck", "ops")
	step("ForceRelease", err)
	_, err = s.Audit(ctx, "k", 10)
	step("Audit", err)
	if l := logged.String(); l != "" {
		t.Fatalf("logged under the documented ACL: %s", l)
	}
}

// A user without the channels: a release watch and a turn watch fail,
// naming the server's refusal, and the Store's logger gets one warning however many
// subscriptions are refused.
func TestARefusedSubscriptionIsReportedAndLoggedOnce(t *testing.T) {
	srv := testserver.StartRedis(t)
	if _, err := srv.Do("ACL", "SETUSER", "app", "on", ">secret", "~*", "+@all", "resetchannels"); err != nil {
		t.Fatal(err)
	}
	var logged lockedLog
	s := newStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret"}), redisstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	for _, key := range []string{"a", "b"} {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, _, err := s.WatchReleases(ctx, key)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("WatchReleases(%s) without the channels: %v, want an error naming the server's NOPERM", key, err)
		}
		ctx, cancel = context.WithTimeout(t.Context(), 2*time.Second)
		_, _, err = s.WatchTurn(ctx, key, "w")
		cancel()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("WatchTurn(%s) without the channels: %v, want an error naming the server's NOPERM", key, err)
		}
	}
	if got := strings.Count(logged.String(), "refused a subscription"); got != 1 {
		t.Fatalf("logged %d warnings of a refused subscription, want 1: %q", got, logged.String())
	}
	if strings.Contains(logged.String(), "secret") {
		t.Fatalf("the warning carries the password: %q", logged.String())
	}
}

// lockedLog is a log written by the Store's goroutines and read by a test.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
