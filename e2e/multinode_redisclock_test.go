package e2e_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/leasehold/leasehold/storetest/testserver"
)

const (
	// clockCut is how long the primary takes writes its replicas never
	// get before it is killed: half the drill's TTL (600 ms), time for
	// several acquires.
	clockCut = 300 * time.Millisecond
	// clockDetect is the wait from the kill to the promotion: Sentinel's
	// down-after of the Sentinel drill (1 s), so that the gap from the last
	// acquire on the old primary to the first on the new one (the clock
	// condition's D) is at least that.
	clockDetect = time.Second
	// clockWait bounds the wait for the set to be whole again.
	clockWait = 20 * time.Second
)

// clockSet is a primary and 2 replicas, each in its own namespace, whose
// failovers the test itself makes, as Sentinel would (kill, detect,
// promote the replica, repoint the other and the clients), without
// Sentinel: with replicas' clocks seconds behind and failovers seconds
// apart, Sentinels were seen to keep two configurations of one epoch, and
// the set never became whole again. Node 0's clock is the real one; nodes
// 1 and 2 run under libfaketime, behind it. Failovers alternate between
// node 0 and a node behind, unless the other replica has more of the
// primary's writes: then it is promoted, as Sentinel would (it promotes the
// replica with the greatest replication offset), which is what makes an
// acquire acknowledged by one replica survive the failover.
type clockSet struct {
	nodes []*redisNode

	mu        sync.Mutex
	primary   *redisNode
	busy      bool
	failovers []time.Duration
	promoted  []*redisNode
	turn      int
	wg        sync.WaitGroup
}

func startClockSet(t *testing.T, behind time.Duration) *clockSet {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: install Debian's redis-server (make deps does)")
	}
	env, err := testserver.ClockOffsetEnv(-behind)
	if err != nil {
		t.Fatal(err)
	}
	// Made before the namespaces, so that it is removed after their servers
	// are stopped: a running server may write in its directory as it goes.
	base := t.TempDir()
	nt := netns.New(t, 3)
	c := &clockSet{}
	for i, nd := range nt.Nodes() {
		r := &redisNode{node: nd, dir: filepath.Join(base, fmt.Sprint(i)), bin: bin}
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r.args = []string{"--bind", nd.Addr.String(), "--port", "6379", "--protected-mode", "no",
			"--save", "", "--appendonly", "no", "--dir", r.dir}
		if i > 0 {
			r.env = env
			r.args = append(r.args, "--replicaof", nt.Node(0).Addr.String(), "6379")
		}
		if err := r.start(); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, r)
	}
	c.primary = c.nodes[0]
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
	if err := c.waitWhole(); err != nil {
		t.Fatalf("replicas not online: %v", err)
	}
	return c
}

// waitWhole waits, for at most clockWait, until the primary lists both
// replicas online.
func (c *clockSet) waitWhole() error {
	return pollUntil(clockWait, func() error { _, err := c.whole(); return err })
}

// whole returns the primary once it lists both replicas online.
func (c *clockSet) whole() (*redisNode, error) {
	p := c.primary
	info, err := ask(p.addr(), "INFO", "replication")
	if err != nil {
		return nil, err
	}
	if n := strings.Count(fmt.Sprint(info), "state=online"); n != 2 {
		return nil, fmt.Errorf("primary %s has %d replicas online", p.addr(), n)
	}
	return p, nil
}

// dial dials the current primary, whatever addr the client asks for: the
// clients' view of the failovers, as a failover client gets it from
// Sentinel.
func (c *clockSet) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	c.mu.Lock()
	addr := c.primary.addr()
	c.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (c *clockSet) failoverCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failovers)
}

func (c *clockSet) settle() { c.wg.Wait() }

// behindFailovers counts the failovers to a node behind: the ones that
// measure.
func (c *clockSet) behindFailovers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.promoted {
		if r != c.nodes[0] {
			n++
		}
	}
	return n
}

