package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// This file starts real PostgreSQL servers (Debian package postgresql) for
// tests, the way redis.go starts redis-server: one server per temporary
// directory, on a free port of 127.0.0.1, every wait bounded in time.
//
// A server is a cluster made by initdb in <tmp>/data, run by the postgres
// program with its Unix socket in <tmp>/sock (so /var/run/postgresql is not
// needed) and its output in <tmp>/postgres.log. Durability is turned off
// where it only protects against an operating-system crash (fsync,
// full_page_writes), which a test never has; see postgresArgs.

const (
	// pgReadyTimeout bounds how long we wait for a started server to accept
	// queries, counting relaunches after Kill (see start).
	pgReadyTimeout = 30 * time.Second
	// pgReadyPollInterval is the pause between two readiness checks.
	pgReadyPollInterval = 20 * time.Millisecond
	// pgProbeTimeout bounds one readiness check with psql.
	pgProbeTimeout = 5 * time.Second
	// pgStopTimeout is how long the server gets to exit after SIGINT (fast
	// shutdown) before its process group is sent SIGKILL.
	pgStopTimeout = 10 * time.Second
	// pgInitdbTimeout bounds initdb, which normally takes a second or two.
	pgInitdbTimeout = 2 * time.Minute
	// pgPsqlTimeout bounds one call of Psql.
	pgPsqlTimeout = time.Minute
	// pgToolTimeout bounds "pg_config --bindir".
	pgToolTimeout = 10 * time.Second
	// pgRelaunchPause is the pause before starting postgres again when the
	// processes of a killed server still hold the data directory.
	pgRelaunchPause = 50 * time.Millisecond
)

// pgVersionsDir is where Debian installs each PostgreSQL major version, as
// <pgVersionsDir>/<version>/bin.
const pgVersionsDir = "/usr/lib/postgresql"

// errPostgresNotFound is returned when no directory with initdb and postgres
// is found.
var errPostgresNotFound = errors.New("testserver: PostgreSQL server binaries not found: " +
	"install the Debian package postgresql (make test does this when run as root)")

// errDataDirBusy marks a start that failed because processes of the previous
// run still hold the data directory (they are exiting after Kill); such a
// start is retried.
var errDataDirBusy = errors.New("processes of the previous server still hold the data directory")

// PostgresServer is one PostgreSQL server process on 127.0.0.1 with its own
// data directory in a temporary directory, user postgres, trust
// authentication, database postgres. Its data survives Restart and
// Kill+Start; Close removes it. Its methods are safe for concurrent use.
type PostgresServer struct {
	binDir  string // directory of initdb and postgres
	psqlBin string // path of psql
	dir     string // temporary directory, removed by Close
	port    int    // TCP port on 127.0.0.1
	runAs   *osUser
	supervisor
}

// osUser is the user that the PostgreSQL programs run as when the test runs
// as root.
type osUser struct {
	name     string
	uid, gid uint32
}

