// Package netns runs a test's servers as nodes of a private network on this
// machine: one network namespace per node, joined by veth pairs to a bridge
// in the root namespace, which carries the test's own address. The test
// (the clients) reaches the nodes through the bridge; nothing leaves the
// machine, since no namespace has a route beyond the test's /24.
//
// Faults: iptables DROP rules in a node's namespace cut it off from the
// other nodes or from the clients (Isolate, Heal); a node's process can be
// killed with SIGKILL or stopped with SIGSTOP (Proc).
//
// Everything is named with the prefix "lh" plus the test process's pid,
// removed by t.Cleanup, and removed at the next start if that process died
// without cleaning up. It needs root with CAP_NET_ADMIN and the ip and
// iptables commands; without them New fails the test with one line.
package netns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// subnetBase is 10.213.X.0/24: a corner of 10/8 that the usual VPN,
	// container and cloud defaults leave alone; X is picked per run.
	subnetBase = "10.213."
	// nodeHostBase is the last octet of node 0; node i gets nodeHostBase+i.
	// .1 is the bridge, the clients' address.
	nodeHostBase = 10
	// cmdTimeout bounds one ip or iptables command: they take milliseconds.
	cmdTimeout = 10 * time.Second
	// stopTimeout bounds the wait for a killed process to be reaped.
	stopTimeout = 5 * time.Second
	// chain is the iptables chain, in each node's namespace, that holds the
	// partition rules; Heal flushes it.
	chain = "LHPART"
)

// Net is a bridge and the nodes on it.
type Net struct {
	t      testing.TB
	id     string // "lh" + pid: the prefix of every name
	bridge string
	subnet string // "10.213.X."
	mu     sync.Mutex
	nodes  []*Node
}

// Node is one network namespace on the bridge.
type Node struct {
	net  *Net
	Name string     // the namespace's name
	Addr netip.Addr // its address on the bridge
	veth string     // the pair's end on the bridge
	mu   sync.Mutex
	proc []*Proc
}

// Proc is a process running in a node's namespace. Pid is the server's own
// pid: ip netns exec enters the namespace and execs the program.
type Proc struct {
	Pid  int
	cmd  *exec.Cmd
	done chan struct{}
}

// New makes a bridge with n nodes on a free 10.213.X.0/24 and registers
// their removal with t.Cleanup. It fails t (one line) without root, without
// CAP_NET_ADMIN or without ip and iptables.
func New(t testing.TB, n int) *Net {
	t.Helper()
	if err := Check(); err != nil {
		t.Fatalf("%v", err)
	}
	removeStale(t)
	nt := &Net{t: t, id: "lh" + strconv.Itoa(os.Getpid())}
	nt.bridge = nt.id + "br"
	t.Cleanup(nt.close)
	x, err := freeSubnet()
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	nt.subnet = subnetBase + strconv.Itoa(x) + "."
	nt.must("ip", "link", "add", nt.bridge, "type", "bridge")
	nt.must("ip", "addr", "add", nt.subnet+"1/24", "dev", nt.bridge)
	nt.must("ip", "link", "set", nt.bridge, "up")
	for i := range n {
		nt.addNode(i)
	}
	return nt
}

// Check returns an error, one line, if this process cannot make
// namespaces: not root, no CAP_NET_ADMIN, or ip or iptables missing.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: the multi-node tests need root (network namespaces, veth, iptables); run them as root")
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	const capNetAdmin = 12
	m := regexp.MustCompile(`(?m)^CapEff:\s*([0-9a-f]+)$`).FindSubmatch(status)
	if m == nil {
		return errors.New("netns: no CapEff in /proc/self/status")
	}
	eff, err := strconv.ParseUint(string(m[1]), 16, 64)
	if err != nil || eff&(1<<capNetAdmin) == 0 {
		return errors.New("netns: the multi-node tests need CAP_NET_ADMIN, which this root process lacks")
	}
	for _, c := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("netns: %s not on PATH: install Debian's iproute2 and iptables (make deps does)", c)
		}
	}
	return nil
}

