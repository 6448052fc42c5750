package testserver

import (
	"bufio"
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

const (
	// readyTimeout bounds how long we wait for a new server to answer PING.
	readyTimeout = 10 * time.Second
	// readyPollInterval is the pause between two PING attempts.
	readyPollInterval = 10 * time.Millisecond
	// stopTimeout is how long a server gets to exit after SIGTERM before it
	// is sent SIGKILL.
	stopTimeout = 5 * time.Second
	// dialTimeout and commandTimeout bound each command sent with Do.
	dialTimeout    = 2 * time.Second
	commandTimeout = 10 * time.Second
)

// errNotFound is returned when redis-server is not on PATH.
var errNotFound = errors.New("testserver: redis-server not found on PATH: " +
	"install the Debian package redis-server (make test does this when run as root)")

// RedisOption configures a server started by NewRedisServer, StartRedis or
// NewRedisCluster.
type RedisOption func(*redisConfig)

// redisConfig collects the options.
type redisConfig struct {
	args    []string       // extra redis-server arguments, after ours
	cluster bool           // start with cluster mode on (set by NewRedisCluster)
	clock   *time.Duration // run under libfaketime with this offset (WithClockOffset)
}

// WithRedisArgs adds extra command-line arguments for redis-server, for
// example WithRedisArgs("--maxmemory", "10mb"). They come after the
// package's own arguments, so they can override them. Arguments that make
// the server refuse plain commands (such as --requirepass) or move it off
// its port are not supported: the server would never be seen as ready.
func WithRedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) {
		c.args = append(c.args, args...)
	}
}

// withCluster turns cluster mode on; only NewRedisCluster uses it.
func withCluster() RedisOption {
	return func(c *redisConfig) {
		c.cluster = true
	}
}

// RedisServer is one redis-server process on 127.0.0.1, no persistence.
// It has its own temporary directory for its log file (and, for cluster
// nodes, nodes.conf). Its methods are safe for concurrent use.
type RedisServer struct {
	bin     string         // path of redis-server
	port    int            // client port
	busPort int            // cluster bus port; 0 when not a cluster node
	dir     string         // temporary directory, removed by Close
	args    []string       // full argument list, reused by Restart
	env     []string       // environment; nil for ours (see WithClockOffset)
	clock   *time.Duration // the clock offset to check after each start, if any
	supervisor
}

// NewRedisServer starts redis-server on a free port of 127.0.0.1 and waits
// (at most 10 s) until it answers PING. The caller must call Close.
//
// If the port is taken by another process between choosing it and the
// server's bind, it tries again with a new port, at most 5 times.
func NewRedisServer(opts ...RedisOption) (*RedisServer, error) {
	var cfg redisConfig
	for _, opt := range opts {
		opt(&cfg)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNotFound
	}
	var env []string
	if cfg.clock != nil {
		if env, err = faketimeEnv(*cfg.clock); err != nil {
			return nil, err
		}
	}
	nPorts := 1
	if cfg.cluster {
		nPorts = 2
	}
	return onFreePorts(nPorts, func(ports []int) (*RedisServer, error) {
		return startRedis(bin, cfg, env, ports)
	})
}

