package main_test

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// TestUsageErrors: a wrong command line is one line on stderr, nothing on
// stdout, exit code 2, and no store is contacted (the Redis URL names a
// closed port, which would otherwise fail with exit code 1).
func TestUsageErrors(t *testing.T) {
	closed := "redis://" + closedAddr(t) + "/0"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "--bogus", "k"}, "unknown flag: --bogus"},
		{[]string{"ls", "--redis", closed, "--etcd", "127.0.0.1:2379", "x"}, "choose one store: --redis and --etcd"},
		{[]string{"inspect", "--redis", closed, "--postgres", "postgres://x@127.0.0.1/db", "k"}, "choose one store"},
		{[]string{"--timeout", "abc", "inspect", "--redis", closed, "k"}, `invalid argument "abc" for "--timeout"`},
		{[]string{"--timeout", "0s", "inspect", "--redis", closed, "k"}, "--timeout must be between 1ns and 10m0s, not 0s"},
		{[]string{"inspect", "--redis", closed}, "inspect needs KEY"},
		{[]string{"inspect", "--redis", closed, "a", "b"}, "inspect takes 1 argument"},
		{[]string{"inspect", "k"}, "no store selected: pass --redis, --etcd, --postgres or --kube"},
		{[]string{"ls", "x"}, "no store selected"},
		{[]string{"ls", "--redis", closed}, "ls needs PATTERN"},
		{[]string{"ls", "--redis", closed, "leader:[a-"}, "invalid pattern: the [ at character 8 is not closed"},
		{[]string{"ls", "--postgres", "postgres://x@" + closedAddr(t) + "/db", `trailing\`}, "invalid pattern: a trailing"},
		{[]string{"inspect", "--redis", closed, "bad\x07key"}, "invalid key: control character U+0007"},
		{[]string{"inspect", "--redis", closed, ""}, "invalid key: empty"},
		{[]string{"inspect", "--redis", "http://127.0.0.1:6379", "k"}, "--redis: invalid URL (not shown: it may contain a password): the scheme is not redis://"},
		{[]string{"inspect", "--redis", "redis://user:hunter2@127.0.0.1:bad/0", "k"}, "--redis: invalid URL"},
		{[]string{"inspect", "--etcd", " , ", "k"}, "--etcd needs at least one endpoint"},
		{[]string{"inspect", "--postgres", "postgres://x@127.0.0.1:notaport/db", "k"}, "--postgres"},
		{[]string{"ls", "--redis", closed, "--limit", "0", "x"}, "--limit must be between 1 and"},
		{[]string{"ls", "--redis", closed, "--page-size", "-1", "x"}, "--page-size must be between 1 and"},
		{[]string{"ls", "--redis", closed, "--limit", "many", "x"}, `invalid argument "many" for "--limit"`},
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"help", "nosuch"}, `unknown help topic "nosuch"`},
		{[]string{"inspect", "--redis", "redis://:hunter2@127.0.0.1:99999/0", "k"}, "--redis: invalid URL (not shown: it may contain a password): the port is not a number"},
		{[]string{"inspect", "--etcd", "http://127.0.0.1:99999", "k"}, "--etcd: invalid URL"},
		// Ports out of range anywhere in a Redis address: the command line's fault.
		{[]string{"inspect", "--redis", "127.0.0.1:99999", "k"}, "--redis: invalid URL (not shown: it may contain a password): the port is not a number"},
		{[]string{"inspect", "--redis", "myredis:70000", "k"}, "the port is not a number from 0 to 65535"},
		{[]string{"inspect", "--redis", "redis+cluster://127.0.0.1:6379?addr=127.0.0.1:99999", "k"}, "an addr query parameter that is not host:port with a port from 0 to 65535"},
		{[]string{"inspect", "--redis", "redis+sentinel://127.0.0.1:26379?master_name=m&addr=127.0.0.1:99999", "k"}, "an addr query parameter that is not host:port"},
		{[]string{"inspect", "--redis", closed, "--pg-table", "zz", "k:1"}, "--pg-table goes with --postgres, not with --redis"},
		{[]string{"inspect", "--redis", closed, "--etcd-prefix", "qq/", "k:1"}, "--etcd-prefix goes with --etcd, not with --redis"},
		{[]string{"inspect", "--redis", closed, "--kube-namespace", "nn", "k:1"}, "--kube-namespace goes with --kube"},
		{[]string{"ls", "--redis", closed, "--kube-prefix", "p-", "*"}, "--kube-prefix goes with --kube"},
		{[]string{"inspect", "--etcd", closedAddr(t), "--tls-ca", "ca.pem", "k:1"}, "--tls-ca goes with --redis, not with --etcd"},
		{[]string{"inspect", "--postgres", "postgres://x@" + closedAddr(t) + "/db", "--etcd-prefix", "qq/", "k:1"}, "--etcd-prefix goes with --etcd, not with --postgres"},
		{[]string{"ttl", "--exec-p99", "soon", "--jitter", "1s", "--guard", "1s"}, `invalid argument "soon" for "--exec-p99"`},
		{[]string{"ttl", "--jitter", "1s", "--guard", "1s"}, "ttl needs --exec-p99"},
		{[]string{"ttl", "--exec-p99", "1s", "--guard", "1s"}, "ttl needs --jitter"},
		{[]string{"ttl", "--exec-p99", "1s", "--jitter", "1s"}, "ttl needs --guard"},
		{[]string{"ttl", "--exec-p99", "1s", "--from", "http://127.0.0.1:1/metrics", "--namespace", "runs", "--jitter", "1s", "--guard", "1s"}, "not both"},
		{[]string{"ttl", "--from", "http://127.0.0.1:1/metrics", "--jitter", "1s", "--guard", "1s"}, "--from needs --namespace"},
		{[]string{"ttl", "--exec-p99", "1s", "--quantile", "0.5", "--jitter", "1s", "--guard", "1s"}, "--quantile goes with --from"},
		{[]string{"ttl", "--from", "ftp://127.0.0.1/metrics", "--namespace", "runs", "--jitter", "1s", "--guard", "1s"}, "--from needs an http:// or https:// URL"},
		{[]string{"ttl", "--exec-p99", "20h", "--jitter", "5h", "--guard", "0s"}, "invalid ttl (--exec-p99 + --jitter + --guard): 25h0m0s is longer than 24h0m0s"},
		{[]string{"ttl", "--exec-p99", "1s", "--jitter", "-1s", "--guard", "0s"}, "--jitter must be between 0s and 24h0m0s, not -1s"},
		{[]string{"ttl", "surplus", "--exec-p99", "1s", "--jitter", "1s", "--guard", "1s"}, "ttl takes no arguments"},
	} {
		r := failsWith(t, 2, []string{tc.want}, tc.args...)
		if r.stdout != "" {
			t.Errorf("leasehold %q printed on stdout: %q", tc.args, r.stdout)
		}
		if strings.Contains(r.stderr, "hunter2") {
			t.Errorf("leasehold %q printed the password: %q", tc.args, r.stderr)
		}
	}
}

// closedAddr returns a loopback address on which nothing listens, held
// until the test ends.
func closedAddr(t *testing.T) string { return testserver.ClosedAddr(t) }

// freeAddr returns a loopback address free right now, for a server the
// test starts on it.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// silentAddr returns a loopback address that accepts connections and never
// answers: a store that hangs.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestUnreachableStore: a store that refuses connections, or accepts them
// and never answers, is one line naming the store, exit code 1, within the
// --timeout (plus the time to start the process).
func TestUnreachableStore(t *testing.T) {
	const timeout = 2 * time.Second
	for _, where := range []struct {
		name string
		addr func(*testing.T) string
		says string
	}{{"refusing", closedAddr, "connection refused"}, {"silent", silentAddr, "did not answer within 2s"}} {
		t.Run(where.name, func(t *testing.T) {
			addr := where.addr(t)
			for _, store := range []struct {
				flag, value, name string
			}{
				{"--redis", "redis://" + addr + "/0", "redis at " + addr},
				{"--etcd", addr, "etcd at " + addr},
				{"--postgres", "postgres://ops:hunter2@" + addr + "/locks?sslmode=disable", "postgres at " + addr},
			} {
				for _, cmd := range [][]string{{"inspect", "runs:R1"}, {"ls", "*:*"}} {
					args := append([]string{"--timeout", timeout.String(), store.flag, store.value}, cmd...)
					t.Run(strings.TrimPrefix(store.flag, "--")+" "+cmd[0], func(t *testing.T) {
						t.Parallel()
						r := failsWith(t, 1, []string{store.name, where.says}, args...)
						if r.elapsed > timeout+loadSlack {
							t.Errorf("leasehold %q took %v with --timeout %v", args, r.elapsed, timeout)
						}
						if strings.Contains(r.stderr, "hunter2") {
							t.Errorf("leasehold %q printed the password: %q", args, r.stderr)
						}
					})
				}
			}
		})
	}
}

// A flag given twice is a usage error naming it, never "the last one wins":
// two --redis would otherwise ask a store the operator did not mean.
func TestFlagGivenTwiceRefused(t *testing.T) {
	t.Parallel()
	closed := "redis://" + closedAddr(t) + "/0"
	for _, args := range [][]string{
		{"inspect", "--redis", closed, "--redis", closed, "k"},
		{"release", "--redis", closed, "k", "--force", "--reason", "a", "--reason", "b"},
		{"ttl", "--exec-p99", "1s", "--jitter", "0s", "--jitter", "2s", "--guard", "0s"},
		{"--timeout", "1s", "ls", "--timeout", "2s", "--redis", closed, "*"},
		{"drill", "--jobs", "2", "--jobs", "3"},
	} {
		failsWith(t, 2, []string{"given more than once"}, args...)
	}
}

// The drill's job storage that refuses connections is named as a store
// is: its address and flag, never its password, exit 1.
func TestUnreachableJobStorage(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	r := failsWith(t, 1, []string{"postgres at " + addr + "/locks (--jobs-postgres): cannot connect", "connection refused"},
		"drill", "--jobs", "2", "--jobs-postgres", "postgres://ops:hunter2@"+addr+"/locks?sslmode=disable")
	if strings.Contains(r.stderr, "hunter2") {
		t.Errorf("the drill printed the password: %q", r.stderr)
	}
}
