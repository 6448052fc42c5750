package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
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
// reads, WAIT (replica acknowledgement, on by default as soon as a primary
// has a replica), the keys and the two channel patterns.
var documentedACL = []string{"on", ">secret", "resetkeys", "~*", "resetchannels",
	"&leasehold:released:*", "&leasehold:turns:*", "-@all",
	"+eval", "+evalsha",
	"+get", "+set", "+del", "+exists", "+type", "+pttl", "+pexpire", "+time", "+publish",
	"+hget", "+hmget", "+hset", "+hdel", "+hincrby", "+zadd", "+zrem", "+zrange", "+zcard", "+zscore", "+xadd",
	"+subscribe", "+unsubscribe", "+ping", "+info", "+scan", "+xrevrange", "+wait"}

// documentedClusterACL adds what docs/backends.md says a cluster client
// needs: go-redis's slot map and command table, and ASKING to follow a
// slot's migration.
var documentedClusterACL = append(slices.Clone(documentedACL), "+cluster|slots", "+command", "+asking")

// setUser gives srvs the user name with rules.
func setUser(t *testing.T, name string, rules []string, srvs ...*testserver.RedisServer) {
	t.Helper()
	for _, srv := range srvs {
		if _, err := srv.Do(append([]string{"ACL", "SETUSER", name, "reset"}, rules...)...); err != nil {
			t.Fatalf("ACL SETUSER %s on %s: %v", name, srv.Addr(), err)
		}
	}
}

// refusedNothing fails the test if any of srvs refused user a command, a
// key or a channel (ACL LOG), naming what was refused.
func refusedNothing(t *testing.T, user string, srvs ...*testserver.RedisServer) {
	t.Helper()
	for _, srv := range srvs {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		log, err := c.ACLLog(t.Context(), 10).Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("ACL LOG on %s: %v", srv.Addr(), err)
		}
		for _, e := range log {
			if e.Username == user {
				t.Errorf("%s refused %s %q of %s (%s)", srv.Addr(), e.Reason, e.Object, e.Username, e.Context)
			}
		}
	}
}

// A user with exactly the documented ACL can do everything the Store does,
// and the server refuses nothing: on a server alone, and on a primary with
// a replica, where the Store waits for the replica's acknowledgement by
// default (WAIT).
func TestTheDocumentedACLServesEveryOperation(t *testing.T) {
	for _, tc := range []struct {
		name        string
		withReplica bool
	}{{"alone", false}, {"with a replica", true}} {
		withReplica := tc.withReplica
		t.Run(tc.name, func(t *testing.T) {
			srv := testserver.StartRedis(t)
			if withReplica {
				testserver.StartRedisReplica(t, srv)
			}
			setUser(t, "app", documentedACL, srv)
			var logged lockedLog
			s := newStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "secret"}),
				redisstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
			everyOperation(t, s, "k", withReplica)
			refusedNothing(t, "app", srv)
			if l := logged.String(); l != "" {
				t.Fatalf("logged under the documented ACL: %s", l)
			}
		})
	}
}

// The same on a cluster with replicas, under the documented ACL with what
// docs/backends.md adds for a cluster client, and a lock's calls follow a
// slot's migration under it. Without +asking, a renewal during the
// migration fails naming the refused ASKING, not the MOVED the importing
// node then answers.
func TestTheDocumentedClusterACLServesEveryOperation(t *testing.T) {
	cluster := testserver.StartRedisClusterWithReplicas(t, 3, 1)
	var srvs []*testserver.RedisServer
	for i := range 3 {
		srvs = append(srvs, cluster.Node(i), cluster.Replica(i, 0))
	}
	setUser(t, "app", documentedClusterACL, srvs...)
	var logged lockedLog
	client := func(user string) *redis.ClusterClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), Username: user, Password: "secret"})
	}
	s := newStore(t, client("app"), redisstore.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	everyOperation(t, s, "k", true)
	refusedNothing(t, "app", srvs...)
	if l := logged.String(); l != "" {
		t.Fatalf("logged under the documented ACL: %s", l)
	}

	setUser(t, "noasking", slices.DeleteFunc(slices.Clone(documentedClusterACL), func(r string) bool { return r == "+asking" }), srvs...)
	noAsking := newStore(t, client("noasking"))
	admin := clusterClient(cluster.Addrs())
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	key := keyOnNode0(t, cluster, admin)
	other := "{" + key + "}:other"
	acquireAll(ctx, t, s, key, other)
	m := startMigration(t, cluster, key)
	m.move(key)
	renewsFollowTheMove(ctx, t, s, key)
	if err := noAsking.Renew(ctx, key, "tok", time.Minute); err == nil || !strings.Contains(err.Error(), "ASKING") || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("Renew without +asking: %v, want an error naming the refused ASKING", err)
	}
	m.finish()
	for _, k := range []string{key, other} {
		if err := s.Release(ctx, k, "tok"); err != nil {
			t.Errorf("Release of %s after the migration: %v", k, err)
		}
	}
	refusedNothing(t, "app", srvs...)
}

