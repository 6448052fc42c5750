package testserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestStartRedisSetGet(t *testing.T) {
	t.Parallel()
	s := StartRedis(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", s.Addr())
	}
	if s.Pid() <= 0 {
		t.Fatalf("Pid() = %d", s.Pid())
	}
	if got, err := s.Do("SET", "k", "v"); err != nil || got != "OK" {
		t.Fatalf("SET k v = %q, %v; want OK", got, err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if got, err := s.Do("DBSIZE"); err != nil || got != "1" {
		t.Fatalf("DBSIZE = %q, %v; want 1", got, err)
	}
	// A missing key is a nil bulk reply, which Do returns as "".
	if got, err := s.Do("GET", "missing"); err != nil || got != "" {
		t.Fatalf("GET missing = %q, %v; want \"\", nil", got, err)
	}
	if _, err := s.Do("NOSUCHCOMMAND"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("NOSUCHCOMMAND: err = %v, want unknown command", err)
	}
	if _, err := s.Do("DEBUG", "SLEEP", "0.1"); err != nil {
		t.Fatalf("DEBUG SLEEP 0.1: %v", err)
	}
	if _, err := s.Do("KEYS", "*"); err == nil {
		t.Fatalf("KEYS *: want an error for an array reply")
	}
}

func TestRestartKeepsAddrAndLosesData(t *testing.T) {
	t.Parallel()
	s := StartRedis(t)
	addr, pid := s.Addr(), s.Pid()
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr() != addr {
		t.Fatalf("Addr after Restart = %q, want %q", s.Addr(), addr)
	}
	if s.Pid() == pid {
		t.Fatalf("Pid after Restart = %d, the same as before", s.Pid())
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "" {
		t.Fatalf("GET k after Restart = %q, %v; want \"\", nil", got, err)
	}
	if got, err := s.Do("DBSIZE"); err != nil || got != "0" {
		t.Fatalf("DBSIZE after Restart = %q, %v; want 0", got, err)
	}
}

func TestCloseThenDoFails(t *testing.T) {
	t.Parallel()
	s, err := NewRedisServer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("PING"); err != nil {
		t.Fatal(err)
	}
	// Close twice, concurrently, as Cleanup and a test body might.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Close()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("third Close: %v", err)
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("Do after Close succeeded")
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
	// The port must really be closed, not just refused by our own check.
	probe := &RedisServer{port: s.port}
	if _, err := probe.Do("PING"); err == nil {
		t.Fatal("something still answers on the closed server's port")
	}
}

func TestWithRedisArgs(t *testing.T) {
	t.Parallel()
	s := StartRedis(t, WithRedisArgs("--maxmemory", "10mb"))
	reply, err := s.command("CONFIG", "GET", "maxmemory")
	if err != nil {
		t.Fatal(err)
	}
	items, ok := reply.([]any)
	if !ok || len(items) != 2 || items[1] != strconv.Itoa(10*1024*1024) {
		t.Fatalf("CONFIG GET maxmemory = %#v, want [maxmemory 10485760]", reply)
	}
}

func TestBadArgsReportLog(t *testing.T) {
	t.Parallel()
	_, err := NewRedisServer(WithRedisArgs("--no-such-option", "1"))
	if err == nil {
		t.Fatal("NewRedisServer with a bad option succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("error does not quote redis-server's complaint: %v", err)
	}
}

func TestRedisServerNotOnPath(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := NewRedisServer()
	if err == nil || !strings.Contains(err.Error(), "redis-server not found on PATH") {
		t.Fatalf("err = %v, want redis-server not found on PATH", err)
	}
}

func TestStartRedisCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartRedisCluster(t, 3)
	t.Logf("cluster of 3 masters ready in %v", time.Since(start))

	addrs := c.Addrs()
	if len(addrs) != 3 {
		t.Fatalf("Addrs() = %v, want 3 addresses", addrs)
	}
	for i, addr := range addrs {
		node := c.Node(i)
		if node.Addr() != addr {
			t.Fatalf("Node(%d).Addr() = %q, want %q", i, node.Addr(), addr)
		}
		info, err := node.Do("CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("node %s: CLUSTER INFO has no cluster_state:ok:\n%s", addr, info)
		}
		if got, err := node.Do("CLUSTER", "KEYSLOT", "foo"); err != nil || got != "12182" {
			t.Fatalf("node %s: CLUSTER KEYSLOT foo = %q, %v; want 12182", addr, got, err)
		}

		// Count the slots in CLUSTER SLOTS without the package's parser.
		reply, err := node.command("CLUSTER", "SLOTS")
		if err != nil {
			t.Fatal(err)
		}
		seen := make([]bool, 16384)
		for _, e := range reply.([]any) {
			entry := e.([]any)
			for slot := entry[0].(int64); slot <= entry[1].(int64); slot++ {
				seen[slot] = true
			}
		}
		for slot, ok := range seen {
			if !ok {
				t.Fatalf("node %s: slot %d is not in CLUSTER SLOTS", addr, slot)
			}
		}
	}

	// Slot 12182 is in the last third, so node 2 serves foo and the others
	// redirect.
	if _, err := c.Node(2).Do("SET", "foo", "bar"); err != nil {
		t.Fatalf("SET foo on its own node: %v", err)
	}
	if _, err := c.Node(0).Do("GET", "foo"); err == nil || !strings.Contains(err.Error(), "MOVED 12182 "+addrs[2]) {
		t.Fatalf("GET foo on node 0: err = %v, want MOVED 12182 %s", err, addrs[2])
	}
}

func TestNewRedisClusterTooSmall(t *testing.T) {
	t.Parallel()
	if _, err := NewRedisCluster(2); err == nil {
		t.Fatal("NewRedisCluster(2) succeeded")
	}
}

// TestPortTakenIsRetryable starts a second server on a port where another
// redis-server already answers: the start must fail with errPortInUse (which
// NewRedisServer retries), not be fooled by the other server's PONG.
func TestPortTakenIsRetryable(t *testing.T) {
	t.Parallel()
	first := StartRedis(t)
	second, err := NewRedisServer()
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	// Point a copy of second's arguments at first's port.
	clash := &RedisServer{bin: second.bin, port: first.port, dir: t.TempDir()}
	for i, arg := range second.args {
		if i > 0 && second.args[i-1] == "--port" {
			arg = strconv.Itoa(first.port)
		}
		if i > 0 && (second.args[i-1] == "--dir" || second.args[i-1] == "--logfile") {
			arg = strings.Replace(arg, second.dir, clash.dir, 1)
		}
		clash.args = append(clash.args, arg)
	}
	clash.mu.Lock()
	err = clash.start()
	clash.mu.Unlock()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("start on a taken port: err = %v, want errPortInUse", err)
	}
}

func TestProxyForwardsCutsAndFreezes(t *testing.T) {
	srv := StartRedis(t)
	p := StartProxy(t, srv.Addr())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	roundTrip := func(cmd string, timeout time.Duration) (string, error) {
		_ = conn.SetDeadline(time.Now().Add(timeout))
		if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
			return "", err
		}
		buf := make([]byte, 64)
		n, err := conn.Read(buf)
		return string(buf[:n]), err
	}
	if got, err := roundTrip("PING", 5*time.Second); err != nil || got != "+PONG\r\n" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}
	p.Freeze()
	if _, err := roundTrip("SET frozen 1", 200*time.Millisecond); err == nil {
		t.Fatal("a reply came through a frozen proxy")
	}
	if err := pollUntil(10*time.Second, func() error {
		if n := p.Held(); n != 1 {
			return fmt.Errorf("Held with a request sent into the freeze = %d, want 1", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.Thaw() // the held SET and its reply go through now
	buf := make([]byte, 64)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "+OK\r\n" {
		t.Fatalf("after thaw: %q, %v", buf[:n], err)
	}
	if n := p.Held(); n != 0 {
		t.Fatalf("Held after the thaw's reply = %d, want 0", n)
	}
	p.CutNextReply()
	if n := p.PendingCuts(); n != 1 {
		t.Fatalf("PendingCuts before the reply = %d, want 1", n)
	}
	if got, err := roundTrip("SET cut 1", 5*time.Second); err == nil {
		t.Fatalf("the cut reply arrived: %q", got)
	}
	if n := p.PendingCuts(); n != 0 {
		t.Fatalf("PendingCuts after the reply = %d, want 0", n)
	}
	if v, err := srv.Do("GET", "cut"); err != nil || v != "1" {
		t.Fatalf("the request behind the cut reply was not applied: %q, %v", v, err)
	}
}

func TestProxyLatency(t *testing.T) {
	srv := StartRedis(t)
	p := StartProxy(t, srv.Addr())
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	roundTrip := func() time.Duration {
		t.Helper()
		start := time.Now()
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, err := conn.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
			t.Fatalf("through the proxy: %q, %v", buf[:n], err)
		}
		return time.Since(start)
	}
	roundTrip()
	const d = 200 * time.Millisecond
	p.SetLatency(d)
	// Three pipelined requests: each is delayed, not queued behind the one
	// before: the replies come about 2d after the writes, not 6d.
	start := time.Now()
	for range 3 {
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	buf := make([]byte, 64)
	for len(got) < 3*len("+PONG\r\n") {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	took := time.Since(start)
	if string(got) != "+PONG\r\n+PONG\r\n+PONG\r\n" {
		t.Fatalf("replies %q", got)
	}
	if took < 2*d || took > 5*d {
		t.Fatalf("3 pipelined round trips took %v with %v each way, want about %v", took, d, 2*d)
	}
	p.SetLatency(0)
	if rt := roundTrip(); rt >= 2*d {
		t.Fatalf("round trip after SetLatency(0) took %v", rt)
	}
}

func TestClosedAddrRefusesAndStaysTaken(t *testing.T) {
	addr := ClosedAddr(t)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded, want refused", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listen on %s succeeded: the port was free for others", addr)
	}
}
