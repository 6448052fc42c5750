package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file starts real etcd servers (EtcdPath: the build of
// scripts/etcd.sh, or the Debian package etcd-server's /usr/bin/etcd) for
// tests, the way redis.go starts redis-server:
// one temporary directory per member, free loopback ports, the process a
// direct child with a parent-death signal, every wait bounded in time. It
// talks to etcd only through its HTTP endpoints (/health and the JSON
// gateway), so the root module needs no etcd client library.
//
// A single server is a cluster of one member. Each member has its own data
// directory (<tmp>/data), its own client and peer ports on 127.0.0.1, and its
// output in <tmp>/etcd.log. A system etcd that the Debian package may have
// started on 127.0.0.1:2379 is neither used nor touched: the ports here are
// picked free by the kernel.

const (
	// etcdReadyTimeout bounds how long we wait for a started server, or every
	// member of a new cluster, to report itself healthy.
	etcdReadyTimeout = 20 * time.Second
	// etcdPollInterval is the pause between two readiness checks.
	etcdPollInterval = 20 * time.Millisecond
	// etcdProbeTimeout bounds one HTTP request of a readiness check.
	etcdProbeTimeout = time.Second
	// etcdStopTimeout is how long a member gets to exit after SIGTERM before
	// it is sent SIGKILL. A leader hands its leadership over before it exits,
	// which takes at most about one election timeout.
	etcdStopTimeout = 10 * time.Second

	// etcdHeartbeatMillis and etcdElectionMillis are the raft timings, in
	// milliseconds. etcd's defaults (100 and 1000) are made for real
	// networks; on loopback these elect a new leader within about a second
	// after the old one stops, while staying ten heartbeats apart, so a
	// loaded test machine does not see spurious elections. They also set the
	// server's minimum lease TTL, 1.5 election timeouts rounded up to whole
	// seconds: 1 s here, 2 s with the defaults.
	etcdHeartbeatMillis = 50
	etcdElectionMillis  = 500
)

// errEtcdNotFound is returned when EtcdPath finds no etcd.
var errEtcdNotFound = errors.New("testserver: etcd not found: run scripts/etcd.sh to build it, " +
	"or install the Debian package etcd-server (make test does both)")

// EtcdVersion is the etcd release scripts/etcd.sh builds, the release of the
// etcd client store/etcdstore uses; keep the two in step.
const EtcdVersion = "v3.6.16"

// envEtcd names an etcd binary to use instead of the cached build.
const envEtcd = "LEASEHOLD_ETCD"

// EtcdPath returns the etcd binary the tests and benchmarks run: $LEASEHOLD_ETCD
// if set, else etcd in the directory etcd-VERSION of the cache (cacheDir:
// $LEASEHOLD_CACHE, or leasehold in $XDG_CACHE_HOME or ~/.cache) where
// scripts/etcd.sh builds it, else etcd on PATH (Debian's, an older release:
// 3.4 on Debian 12, whose transactions cost the server more, docs/design.md
// §9). A cache directory that is not an absolute path is an error.
func EtcdPath() (string, error) {
	if path := os.Getenv(envEtcd); path != "" {
		if !executable(path) {
			return "", fmt.Errorf("%w ($%s is %s, not an executable file)", errEtcdNotFound, envEtcd, path)
		}
		return path, nil
	}
	dir, err := cacheDir()
	if err != nil {
		return "", fmt.Errorf("%w (%v)", errEtcdNotFound, err)
	}
	if path := filepath.Join(dir, "etcd-"+EtcdVersion, "etcd"); executable(path) {
		return path, nil
	}
	path, err := exec.LookPath("etcd")
	if err != nil {
		return "", errEtcdNotFound
	}
	return path, nil
}

// executable reports whether path is a regular file with an execute bit.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// etcdHTTP is the client for readiness checks. Keep-alives are off so that no
// idle connection to a stopped member (or to a port reused by another test)
// is ever picked up again, and no proxy from the environment is used (a nil
// Proxy): the members are on loopback.
var etcdHTTP = &http.Client{
	Timeout:   etcdProbeTimeout,
	Transport: &http.Transport{DisableKeepAlives: true},
}

// EtcdServer is one etcd member on 127.0.0.1: a single server made by
// NewEtcdServer, or a member of an EtcdCluster. Its data directory survives
// Stop, Start and Restart; Close removes it. Its methods are safe for
// concurrent use.
type EtcdServer struct {
	bin        string
	name       string // --name, unique on this machine (the temporary directory's name)
	clientPort int
	peerPort   int
	dir        string   // temporary directory, removed by Close
	args       []string // full argument list, reused by Start and Restart
	supervisor
}

// NewEtcdServer starts a single-member etcd on free ports of 127.0.0.1 and
// waits (at most 20 s) until it reports itself healthy. The caller must call
// Close.
//
// If a port is taken by another process between choosing it and the
// server's bind, it tries again with new ports, at most 5 times.
func NewEtcdServer() (*EtcdServer, error) {
	members, err := startEtcdMembers(1)
	if err != nil {
		return nil, err
	}
	return members[0], nil
}

// StartEtcd starts a single-member etcd for a test or benchmark and
// registers tb.Cleanup to close it. If the server cannot be started it calls
// tb.Fatalf with the reason (for example that etcd is not on PATH). It never
// skips the test.
func StartEtcd(tb testing.TB) *EtcdServer {
	tb.Helper()
	s, err := NewEtcdServer()
	return started(tb, s, err)
}

// startEtcdMembers starts a new cluster of n members and waits until every
// one is healthy. A start that fails because a port was taken is retried
// with new ports and new directories.
func startEtcdMembers(n int) ([]*EtcdServer, error) {
	bin, err := EtcdPath()
	if err != nil {
		return nil, err
	}
	return onFreePorts(2*n, func(ports []int) ([]*EtcdServer, error) {
		members, err := newEtcdMembers(bin, ports)
		if err != nil {
			return nil, err
		}
		if err := startNewMembers(members); err != nil {
			for _, m := range members {
				m.Close()
			}
			return nil, err
		}
		return members, nil
	})
}

// newEtcdMembers makes the directories and builds the command lines of the
// members of one new cluster, two ports each. Nothing is started yet.
func newEtcdMembers(bin string, ports []int) ([]*EtcdServer, error) {
	n := len(ports) / 2
	members := make([]*EtcdServer, n)
	peers := make([]string, n)
	for i := range members {
		dir, err := os.MkdirTemp("", "leasehold-etcd-")
		if err != nil {
			for _, m := range members[:i] {
				os.RemoveAll(m.dir)
			}
			return nil, fmt.Errorf("testserver: %w", err)
		}
		m := &EtcdServer{
			bin:        bin,
			name:       filepath.Base(dir),
			clientPort: ports[2*i],
			peerPort:   ports[2*i+1],
			dir:        dir,
		}
		members[i] = m
		peers[i] = m.name + "=" + m.peerURL()
	}
	// The token makes the cluster's identity unique, so that a member never
	// joins another test's cluster that happens to reuse a port.
	token := members[0].name
	for _, m := range members {
		m.args = []string{
			"--name", m.name,
			"--data-dir", m.dataDir(),
			"--listen-client-urls", m.clientURL(),
			"--advertise-client-urls", m.clientURL(),
			"--listen-peer-urls", m.peerURL(),
			"--initial-advertise-peer-urls", m.peerURL(),
			"--initial-cluster", strings.Join(peers, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", token,
			"--heartbeat-interval", strconv.Itoa(etcdHeartbeatMillis),
			"--election-timeout", strconv.Itoa(etcdElectionMillis),
			// A member coming back after Stop asks the others before it
			// starts an election, so it does not depose a working leader.
			"--pre-vote=true",
			"--logger", "zap",
			"--log-outputs", "stderr",
		}
	}
	return members, nil
}

// startNewMembers launches every member of a new cluster, then waits until
// all of them are healthy, within one etcdReadyTimeout: no member can be
// healthy before a quorum of them runs.
func startNewMembers(members []*EtcdServer) error {
	for _, m := range members {
		m.mu.Lock()
		err := m.launch(m.program())
		m.mu.Unlock()
		if err != nil {
			return err
		}
	}
	deadline := time.Now().Add(etcdReadyTimeout)
	for _, m := range members {
		if err := m.waitReady(deadline); err != nil {
			return err
		}
	}
	return nil
}

// program is how the supervisor runs this member.
func (s *EtcdServer) program() program {
	return program{
		name: "etcd " + s.name, addr: s.clientURL(), bin: s.bin, args: s.args, dir: s.dir,
		env: etcdEnv(), out: s.logPath(), logs: []string{s.logPath()},
		ready: s.check, readyWhat: "report itself healthy", poll: etcdPollInterval,
		exitCause:  portInUse,
		stopSignal: syscall.SIGTERM, stopGrace: etcdStopTimeout,
	}
}

// etcdEnv is our environment without etcd's ETCD_* variables, which etcd
// reads as flags: a developer's ETCD_DATA_DIR must not change the tests.
func etcdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}
	return env
}

