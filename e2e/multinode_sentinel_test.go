package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// sentinelMaster is the name the Sentinels know the primary by.
	sentinelMaster = "lh"
	// sentinelDownAfter: a primary silent this long is down. Sentinel's
	// default is 30 s; 1 s fails over within a few seconds here.
	sentinelDownAfter = time.Second
	// sentinelFailoverTimeout bounds one failover attempt (default 3 min).
	sentinelFailoverTimeout = 3 * time.Second
	// sentinelFailoverCost is what a failover may add to a takeover:
	// down-after, then the Sentinels' vote and the replica's promotion;
	// 1.6 to 3.3 s from the fault to the new primary measured here.
	sentinelFailoverCost = 4 * time.Second
	// sentinelWait bounds the wait for a new primary after a fault, and for
	// the topology to be ready: several failover timeouts.
	sentinelWait = 20 * time.Second
)

// redisNode is a redis-server and a Sentinel in one namespace.
type redisNode struct {
	node   *netns.Node
	dir    string
	bin    string
	args   []string // the server's, for a restart
	env    []string // the server's (nil: ours); libfaketime's for a clock off
	mu     sync.Mutex
	server *netns.Proc
}

func (r *redisNode) start() error {
	p, err := r.node.Start(filepath.Join(r.dir, "redis.log"), r.env, r.bin, r.args...)
	if err == nil {
		r.mu.Lock()
		r.server = p
		r.mu.Unlock()
	}
	return err
}

// restartAsReplicaOf starts the server again, replicating primary
// ("ip:port"), whatever it was started as.
func (r *redisNode) restartAsReplicaOf(primary string) error {
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return err
	}
	var args []string
	for i := 0; i < len(r.args); i++ {
		if r.args[i] == "--replicaof" {
			i += 2
			continue
		}
		args = append(args, r.args[i])
	}
	r.args = append(args, "--replicaof", host, port)
	return r.start()
}

func (r *redisNode) proc() *netns.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.server
}

func (r *redisNode) addr() string     { return r.node.Addr.String() + ":6379" }
func (r *redisNode) sentinel() string { return r.node.Addr.String() + ":26379" }

// sentinelSet is a primary, 2 replicas and 3 Sentinels on a netns bridge.
type sentinelSet struct {
	nodes []*redisNode
	mu    sync.Mutex
	busy  bool
	// failovers: from a fault on the primary to the Sentinels naming another.
	failovers []time.Duration
	// astray: since when each Sentinel has named another primary than
	// the others; resets counts the Sentinels reset for it.
	astray map[*redisNode]time.Time
	resets int
	wg     sync.WaitGroup
}