// The ACL the tests apply is the one docs/backends.md gives: its ACL
// SETUSER line rule for rule (the password aside), and each of the rules it
// adds for a cluster client.
func TestTheDocumentedACLIsTheTestedOne(t *testing.T) {
	doc, err := os.ReadFile("../../docs/backends.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```\nACL SETUSER app ")
	block, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed {
		t.Fatal("docs/backends.md has no ACL SETUSER block")
	}
	want := slices.Clone(documentedACL)
	want[slices.Index(want, ">secret")] = ">…"
	if got := strings.Fields(block); !slices.Equal(got, want) {
		t.Errorf("docs/backends.md gives the rules\n%q\nthe tests apply\n%q", got, want)
	}
	for _, rule := range documentedClusterACL[len(documentedACL):] {
		if !strings.Contains(string(doc), "`"+rule+"`") {
			t.Errorf("docs/backends.md does not name the cluster rule %s", rule)
		}
	}
}

// everyOperation runs every operation of the Store on key: acquire, watch
// releases and turns, queue, renew (alone and batched), inspect, list,
// release granting the key to the queue's head (whose word arrives on the
// Store's turn channel; where writes wait for replicas the head takes the
// grant with its next AcquireQueued), hand off, force release and read the
// audit.
func everyOperation(t *testing.T, s *redisstore.Store, key string, acked bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s under the documented ACL: %v", name, err)
		}
	}
	_, err := s.Acquire(ctx, key, "holder", time.Minute)
	step("Acquire", err)
	released, stopReleases, err := s.WatchReleases(ctx, key)
	step("WatchReleases", err)
	defer stopReleases()
	turn, stopTurn, err := s.WatchTurn(ctx, key, "w")
	step("WatchTurn", err)
	defer stopTurn()
	if _, err := s.AcquireQueued(ctx, key, "w", time.Minute, 5*time.Second); !errors.Is(err, driver.ErrNotAcquired) {
		step("AcquireQueued", err)
	}
	step("Renew", s.Renew(ctx, key, "holder", time.Minute))
	step("RenewBatch", s.RenewBatch(ctx, []driver.RenewItem{{Key: key, Token: "holder", TTL: time.Minute}})[0])
	_, err = s.Inspect(ctx, key)
	step("Inspect", err)
	_, _, err = s.List(ctx, "*", "", 10)
	step("List", err)
	step("Release", s.Release(ctx, key, "holder"))
	waitWord(t, turn)
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("no release word within 5 s")
	}
	if acked {
		f, err := s.AcquireQueued(ctx, key, "w", time.Minute, 5*time.Second)
		step("AcquireQueued taking the grant", err)
		if f < 1 {
			t.Fatalf("the grant taken with fence %d", f)
		}
	} else if f, _, ok := s.Granted(key, "w"); !ok || f < 1 {
		t.Fatalf("the grant's word on the turn channel: fence %d, %v", f, ok)
	}
	_, _, err = s.HandOff(ctx, key, "w", "x", time.Minute)
	step("HandOff", err)
	_, err = s.ForceRelease(ctx, key, "stuck", "ops")
	step("ForceRelease", err)
	_, err = s.Audit(ctx, key, 10)
	step("Audit", err)
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
