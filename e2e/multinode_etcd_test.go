package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/report"
	"github.com/leasehold/leasehold/e2e/internal/netns"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

const (
	// etcdMembers: the smallest cluster that keeps a quorum with one
	// member down.
	etcdMembers = 3
	// etcdHeartbeat and etcdElection are testserver's raft timings (50 and
	// 500 ms): a new leader within about a second on a local bridge, and a
	// minimum lease TTL of 1 s, the drill's TTL here.
	etcdHeartbeat = 50 * time.Millisecond
	etcdElection  = 500 * time.Millisecond
	// etcdReady bounds the wait for a member to report itself healthy.
	etcdReady = 20 * time.Second
	// etcdPoll spaces health and leader polls.
	etcdPoll = 20 * time.Millisecond
	// etcdDrillScale gives TTL 1 s, etcd's shortest lease with these timings.
	etcdDrillScale = 1.0 / 60
	// etcdFailoverCost is what a cluster fault may add to a takeover: the
	// election (two election timeouts at most; under 1 s measured), the new
	// leader's renewal of every lease by one election timeout (etcd's
	// lessor Promote), the lessor's expiry check every 500 ms, and one
	// store call lost to a member the client cannot reach (the drill's
	// call timeout, one TTL).
	etcdFailoverCost = 2*etcdElection + etcdElection + etcdExpiryCheck + time.Second
	// etcdExpiryCheck: etcd's lessor looks for expired leases every 500 ms.
	etcdExpiryCheck = 500 * time.Millisecond
	// etcdFailoverWait bounds the wait for a new leader after a fault: ten
	// election timeouts.
	etcdFailoverWait = 10 * etcdElection
)

// etcdHTTP probes members; a short timeout, since a frozen or cut-off
// member never answers, and no keep-alive to a member that was killed.
var etcdHTTP = &http.Client{Timeout: 300 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}

// etcdMember is one etcd process in its own namespace.
type etcdMember struct {
	node *netns.Node
	// proxy carries the clients' traffic to the member, from the root
	// namespace (so partitions from the clients still apply), and adds
	// latency on demand.
	proxy *testserver.Proxy
	args  []string
	log   string
	mu    sync.Mutex
	proc  *netns.Proc
}

func (m *etcdMember) url() string { return "http://" + m.node.Addr.String() + ":2379" }

// start launches the member (again, with its data, after a kill).
func (m *etcdMember) start() error {
	var env []string // without ETCD_* variables, which etcd reads as flags
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	p, err := m.node.Start(m.log, env, "etcd", m.args...)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.proc = p
	m.mu.Unlock()
	return nil
}

func (m *etcdMember) process() *netns.Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// healthy is nil when the member answers /health with true: it has a
// leader and a quorum.
func (m *etcdMember) healthy() error {
	resp, err := etcdHTTP.Get(m.url() + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct{ Health string }
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&h); err != nil || h.Health != "true" {
		return fmt.Errorf("etcd %s not healthy: %s %v", m.url(), h.Health, err)
	}
	return nil
}

// status returns the member's own id and its leader's ("0": none).
func (m *etcdMember) status() (self, leader string, err error) {
	resp, err := etcdHTTP.Post(m.url()+"/v3/maintenance/status", "application/json", strings.NewReader("{}"))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&st); err != nil {
		return "", "", err
	}
	return st.Header.MemberID, st.Leader, nil
}

// etcdCluster is 3 members on a netns bridge, and the faults on it.
type etcdCluster struct {
	net     *netns.Net
	members []*etcdMember
	ids     map[string]int // member id -> index

	mu        sync.Mutex
	busy      bool            // one cluster fault at a time: a quorum stays
	failovers []time.Duration // fault to new leader, measured
	elected   []time.Time     // when a new leader was first seen
	wg        sync.WaitGroup
}

