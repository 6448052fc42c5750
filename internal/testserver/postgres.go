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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// pgWaitDelay is how long a command gets to close its output after
	// its context is done or it has exited.
	pgWaitDelay = time.Second
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

	mu     sync.Mutex
	proc   *process // running postmaster; nil when stopped
	pid    int      // pid of the last started postmaster
	closed bool
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

	var lastErr error
	for attempt := 1; attempt <= maxPortAttempts; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.port = ports[0]
		s.mu.Lock()
		err = s.start()
		s.mu.Unlock()
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortInUse) {
			os.RemoveAll(dir)
			return nil, err
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("testserver: gave up after %d attempts to find a free port: %w",
		maxPortAttempts, lastErr)
}

// findPostgresBinDir returns the directory that holds initdb and postgres:
// the one "pg_config --bindir" names, else the highest version under
// /usr/lib/postgresql (where Debian puts them, off PATH), else the
// directory of initdb on PATH.
func findPostgresBinDir() (string, error) {
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), pgToolTimeout)
		cmd := exec.CommandContext(ctx, pgConfig, "--bindir")
		cmd.WaitDelay = pgWaitDelay
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
	// server messages in English, which exitedEarly relies on.
	cmd, err := s.command(ctx, filepath.Join(s.binDir, "initdb"),
		"-D", s.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if err != nil {
		return err
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err = startLockedThread(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
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

// command prepares one of the PostgreSQL programs: working directory the
// temporary directory (the postgres user may not be able to read ours),
// clean environment, parent-death signal, own process group, and the
// postgres user when we are root. With a context, the whole process group
// is killed when the context is done.
func (s *PostgresServer) command(ctx context.Context, bin string, args ...string) (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, bin, args...)
		cmd.Cancel = func() error { _, err := killProcessGroup(cmd.Process.Pid); return err }
		cmd.WaitDelay = pgWaitDelay
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Dir = s.dir
	cmd.Env = postgresEnv()
	setParentDeathSignal(cmd)
	setProcessGroup(cmd)
	if s.runAs != nil {
		if err := setCredential(cmd, s.runAs.uid, s.runAs.gid); err != nil {
			return nil, err
		}
	}
	return cmd, nil
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

// startLockedThread starts cmd with the goroutine locked to its OS thread;
// see setParentDeathSignal for why.
func startLockedThread(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
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
		err := s.launch(deadline)
		if err == nil || !errors.Is(err, errDataDirBusy) || time.Now().Add(pgRelaunchPause).After(deadline) {
			return err
		}
		time.Sleep(pgRelaunchPause)
	}
}

// launch makes one attempt of start.
//
// The server is run directly as our child, not with pg_ctl: pg_ctl starts
// it in the background and exits, so the server would not be our child. We
// could then not give it a parent-death signal (a killed test binary would
// leave it running), not wait for it, not see at once when it exits early,
// and not kill it (or its process group) for Kill; we would have to go by
// the pid in postmaster.pid instead.
func (s *PostgresServer) launch(deadline time.Time) error {
	var logStart int64
	if fi, err := os.Stat(s.logPath()); err == nil {
		logStart = fi.Size()
	}
	out, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testserver: %w", err)
	}
	defer out.Close()

	cmd, err := s.command(nil, filepath.Join(s.binDir, "postgres"), s.postgresArgs()...)
	if err != nil {
		return err
	}
	cmd.Stdout = out
	cmd.Stderr = out
	if err := startLockedThread(cmd); err != nil {
		return fmt.Errorf("testserver: start postgres: %w", err)
	}

	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.proc = p
	s.pid = cmd.Process.Pid

	if err := s.waitReady(p, deadline, logStart); err != nil {
		s.stop()
		return err
	}
	return nil
}

// waitReady polls until our server answers a query, the process exits, or
// the deadline passes. logStart is the size of postgres.log before the
// launch, so that only this run's messages are looked at.
func (s *PostgresServer) waitReady(p *process, deadline time.Time, logStart int64) error {
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return s.exitedEarly(p, logStart)
		default:
		}
		if s.isReady(p, deadline) {
			return nil
		}
		select {
		case <-p.done:
			return s.exitedEarly(p, logStart)
		case <-time.After(pgReadyPollInterval):
		}
	}
	return fmt.Errorf("testserver: postgres (pid %d) on %s did not accept queries within %v%s",
		s.pid, s.Addr(), pgReadyTimeout, s.logTail())
}