func startSentinelSet(t *testing.T) *sentinelSet {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: install Debian's redis-server (make deps does)")
	}
	// Made before the namespaces, so that it is removed after their servers
	// are stopped: a running server may write in its directory as it goes.
	base := t.TempDir()
	nt := netns.New(t, 3)
	s := &sentinelSet{}
	for i, nd := range nt.Nodes() {
		r := &redisNode{node: nd, dir: filepath.Join(base, fmt.Sprint(i))}
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		s.nodes = append(s.nodes, r)
	}
	primary := s.nodes[0]
	for i, r := range s.nodes {
		args := []string{"--bind", r.node.Addr.String(), "--port", "6379", "--protected-mode", "no",
			"--save", "", "--appendonly", "no", "--dir", r.dir}
		if i > 0 {
			args = append(args, "--replicaof", primary.node.Addr.String(), "6379")
		}
		r.bin, r.args = bin, args
		if err := r.start(); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range s.nodes {
		conf := strings.Join([]string{
			"port 26379", "bind " + r.node.Addr.String(), "protected-mode no", "dir " + r.dir,
			fmt.Sprintf("sentinel monitor %s %s 6379 2", sentinelMaster, primary.node.Addr),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", sentinelMaster, sentinelDownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", sentinelMaster, sentinelFailoverTimeout.Milliseconds()),
		}, "\n") + "\n"
		path := filepath.Join(r.dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := r.node.Start(filepath.Join(r.dir, "sentinel.log"), nil, bin, path, "--sentinel"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		s.wg.Wait()
		if t.Failed() {
			for _, r := range s.nodes {
				for _, f := range []string{"redis.log", "sentinel.log"} {
					if b, err := os.ReadFile(filepath.Join(r.dir, f)); err == nil {
						t.Logf("%s %s tail:\n%s", r.node.Addr, f, tail(string(b), 8))
					}
				}
			}
		}
	})
	// Ready: every Sentinel names the primary and knows the 2 replicas and
	// the 2 other Sentinels.
	err = pollUntil(sentinelWait, func() error {
		for _, r := range s.nodes {
			if err := s.sentinelReady(r, primary.addr()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sentinels not ready: %v", err)
	}
	return s
}

// ask runs one command on addr with a short timeout.
func ask(addr string, args ...any) (any, error) {
	return askWithin(addr, 300*time.Millisecond, args...)
}

// askWithin runs one command on addr that may take up to d on the server
// (a WAIT with a timeout of d, say) before its reply.
func askWithin(addr string, d time.Duration, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: d, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

func (s *sentinelSet) sentinelReady(r *redisNode, primary string) error {
	got, err := s.primaryOf(r)
	if err != nil {
		return err
	}
	if got != primary {
		return fmt.Errorf("sentinel %s names %s, want %s", r.sentinel(), got, primary)
	}
	m, err := ask(r.sentinel(), "SENTINEL", "MASTER", sentinelMaster)
	if err != nil {
		return err
	}
	f := fields(m)
	if f["num-slaves"] != "2" || f["num-other-sentinels"] != "2" || f["flags"] != "master" {
		return fmt.Errorf("sentinel %s: %s replicas, %s other sentinels, flags %s", r.sentinel(), f["num-slaves"], f["num-other-sentinels"], f["flags"])
	}
	return nil
}

// fields reads a flat key, value reply (RESP2 array or RESP3 map).
func fields(v any) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
		}
	case map[any]any:
		for k, v := range x {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	}
	return out
}

// primaryOf is the primary's address that Sentinel r names.
func (s *sentinelSet) primaryOf(r *redisNode) (string, error) {
	v, err := ask(r.sentinel(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster)
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME: %v", r.sentinel(), v)
	}
	return fmt.Sprintf("%v:%v", a[0], a[1]), nil
}

// primary returns the node that a majority of Sentinels name, or nil.
func (s *sentinelSet) primary() *redisNode {
	votes := map[string]int{}
	for _, r := range s.nodes {
		if a, err := s.primaryOf(r); err == nil {
			votes[a]++
		}
	}
	for _, r := range s.nodes {
		if votes[r.addr()] >= 2 {
			return r
		}
	}
	return nil
}

// whole returns the primary when every Sentinel names it and it has 2
// replicas online: the set is ready for the next fault.
func (s *sentinelSet) whole() (*redisNode, error) {
	p := s.primary()
	if p == nil {
		return nil, errors.New("no primary named by a majority")
	}
	for _, r := range s.nodes {
		if a, err := s.primaryOf(r); err != nil || a != p.addr() {
			return nil, fmt.Errorf("sentinel %s names %s (%v)", r.sentinel(), a, err)
		}
	}
	info, err := ask(p.addr(), "INFO", "replication")
	if err != nil {
		return nil, err
	}
	if !strings.Contains(fmt.Sprint(info), "connected_slaves:2") {
		return nil, fmt.Errorf("primary %s has not 2 replicas", p.addr())
	}
	return p, nil
}

// sentinelAstray is how long a Sentinel may name another primary than the
// other two before bringBackAstray resets it: several hello periods (2 s),
// in which a Sentinel that missed a failover learns of it.
const sentinelAstray = 10 * time.Second

// bringBackAstray resets a Sentinel that has named another primary than
// the other two for sentinelAstray: a Sentinel that missed a failover can
// keep a configuration of the same epoch as theirs and never take theirs
// (seen here after failovers seconds apart), and the set is then never
// whole again. It is made to monitor the others' primary afresh, as an
// operator would (SENTINEL REMOVE, then MONITOR and the same settings).
func (s *sentinelSet) bringBackAstray() {
	votes := map[string][]*redisNode{}
	for _, r := range s.nodes {
		if a, err := s.primaryOf(r); err == nil {
			votes[a] = append(votes[a], r)
		}
	}
	var primary string
	for a, rs := range votes {
		if len(rs) == len(s.nodes)-1 {
			primary = a
		}
	}
	if s.astray == nil {
		s.astray = map[*redisNode]time.Time{}
	}
	for _, r := range s.nodes {
		a, err := s.primaryOf(r)
		if primary == "" || err != nil || a == primary {
			delete(s.astray, r)
			continue
		}
		since, ok := s.astray[r]
		if !ok {
			s.astray[r] = time.Now()
			continue
		}
		if time.Since(since) < sentinelAstray {
			continue
		}
		host, port, _ := net.SplitHostPort(primary)
		for _, cmd := range [][]any{
			{"SENTINEL", "REMOVE", sentinelMaster},
			{"SENTINEL", "MONITOR", sentinelMaster, host, port, 2},
			{"SENTINEL", "SET", sentinelMaster, "down-after-milliseconds", sentinelDownAfter.Milliseconds()},
			{"SENTINEL", "SET", sentinelMaster, "failover-timeout", sentinelFailoverTimeout.Milliseconds()},
		} {
			_, _ = ask(r.sentinel(), cmd...)
		}
		delete(s.astray, r)
		s.resets++
	}
}

// sentinelFault cuts the primary off from its peers (its Sentinel with it;
// the clients still reach it, so it keeps taking writes that the new
// primary never gets) or SIGKILLs it. It lasts until the other Sentinels
// have failed over, then heals in the background (the drill's heal, a TTL
// later, is too early for a failover): the partition is lifted, a killed
// server restarts empty and Sentinel makes it a replica. The next fault
// waits until the set is whole again. The kinds take turns.
type sentinelFault struct {
	faultTurns
	s *sentinelSet
}

const (
	faultSentinelPartition = "sentinel-partition-primary"
	faultSentinelKill      = "sentinel-kill-9-primary"
)

var sentinelFaultKinds = []string{faultSentinelPartition, faultSentinelKill}

func (f *sentinelFault) Inject(context.Context, faults.Env) error {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy {
		return errClusterBusy
	}
	p, err := s.whole()
	if err != nil {
		s.bringBackAstray()
		return errClusterBusy
	}
	kind := f.next()
	switch kind {
	case faultSentinelPartition:
		err = p.node.IsolateFromPeers()
	case faultSentinelKill:
		err = p.proc().Kill()
	}
	if err != nil {
		_ = p.node.Heal()
		return err
	}
	f.injected(kind)
	s.busy = true
	start := time.Now()
	s.wg.Go(func() { s.failOver(p, kind, start) })
	return nil
}

// failOver waits until the other Sentinels name a new primary, records the
// time, and heals. A killed server always comes back: as a replica of the
// primary a majority of Sentinels names, or, if there is none other than
// itself, as it was started. (When one of the others missed the failover,
// the wait ends without a primary of its own to name; leaving the server
// down then left the set never whole again and every later fault refused.)
func (s *sentinelSet) failOver(p *redisNode, kind string, start time.Time) {
	var others []*redisNode
	for _, r := range s.nodes {
		if r != p {
			others = append(others, r)
		}
	}
	err := pollUntil(sentinelWait, func() error {
		for _, r := range others {
			if a, err := s.primaryOf(r); err != nil || a == p.addr() {
				return errors.New("no failover yet")
			}
		}
		return nil
	})
	took := time.Since(start)
	_ = p.node.Heal()
	if kind == faultSentinelKill {
		// Back as a replica of the new primary, as an operator (or a
		// supervisor with Sentinel's config) brings it back: started
		// empty as a primary, it would take writes from any client that
		// its own Sentinel, still behind, sent there.
		if q := s.primary(); q != nil && q != p {
			_ = p.restartAsReplicaOf(q.addr())
		} else {
			_ = p.start()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.failovers = append(s.failovers, took)
	}
	s.busy = false
}

// Heal does nothing: the fault heals itself after the failover.
func (f *sentinelFault) Heal(context.Context, faults.Env) error { return nil }

// sentinelDrill: locks in redisstore through go-redis's failover client,
// made with opts, while the Sentinel faults of kinds take turns with the
// worker faults.
func sentinelDrill(t *testing.T, s *sentinelSet, kinds []string, opts ...redisstore.Option) drill.Config {
	t.Helper()
	var addrs []string
	for _, r := range s.nodes {
		addrs = append(addrs, r.sentinel())
	}
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: sentinelMaster, SentinelAddrs: addrs, ContextTimeoutEnabled: true,
	})
	store, err := redisstore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(); _ = client.Close() })
	jobs := newJobs(t)
	return drill.Config{
		Store: store, StoreName: "redis, primary + 2 replicas + 3 sentinels in network namespaces",
		Storage: jobs, StorageName: "postgres", Timeout: 3 * time.Minute,
		Faults: interleave(faults.Default(), &sentinelFault{faultTurns: faultTurns{kinds: kinds}, s: s}),
		// TTL 600 ms at the drill's default time scale, 1/100.
		TakeoverSLO: check.DefaultTakeoverSLO(600*time.Millisecond) + sentinelFailoverCost,
	}
}