// start launches the member and waits until it is healthy. The caller holds
// s.mu and s.proc is nil.
func (s *EtcdServer) start() error {
	return s.run(s.program(), time.Now().Add(etcdReadyTimeout))
}

// check returns nil when the member answers on its client port, reports
// itself healthy, and is ours: another test's etcd may have won the race for
// the port, so it asks the member for its name.
func (s *EtcdServer) check(context.Context) error {
	if err := s.Healthy(); err != nil {
		return err
	}
	var list struct {
		Header  etcdHeader `json:"header"`
		Members []struct {
			ID   string `json:"ID"`
			Name string `json:"name"`
		} `json:"members"`
	}
	if err := s.gateway("/v3/cluster/member/list", &list); err != nil {
		return err
	}
	for _, m := range list.Members {
		if m.ID == list.Header.MemberID {
			if m.Name != s.name {
				return fmt.Errorf("the member on %s is %q, not ours (%q)", s.clientURL(), m.Name, s.name)
			}
			return nil
		}
	}
	return fmt.Errorf("the member on %s is not in its own member list", s.clientURL())
}

// etcdHeader is the header of every JSON gateway response. Integers that do
// not fit a JSON number are strings.
type etcdHeader struct {
	ClusterID string `json:"cluster_id"`
	MemberID  string `json:"member_id"`
	Revision  string `json:"revision"`
}

