package netns_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/e2e/internal/netns"
)

// This test binary, run with envListen set, is a TCP server that accepts
// and holds connections; with envDial set, it dials once and exits 0 on
// success, 1 on failure.
const (
	envListen = "NETNS_TEST_LISTEN"
	envDial   = "NETNS_TEST_DIAL"
	port      = "7000"
	// dialTimeout: a dropped SYN is never answered; a live node on the
	// bridge answers in well under a millisecond.
	dialTimeout = 300 * time.Millisecond
	// waitFor bounds the wait for a server to listen.
	waitFor = 10 * time.Second
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(envListen); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			defer c.Close()
		}
	}
	if addr := os.Getenv(envDial); addr != "" {
		c, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err != nil {
			os.Exit(1)
		}
		c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err == nil {
		c.Close()
	}
	return err
}

// dialFrom dials addr from inside node nd's namespace.
func dialFrom(t *testing.T, nd *netns.Node, addr string) error {
	exe, _ := os.Executable()
	cmd := exec.Command("ip", "netns", "exec", nd.Name, exe)
	cmd.Env = append(os.Environ(), envDial+"="+addr)
	return cmd.Run()
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for polls := 0; polls < int(waitFor/(20*time.Millisecond)); polls++ {
		if dial(addr) == nil {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s not listening within %v", addr, waitFor)
}

// ours lists the namespaces and links named for this process.
func ours(t *testing.T) []string {
	t.Helper()
	prefix := "lh" + strconv.Itoa(os.Getpid())
	var names []string
	for _, args := range [][]string{{"netns", "list"}, {"-o", "link", "show"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && args[0] == "-o" {
				f = f[1:]
			}
			if len(f) > 0 && strings.HasPrefix(f[0], prefix) {
				names = append(names, f[0])
			}
		}
	}
	return names
}

// Partitions cut exactly the traffic they name and heal; processes are
// stopped, continued and killed by their real pid; everything is gone
// after the test, and a dead run's leftovers are removed at the start.
func TestNet(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Fatal(err)
	}
	// A namespace named for a dead process: a run killed before cleanup.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := "lh" + strconv.Itoa(dead.Process.Pid) + "n0"
	if out, err := exec.Command("ip", "netns", "add", stale).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var pids []int
	t.Run("net", func(t *testing.T) {
		nt := netns.New(t, 3)
		if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), stale) {
			t.Errorf("stale namespace %s not removed", stale)
		}
		exe, _ := os.Executable()
		var addrs []string
		for _, nd := range nt.Nodes() {
			addr := net.JoinHostPort(nd.Addr.String(), port)
			p, err := nd.Start(filepath.Join(t.TempDir(), "log"), append(os.Environ(), envListen+"="+addr), exe)
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, p.Pid)
			addrs = append(addrs, addr)
		}
		for _, a := range addrs {
			waitListening(t, a)
		}
		n0, n1 := nt.Node(0), nt.Node(1)
		if err := dialFrom(t, n1, addrs[0]); err != nil {
			t.Fatalf("node 1 cannot reach node 0: %v", err)
		}

		if err := n0.IsolateFromClients(); err != nil {
			t.Fatal(err)
		}
		if dial(addrs[0]) == nil {
			t.Error("the client reached node 0 cut off from the clients")
		}
		if err := dialFrom(t, n1, addrs[0]); err != nil {
			t.Errorf("node 1 cannot reach node 0 cut off from the clients only: %v", err)
		}
		if err := n0.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := dial(addrs[0]); err != nil {
			t.Errorf("node 0 unreachable after heal: %v", err)
		}

		if err := n0.IsolateFromPeers(); err != nil {
			t.Fatal(err)
		}
		if dialFrom(t, n1, addrs[0]) == nil {
			t.Error("node 1 reached node 0 cut off from its peers")
		}
		if err := dial(addrs[0]); err != nil {
			t.Errorf("the client cannot reach node 0 cut off from its peers only: %v", err)
		}
		if err := n0.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := dialFrom(t, n1, addrs[0]); err != nil {
			t.Errorf("node 1 cannot reach node 0 after heal: %v", err)
		}

		if err := n0.IsolateFrom(n1); err != nil {
			t.Fatal(err)
		}
		if dialFrom(t, n1, addrs[0]) == nil {
			t.Error("node 1 reached node 0 cut off from it")
		}
		if err := dialFrom(t, nt.Node(2), addrs[0]); err != nil {
			t.Errorf("node 2 cannot reach node 0 cut off from node 1 only: %v", err)
		}
		if err := dial(addrs[0]); err != nil {
			t.Errorf("the client cannot reach node 0 cut off from node 1 only: %v", err)
		}
		if err := n0.Heal(); err != nil {
			t.Fatal(err)
		}

		p := procOf(t, nt, 0)
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		// The signal is delivered asynchronously: poll, bounded.
		st := ""
		for range 100 {
			if st = state(p.Pid); st == "T" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if st != "T" {
			t.Errorf("state %q 1 s after SIGSTOP, want T", st)
		}
		if err := p.Cont(); err != nil {
			t.Fatal(err)
		}
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		if !p.Exited() || dial(addrs[0]) == nil {
			t.Error("node 0's server still there after SIGKILL")
		}
	})
	if left := ours(t); len(left) > 0 {
		t.Errorf("left after the test: %v", left)
	}
	for _, pid := range pids {
		if state(pid) != "" && state(pid) != "Z" {
			t.Errorf("process %d still running after the test", pid)
		}
	}
}

// procOf starts nothing: it returns node i's first process, for the test.
func procOf(t *testing.T, nt *netns.Net, i int) *netns.Proc {
	t.Helper()
	ps := nt.Node(i).Procs()
	if len(ps) == 0 {
		t.Fatal(errors.New("no process on node"))
	}
	return ps[0]
}

// state is the process's state letter from /proc; "" when gone.
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