// startEtcdCluster starts 3 members, one per namespace, and waits until
// every one is healthy.
func startEtcdCluster(t *testing.T) *etcdCluster {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Fatal("etcd not on PATH: install Debian's etcd-server (make deps does)")
	}
	// Made before the namespaces, so that it is removed after the members
	// are stopped: a running member writes in its directory as it goes.
	dir := t.TempDir()
	nt := netns.New(t, etcdMembers)
	c := &etcdCluster{net: nt, ids: make(map[string]int)}
	var peers []string
	for i, nd := range nt.Nodes() {
		peers = append(peers, fmt.Sprintf("m%d=http://%s:2380", i, nd.Addr))
	}
	for i, nd := range nt.Nodes() {
		a := nd.Addr.String()
		m := &etcdMember{node: nd, log: filepath.Join(dir, fmt.Sprintf("m%d.log", i)), args: []string{
			"--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls", "http://" + a + ":2379", "--advertise-client-urls", "http://" + a + ":2379",
			"--listen-peer-urls", "http://" + a + ":2380", "--initial-advertise-peer-urls", "http://" + a + ":2380",
			"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", nt.Node(0).Name, // one per cluster
			"--heartbeat-interval", strconv.Itoa(int(etcdHeartbeat / time.Millisecond)),
			"--election-timeout", strconv.Itoa(int(etcdElection / time.Millisecond)),
			"--pre-vote=true", "--logger", "zap", "--log-outputs", "stderr",
		}}
		c.members = append(c.members, m)
		if err := m.start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c.wg.Wait()
		if t.Failed() {
			for _, m := range c.members {
				if b, err := os.ReadFile(m.log); err == nil {
					t.Logf("%s log tail:\n%s", m.url(), tail(string(b), 5))
				}
			}
		}
	})
	for _, m := range c.members {
		if err := pollUntil(etcdReady, m.healthy); err != nil {
			t.Fatalf("etcd member %s: %v", m.url(), err)
		}
		self, _, err := m.status()
		if err != nil {
			t.Fatal(err)
		}
		c.ids[self] = slices.Index(c.members, m)
		m.proxy = testserver.StartProxy(t, m.node.Addr.String()+":2379")
	}
	return c
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// pollUntil calls f every etcdPoll until it returns nil or d passes.
func pollUntil(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for polls := int(d/etcdPoll) + 1; ; polls-- {
		err := f()
		if err == nil {
			return nil
		}
		if polls <= 0 || time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", d, err)
		}
		time.Sleep(etcdPoll)
	}
}

// endpoints are the members' proxies, for the drill's clients.
func (c *etcdCluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, "http://"+m.proxy.Addr())
	}
	return eps
}

// leader returns the index of the leader that a member reports, or -1.
func (c *etcdCluster) leader(among ...int) int {
	for _, i := range among {
		if _, l, err := c.members[i].status(); err == nil {
			if j, ok := c.ids[l]; ok {
				return j
			}
		}
	}
	return -1
}

var errClusterBusy = errors.New("another cluster fault is active or a member is not healthy")

// claim takes the cluster for one fault once every member is healthy; it
// returns the current leader.
func (c *etcdCluster) claim() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy {
		return -1, errClusterBusy
	}
	for _, m := range c.members {
		if m.healthy() != nil {
			return -1, errClusterBusy
		}
	}
	l := c.leader(0, 1, 2)
	if l < 0 {
		return -1, errClusterBusy
	}
	c.busy = true
	return l, nil
}

func (c *etcdCluster) release() {
	c.mu.Lock()
	c.busy = false
	c.mu.Unlock()
}

// measureFailover times, in the background, from now until a member other
// than old reports a leader other than old.
func (c *etcdCluster) measureFailover(old int) {
	start := time.Now()
	var others []int
	for i := range c.members {
		if i != old {
			others = append(others, i)
		}
	}
	c.wg.Go(func() {
		err := pollUntil(etcdFailoverWait, func() error {
			if l := c.leader(others...); l >= 0 && l != old {
				return nil
			}
			return errors.New("no new leader")
		})
		if err == nil {
			c.mu.Lock()
			c.failovers = append(c.failovers, time.Since(start))
			c.elected = append(c.elected, time.Now())
			c.mu.Unlock()
		}
	})
}

// etcdFault is the cluster's fault, a drill fault: each injection is the
// next of etcdFaultKinds, in turn, when the cluster is whole; the drill
// heals it a TTL (1 s, two election timeouts) later.
type etcdFault struct {
	faultTurns
	c   *etcdCluster
	hit int // the member it hit
}