// clockFault cuts the primary off from its replicas for clockCut while the
// clients write there, SIGKILLs it (still cut off), and, clockDetect
// later, promotes a replica that lacks those writes: node 0 after a node
// behind, a node behind after node 0 (the two take turns). The old primary
// comes back as a replica of the new one.
type clockFault struct{ c *clockSet }

const faultClockFailover = "redis-cut-kill-9-primary-promote-replica"

func (f *clockFault) Name() string                           { return faultClockFailover }
func (f *clockFault) Available(faults.Env) bool              { return true }
func (f *clockFault) Heal(context.Context, faults.Env) error { return nil }

func (f *clockFault) Inject(context.Context, faults.Env) error {
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy {
		return errClusterBusy
	}
	p, err := c.whole()
	if err != nil {
		return errClusterBusy
	}
	var next *redisNode
	if p == c.nodes[0] {
		next = c.nodes[1+c.turn%2]
		c.turn++
	} else {
		next = c.nodes[0]
	}
	if err := p.node.IsolateFromPeers(); err != nil {
		_ = p.node.Heal()
		return err
	}
	c.busy = true
	start := time.Now()
	c.wg.Go(func() { c.failOver(p, next, start) })
	return nil
}

// failOver kills p after the cut, waits for the detection and promotes
// next.
func (c *clockSet) failOver(p, next *redisNode, start time.Time) {
	time.Sleep(clockCut) // the fault's own timing: the clients write on
	err := p.proc().Kill()
	// p stays cut off until the promotion: the kernel keeps sending what a
	// killed process left in its sockets, so a heal now would hand the
	// replicas the writes of the cut (a lost machine loses them), and
	// whether the promoted one had them would depend on TCP's retransmission
	// timer.
	time.Sleep(clockDetect) // as Sentinel's down-after
	for _, r := range c.nodes {
		if r != p && r != next && replOffset(r.addr()) > replOffset(next.addr()) {
			next = r // the replica with the most data, as Sentinel picks
		}
	}
	if err == nil {
		_, err = ask(next.addr(), "REPLICAOF", "NO", "ONE")
	}
	host, port, _ := net.SplitHostPort(next.addr())
	for _, r := range c.nodes {
		if r != p && r != next && err == nil {
			_, err = ask(r.addr(), "REPLICAOF", host, port)
		}
	}
	c.mu.Lock()
	if err == nil {
		c.primary = next
	}
	c.mu.Unlock()
	if herr := p.node.Heal(); err == nil {
		err = herr
	}
	if err == nil {
		err = p.restartAsReplicaOf(next.addr())
	}
	took := time.Since(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.failovers = append(c.failovers, took)
		c.promoted = append(c.promoted, next)
		c.busy = false
	} // else: stays busy, no more faults; the test sees too few failovers
}

