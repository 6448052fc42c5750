package testserver

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartPostgresPsql(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := StartPostgres(t)
	t.Logf("StartPostgres (initdb + start) took %v", time.Since(start))

	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", s.Addr())
	}
	wantDSN := "postgres://postgres@" + s.Addr() + "/postgres?sslmode=disable"
	if s.DSN() != wantDSN {
		t.Fatalf("DSN() = %q, want %q", s.DSN(), wantDSN)
	}
	mustPsql(t, s, "CREATE TABLE t (id int primary key, v text)")
	mustPsql(t, s, "INSERT INTO t VALUES (1, 'one'), (2, 'two')")
	if got := mustPsql(t, s, "SELECT v FROM t WHERE id = 1"); got != "one" {
		t.Fatalf("SELECT v = %q, want one", got)
	}
	if got := mustPsql(t, s, "SELECT id, v FROM t ORDER BY id"); got != "1|one\n2|two" {
		t.Fatalf("SELECT id, v = %q, want \"1|one\\n2|two\"", got)
	}
	// Errors carry psql's standard error.
	_, err := s.Psql("INSERT INTO t VALUES (1, 'again')")
	if err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Fatalf("duplicate INSERT: err = %v, want a duplicate key error", err)
	}
	_, err = s.Psql("SELECT * FROM missing")
	if err == nil || !strings.Contains(err.Error(), `relation "missing" does not exist`) {
		t.Fatalf("SELECT from a missing table: err = %v, want relation does not exist", err)
	}
	// The settings we ask for are in force, and the server is on loopback only.
	for name, want := range map[string]string{
		"listen_addresses": "127.0.0.1",
		"fsync":            "off",
		"max_connections":  "200",
		"server_encoding":  "UTF8",
		"port":             strconv.Itoa(s.port),
	} {
		if got := mustPsql(t, s, "SHOW "+name); got != want {
			t.Errorf("SHOW %s = %q, want %q", name, got, want)
		}
	}
}

func TestPostgresRestartKeepsData(t *testing.T) {
	t.Parallel()
	s := StartPostgres(t)
	addr, pid := s.Addr(), s.pid
	mustPsql(t, s, "CREATE TABLE t (id int primary key, v text)")
	mustPsql(t, s, "INSERT INTO t VALUES (1, 'before restart')")

	start := time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Restart took %v", time.Since(start))
	if s.Addr() != addr {
		t.Fatalf("Addr after Restart = %q, want %q", s.Addr(), addr)
	}
	if s.pid == pid {
		t.Fatalf("pid after Restart = %d, the same as before", s.pid)
	}
	if got := mustPsql(t, s, "SELECT v FROM t WHERE id = 1"); got != "before restart" {
		t.Fatalf("after Restart: SELECT v = %q, want %q", got, "before restart")
	}
	mustPsql(t, s, "INSERT INTO t VALUES (2, 'after restart')")
}

func TestPostgresKillThenStartRecovers(t *testing.T) {
	t.Parallel()
	s := StartPostgres(t)
	addr := s.Addr()
	mustPsql(t, s, "CREATE TABLE t (id int primary key, v text)")
	// Kill right after the commits: a commit reported to the client must
	// survive the crash.
	for i := 1; i <= 20; i++ {
		mustPsql(t, s, "INSERT INTO t VALUES ("+strconv.Itoa(i)+", 'v"+strconv.Itoa(i)+"')")
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Psql("SELECT 1"); err == nil {
		t.Fatal("Psql after Kill: want an error")
	}
	if err := s.Kill(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("second Kill: err = %v, want not running", err)
	}

	start := time.Now()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Start after Kill (crash recovery) took %v", time.Since(start))
	if s.Addr() != addr {
		t.Fatalf("Addr after Kill+Start = %q, want %q", s.Addr(), addr)
	}
	if got := mustPsql(t, s, "SELECT count(*), max(v) FROM t"); got != "20|v9" {
		t.Fatalf("after Kill+Start: count, max = %q, want 20|v9", got)
	}
	if log, _ := os.ReadFile(s.logPath()); !strings.Contains(string(log), "not properly shut down") {
		t.Errorf("postgres.log does not show crash recovery:\n%s", log)
	}
	if err := s.Start(); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("Start while running: err = %v, want already running", err)
	}

	// Restart works after a crash too, and a killed server can be restarted.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := mustPsql(t, s, "SELECT count(*) FROM t"); got != "20" {
		t.Fatalf("after Kill+Restart: count = %q, want 20", got)
	}
}

func TestPostgresCloseTwiceThenPsqlFails(t *testing.T) {
	t.Parallel()
	s, err := NewPostgresServer()
	if err != nil {
		t.Fatal(err)
	}
	dir := s.dir
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary directory %s still there after Close (stat: %v)", dir, err)
	}
	if _, err := s.Psql("SELECT 1"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Psql after Close: err = %v, want closed", err)
	}
	for name, f := range map[string]func() error{"Restart": s.Restart, "Start": s.Start, "Kill": s.Kill} {
		if err := f(); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s after Close: err = %v, want closed", name, err)
		}
	}
}

func TestPostgresRestartFailsWhenPortTaken(t *testing.T) {
	t.Parallel()
	s := StartPostgres(t)
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	// Someone else takes the port while our server is down.
	ln, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start()
	if err == nil || !errors.Is(err, errPortInUse) || !strings.Contains(err.Error(), "port was taken") {
		t.Fatalf("Start on a taken port: err = %v, want port was taken", err)
	}
	t.Logf("Start on a taken port: %v", err)
	ln.Close()
	if err := s.Start(); err != nil {
		t.Fatalf("Start once the port is free again: %v", err)
	}
}

func TestFindPostgresBinDir(t *testing.T) {
	dir, err := findPostgresBinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "postgres"} {
		if !isExecutable(filepath.Join(dir, name)) {
			t.Errorf("%s not executable in %s", name, dir)
		}
	}
	t.Logf("PostgreSQL binaries in %s", dir)
}

func TestCompareVersions(t *testing.T) {
	for _, c := range []struct {
		a, b string
		sign int
	}{
		{"15", "9.6", 1},
		{"9.6", "10", -1},
		{"16", "16", 0},
		{"x", "9", -1},
	} {
		got := compareVersions(c.a, c.b)
		if (got > 0) != (c.sign > 0) || (got < 0) != (c.sign < 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", c.a, c.b, got, c.sign)
		}
	}
}

// mustPsql runs sql and fails the test on error.
func mustPsql(t *testing.T, s *PostgresServer, sql string) string {
	t.Helper()
	out, err := s.Psql(sql)
	if err != nil {
		t.Fatalf("Psql(%q): %v", sql, err)
	}
	return out
}

// Kill is a crash: no backend of the killed server may go on with its query
// (PostgreSQL's backends leave the process group, and a CPU-bound query
// does not look for the postmaster's death).
func TestPostgresKillLeavesNoBackend(t *testing.T) {
	t.Parallel()
	s := StartPostgres(t)
	go func() { _, _ = s.Psql("SELECT count(*) FROM generate_series(1, 3000000000)") }()
	var backend int
	for deadline := time.Now().Add(10 * time.Second); backend == 0; {
		out, err := s.Psql("SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%generate_series%' AND pid <> pg_backend_pid()")
		if err == nil && out != "" {
			backend, _ = strconv.Atoi(strings.Fields(out)[0])
		}
		if time.Now().After(deadline) {
			t.Fatal("the long query did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if processAlive(backend) {
		t.Fatalf("backend %d of the killed server is still running its query", backend)
	}
}