const (
	faultPartitionFollower = "etcd-partition-follower"     // a minority member cut from its peers
	faultPartitionLeader   = "etcd-partition-leader"       // the leader cut from its peers: an election
	faultPartitionClients  = "etcd-partition-from-clients" // a member the clients cannot reach
	faultKillMember        = "etcd-kill-9"                 // the leader SIGKILLed, restarted at heal
	faultStopLeader        = "etcd-sigstop-leader"         // the leader frozen past the election timeout
	faultSlowMember        = "etcd-latency-to-member"      // a member's client link slowed by etcdSlowLink each way
)

// etcdSlowLink is the latency the slow-member fault adds each way: a
// 400 ms round trip, a link to another continent, more than the 333 ms
// between renewals and less than the drill's 1 s call timeout.
const etcdSlowLink = 200 * time.Millisecond

var etcdFaultKinds = []string{faultPartitionFollower, faultPartitionLeader, faultPartitionClients, faultKillMember, faultStopLeader, faultSlowMember}

func (f *etcdFault) Inject(context.Context, faults.Env) error {
	l, err := f.c.claim()
	if err != nil {
		return err
	}
	kind := f.next()
	target := l
	if kind == faultPartitionFollower || kind == faultPartitionClients || kind == faultSlowMember {
		target = (l + 1) % etcdMembers
	}
	m := f.c.members[target]
	switch kind {
	case faultPartitionFollower, faultPartitionLeader:
		err = m.node.IsolateFromPeers()
	case faultPartitionClients:
		err = m.node.IsolateFromClients()
	case faultKillMember:
		err = m.process().Kill()
	case faultStopLeader:
		err = m.process().Stop()
	case faultSlowMember:
		m.proxy.SetLatency(etcdSlowLink)
	}
	if err != nil {
		_ = m.node.Heal()
		f.c.release()
		return err
	}
	f.injected(kind)
	f.hit = target
	if target == l {
		f.c.measureFailover(l)
	}
	return nil
}

// Heal ends the fault; the member catches up in the background, and the
// next cluster fault waits until every member is healthy again.
func (f *etcdFault) Heal(context.Context, faults.Env) error {
	defer f.c.release()
	m := f.c.members[f.hit]
	switch f.kind {
	case faultKillMember:
		return m.start()
	case faultStopLeader:
		return m.process().Cont()
	case faultSlowMember:
		m.proxy.SetLatency(0)
		return nil
	}
	return m.node.Heal()
}

// interleave alternates the worker faults with the cluster fault, which is
// so tried every TTL/2 and injected when the last one has healed.
func interleave(worker []faults.Fault, cluster faults.Fault) []faults.Fault {
	var fs []faults.Fault
	for _, f := range worker {
		fs = append(fs, f, cluster)
	}
	return fs
}

// etcdDrill is a drill's configuration on the cluster: locks in etcdstore
// over all three endpoints, jobs fenced in PostgreSQL, the worker faults
// and the cluster faults.
func etcdDrill(t *testing.T, c *etcdCluster) drill.Config {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{
		Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		// A connection to a frozen or cut-off member is dropped after
		// gRPC's shortest client keepalive (10 s) plus 1 s without an
		// answer; until then the drill's call timeouts bound each call.
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	store, err := etcdstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(); _ = client.Close() })
	jobs := newJobs(t)
	return drill.Config{
		Store: store, StoreName: "etcd, 3 members in network namespaces",
		Storage: jobs, StorageName: "postgres", TimeScale: etcdDrillScale,
		Faults: interleave(faults.Default(), &etcdFault{faultTurns: faultTurns{kinds: etcdFaultKinds}, c: c}), Timeout: 3 * time.Minute,
	}
}