// isReady reports whether our server accepts TCP connections and answers a
// query. It asks for the data directory, because another test's server may
// have won the race for the port; ours then exits and is retried.
func (s *PostgresServer) isReady(p *process, deadline time.Time) bool {
	conn, err := net.DialTimeout("tcp", s.Addr(), 100*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	probeDeadline := time.Now().Add(pgProbeTimeout)
	if deadline.Before(probeDeadline) {
		probeDeadline = deadline
	}
	ctx, cancel := context.WithDeadline(context.Background(), probeDeadline)
	defer cancel()
	// If the port belongs to someone else, psql may wait for an answer
	// that never comes; stop it as soon as our process is gone.
	probeDone := make(chan struct{})
	defer close(probeDone)
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-probeDone:
		}
	}()
	dataDir, err := s.psql(ctx, "SELECT current_setting('data_directory')")
	if err != nil || !sameDir(dataDir, s.dataDir()) {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
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

// exitedEarly builds the error for a postmaster that exited before it was
// ready. A failed bind is marked with errPortInUse (retried on another port
// by NewPostgresServer), a data directory still in use after Kill with
// errDataDirBusy (retried by start).
func (s *PostgresServer) exitedEarly(p *process, logStart int64) error {
	fresh := s.logSince(logStart)
	tail := s.logTail()
	switch {
	case strings.Contains(fresh, "could not bind") || strings.Contains(fresh, "Address already in use"):
		return fmt.Errorf("testserver: postgres on %s: %w%s", s.Addr(), errPortInUse, tail)
	case strings.Contains(fresh, "pre-existing shared memory block") ||
		(strings.Contains(fresh, "lock file") && strings.Contains(fresh, "already exists")):
		return fmt.Errorf("testserver: postgres on %s: %w%s", s.Addr(), errDataDirBusy, tail)
	}
	return fmt.Errorf("testserver: postgres (pid %d) on %s exited before it accepted queries (%v)%s",
		s.pid, s.Addr(), p.err, tail)
}

// stop shuts the running server down, if any: SIGINT (PostgreSQL's fast
// shutdown: roll back open transactions, checkpoint, exit), then SIGKILL to
// its process group after pgStopTimeout. The caller holds s.mu.
func (s *PostgresServer) stop() error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	// Signal fails only if the process is already gone, which is fine.
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
		return nil
	case <-time.After(pgStopTimeout):
	}
	return s.kill(p)
}

// kill sends SIGKILL to the postmaster and all its children (its process
// group) and waits until the postmaster has exited. The children are reaped
// by init; start copes with any that are still exiting. The caller holds
// s.mu and has taken p out of s.proc.
func (s *PostgresServer) kill(p *process) error {
	select {
	case <-p.done:
		// Already reaped: its process group id may belong to someone
		// else by now, so send nothing.
		return nil
	default:
	}
	// Fails only if the processes are already gone, which is fine.
	children, _ := killProcessGroup(p.cmd.Process.Pid)
	deadline := time.After(killTimeout)
	select {
	case <-p.done:
	case <-deadline:
		return fmt.Errorf("testserver: postgres (pid %d) on %s did not exit after SIGKILL",
			p.cmd.Process.Pid, s.Addr())
	}
	// A crash leaves nothing running: no backend may go on with a query
	// (and commit it) after Kill returns.
	for _, c := range children {
		for processAlive(c) {
			select {
			case <-deadline:
				return fmt.Errorf("testserver: backend %d of postgres on %s still running after SIGKILL", c, s.Addr())
			case <-time.After(readyPollInterval):
			}
		}
	}
	// The postmaster is reaped, but its children, killed with it, may still
	// be on their way out holding the listening socket. Return once the
	// port is free, so that Start (or a test taking the port) can bind it.
	for {
		ln, err := net.Listen("tcp", s.Addr())
		if err == nil {
			return ln.Close()
		}
		select {
		case <-deadline:
			return fmt.Errorf("testserver: port of postgres on %s still taken after SIGKILL: %w", s.Addr(), err)
		case <-time.After(readyPollInterval):
		}
	}
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
func (s *PostgresServer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stop()
	if rmErr := os.RemoveAll(s.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("testserver: %w", rmErr))
	}
	return err
}