// freeSubnet picks X for 10.213.X.0/24, starting from a value drawn from
// our pid (so that concurrent runs start apart), that no address of the
// root namespace is in.
func freeSubnet() (int, error) {
	out, err := run("ip", "-4", "-o", "addr", "show")
	if err != nil {
		return 0, err
	}
	start := os.Getpid() % 250
	for k := range 250 {
		x := 1 + (start+k)%250
		if !strings.Contains(out, " "+subnetBase+strconv.Itoa(x)+".") {
			return x, nil
		}
	}
	return 0, errors.New("every 10.213.X.0/24 is in use")
}

// staleName matches our names: the pid is the run's owner.
var staleName = regexp.MustCompile(`^lh([0-9]+)(br|n[0-9]+|v[0-9]+)$`)

// removeStale removes the namespaces and links of runs whose process is
// gone (killed before its cleanup ran), with the processes left in them.
func removeStale(t testing.TB) {
	dead := func(name string) bool {
		m := staleName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, _ := strconv.Atoi(m[1])
		return pid != os.Getpid() && syscall.Kill(pid, 0) == syscall.ESRCH
	}
	if out, err := run("ip", "netns", "list"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
				killIn(f[0])
				if _, err := run("ip", "netns", "del", f[0]); err != nil {
					t.Logf("netns: stale namespace %s: %v", f[0], err)
				}
			}
		}
	}
	if out, err := run("ip", "-o", "link", "show"); err == nil {
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if dead(name) {
				if _, err := run("ip", "link", "del", name); err != nil {
					t.Logf("netns: stale link %s: %v", name, err)
				}
			}
		}
	}
}

