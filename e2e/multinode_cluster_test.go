package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/e2e/internal/netns"
	"github.com/leasehold/leasehold/store/redisstore"
)

const (
	// clusterMasters: the fewest a Redis Cluster fails over with (a
	// majority of masters votes), each with one replica.
	clusterMasters = 3
	// clusterNodeTimeout is cluster-node-timeout: a master silent this
	// long is failing. Redis's default is 15 s; 1 s fails over within a
	// few seconds here.
	clusterNodeTimeout = time.Second
	// clusterCut is how long a master takes writes its replica never gets
	// before the replica takes over: over a TTL of the drill (600 ms), so
	// that jobs start there whose locks the new master never sees.
	clusterCut = time.Second
	// clusterWait bounds the waits for a failover and for the cluster to
	// be whole again (a replica's full sync included).
	clusterWait = 30 * time.Second
	// clusterFailoverCost is what a failover may add to a takeover: the
	// node timeout, the replicas' election and the client's new slot map;
	// 0.3 to 3 s from the fault to the new master measured here.
	clusterFailoverCost = 4 * time.Second
)

// redisClusterNS is a Redis Cluster of 3 masters and 3 replicas, each node
// in its own network namespace.
type redisClusterNS struct {
	nodes []*redisNode
	ids   map[*redisNode]string
	mu    sync.Mutex
	busy  bool
	// failovers: from a fault on a master to another node serving its slots.
	failovers []time.Duration
	wg        sync.WaitGroup
}

