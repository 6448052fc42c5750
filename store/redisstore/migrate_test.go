package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// migration moves one slot of a cluster from its node 0 to its node 1, as
// redis-cli --cluster reshard does: both sides marked, the keys moved a
// command at a time, then the slot given to node 1.
type migration struct {
	t        *testing.T
	src, dst *redis.Client // nodes 0 and 1
	dstAddr  string
	slot     int64
	srcID    string
	dstID    string
}

// keyOnNode0 returns a key of the test's whose slot is on node 0.
func keyOnNode0(t *testing.T, cluster *testserver.RedisCluster, cc *redis.ClusterClient) string {
	base := storetest.Key(t)
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("%s:%d", base, i)
		if m, err := cc.MasterForKey(t.Context(), k); err == nil && m.Options().Addr == cluster.Node(0).Addr() {
			return k
		}
	}
	t.Fatal("no key on node 0 in 1000 tries")
	return ""
}

func startMigration(t *testing.T, cluster *testserver.RedisCluster, key string) *migration {
	ctx := t.Context()
	m := &migration{t: t, dstAddr: cluster.Node(1).Addr(),
		src: redis.NewClient(&redis.Options{Addr: cluster.Node(0).Addr()}),
		dst: redis.NewClient(&redis.Options{Addr: cluster.Node(1).Addr()})}
	t.Cleanup(func() { _ = m.src.Close(); _ = m.dst.Close() })
	var err error
	if m.slot, err = m.src.ClusterKeySlot(ctx, key).Result(); err != nil {
		t.Fatal(err)
	}
	if m.srcID, err = m.src.ClusterMyID(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	if m.dstID, err = m.dst.ClusterMyID(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	m.must(m.dst.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.srcID).Err())
	m.must(m.src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.dstID).Err())
	return m
}

func (m *migration) must(err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatal(err)
	}
}

// move migrates keys (those that exist) to node 1.
func (m *migration) move(keys ...string) {
	m.t.Helper()
	host, port, _ := net.SplitHostPort(m.dstAddr)
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := m.src.Do(m.t.Context(), args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		m.t.Fatalf("MIGRATE %q: %v", keys, err)
	}
}

// acquireAll has s take keys with the token "tok" for a minute.
func acquireAll(ctx context.Context, t *testing.T, s *redisstore.Store, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := s.Acquire(ctx, k, "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
}

// renewsFollowTheMove checks that Renew and RenewBatch of key, held with
// "tok" and moved to the importing node of a migration, succeed.
func renewsFollowTheMove(ctx context.Context, t *testing.T, s *redisstore.Store, key string) {
	t.Helper()
	if err := s.Renew(ctx, key, "tok", time.Minute); err != nil {
		t.Errorf("Renew of a held key moved to the importing node: %v", err)
	}
	if errs := s.RenewBatch(ctx, []driver.RenewItem{{Key: key, Token: "tok", TTL: time.Minute}}); errs[0] != nil {
		t.Errorf("RenewBatch of a held key moved to the importing node: %v", errs[0])
	}
}

// finish moves every key left in the slot, then gives the slot to node 1.
func (m *migration) finish() {
	m.t.Helper()
	ctx := m.t.Context()
	for range 100 {
		keys, err := m.src.ClusterGetKeysInSlot(ctx, int(m.slot), 100).Result()
		m.must(err)
		if len(keys) == 0 {
			break
		}
		m.move(keys...)
	}
	m.must(m.dst.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID).Err())
	m.must(m.src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.dstID).Err())
}

// While a lock's slot is being migrated, its calls are answered TRYAGAIN
// (the scripts' companion keys are missing on one side) or ASK (the key is
// on the importing node): nothing runs, and the Store sends them again and
// follows the ASK, with and without replica acknowledgement. Before,
// Release and Acquire failed with TRYAGAIN for the whole migration, and on
// a cluster with replicas Renew of a key already moved failed with ASK, so
// a live holder lost its lease to a resharding.
func TestCallsDuringSlotMigration(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *testserver.RedisCluster
	}{
		{"no replicas", func(t *testing.T) *testserver.RedisCluster { return testserver.StartRedisCluster(t, 3) }},
		{"replicas", func(t *testing.T) *testserver.RedisCluster { return testserver.StartRedisClusterWithReplicas(t, 3, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cluster := tc.start(t)
			cc := clusterClient(cluster.Addrs())
			t.Cleanup(func() { _ = cc.Close() })
			s := newStore(t, cc)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			key := keyOnNode0(t, cluster, cc)
			renewed, released := key, "{"+key+"}:released"
			acquireAll(ctx, t, s, renewed, released)
			m := startMigration(t, cluster, key)
			// The renewed key moves first; its fence counter stays behind.
			m.move(renewed)
			renewsFollowTheMove(ctx, t, s, renewed)
			// Release and Acquire wait for the migration's end.
			type result struct {
				what string
				err  error
			}
			results := make(chan result, 2)
			go func() { results <- result{"Release", s.Release(ctx, released, "tok")} }()
			go func() {
				_, err := s.Acquire(ctx, "{"+key+"}:new", "tok", time.Minute)
				results <- result{"Acquire", err}
			}()
			time.Sleep(200 * time.Millisecond) // both refused at least once: they are sent again
			m.finish()
			for range 2 {
				if r := <-results; r.err != nil {
					t.Errorf("%s during the migration: %v", r.what, r.err)
				}
			}
			info, err := s.Inspect(ctx, released)
			if err != nil || info.Held {
				t.Errorf("after the migration, the released key: %+v, %v", info, err)
			}
			info, err = s.Inspect(ctx, renewed)
			if err != nil || !info.Held || info.TTL < 50*time.Second {
				t.Errorf("after the migration, the renewed key: %+v, %v", info, err)
			}
		})
	}
}

// A Client's waiter on a key whose slot is being migrated gets the key
// once the migration ends, within its wait.
func TestClientWaitsOutSlotMigration(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	cc := clusterClient(cluster.Addrs())
	t.Cleanup(func() { _ = cc.Close() })
	c := leasehold.New(newStore(t, cc, redisstore.WithoutReplicaAcks()))
	defer c.Close()
	key := keyOnNode0(t, cluster, cc)
	m := startMigration(t, cluster, key)
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		l, err := c.Acquire(ctx, key, time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	m.finish()
	if err := <-got; err != nil {
		t.Errorf("Acquire and Release across a slot migration: %v", err)
	}
}