// killIn SIGKILLs every process in namespace ns.
func killIn(ns string) {
	out, _ := run("ip", "netns", "pids", ns)
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// addNode makes node i: namespace, veth pair, address, the partition chain.
func (nt *Net) addNode(i int) {
	nd := &Node{net: nt, Name: nt.id + "n" + strconv.Itoa(i)}
	nd.Addr = netip.MustParseAddr(nt.subnet + strconv.Itoa(nodeHostBase+i))
	nt.mu.Lock()
	nt.nodes = append(nt.nodes, nd)
	nt.mu.Unlock()
	veth := nt.id + "v" + strconv.Itoa(i)
	nd.veth = veth
	nt.must("ip", "netns", "add", nd.Name)
	nt.must("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", nd.Name)
	nt.must("ip", "link", "set", veth, "master", nt.bridge, "up")
	nt.must("ip", "-n", nd.Name, "addr", "add", nd.Addr.String()+"/24", "dev", "eth0")
	nt.must("ip", "-n", nd.Name, "link", "set", "eth0", "up")
	nt.must("ip", "-n", nd.Name, "link", "set", "lo", "up")
	for _, args := range [][]string{{"-N", chain}, {"-I", "INPUT", "-j", chain}, {"-I", "OUTPUT", "-j", chain}} {
		nt.must("ip", append([]string{"netns", "exec", nd.Name, "iptables"}, args...)...)
	}
}

// ClientAddr is the test process's address on the bridge.
func (nt *Net) ClientAddr() netip.Addr { return netip.MustParseAddr(nt.subnet + "1") }

// Node returns node i.
func (nt *Net) Node(i int) *Node { return nt.nodes[i] }

// Nodes returns every node.
func (nt *Net) Nodes() []*Node { return nt.nodes }

// IsolateFromPeers drops every packet between nd and the other nodes; the
// clients still reach it.
func (nd *Node) IsolateFromPeers() error {
	var addrs []netip.Addr
	for _, o := range nd.net.nodes {
		if o != nd {
			addrs = append(addrs, o.Addr)
		}
	}
	return nd.drop(addrs...)
}

// IsolateFrom drops every packet between nd and the nodes others; the rest
// of the network still reaches it.
func (nd *Node) IsolateFrom(others ...*Node) error {
	addrs := make([]netip.Addr, len(others))
	for i, o := range others {
		addrs[i] = o.Addr
	}
	return nd.drop(addrs...)
}

// IsolateFromClients drops every packet between nd and the test process.
func (nd *Node) IsolateFromClients() error { return nd.drop(nd.net.ClientAddr()) }

// drop adds DROP rules both ways for each address.
func (nd *Node) drop(addrs ...netip.Addr) error {
	for _, a := range addrs {
		for _, dir := range []string{"-s", "-d"} {
			if _, err := run("ip", "netns", "exec", nd.Name, "iptables", "-A", chain, dir, a.String(), "-j", "DROP"); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heal removes every partition rule of nd.
func (nd *Node) Heal() error {
	_, err := run("ip", "netns", "exec", nd.Name, "iptables", "-F", chain)
	return err
}

// Start runs bin with args in nd's namespace, output appended to logPath,
// with env (nil: ours).
// The process gets SIGKILL if the test process dies; Cleanup kills it.
func (nd *Node) Start(logPath string, env []string, bin string, args ...string) (*Proc, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", nd.Name, bin}, args...)...)
	cmd.Stdout, cmd.Stderr, cmd.Env = out, out, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startLocked(cmd); err != nil {
		return nil, fmt.Errorf("netns: start %s in %s: %w", bin, nd.Name, err)
	}
	p := &Proc{Pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	nd.mu.Lock()
	nd.proc = append(nd.proc, p)
	nd.mu.Unlock()
	return p, nil
}

// startLocked starts cmd on a locked OS thread: the parent-death signal
// is tied to the thread that forks (see testserver's pdeathsig).
func startLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// Procs returns the processes started on nd, oldest first.
func (nd *Node) Procs() []*Proc {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return append([]*Proc(nil), nd.proc...)
}

// Kill sends SIGKILL (continuing a stopped process first is not needed:
// SIGKILL ends it anyway) and waits until it is reaped; a process already
// reaped is left alone.
func (p *Proc) Kill() error {
	if p.Exited() {
		// Reaped: its pid may be another process's by now (pid_max is
		// 32768 on many machines, and tests fork many servers).
		return nil
	}
	_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("netns: pid %d not gone %v after SIGKILL", p.Pid, stopTimeout)
	}
}

// Stop freezes the process (SIGSTOP); Cont lets it run on.
func (p *Proc) Stop() error { return syscall.Kill(p.Pid, syscall.SIGSTOP) }

// Cont sends SIGCONT.
func (p *Proc) Cont() error { return syscall.Kill(p.Pid, syscall.SIGCONT) }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// close kills every process and removes the namespaces and the bridge
// (a namespace takes its veth end and so the pair with it).
func (nt *Net) close() {
	for _, nd := range nt.nodes {
		nd.mu.Lock()
		for _, p := range nd.proc {
			if err := p.Kill(); err != nil {
				nt.t.Errorf("%v", err)
			}
		}
		nd.mu.Unlock()
		killIn(nd.Name)
		// The pair goes at once with its root end; with the namespace only
		// once the kernel has freed it, too late for the next test.
		if _, err := run("ip", "link", "show", nd.veth); err == nil {
			if _, err := run("ip", "link", "del", nd.veth); err != nil {
				nt.t.Errorf("netns: %v", err)
			}
		}
		if _, err := run("ip", "netns", "del", nd.Name); err != nil {
			nt.t.Errorf("netns: %v", err)
		}
	}
	if _, err := run("ip", "link", "show", nt.bridge); err == nil {
		if _, err := run("ip", "link", "del", nt.bridge); err != nil {
			nt.t.Errorf("netns: %v", err)
		}
	}
}

// must runs a setup command, failing the test on error.
func (nt *Net) must(name string, args ...string) {
	nt.t.Helper()
	if _, err := run(name, args...); err != nil {
		nt.t.Fatalf("%v", err)
	}
}

// run runs a command, bounded by cmdTimeout, and returns its output.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("netns: %s %s: %w: %s", name, strings.Join(args, " "), err, firstLine(out.Bytes()))
	}
	return out.String(), nil
}

func firstLine(b []byte) string {
	s := bufio.NewScanner(bytes.NewReader(b))
	if s.Scan() {
		return s.Text()
	}
	return ""
}