func startRedisClusterNS(t *testing.T) *redisClusterNS {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: install Debian's redis-server (make deps does)")
	}
	// Made before the namespaces, so that it is removed after their servers
	// are stopped: a running server may write in its directory as it goes.
	base := t.TempDir()
	nt := netns.New(t, 2*clusterMasters)
	c := &redisClusterNS{ids: map[*redisNode]string{}}
	for i, nd := range nt.Nodes() {
		r := &redisNode{node: nd, dir: filepath.Join(base, fmt.Sprint(i)), bin: bin}
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r.args = []string{"--bind", nd.Addr.String(), "--port", "6379", "--protected-mode", "no",
			"--save", "", "--appendonly", "no", "--dir", r.dir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(r.dir, "nodes.conf"),
			"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10)}
		if err := r.start(); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, r)
	}
	t.Cleanup(func() {
		c.wg.Wait()
		if t.Failed() {
			for _, r := range c.nodes {
				if b, err := os.ReadFile(filepath.Join(r.dir, "redis.log")); err == nil {
					t.Logf("%s redis.log tail:\n%s", r.node.Addr, tail(string(b), 8))
				}
			}
		}
	})
	err = pollUntil(clusterWait, func() error {
		for _, r := range c.nodes {
			id, err := ask(r.addr(), "CLUSTER", "MYID")
			if err != nil {
				return err
			}
			c.ids[r] = fmt.Sprint(id)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("cluster nodes not up: %v", err)
	}
	const slots = 16384
	for i, m := range c.nodes[:clusterMasters] {
		for _, cmd := range [][]any{
			{"CLUSTER", "SET-CONFIG-EPOCH", i + 1},
			{"CLUSTER", "ADDSLOTSRANGE", i * slots / clusterMasters, (i+1)*slots/clusterMasters - 1},
		} {
			if _, err := ask(m.addr(), cmd...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range c.nodes[1:] {
		if _, err := ask(c.nodes[0].addr(), "CLUSTER", "MEET", r.node.Addr.String(), 6379); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range c.nodes[clusterMasters:] {
		master := c.ids[c.nodes[i]]
		// A node knows another's id once their handshake is done.
		if err := pollUntil(clusterWait, func() error { _, err := ask(r.addr(), "CLUSTER", "REPLICATE", master); return err }); err != nil {
			t.Fatalf("%s cannot replicate %s: %v", r.addr(), c.nodes[i].addr(), err)
		}
	}
	if err := pollUntil(clusterWait, func() error { _, err := c.whole(); return err }); err != nil {
		t.Fatalf("cluster not ready: %v", err)
	}
	return c
}

func (c *redisClusterNS) addrs() []string {
	var a []string
	for _, r := range c.nodes {
		a = append(a, r.addr())
	}
	return a
}

// slotMasters maps the first slot of each shard to the node serving it, as
// node r sees the slot map.
func (c *redisClusterNS) slotMasters(r *redisNode) (map[int]*redisNode, error) {
	v, err := ask(r.addr(), "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	entries, _ := v.([]any)
	out := map[int]*redisNode{}
	for _, e := range entries {
		entry, _ := e.([]any)
		if len(entry) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS on %s: %v", r.addr(), v)
		}
		first, _ := entry[0].(int64)
		master, _ := entry[2].([]any)
		if len(master) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS on %s: %v", r.addr(), v)
		}
		addr := fmt.Sprintf("%v:%v", master[0], master[1])
		for _, n := range c.nodes {
			if n.addr() == addr {
				out[int(first)] = n
			}
		}
	}
	return out, nil
}

// whole returns the masters, by their first slot, when every node is up,
// sees the cluster ok with its 6 nodes and the same masters, and every
// master has one replica online: the cluster is ready for the next fault.
func (c *redisClusterNS) whole() (map[int]*redisNode, error) {
	var masters map[int]*redisNode
	for _, r := range c.nodes {
		info, err := ask(r.addr(), "CLUSTER", "INFO")
		if err != nil {
			return nil, err
		}
		f := fmt.Sprint(info)
		if !strings.Contains(f, "cluster_state:ok") || !strings.Contains(f, fmt.Sprintf("cluster_known_nodes:%d", len(c.nodes))) {
			return nil, fmt.Errorf("%s: cluster not ok or not every node known", r.addr())
		}
		m, err := c.slotMasters(r)
		if err != nil {
			return nil, err
		}
		if masters != nil && !maps.Equal(masters, m) {
			return nil, fmt.Errorf("%s sees other masters", r.addr())
		}
		masters = m
	}
	if len(masters) != clusterMasters {
		return nil, fmt.Errorf("%d masters", len(masters))
	}
	for _, m := range masters {
		info, err := ask(m.addr(), "INFO", "replication")
		if err != nil {
			return nil, err
		}
		if s := fmt.Sprint(info); !strings.Contains(s, "connected_slaves:1") || !strings.Contains(s, "state=online") {
			return nil, fmt.Errorf("master %s has not its replica online", m.addr())
		}
	}
	return masters, nil
}

// replicaOf is the node that replicates master m.
func (c *redisClusterNS) replicaOf(m *redisNode) (*redisNode, error) {
	for _, r := range c.nodes {
		if r == m {
			continue
		}
		info, err := ask(r.addr(), "INFO", "replication")
		if err != nil {
			continue
		}
		if s := fmt.Sprint(info); strings.Contains(s, "role:slave") && strings.Contains(s, "master_host:"+m.node.Addr.String()) {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no replica of %s", m.addr())
}

func (c *redisClusterNS) failoverCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failovers)
}

func (c *redisClusterNS) settle() { c.wg.Wait() }

// clusterFault fails a master over, the shards taking turns, in one of
// three ways: its replica is cut off from it while the clients still write
// there, then takes over (CLUSTER FAILOVER TAKEOVER), so those writes are
// lost for sure; it is SIGKILLed; or it is cut off from every other node
// (the clients still reach it; it stops taking writes after the node
// timeout) and the others fail over. It heals in the background once
// another node serves the slots (a killed node restarts empty and rejoins
// as a replica); the next fault waits until the cluster is whole again.
type clusterFault struct {
	faultTurns
	c *redisClusterNS
}

const (
	faultClusterTakeover  = "cluster-cut-replica-then-takeover"
	faultClusterKill      = "cluster-kill-9-master"
	faultClusterPartition = "cluster-partition-master"
)

var clusterFaultKinds = []string{faultClusterTakeover, faultClusterKill, faultClusterPartition}

func (f *clusterFault) Inject(context.Context, faults.Env) error {
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy {
		return errClusterBusy
	}
	masters, err := c.whole()
	if err != nil {
		return errClusterBusy
	}
	firsts := slices.Sorted(maps.Keys(masters))
	slot := firsts[f.turn%len(firsts)]
	m := masters[slot]
	replica, err := c.replicaOf(m)
	if err != nil {
		return errClusterBusy
	}
	kind := f.next()
	switch kind {
	case faultClusterTakeover:
		err = m.node.IsolateFrom(replica.node)
	case faultClusterKill:
		err = m.proc().Kill()
	case faultClusterPartition:
		err = m.node.IsolateFromPeers()
	}
	if err != nil {
		_ = m.node.Heal()
		return err
	}
	f.injected(kind)
	c.busy = true
	start := time.Now()
	c.wg.Go(func() { c.failOver(m, replica, slot, kind, start) })
	return nil
}

// failOver ends a fault: the take-over, the wait for another node to serve
// slot (as a third node sees it), the heal.
func (c *redisClusterNS) failOver(m, replica *redisNode, slot int, kind string, start time.Time) {
	var err error
	if kind == faultClusterTakeover {
		time.Sleep(clusterCut) // the fault's own timing: the clients write on
		_, err = ask(replica.addr(), "CLUSTER", "FAILOVER", "TAKEOVER")
	}
	var witness *redisNode
	for _, r := range c.nodes {
		if r != m && r != replica {
			witness = r
			break
		}
	}
	if err == nil {
		err = pollUntil(clusterWait, func() error {
			ms, err := c.slotMasters(witness)
			if err != nil {
				return err
			}
			if ms[slot] == m || ms[slot] == nil {
				return errors.New("no failover yet")
			}
			return nil
		})
	}
	took := time.Since(start)
	_ = m.node.Heal()
	if kind == faultClusterKill {
		_ = m.start() // nodes.conf is kept: it rejoins, as a replica
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.failovers = append(c.failovers, took)
	}
	c.busy = false
}

// Heal does nothing: the fault heals itself after the failover.
func (f *clusterFault) Heal(context.Context, faults.Env) error { return nil }

// clusterDrill: locks in redisstore through go-redis's cluster client,
// made with opts, while the cluster faults take turns with the worker
// faults.
func clusterDrill(t *testing.T, c *redisClusterNS, opts ...redisstore.Option) drill.Config {
	t.Helper()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.addrs(), ContextTimeoutEnabled: true})
	store, err := redisstore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(); _ = client.Close() })
	return drill.Config{
		Store: store, StoreName: "redis cluster, 3 masters + 3 replicas in network namespaces",
		Storage: newJobs(t), StorageName: "postgres", Timeout: 3 * time.Minute,
		Faults: interleave(faults.Default(), &clusterFault{faultTurns: faultTurns{kinds: clusterFaultKinds}, c: c}),
		// TTL 600 ms at the drill's default time scale, 1/100.
		TakeoverSLO: check.DefaultTakeoverSLO(600*time.Millisecond) + clusterFailoverCost,
	}
}

// The drill on a Redis Cluster, each node in its own network namespace,
// through go-redis's cluster client, while masters fail over: a replica cut
// off from its master takes over while the clients still write to the old
// one, a master is SIGKILLed, or a master is cut off from the other nodes.
// Without replica acknowledgement (the negative control), two owners hold
// one key, as the store saw it, and the fence refuses their stale writes;
// with it (the default), each shard's acquires wait for that shard's
// replica, and no owner overlaps another over at least 8 failovers.
func TestMultiNodeCluster(t *testing.T) {
	c := startRedisClusterNS(t)
	mk := func(opts ...redisstore.Option) drill.Config { return clusterDrill(t, c, opts...) }
	off := redisDrills(t, c, mk, 150, 4, sawHazard, redisstore.WithoutReplicaAcks())
	on := redisDrills(t, c, mk, 150, 8, coveredFailovers(8))
	c.mu.Lock()
	fo := slices.Clone(c.failovers)
	c.mu.Unlock()
	slices.Sort(fo)
	t.Logf("failovers measured (fault to new master): %v", fo)
	checkAcks(t, off, on)
}