// startRedis makes one attempt on the given ports: make the directory, start.
func startRedis(bin string, cfg redisConfig, env []string, ports []int) (*RedisServer, error) {
	dir, err := os.MkdirTemp("", "leasehold-redis-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	s := &RedisServer{bin: bin, port: ports[0], dir: dir, env: env, clock: cfg.clock}
	s.args = []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--logfile", s.logPath(),
		// DEBUG (e.g. DEBUG SLEEP) is refused by default since Redis 7;
		// allow it from loopback connections, which is all we have.
		"--enable-debug-command", "local",
	}
	if cfg.cluster {
		s.busPort = ports[1]
		s.args = append(s.args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	s.args = append(s.args, cfg.args...)

	if err := s.do("start", anyState, s.start); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// start launches redis-server with s.args and waits until it answers PING;
// with WithClockOffset it then checks, once, that TIME shows the offset.
// The caller holds s.mu and s.proc is nil.
func (s *RedisServer) start() error {
	// stdout and stderr go to redis.out: redis writes to redis.log once it
	// has read its arguments, but errors in the arguments go to stderr.
	err := s.run(program{
		name: "redis-server", addr: s.Addr(), bin: s.bin, args: s.args, dir: s.dir, env: s.env,
		out: s.outPath(), logs: []string{s.outPath(), s.logPath()},
		ready: s.ping, readyWhat: "answer PING", poll: readyPollInterval,
		exitCause:  portInUse,
		stopSignal: syscall.SIGTERM, stopGrace: stopTimeout,
	}, time.Now().Add(readyTimeout))
	if err == nil && s.clock != nil {
		if err = s.checkClock(*s.clock); err != nil {
			s.kill()
		}
	}
	return err
}

// ping returns nil if our process answers PING on the port (see askOwn).
func (s *RedisServer) ping(context.Context) error {
	_, done, err := askOwn(s.Addr(), s.pid)
	if err == nil {
		done()
	}
	return err
}

// askOwn dials a Redis or Sentinel process at addr and checks it answers PING
// and is ours, pid: another test's server may have won the race for the port,
// and ours then exits and is retried. ask sends more commands; done closes.
func askOwn(addr string, pid int) (ask func(args ...string) (any, error), done func(), err error) {
	conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return nil, nil, err
	}
	conn.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(conn)
	ask = func(args ...string) (any, error) {
		if err := writeCommand(conn, args); err != nil {
			return nil, err
		}
		reply, err := readReply(r)
		if e, ok := reply.(redisError); ok {
			return nil, e
		}
		return reply, err
	}
	if reply, err := ask("PING"); err != nil || reply != "PONG" {
		conn.Close()
		return nil, nil, fmt.Errorf("PING: %v, %v", reply, err)
	}
	reply, err := ask("INFO", "server")
	info, _ := reply.(string)
	if got := InfoField(info, "process_id"); err != nil || got != strconv.Itoa(pid) {
		conn.Close()
		return nil, nil, fmt.Errorf("INFO server: process_id %q, want %d (%v)", got, pid, err)
	}
	return ask, func() { conn.Close() }, nil
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *RedisServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Pid returns the process id of the most recently started redis-server
// process (it changes with Restart).
func (s *RedisServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Close stops the server (SIGTERM, then SIGKILL after 5 s), waits for the
// process to exit and removes its temporary directory. Calling Close again
// does nothing and returns nil.
func (s *RedisServer) Close() error { return s.close(s.stop, s.dir) }

// Restart stops the server and starts it again on the same port with the
// same arguments, then waits (at most 10 s) until it answers PING. There is
// no persistence, so all data is gone afterwards. A cluster node keeps its
// cluster configuration (nodes.conf), so it rejoins its cluster.
//
// Restart fails if the port was taken while the server was down; there is
// no retry, since the point is to keep the address.
func (s *RedisServer) Restart() error { return s.restart(s.start) }

// Do sends one command on a new connection and returns the reply as a
// string: a simple or bulk string as it is, an integer in decimal. A nil
// reply (for example GET of a missing key) is returned as "" with a nil
// error; use EXISTS if the difference matters. An error reply from the
// server is returned as a Go error holding its text (e.g. "MOVED 12182
// 127.0.0.1:PORT"). Array replies are not supported and give an error.
//
// Do fails once the server is closed. Each call is bounded: 2 s to connect,
// 10 s for the reply.
func (s *RedisServer) Do(args ...string) (string, error) {
	reply, err := s.command(args...)
	if err != nil {
		return "", err
	}
	switch v := reply.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	default:
		return "", fmt.Errorf("testserver: %s: array reply not supported by Do", args[0])
	}
}

// command sends one command on a new connection and returns the raw reply
// (see readReply). An error reply becomes a Go error.
func (s *RedisServer) command(args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("testserver: no command given")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("testserver: %s: server %s is closed", args[0], s.Addr())
	}
	return s.send(args...)
}

// send is command without the check that the server is open, for callers
// that hold s.mu.
func (s *RedisServer) send(args ...string) (any, error) {
	conn, err := net.DialTimeout("tcp", s.Addr(), dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("testserver: %s: %w", args[0], err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(commandTimeout))
	if err := writeCommand(conn, args); err != nil {
		return nil, fmt.Errorf("testserver: %s on %s: %w", args[0], s.Addr(), err)
	}
	reply, err := readReply(bufio.NewReader(conn))
	if err != nil {
		return nil, fmt.Errorf("testserver: %s on %s: %w", args[0], s.Addr(), err)
	}
	if e, ok := reply.(redisError); ok {
		return nil, fmt.Errorf("testserver: %s on %s: %s", args[0], s.Addr(), string(e))
	}
	return reply, nil
}

// logPath is the server's log file.
func (s *RedisServer) logPath() string { return filepath.Join(s.dir, "redis.log") }

// outPath is where the process's stdout and stderr go.
func (s *RedisServer) outPath() string { return filepath.Join(s.dir, "redis.out") }

// InfoField returns the value of "name:value" in the text of an INFO or
// CLUSTER INFO reply, or "" if it is not there.
func InfoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		value, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), name+":")
		if ok {
			return value
		}
	}
	return ""
}

// StartRedis starts a server for a test or benchmark and registers
// tb.Cleanup to close it. If the server cannot be started it calls
// tb.Fatalf with the reason (for example that redis-server is not on PATH).
// It never skips the test.
func StartRedis(tb testing.TB, opts ...RedisOption) *RedisServer {
	tb.Helper()
	s, err := NewRedisServer(opts...)
	return started(tb, s, err)
}
