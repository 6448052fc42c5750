package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisSentinel is one Redis Sentinel on 127.0.0.1 (redis-server --sentinel)
// that monitors one primary under a master name, with a quorum of 1. It has
// its own temporary directory for its configuration, which Sentinel rewrites,
// and its log.
type RedisSentinel struct {
	bin     string // path of redis-server
	port    int
	dir     string // temporary directory, removed by Close
	name    string // the master name
	primary string // "127.0.0.1:PORT" of the monitored primary
	supervisor
}

// NewRedisSentinel starts a Sentinel on a free port of 127.0.0.1 that
// monitors primary ("127.0.0.1:PORT", a running redis-server) as name, and
// waits (at most 10 s) until it answers PING and reports primary as a master
// it is connected to. The caller must call Close.
func NewRedisSentinel(name, primary string) (*RedisSentinel, error) {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == '"' || r == 0x7f }) {
		return nil, fmt.Errorf("testserver: sentinel master name %q: want a non-empty name without spaces, quotes or control characters", name)
	}
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return nil, fmt.Errorf("testserver: sentinel primary %q: %w", primary, err)
	}
	if host != "127.0.0.1" {
		return nil, fmt.Errorf("testserver: sentinel primary %q: want an address on 127.0.0.1", primary)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("testserver: sentinel primary %q: port %q is not in 1..65535", primary, port)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNotFound
	}
	return onFreePorts(1, func(ports []int) (*RedisSentinel, error) {
		return startSentinel(bin, name, primary, ports[0])
	})
}

// startSentinel makes one attempt on port: write the configuration, start.
func startSentinel(bin, name, primary string, port int) (*RedisSentinel, error) {
	dir, err := os.MkdirTemp("", "leasehold-sentinel-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	s := &RedisSentinel{bin: bin, port: port, dir: dir, name: name, primary: primary}
	host, primaryPort, _ := net.SplitHostPort(primary)
	conf := strings.Join([]string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"protected-mode no",
		"daemonize no",
		"dir " + dir,
		"logfile " + s.logPath(),
		fmt.Sprintf("sentinel monitor %s %s %s 1", name, host, primaryPort),
		// Fail over 5 s after the primary went silent, not Sentinel's 30 s.
		"sentinel down-after-milliseconds " + name + " 5000",
	}, "\n") + "\n"
	if err := os.WriteFile(s.confPath(), []byte(conf), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testserver: %w", err)
	}
	if err := s.do("start", anyState, s.start); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// start launches the Sentinel and waits until it is ready; s.mu is held.
func (s *RedisSentinel) start() error {
	return s.run(program{
		name: "redis-sentinel", addr: s.Addr(), bin: s.bin, args: []string{s.confPath(), "--sentinel"}, dir: s.dir,
		out: s.outPath(), logs: []string{s.outPath(), s.logPath()},
		ready: s.ready, readyWhat: "answer PING and see the primary " + s.primary, poll: readyPollInterval,
		exitCause:  portInUse,
		stopSignal: syscall.SIGTERM, stopGrace: stopTimeout,
	}, time.Now().Add(readyTimeout))
}

// ready returns nil once our process answers PING on the port and reports
// the primary under its name, connected (flags exactly "master").
func (s *RedisSentinel) ready(context.Context) error {
	ask, done, err := askOwn(s.Addr(), s.pid)
	if err != nil {
		return err
	}
	defer done()
	reply, err := ask("SENTINEL", "MASTER", s.name)
	if err != nil {
		return fmt.Errorf("SENTINEL MASTER %s: %w", s.name, err)
	}
	fields, _ := reply.([]any)
	got := map[string]string{}
	for i := 0; i+1 < len(fields); i += 2 {
		k, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		got[k] = v
	}
	if addr := net.JoinHostPort(got["ip"], got["port"]); addr != s.primary || got["flags"] != "master" {
		return fmt.Errorf("SENTINEL MASTER %s: %s with flags %q, want %s with flags \"master\"", s.name, addr, got["flags"], s.primary)
	}
	return nil
}

// Addr returns the Sentinel's address, "127.0.0.1:PORT".
func (s *RedisSentinel) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Close stops the Sentinel (SIGTERM, then SIGKILL after 5 s), waits for the
// process to exit and removes its directory. Calling it again does nothing.
// It leaves the primary running.
func (s *RedisSentinel) Close() error { return s.close(s.stop, s.dir) }

func (s *RedisSentinel) confPath() string { return filepath.Join(s.dir, "sentinel.conf") }
func (s *RedisSentinel) logPath() string  { return filepath.Join(s.dir, "sentinel.log") }
func (s *RedisSentinel) outPath() string  { return filepath.Join(s.dir, "sentinel.out") }

// RedisFailover is a primary and a Sentinel that monitors it, for a
// failover client (redis.NewFailoverClient).
type RedisFailover struct {
	Primary  *RedisServer
	Sentinel *RedisSentinel
	name     string
}

// NewRedisFailover starts a primary (with opts) and a Sentinel that monitors
// it as name. The caller must call Close.
func NewRedisFailover(name string, opts ...RedisOption) (*RedisFailover, error) {
	primary, err := NewRedisServer(opts...)
	if err != nil {
		return nil, err
	}
	sentinel, err := NewRedisSentinel(name, primary.Addr())
	if err != nil {
		return nil, errors.Join(err, primary.Close())
	}
	return &RedisFailover{Primary: primary, Sentinel: sentinel, name: name}, nil
}

// MasterName returns the name the Sentinel knows the primary by.
func (f *RedisFailover) MasterName() string { return f.name }

// SentinelAddrs returns the Sentinels' addresses, for FailoverOptions.
func (f *RedisFailover) SentinelAddrs() []string { return []string{f.Sentinel.Addr()} }

// Close stops the Sentinel, then the primary. It is safe to call more than
// once.
func (f *RedisFailover) Close() error { return errors.Join(f.Sentinel.Close(), f.Primary.Close()) }

// StartRedisFailover starts a primary and its Sentinel for a test and
// registers tb.Cleanup to close them. It calls tb.Fatalf if they cannot be
// started; it never skips the test.
func StartRedisFailover(tb testing.TB, name string) *RedisFailover {
	tb.Helper()
	f, err := NewRedisFailover(name)
	return started(tb, f, err)
}