// NewPostgresServer creates a fresh cluster with initdb, starts postgres on a
// free port of 127.0.0.1 and waits (at most 30 s) until it accepts queries.
// The caller must call Close.
//
// If the port is taken by another process between choosing it and the
// server's bind, it tries again with a new port, at most 5 times.
//
// PostgreSQL refuses to run as root. When the test runs as root, initdb,
// postgres and psql run as the OS user postgres (created by the Debian
// package), and the temporary directory is given to that user.
func NewPostgresServer() (*PostgresServer, error) {
	binDir, err := findPostgresBinDir()
	if err != nil {
		return nil, err
	}
	psqlBin, err := findPsql(binDir)
	if err != nil {
		return nil, err
	}
	runAs, err := postgresRunAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "leasehold-postgres-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	s := &PostgresServer{binDir: binDir, psqlBin: psqlBin, dir: dir, runAs: runAs}
	if err := s.initdb(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}

	_, err = onFreePorts(1, func(ports []int) (*PostgresServer, error) {
		s.port = ports[0]
		return s, s.do("start", anyState, s.start)
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// findPostgresBinDir returns the directory that holds initdb and postgres:
// the one "pg_config --bindir" names, else the highest version under
// /usr/lib/postgresql (where Debian puts them, off PATH), else the
// directory of initdb on PATH.
func findPostgresBinDir() (string, error) {
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), pgToolTimeout)
		cmd := exec.CommandContext(ctx, pgConfig, "--bindir")
		cmd.WaitDelay = cmdWaitDelay
		out, err := cmd.Output()
		cancel()
		// Debian's pg_config comes with libpq-dev and may name a version
		// whose server is not installed, so check before trusting it.
		if dir := strings.TrimSpace(string(out)); err == nil && hasServerBinaries(dir) {
			return dir, nil
		}
	}

	dirs, _ := filepath.Glob(filepath.Join(pgVersionsDir, "*", "bin"))
	slices.SortFunc(dirs, func(a, b string) int {
		// Highest version first.
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, dir := range dirs {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}

	if initdb, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(initdb); hasServerBinaries(dir) {
			return dir, nil
		}
		// A lone symlink on PATH (such as /usr/local/bin/initdb) points
		// into the real directory.
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			if dir := filepath.Dir(real); hasServerBinaries(dir) {
				return dir, nil
			}
		}
	}
	return "", errPostgresNotFound
}