// Restart stops the server (fast shutdown, as Close) and starts it again on
// the same port with the same data directory, so all committed data is
// still there, then waits (at most 30 s) until it accepts queries. After
// Kill it just starts the server, like Start.
//
// Restart fails if the port was taken while the server was down; there is
// no retry, since the point is to keep the address.
func (s *PostgresServer) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("testserver: restart %s: server is closed", s.Addr())
	}
	if err := s.stop(); err != nil {
		return err
	}
	return s.startAgain("restart")
}

// Kill crashes the server: SIGKILL to the postmaster and all its processes
// at once, no shutdown checkpoint. It waits until the postmaster has exited.
// Call Start to bring the server back; it then recovers from its write-ahead
// log, so every committed transaction is still there. Kill fails if the
// server is not running.
func (s *PostgresServer) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("testserver: kill %s: server is closed", s.Addr())
	}
	p := s.proc
	if p == nil {
		return fmt.Errorf("testserver: kill %s: server is not running", s.Addr())
	}
	s.proc = nil
	return s.kill(p)
}

// Start starts the server again after Kill, on the same port with the same
// data directory, and waits (at most 30 s) until it has recovered and
// accepts queries. It fails if the server is running, is closed, or if its
// port was taken while it was down.
func (s *PostgresServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("testserver: start %s: server is closed", s.Addr())
	}
	if s.proc != nil {
		return fmt.Errorf("testserver: start %s: server is already running", s.Addr())
	}
	return s.startAgain("start")
}

// startAgain starts a stopped server on its old port. The caller holds s.mu.
func (s *PostgresServer) startAgain(what string) error {
	err := s.start()
	if errors.Is(err, errPortInUse) {
		return fmt.Errorf("testserver: %s %s: the port was taken by another process while the server was down: %w",
			what, s.Addr(), err)
	}
	if err != nil {
		return fmt.Errorf("testserver: %s %s: %w", what, s.Addr(), err)
	}
	return nil
}

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
	cmd, err := s.command(ctx, s.psqlBin,
		"-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(s.port),
		"-U", "postgres", "-d", "postgres", "-c", sql)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err = startLockedThread(cmd)
	if err == nil {
		err = cmd.Wait()
	}
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

// logSince returns what postgres.log got after its first offset bytes.
func (s *PostgresServer) logSince(offset int64) string {
	data, err := os.ReadFile(s.logPath())
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	return string(data[offset:])
}

// logTail returns the last lines of postgres.log, ready to append to an
// error message, or "" if it is empty.
func (s *PostgresServer) logTail() string {
	data, err := os.ReadFile(s.logPath())
	if err != nil || len(strings.TrimSpace(string(data))) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return fmt.Sprintf("\nlast lines of %s:\n%s", s.logPath(), strings.Join(lines, "\n"))
}

// StartPostgres starts a server for a test or benchmark and registers
// tb.Cleanup to close it. If the server cannot be started it calls
// tb.Fatalf with the reason (for example that PostgreSQL is not installed).
// It never skips the test.
func StartPostgres(tb testing.TB) *PostgresServer {
	tb.Helper()
	s, err := NewPostgresServer()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return s
}
