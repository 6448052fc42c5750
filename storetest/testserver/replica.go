package testserver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replicaReadyTimeout bounds the wait for a new replica to be listed online
// by its primary (a full sync of an almost empty data set: milliseconds).
const replicaReadyTimeout = 20 * time.Second

// NewRedisReplica starts a redis-server that replicates primary (opts apply
// to the replica: WithClockOffset gives it a clock of its own) and waits
// until the primary lists it as an online replica. The caller must call
// Close.
func NewRedisReplica(primary *RedisServer, opts ...RedisOption) (*RedisServer, error) {
	host, port := "127.0.0.1", strconv.Itoa(primary.port)
	r, err := NewRedisServer(append([]RedisOption{WithRedisArgs("--replicaof", host, port)}, opts...)...)
	if err != nil {
		return nil, err
	}
	if err := waitReplica(primary, r); err != nil {
		return nil, errors.Join(err, r.Close())
	}
	return r, nil
}

// StartRedisReplica starts a replica of primary for a test and registers
// tb.Cleanup to close it; it calls tb.Fatalf if it cannot, never skips.
func StartRedisReplica(tb testing.TB, primary *RedisServer, opts ...RedisOption) *RedisServer {
	tb.Helper()
	r, err := NewRedisReplica(primary, opts...)
	return started(tb, r, err)
}

// waitReplica polls primary's INFO replication until it lists replica
// online, for at most replicaReadyTimeout.
func waitReplica(primary, replica *RedisServer) error {
	want := "port=" + strconv.Itoa(replica.port) + ","
	err := pollUntil(replicaReadyTimeout, func() error {
		info, err := primary.Do("INFO", "replication")
		if err == nil && onlineReplica(info, want) {
			return nil
		}
		return errors.New(fmt.Sprint(info, err))
	})
	if err == nil {
		return nil
	}
	return fmt.Errorf("testserver: %s is not an online replica of %s after %v: %v", replica.Addr(), primary.Addr(), replicaReadyTimeout, err)
}

// onlineReplica reports whether an INFO replication reply lists the replica
// whose "port=N," is want as online.
func onlineReplica(info, want string) bool {
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, want) && strings.Contains(line, "state=online") {
			return true
		}
	}
	return false
}

// NewRedisClusterWithReplicas is NewRedisCluster with replicas replicas of
// each master, joined to the cluster as its replicas (CLUSTER REPLICATE),
// and waits until every master lists its replicas online and every node
// knows every other. Replica(i, j) returns them.
func NewRedisClusterWithReplicas(masters, replicas int, opts ...RedisOption) (*RedisCluster, error) {
	if replicas < 1 {
		return nil, fmt.Errorf("testserver: NewRedisClusterWithReplicas needs at least 1 replica per master, got %d", replicas)
	}
	c, err := NewRedisCluster(masters, opts...)
	if err != nil {
		return nil, err
	}
	nodeOpts := append([]RedisOption{withCluster()}, opts...)
	for _, m := range c.nodes {
		id, err := m.Do("CLUSTER", "MYID")
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		var rs []*RedisServer
		for range replicas {
			r, err := NewRedisServer(nodeOpts...)
			if err != nil {
				return nil, errors.Join(err, c.Close())
			}
			rs = append(rs, r)
			c.replicas = append(c.replicas, rs[len(rs)-1:]...)
			if err := joinAsReplica(r, m, id); err != nil {
				return nil, errors.Join(err, c.Close())
			}
		}
		for _, r := range rs {
			if err := waitReplica(m, r); err != nil {
				return nil, errors.Join(err, c.Close())
			}
		}
	}
	c.perMaster = replicas
	return c, c.waitKnown()
}

// joinAsReplica makes r meet master and, once r knows master's id,
// replicate it.
func joinAsReplica(r, master *RedisServer, id string) error {
	if _, err := r.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(master.port), strconv.Itoa(master.busPort)); err != nil {
		return err
	}
	// r does not know id until the handshake ends.
	err := pollUntil(clusterReadyTimeout, func() error { _, err := r.Do("CLUSTER", "REPLICATE", id); return err })
	if err == nil {
		return nil
	}
	return fmt.Errorf("testserver: %s cannot replicate %s: %w", r.Addr(), master.Addr(), err)
}

// waitKnown waits until every node reports cluster_state:ok and knows
// every node.
func (c *RedisCluster) waitKnown() error {
	all := append(append([]*RedisServer(nil), c.nodes...), c.replicas...)
	want := strconv.Itoa(len(all))
	problem := pollUntil(clusterReadyTimeout, func() error {
		for _, n := range all {
			info, err := n.Do("CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if InfoField(info, "cluster_state") != "ok" || InfoField(info, "cluster_known_nodes") != want {
				return fmt.Errorf("node %s: cluster_state %s, %s known nodes, want ok and %s", n.Addr(),
					InfoField(info, "cluster_state"), InfoField(info, "cluster_known_nodes"), want)
			}
		}
		return nil
	})
	if problem == nil {
		return nil
	}
	return errors.Join(fmt.Errorf("testserver: cluster with replicas not ready within %v: %w", clusterReadyTimeout, problem), c.Close())
}

// Replica returns replica j of master i (NewRedisClusterWithReplicas).
func (c *RedisCluster) Replica(i, j int) *RedisServer { return c.replicas[i*c.perMaster+j] }

// StartRedisClusterWithReplicas starts a cluster of masters masters with
// replicas replicas each for a test and registers tb.Cleanup to close it. It
// calls tb.Fatalf if it cannot, and never skips the test.
func StartRedisClusterWithReplicas(tb testing.TB, masters, replicas int) *RedisCluster {
	tb.Helper()
	c, err := NewRedisClusterWithReplicas(masters, replicas)
	return started(tb, c, err)
}