// compareVersions compares two version strings such as "9.6" and "15"
// number by number. A part that is not a number sorts below any number.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		x, y := -1, -1
		if i < len(as) {
			if n, err := strconv.Atoi(as[i]); err == nil {
				x = n
			}
		}
		if i < len(bs) {
			if n, err := strconv.Atoi(bs[i]); err == nil {
				y = n
			}
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

// hasServerBinaries reports whether dir holds executable initdb and postgres.
func hasServerBinaries(dir string) bool {
	return dir != "" && isExecutable(filepath.Join(dir, "initdb")) &&
		isExecutable(filepath.Join(dir, "postgres"))
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// findPsql returns psql from binDir, or else from PATH. The one in binDir
// is preferred: on Debian, psql on PATH is a Perl wrapper that picks a
// version by itself and starts more slowly.
func findPsql(binDir string) (string, error) {
	if p := filepath.Join(binDir, "psql"); isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath("psql"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("testserver: psql not found in %s or on PATH: "+
		"install the Debian package postgresql-client (make test does this when run as root)", binDir)
}

// postgresRunAs returns the OS user postgres when we run as root, and nil
// otherwise (the programs then run as the current user).
func postgresRunAs() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("testserver: running as root, and PostgreSQL refuses to run as root, "+
			"but there is no OS user postgres to run it as (%v): install the Debian package postgresql, which creates it", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil || uid == 0 {
		return nil, fmt.Errorf("testserver: OS user postgres has uid %q and gid %q; need an ordinary user to run PostgreSQL as",
			u.Uid, u.Gid)
	}
	return &osUser{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

// initdb creates the socket directory, the log file and the cluster. It
// runs once per server; Restart and Start reuse the cluster.
func (s *PostgresServer) initdb() error {
	if err := os.Mkdir(s.socketDir(), 0o700); err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	f, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	f.Close()
	if s.runAs != nil {
		if err := chownTree(s.dir, int(s.runAs.uid), int(s.runAs.gid)); err != nil {
			return fmt.Errorf("testserver: give %s to OS user %s: %w", s.dir, s.runAs.name, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), pgInitdbTimeout)
	defer cancel()
	// --locale=C makes the cluster independent of the host's locale
	// settings (initdb fails on a locale that is not installed) and keeps
	// server messages in English, which postgresExitCause relies on.
	var out bytes.Buffer
	initdb := s.tool(filepath.Join(s.binDir, "initdb"),
		"-D", s.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if err := initdb.runToEnd(ctx, &out, &out); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("did not finish within %v", pgInitdbTimeout)
		}
		hint := ""
		if s.runAs != nil && strings.Contains(out.String(), "Permission denied") {
			hint = fmt.Sprintf("\n(initdb runs as OS user %s, which must be able to reach %s; set TMPDIR to a directory such as /tmp)",
				s.runAs.name, s.dir)
		}
		return fmt.Errorf("testserver: initdb -D %s: %v\ninitdb output:\n%s%s",
			s.dataDir(), err, strings.TrimSpace(out.String()), hint)
	}
	return nil
}

// chownTree gives root and everything below it to uid and gid.
func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// tool is one of the PostgreSQL programs: working directory the temporary
// directory (the postgres user may not be able to read ours), clean
// environment, own process group, and the postgres user when we are root.
func (s *PostgresServer) tool(bin string, args ...string) program {
	return program{bin: bin, args: args, dir: s.dir, env: postgresEnv(), runAs: s.runAs, group: true}
}

// postgresEnv is our environment without libpq's PG* variables (a
// developer's PGOPTIONS, PGSSLMODE or PGSERVICE must not change what the
// tests see), in the C locale, with a bound on psql's connection attempts.
func postgresEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	// exec.Cmd uses the last value of a duplicated name, so LC_ALL wins.
	return append(env, "LC_ALL=C", "PGCLIENTENCODING=UTF8", "PGCONNECT_TIMEOUT=5")
}

// postgresArgs is the postgres command line.
//
// fsync=off and full_page_writes=off only lose data when the operating
// system crashes, which a test never sees: after Kill (a crash of the
// server's processes) the written pages are still in the kernel's cache and
// recovery works. synchronous_commit stays on: with fsync=off a commit costs
// just one write(2), and with it off a commit that was already reported to
// the client could be lost by Kill, which would make crash tests flaky.
func (s *PostgresServer) postgresArgs() []string {
	return []string{
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-k", s.socketDir(),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=on",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
		"-c", "logging_collector=off",
	}
}

// start launches postgres and waits until it accepts queries. If processes
// of a killed server still hold the data directory, it launches again until
// they are gone; all of it within pgReadyTimeout. The caller holds s.mu and
// s.proc is nil.
func (s *PostgresServer) start() error {
	deadline := time.Now().Add(pgReadyTimeout)
	for {
		err := s.run(s.program(), deadline)
		if !errors.Is(err, errDataDirBusy) || time.Now().Add(pgRelaunchPause).After(deadline) {
			return err
		}
		time.Sleep(pgRelaunchPause)
	}
}

// program is how the supervisor runs the server: SIGINT is PostgreSQL's fast
// shutdown (roll back open transactions, checkpoint, exit); a kill takes the
// postmaster and all its children.
//
// The server is run directly as our child, not with pg_ctl: pg_ctl starts
// it in the background and exits, so the server would not be our child. We
// could then not give it a parent-death signal (a killed test binary would
// leave it running), not wait for it, not see at once when it exits early,
// and not kill it (or its process group) for Kill; we would have to go by
// the pid in postmaster.pid instead.
func (s *PostgresServer) program() program {
	prog := s.tool(filepath.Join(s.binDir, "postgres"), s.postgresArgs()...)
	prog.name, prog.addr = "postgres", s.Addr()
	prog.out, prog.logs = s.logPath(), []string{s.logPath()}
	prog.ready, prog.readyWhat, prog.poll = s.ready, "accept queries", pgReadyPollInterval
	prog.exitCause = postgresExitCause
	prog.stopSignal, prog.stopGrace = syscall.SIGINT, pgStopTimeout
	return prog
}

// ready returns nil when our server accepts TCP connections and answers a
// query. It asks for the data directory, because another test's server may
// have won the race for the port; ours then exits and is retried.
func (s *PostgresServer) ready(ctx context.Context) error {
	conn, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
	if err != nil {
		return err
	}
	conn.Close()
	ctx, cancel := context.WithTimeout(ctx, pgProbeTimeout)
	defer cancel()
	dataDir, err := s.psql(ctx, "SELECT current_setting('data_directory')")
	if err == nil && !sameDir(dataDir, s.dataDir()) {
		err = fmt.Errorf("the server on %s has data directory %s, not ours", s.Addr(), dataDir)
	}
	return err
}

// sameDir reports whether a and b name the same existing directory.
func sameDir(a, b string) bool {
	if a == b {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// postgresExitCause reads the log of a postmaster that exited before it was
// ready: a failed bind is errPortInUse (retried on another port by
// NewPostgresServer), a data directory still in use after Kill
// errDataDirBusy (retried by start).
func postgresExitCause(output string) error {
	switch {
	case strings.Contains(output, "could not bind") || portInUse(output) != nil:
		return errPortInUse
	case strings.Contains(output, "pre-existing shared memory block") ||
		(strings.Contains(output, "lock file") && strings.Contains(output, "already exists")):
		return errDataDirBusy
	}
	return nil
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *PostgresServer) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// DSN returns a connection URL for user postgres and database postgres
// (trust authentication, no password, no TLS):
// "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable".
func (s *PostgresServer) DSN() string {
	return "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
}

// Close stops the server (fast shutdown with SIGINT, then SIGKILL after
// 10 s), waits for it to exit and removes its temporary directory with all
// data. Calling Close again does nothing and returns nil.
func (s *PostgresServer) Close() error { return s.close(s.stop, s.dir) }

// Restart stops the server (fast shutdown, as Close) and starts it again on
// the same port with the same data directory, so all committed data is
// still there, then waits (at most 30 s) until it accepts queries. After
// Kill it just starts the server, like Start.
//
// Restart fails if the port was taken while the server was down; there is
// no retry, since the point is to keep the address.
func (s *PostgresServer) Restart() error { return s.restart(s.start) }

// Kill crashes the server: SIGKILL to the postmaster and all its processes
// at once, no shutdown checkpoint. It waits until the postmaster and its
// backends are gone and the port is free. Call Start to bring the server
// back; it then recovers from its write-ahead log, so every committed
// transaction is still there. Kill fails if the server is not running.
func (s *PostgresServer) Kill() error { return s.do("kill", running, s.kill) }

// Start starts the server again after Kill, on the same port with the same
// data directory, and waits (at most 30 s) until it has recovered and
// accepts queries. It fails if the server is running, is closed, or if its
// port was taken while it was down.
func (s *PostgresServer) Start() error { return s.resume(s.start) }

// Psql runs sql with psql as user postgres on database postgres, with
// ON_ERROR_STOP, unaligned output without headers or footers, and no
// ~/.psqlrc, then returns its standard output with surrounding white space
// trimmed: one line per row, columns separated by "|". An SQL error (or a
// server that is down) gives an error that holds psql's standard error.
// Several statements separated by ";" run in one transaction.
//
// Psql fails once the server is closed. Each call is bounded: 5 s to
// connect, one minute in all.
func (s *PostgresServer) Psql(sql string) (string, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return "", fmt.Errorf("testserver: psql: server %s is closed", s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgPsqlTimeout)
	defer cancel()
	return s.psql(ctx, sql)
}

// psql runs sql with psql; see Psql.
func (s *PostgresServer) psql(ctx context.Context, sql string) (string, error) {
	var stdout, stderr bytes.Buffer
	err := s.tool(s.psqlBin,
		"-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port),
		"-U", "postgres", "-d", "postgres", "-c", sql).runToEnd(ctx, &stdout, &stderr)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("did not finish in time (%v)", ctx.Err())
		}
		return "", fmt.Errorf("testserver: psql on %s: %v: %s", s.Addr(), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// dataDir is the cluster's data directory.
func (s *PostgresServer) dataDir() string { return filepath.Join(s.dir, "data") }

// socketDir is where the server puts its Unix socket.
func (s *PostgresServer) socketDir() string { return filepath.Join(s.dir, "sock") }

// logPath is where the server's stdout and stderr go, over all its runs.
func (s *PostgresServer) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// StartPostgres starts a server for a test or benchmark and registers
// tb.Cleanup to close it. If the server cannot be started it calls
// tb.Fatalf with the reason (for example that PostgreSQL is not installed).
// It never skips the test.
func StartPostgres(tb testing.TB) *PostgresServer {
	tb.Helper()
	s, err := NewPostgresServer()
	return started(tb, s, err)
}