// Healthy returns nil if the member answers GET /health with
// {"health":"true"} within 1 s. etcd answers so only when the member has a
// leader and a quorum read through raft succeeds, so it is false on a member
// cut off from a majority of its cluster.
func (s *EtcdServer) Healthy() error {
	resp, err := etcdHTTP.Get(s.clientURL() + "/health")
	if err != nil {
		return fmt.Errorf("testserver: etcd %s: %w", s.clientURL(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fmt.Errorf("testserver: etcd %s/health: %w", s.clientURL(), err)
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("testserver: etcd %s/health: %s %s", s.clientURL(), resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// gateway posts an empty JSON request to one of the member's v3 JSON gateway
// endpoints and decodes the answer into out.
func (s *EtcdServer) gateway(path string, out any) error {
	resp, err := etcdHTTP.Post(s.clientURL()+path, "application/json", strings.NewReader("{}"))
	if err != nil {
		return fmt.Errorf("testserver: etcd %s%s: %w", s.clientURL(), path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s %s", resp.Status, bytes.TrimSpace(body))
	}
	if err == nil {
		err = json.Unmarshal(body, out)
	}
	if err != nil {
		return fmt.Errorf("testserver: etcd %s%s: %w", s.clientURL(), path, err)
	}
	return nil
}

// Endpoints returns the member's client URL, "http://127.0.0.1:PORT", as
// the one-element list that clientv3.Config.Endpoints takes.
func (s *EtcdServer) Endpoints() []string { return []string{s.clientURL()} }

// Name returns the member's --name.
func (s *EtcdServer) Name() string { return s.name }

// Pid returns the process id of the most recently started etcd process (it
// changes with Start and Restart).
func (s *EtcdServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Stop shuts the member down gracefully (SIGTERM; a leader first hands its
// leadership to another member) and waits until the process has exited,
// sending SIGKILL after 10 s. Its data directory is kept; Start brings it
// back. Stop fails if the server is closed or not running.
func (s *EtcdServer) Stop() error { return s.do("stop", running, s.stop) }

// Kill crashes the member: SIGKILL, no leadership hand-over, so a killed
// leader leaves its cluster to notice and elect a new one (about one
// election timeout, 0.5 s here). It waits until the process has exited.
// Every write etcd acknowledged is on disk, so Start brings the member back
// with its data. Kill fails if the server is closed or not running.
func (s *EtcdServer) Kill() error { return s.do("kill", running, s.kill) }

// Start starts the member again after Stop or Kill, on the same ports with the same
// data directory (so every committed write is still there), and waits (at
// most 20 s) until it is healthy. A cluster member is healthy only while a
// quorum of its cluster is up, itself included. Start fails if the server is
// running, is closed, or if one of its ports was taken while it was down.
func (s *EtcdServer) Start() error { return s.resume(s.start) }

// Restart stops the member (as Stop) and starts it again (as Start): same
// ports, same data, healthy within 20 s. After Stop or Kill it just starts
// it.
func (s *EtcdServer) Restart() error { return s.restart(s.start) }

// Close kills the member (SIGKILL: its data is thrown away, so there is
// nothing to shut down cleanly), waits for the process to exit and removes
// its temporary directory with all data. Calling Close again does nothing
// and returns nil.
func (s *EtcdServer) Close() error { return s.close(s.kill, s.dir) }

// clientURL is "http://127.0.0.1:PORT" of the client port.
func (s *EtcdServer) clientURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.clientPort))
}

// peerURL is "http://127.0.0.1:PORT" of the peer port.
func (s *EtcdServer) peerURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.peerPort))
}

// dataDir is the member's --data-dir.
func (s *EtcdServer) dataDir() string { return filepath.Join(s.dir, "data") }

// logPath is where the member's output goes, over all its runs.
func (s *EtcdServer) logPath() string { return filepath.Join(s.dir, "etcd.log") }

// EtcdCluster is a real etcd cluster of several members on 127.0.0.1, each
// an EtcdServer with its own ports and data directory, that can be stopped
// and started one by one.
type EtcdCluster struct {
	members []*EtcdServer
}

// NewEtcdCluster starts a new cluster of n members (n >= 1) and waits (at
// most 20 s) until every member is healthy. The caller must call Close.
func NewEtcdCluster(n int) (*EtcdCluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: an etcd cluster needs at least 1 member, got %d", n)
	}
	members, err := startEtcdMembers(n)
	if err != nil {
		return nil, err
	}
	return &EtcdCluster{members: members}, nil
}

// StartEtcdCluster starts a cluster of n members for a test or benchmark and
// registers tb.Cleanup to close it. If the cluster cannot be started it
// calls tb.Fatalf with the reason. It never skips the test.
func StartEtcdCluster(tb testing.TB, n int) *EtcdCluster {
	tb.Helper()
	c, err := NewEtcdCluster(n)
	return started(tb, c, err)
}

// Endpoints returns the client URLs of all members, in member order,
// whether they run or not: a client balances over them and fails over
// between them.
func (c *EtcdCluster) Endpoints() []string {
	urls := make([]string, len(c.members))
	for i, m := range c.members {
		urls[i] = m.clientURL()
	}
	return urls
}

// Member returns member i (0 <= i < n).
func (c *EtcdCluster) Member(i int) *EtcdServer { return c.members[i] }

// Leader returns the index of the member that the running members report
// as their leader. It fails when no running member names a leader that
// answers (during an election, or without a quorum).
func (c *EtcdCluster) Leader() (int, error) {
	ids := make([]string, len(c.members))
	leader := ""
	var problems []error
	for i, m := range c.members {
		var st struct {
			Header etcdHeader `json:"header"`
			Leader string     `json:"leader"`
		}
		if err := m.gateway("/v3/maintenance/status", &st); err != nil {
			problems = append(problems, err)
			continue
		}
		ids[i] = st.Header.MemberID
		if leader == "" && st.Leader != "0" {
			leader = st.Leader
		}
	}
	for i, id := range ids {
		if id != "" && id == leader {
			return i, nil
		}
	}
	problems = append(problems, fmt.Errorf("leader %q is not a running member", leader))
	return -1, fmt.Errorf("testserver: no etcd leader found: %w", errors.Join(problems...))
}

// Close kills every member and removes their directories. It is safe to
// call more than once.
func (c *EtcdCluster) Close() error {
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { errs[i] = m.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