// The drill on a 3-member etcd cluster, each member in its own network
// namespace, while members are cut off from their peers or from the
// clients, the leader is SIGKILLed (and restarted) or SIGSTOPped past the
// election timeout, or a member's link to the clients slows down: no stale
// write, a linearizable history, and takeovers, counted from the last
// leader change, within TTL + one renewal + an election timeout + the
// lessor's expiry check.
func TestMultiNodeEtcd(t *testing.T) {
	c := startEtcdCluster(t)
	cfg := etcdDrill(t, c)
	cfg.Jobs = 50 // about 55 s at TTL 1 s, some 30 cluster faults
	ttl := time.Duration(float64(time.Minute) * etcdDrillScale)
	cfg.TakeoverSLO = check.DefaultTakeoverSLO(ttl) + etcdFailoverCost
	rep, text := runMultiNode(t, cfg, c.wg.Wait)
	c.mu.Lock()
	fo, elected := slices.Clone(c.failovers), slices.Clone(c.elected)
	c.mu.Unlock()
	slices.Sort(fo)
	if len(fo) > 0 {
		t.Logf("etcd failover (fault to new leader): %d measured, p50 %v, max %v; takeover p50 %v, p99 %v against TTL %v + failover",
			len(fo), fo[len(fo)/2].Round(time.Millisecond), fo[len(fo)-1].Round(time.Millisecond),
			rep.TakeoverP50.Round(time.Millisecond), rep.TakeoverP99.Round(time.Millisecond), ttl)
	}
	logSlowTakeovers(t, rep)
	if !rep.Safe() {
		t.Fatalf("safety violations on the etcd cluster:\n%s", text)
	}
	// Overlapping owners are logged, not asserted (none seen here): etcd 3.4
	// (Debian's) may let a leader that was replaced or frozen still answer
	// lease keepalives, so its successor lets the lease expire earlier
	// than the holder was told (etcd-io/etcd#15247). The fence refuses
	// what such a holder writes; rep.Safe above checked that.
	t.Logf("overlapping owners seen by the store: %d", overlappingOwners(rep.History, rep.TTL))
	// Reported, not asserted: on replicated stores the takeover includes
	// the store's failover. On etcd it also restarts at every leader
	// change: a new leader gives every lease its whole TTL again, plus an
	// election timeout (etcd's lessor Promote, lease checkpointing being
	// off), so a dead holder's lease ends TTL + 0.5 s after the last leader
	// change, not after its last renewal. Measured from the later of the
	// fault and the last leader change, the takeovers fit TTL + election
	// timeout + the lessor's 500 ms expiry check + the drill's detection.
	t.Logf("takeover p50 %v, p99 %v, SLO %v (%d takeovers)", rep.TakeoverP50, rep.TakeoverP99, rep.TakeoverSLO, rep.Takeovers)
	after, changed := sinceLeaderChange(rep, elected)
	if len(after) > 0 {
		p99 := after[int(0.99*float64(len(after)-1)+0.5)]
		// Reported against TTL's SLO + election timeout + expiry check: a
		// loaded machine delays the members' elections and the workers (at
		// load average 10 to 19, a p99 of 6.28 s against 2.33 s).
		t.Logf("takeover from the later of the fault and the last leader change: p50 %v, p99 %v against %v (%d of %d takeovers had a leader change in them)",
			after[len(after)/2].Round(time.Millisecond), p99.Round(time.Millisecond), check.DefaultTakeoverSLO(ttl)+etcdElection+etcdExpiryCheck, changed, len(after))
	}
	if rep.Takeovers == 0 {
		t.Errorf("no takeover measured: no holder was paused or killed, or none was taken over")
	}
	for _, k := range etcdFaultKinds {
		if rep.Faults[k] == 0 {
			t.Errorf("cluster fault %s was never injected", k)
		}
	}
	if len(fo) == 0 || rep.StaleRefused == 0 {
		t.Errorf("the drill proved little: %d failovers measured, %d stale writes refused", len(fo), rep.StaleRefused)
	}
}

// The negative control on the cluster: with fencing off, the drill reports
// the stale writes that PostgreSQL accepted.
func TestMultiNodeEtcdCanFail(t *testing.T) {
	c := startEtcdCluster(t)
	cfg := etcdDrill(t, c)
	cfg.Jobs, cfg.NoFencing = 36, true // about 25 s; 4 to 8 stale writes seen
	rep, _ := runMultiNode(t, cfg, c.wg.Wait)
	checkStaleWritesReported(t, rep)
}

// sinceLeaderChange measures each counted takeover from the later of its
// fault and the last new leader seen before the new owner's acquire
// returned, sorted; changed counts the takeovers with a leader change.
func sinceLeaderChange(rep *report.Report, elected []time.Time) (after []time.Duration, changed int) {
	for _, tk := range check.ListTakeovers(rep.History) {
		if tk.DuringOutage {
			continue
		}
		from := tk.Event.At
		for _, e := range elected {
			if e.After(from) && e.Before(tk.Acquire.Return) {
				from = e
			}
		}
		if from != tk.Event.At {
			changed++
		}
		after = append(after, tk.Acquire.Return.Sub(from))
	}
	slices.Sort(after)
	return after, changed
}