// probeReissue is the negative control in one deterministic step, run once
// the drills are over: with node 0 (the real clock) primary, a probe key
// is acquired and released there and reaches both replicas; acquired again
// while the primary is cut off from its replicas (cut, its fence, or the
// error of that acquire: with replica acknowledgement it fails); and, after
// failOver to a replica behind, acquired on the new primary (after). Fences
// after the cut one were issued again when after ≤ cut.
func (c *clockSet) probeReissue(t *testing.T, store *redisstore.Store, key string) (cut, after int64, cutErr error) {
	t.Helper()
	ctx := t.Context()
	c.settle()
	for range 3 { // failOver may pick another replica than node 0
		c.mu.Lock()
		p := c.primary
		c.busy = true
		c.mu.Unlock()
		if p == c.nodes[0] {
			break
		}
		c.failOver(p, c.nodes[0], time.Now())
		if err := c.waitWhole(); err != nil {
			t.Fatalf("probe: replicas not online after a failover to node 0: %v", err)
		}
	}
	c.mu.Lock()
	p := c.primary
	c.mu.Unlock()
	if p != c.nodes[0] {
		t.Fatal("probe: node 0 not primary after 3 failovers")
	}
	if err := c.waitWhole(); err != nil {
		t.Fatalf("probe: replicas not online: %v", err)
	}
	const ttl = 10 * time.Second
	first := "probe-first"
	if _, err := store.Acquire(ctx, key, first, ttl); err != nil {
		t.Fatalf("probe: first acquire: %v", err)
	}
	if err := store.Release(ctx, key, first); err != nil {
		t.Fatalf("probe: first release: %v", err)
	}
	// WAIT answers when both replicas acknowledge or after its 5 s: the
	// reply may take that long on a loaded machine, past ask's 300 ms.
	if n, err := askWithin(p.addr(), 6*time.Second, "WAIT", 2, 5000); err != nil || fmt.Sprint(n) != "2" {
		t.Fatalf("probe: WAIT for both replicas: %v, %v", n, err)
	}
	if err := p.node.IsolateFromPeers(); err != nil {
		_ = p.node.Heal()
		t.Fatal(err)
	}
	cut, cutErr = store.Acquire(ctx, key, "probe-cut", ttl)
	c.failOver(p, c.nodes[1], time.Now()) // heals p; node 1 or 2, both behind
	if err := c.waitWhole(); err != nil {
		t.Fatalf("probe: replicas not online after the failover: %v", err)
	}
	after, err := store.Acquire(ctx, key, "probe-after", ttl)
	if err != nil {
		t.Fatalf("probe: acquire on the new primary: %v", err)
	}
	if err := store.Release(ctx, key, "probe-after"); err != nil {
		t.Fatalf("probe: release on the new primary: %v", err)
	}
	return cut, after, cutErr
}

// replOffset is the replication offset a replica has processed, or -1 when
// it cannot be read.
func replOffset(addr string) int64 {
	info, err := ask(addr, "INFO", "replication")
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(testserver.InfoField(fmt.Sprint(info), "slave_repl_offset"), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// store is a redisstore Store made with opts on a client that follows the
// test's failovers; both are closed when the test ends.
func (c *clockSet) store(t *testing.T, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: "clockset:6379", Dialer: c.dial, ContextTimeoutEnabled: true})
	store, err := redisstore.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(); _ = client.Close() })
	return store
}

// clockDrill: locks in redisstore, made with opts, through a client that
// follows the test's failovers, while they take turns with the worker
// faults.
func clockDrill(t *testing.T, c *clockSet, opts ...redisstore.Option) drill.Config {
	t.Helper()
	return drill.Config{
		Store: c.store(t, opts...), StoreName: "redis, primary + 2 replicas (clocks behind) in network namespaces, failed over by the test",
		Storage: newJobs(t), StorageName: "postgres", Timeout: 3 * time.Minute,
		Faults: interleave(faults.Default(), &clockFault{c: c}),
		// TTL 600 ms at the drill's default time scale, 1/100.
		TakeoverSLO: check.DefaultTakeoverSLO(600*time.Millisecond) + clockCut + clockDetect,
	}
}

