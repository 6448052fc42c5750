package testserver

import (
	"bufio"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// ask sends one command to addr on a new connection and returns the reply.
func ask(t *testing.T, addr string, args ...string) any {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(commandTimeout))
	if err := writeCommand(conn, args); err != nil {
		t.Fatal(err)
	}
	reply, err := readReply(bufio.NewReader(conn))
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func TestStartRedisFailover(t *testing.T) {
	t.Parallel()
	f := StartRedisFailover(t, "mymaster")
	if got := f.SentinelAddrs(); len(got) != 1 || !strings.HasPrefix(got[0], "127.0.0.1:") {
		t.Fatalf("SentinelAddrs() = %q, want one 127.0.0.1:PORT", got)
	}
	reply := ask(t, f.Sentinel.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", f.MasterName())
	if addr, _ := reply.([]any); len(addr) != 2 || addr[0].(string)+":"+addr[1].(string) != f.Primary.Addr() {
		t.Fatalf("GET-MASTER-ADDR-BY-NAME = %v, want %s", reply, f.Primary.Addr())
	}
	dir := f.Sentinel.dir
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the Sentinel's directory %s is still there: %v", dir, err)
	}
	if _, err := f.Primary.Do("PING"); err == nil {
		t.Fatal("the primary still answers after Close")
	}
}

func TestNewRedisSentinelRefusesBadArguments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, primary, want string }{
		{"", "127.0.0.1:6379", "master name"},
		{"my master", "127.0.0.1:6379", "master name"},
		{"m\nsentinel x", "127.0.0.1:6379", "master name"},
		{"m", "10.0.0.1:6379", "127.0.0.1"},
		{"m", "127.0.0.1", "primary"},
		{"m", "127.0.0.1:0", "port"},
	} {
		if s, err := NewRedisSentinel(c.name, c.primary); err == nil || !strings.Contains(err.Error(), c.want) {
			if s != nil {
				s.Close()
			}
			t.Errorf("NewRedisSentinel(%q, %q) = %v, want an error naming %s", c.name, c.primary, err, c.want)
		}
	}
}