func (s *sentinelSet) failoverCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.failovers)
}

func (s *sentinelSet) settle() { s.wg.Wait() }

// The drill on Redis with Sentinel, each node (a redis-server and its
// Sentinel) in its own namespace, through go-redis's failover client,
// while the primary is cut off from its peers (it still serves the
// clients) or SIGKILLed, and the Sentinels fail over to a replica that
// missed its last writes. Without replica acknowledgement (the negative
// control), two owners hold one key, as the store saw it, and the fence
// refuses their stale writes; with it (the default), no owner overlaps
// another over at least 8 failovers.
func TestMultiNodeSentinel(t *testing.T) {
	s := startSentinelSet(t)
	// About 25 s at TTL 600 ms: some 3 failovers a drill.
	mk := func(opts ...redisstore.Option) drill.Config { return sentinelDrill(t, s, sentinelFaultKinds, opts...) }
	off := redisDrills(t, s, mk, 150, 4, sawHazard, redisstore.WithoutReplicaAcks())
	on := redisDrills(t, s, mk, 150, 8, coveredFailovers(8))
	s.mu.Lock()
	fo := slices.Clone(s.failovers)
	s.mu.Unlock()
	slices.Sort(fo)
	t.Logf("failovers measured (fault to new primary): %v; Sentinels reset after missing a failover: %d", fo, s.resets)
	checkAcks(t, off, on)
}

// The negative control with Sentinel: with fencing off, the drill reports
// the stale writes that PostgreSQL accepted.
func TestMultiNodeSentinelCanFail(t *testing.T) {
	s := startSentinelSet(t)
	cfg := sentinelDrill(t, s, sentinelFaultKinds, redisstore.WithoutReplicaAcks())
	cfg.Jobs, cfg.NoFencing = 40, true // about 8 s; a few stale writes
	rep, _ := runMultiNode(t, cfg, s.wg.Wait)
	checkStaleWritesReported(t, rep)
}