// The clock condition of redisstore's package doc, measured: after a
// failover that lost acquires, the promoted replica's first fence for a key
// is its clock, which is Δ behind the old primary's; the fences the old
// primary gave out in its last Δ − D are then issued again, D being the gap
// from the last acquire there to the first on the new primary. The drill
// runs on a primary and 2 replicas whose clocks are Δ behind its own, the
// primary cut off from its replicas for clockCut while the clients write
// there and then SIGKILLed, and a replica promoted clockDetect later (so D
// is over 1 s), failovers alternating between the real clock and one
// behind. Inside the bound (Δ = 250 ms) no fence is issued again; well
// beyond it (Δ = 10 s), without replica acknowledgement, fences are issued
// again (the negative control: a probe acquire inside a cut and another
// after the failover, the drills' own count reported beside it); with
// acknowledgement, never, at either Δ, since every fence returned reached
// the replica promoted. Stale writes are refused by
// the fence throughout; none is accepted.
func TestMultiNodeRedisClock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behind time.Duration
	}{{"inside the bound", 250 * time.Millisecond}, {"well beyond it", 10 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startClockSet(t, tc.behind)
			mk := func(opts ...redisstore.Option) drill.Config { return clockDrill(t, c, opts...) }
			measured := func(want int) func(drillSums) bool {
				from := c.behindFailovers()
				return func(drillSums) bool { return c.behindFailovers()-from >= want }
			}
			beyond := tc.behind > clockDetect
			from := c.behindFailovers()
			off := redisDrills(t, c, mk, 100, 4, measured(2), redisstore.WithoutReplicaAcks())
			offBehind := c.behindFailovers() - from
			from = c.behindFailovers()
			on := redisDrills(t, c, mk, 100, 4, measured(2))
			onBehind := c.behindFailovers() - from
			t.Logf("replicas %v behind, without acknowledgement: %v; %d of them to a clock behind", tc.behind, off, offBehind)
			t.Logf("replicas %v behind, with acknowledgement: %v; %d of them to a clock behind", tc.behind, on, onBehind)
			for _, text := range append(off.unsafe, on.unsafe...) {
				t.Errorf("safety violations:\n%s", text)
			}
			// A release or renewal of a lease after a newer fence's acquire:
			// how the checker also sees fences issued again.
			t.Logf("releases or renewals after a newer fence: %d without acknowledgement, %d with", off.wrongOwner, on.wrongOwner)
			if on.wrongOwner != 0 || !beyond && off.wrongOwner != 0 {
				t.Errorf("releases or renewals after a newer fence: %d without acknowledgement, %d with; want none but from fences issued again", off.wrongOwner, on.wrongOwner)
			}
			if offBehind < 2 || onBehind < 2 {
				t.Errorf("the drills measured %d and %d failovers to a clock behind, want at least 2 each", offBehind, onBehind)
			}
			if on.reissued+on.notLinearizable != 0 {
				t.Errorf("with acknowledgement, a replica %v behind issued %d fences again (%d histories not linearizable)", tc.behind, on.reissued, on.notLinearizable)
			}
			if !beyond && off.reissued+off.notLinearizable != 0 {
				t.Errorf("without acknowledgement, a replica %v behind (inside the bound) issued %d fences again (%d histories not linearizable)",
					tc.behind, off.reissued, off.notLinearizable)
			}
			if !beyond {
				return
			}
			// The negative control. The drills see fences issued again only
			// when a worker acquires inside the 300 ms cut and again after
			// the failover: a drill alone mostly does, but one CI run under
			// the full suite's load saw 23 failovers in 8 drills without it.
			// So the drills' count is a figure, and the probe makes the
			// hazard happen on purpose.
			t.Logf("the drills without acknowledgement saw %d fences issued again, %d histories not linearizable", off.reissued, off.notLinearizable)
			cut, after, cutErr := c.probeReissue(t, c.store(t, redisstore.WithoutReplicaAcks()), "clock-probe-off")
			t.Logf("probe without acknowledgement: fence %d in the cut (%v), %d after the failover to a clock %v behind", cut, cutErr, after, tc.behind)
			if cutErr != nil || after > cut {
				t.Errorf("without acknowledgement the probe's fence after the failover is %d, above the cut's %d (%v): the negative control saw nothing", after, cut, cutErr)
			}
			cut, after, cutErr = c.probeReissue(t, c.store(t), "clock-probe-on")
			t.Logf("probe with acknowledgement: fence %d in the cut (%v), %d after the failover", cut, cutErr, after)
			if cutErr == nil && after <= cut {
				t.Errorf("with acknowledgement the probe's fence %d was issued in the cut and %d after the failover: issued again", cut, after)
			}
		})
	}
}
