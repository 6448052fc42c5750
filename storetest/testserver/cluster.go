package testserver

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"
)

const (
	// clusterSlots is the number of hash slots in a Redis Cluster.
	clusterSlots = 16384
	// clusterReadyTimeout bounds how long we wait for a new cluster to
	// become healthy on every node.
	clusterReadyTimeout = 20 * time.Second
	// clusterPollInterval is the pause between two health checks.
	clusterPollInterval = 50 * time.Millisecond
)

// RedisCluster is a real Redis Cluster of N masters on 127.0.0.1, all
// slots assigned, cluster_state:ok on every node; with replicas when made
// by NewRedisClusterWithReplicas.
type RedisCluster struct {
	nodes     []*RedisServer
	replicas  []*RedisServer // of master i: [i*perMaster, (i+1)*perMaster)
	perMaster int
}

// NewRedisCluster starts masters redis-server processes in cluster mode
// (masters must be at least 3), splits the 16384 slots evenly between them,
// joins them and waits (at most 20 s) until every node reports
// cluster_state:ok and knows the full slot map. The options apply to every
// node. The caller must call Close.
func NewRedisCluster(masters int, opts ...RedisOption) (*RedisCluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("testserver: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	nodeOpts := append([]RedisOption{withCluster()}, opts...)
	c := &RedisCluster{}
	for i := 0; i < masters; i++ {
		s, err := NewRedisServer(nodeOpts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("testserver: start cluster node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, s)
	}
	if err := c.create(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// create assigns the slots, joins the nodes and waits until the cluster is
// healthy. It does what "redis-cli --cluster create" does, without redis-cli.
func (c *RedisCluster) create() error {
	n := len(c.nodes)
	for i, node := range c.nodes {
		// Distinct config epochs avoid a round of epoch-collision
		// resolution once the nodes meet.
		if _, err := node.command("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return err
		}
		first := i * clusterSlots / n
		last := (i+1)*clusterSlots/n - 1
		if _, err := node.command("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			return err
		}
	}
	for _, node := range c.nodes[1:] {
		_, err := c.nodes[0].command("CLUSTER", "MEET", "127.0.0.1",
			strconv.Itoa(node.port), strconv.Itoa(node.busPort))
		if err != nil {
			return err
		}
	}
	return c.waitReady()
}

// waitReady polls every node until all of them are healthy, or fails after
// clusterReadyTimeout with the last problem seen.
func (c *RedisCluster) waitReady() error {
	problem := pollUntil(clusterReadyTimeout, func() error {
		for _, node := range c.nodes {
			if err := c.checkNode(node); err != nil {
				return err
			}
		}
		return nil
	})
	if problem == nil {
		return nil
	}
	return fmt.Errorf("testserver: cluster not ready within %v: %w", clusterReadyTimeout, problem)
}

// checkNode returns nil if node reports cluster_state:ok, all slots assigned
// and served, and a CLUSTER SLOTS map that covers all slots with exactly the
// cluster's masters at their 127.0.0.1 addresses.
func (c *RedisCluster) checkNode(node *RedisServer) error {
	n := strconv.Itoa(len(c.nodes))
	reply, err := node.command("CLUSTER", "INFO")
	if err != nil {
		return err
	}
	info, _ := reply.(string)
	want := []struct{ field, value string }{
		{"cluster_state", "ok"},
		{"cluster_slots_assigned", strconv.Itoa(clusterSlots)},
		{"cluster_slots_ok", strconv.Itoa(clusterSlots)},
		{"cluster_known_nodes", n},
		{"cluster_size", n},
	}
	for _, w := range want {
		if got := InfoField(info, w.field); got != w.value {
			return fmt.Errorf("node %s: CLUSTER INFO has %s:%s, want %s", node.Addr(), w.field, got, w.value)
		}
	}

	reply, err = node.command("CLUSTER", "SLOTS")
	if err != nil {
		return err
	}
	covered, masters, err := parseClusterSlots(reply)
	if err != nil {
		return fmt.Errorf("node %s: %w", node.Addr(), err)
	}
	if covered != clusterSlots {
		return fmt.Errorf("node %s: CLUSTER SLOTS covers %d slots, want %d", node.Addr(), covered, clusterSlots)
	}
	if len(masters) != len(c.nodes) {
		return fmt.Errorf("node %s: CLUSTER SLOTS names %d masters, want %d", node.Addr(), len(masters), len(c.nodes))
	}
	for _, other := range c.nodes {
		if !masters[other.Addr()] {
			return fmt.Errorf("node %s: CLUSTER SLOTS does not name %s", node.Addr(), other.Addr())
		}
	}
	return nil
}

// parseClusterSlots reads a CLUSTER SLOTS reply and returns how many slots
// it covers and the set of master addresses ("ip:port") it names.
// Each entry is [first slot, last slot, [ip, port, id, ...], replicas...].
func parseClusterSlots(reply any) (int, map[string]bool, error) {
	entries, ok := reply.([]any)
	if !ok {
		return 0, nil, fmt.Errorf("CLUSTER SLOTS: reply is %T, want an array", reply)
	}
	covered := 0
	masters := make(map[string]bool)
	for _, e := range entries {
		entry, ok := e.([]any)
		if !ok || len(entry) < 3 {
			return 0, nil, fmt.Errorf("CLUSTER SLOTS: bad entry %v", e)
		}
		first, ok1 := entry[0].(int64)
		last, ok2 := entry[1].(int64)
		master, ok3 := entry[2].([]any)
		if !ok1 || !ok2 || !ok3 || len(master) < 2 {
			return 0, nil, fmt.Errorf("CLUSTER SLOTS: bad entry %v", e)
		}
		ip, ok1 := master[0].(string)
		port, ok2 := master[1].(int64)
		if !ok1 || !ok2 {
			return 0, nil, fmt.Errorf("CLUSTER SLOTS: bad master %v", master)
		}
		covered += int(last - first + 1)
		masters[ip+":"+strconv.FormatInt(port, 10)] = true
	}
	return covered, masters, nil
}

// Addrs returns the addresses of the masters, "127.0.0.1:PORT" each, in
// node order.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Node returns node i (0 <= i < number of masters). Node i serves the i-th
// even share of the slots, in order.
func (c *RedisCluster) Node(i int) *RedisServer {
	return c.nodes[i]
}

// Close stops every node and removes their directories. It is safe to call
// more than once.
func (c *RedisCluster) Close() error {
	var errs []error
	for _, node := range append(append([]*RedisServer(nil), c.replicas...), c.nodes...) {
		errs = append(errs, node.Close())
	}
	return errors.Join(errs...)
}

// StartRedisCluster starts a cluster of masters nodes for a test or
// benchmark and registers tb.Cleanup to close it. If the cluster cannot be
// started it calls tb.Fatalf with the reason. It never skips the test.
func StartRedisCluster(tb testing.TB, masters int) *RedisCluster {
	tb.Helper()
	c, err := NewRedisCluster(masters)
	return started(tb, c, err)
}
