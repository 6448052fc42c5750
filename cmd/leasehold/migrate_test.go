package main_test

import (
	"os"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// On a fresh database: the drill fails naming the command that makes the
// tables; migrate makes them, saying which; the drill then runs; migrate
// again changes nothing.
func TestMigrate(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	dsn := srv.DSN()
	where := "postgres at " + srv.Addr() + "/postgres"
	missing := []string{`"leasehold_leases" does not exist`, "leasehold migrate --postgres DSN",
		`"leasehold_leases", "leasehold_leases_waiters" and "leasehold_leases_audit"`}
	failsWith(t, 1, missing, "drill", "--postgres", dsn, "--jobs", "5", "--quiet")
	failsWith(t, 1, missing[1:], "inspect", "--postgres", dsn, "runs:R1")

	want := where + ": created table leasehold_leases, created table leasehold_leases_waiters," +
		" created function leasehold_leases_wake, created function leasehold_leases_held, created table leasehold_leases_audit, created index leasehold_leases_audit_key_at\n"
	if out := ok(t, "migrate", "--postgres", dsn); out != want {
		t.Fatalf("migrate on a fresh database printed %q, want %q", out, want)
	}
	r := run(t, "drill", "--postgres", dsn, "--time-scale", "1/200", "--jobs", "10", "--quiet")
	if r.code != 0 && r.code != 3 { // 3: the takeover SLO missed; the drill's own tests judge timing
		t.Fatalf("drill after migrate: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if out := ok(t, "migrate", "--postgres", dsn); out != where+": already up to date\n" {
		t.Errorf("migrate again printed %q, want it up to date", out)
	}
	var v struct {
		Store   string   `json:"store"`
		Created []string `json:"created"`
	}
	out := runEnv(t, map[string]string{"LEASEHOLD_POSTGRES_DSN": dsn}, "migrate", "--pg-table", "more", "-o", "json")
	decode(t, out.stdout, &v)
	if out.code != 0 || v.Store != where || len(v.Created) != 6 || v.Created[0] != "table more" {
		t.Errorf("migrate -o json from $LEASEHOLD_POSTGRES_DSN: exit %d, %+v; stderr %q", out.code, v, out.stderr)
	}
	decode(t, ok(t, "migrate", "--postgres", dsn, "--pg-table", "more", "--json"), &v)
	if v.Created == nil || len(v.Created) != 0 {
		t.Errorf("migrate --json again: %+v, want created []", v)
	}
}

// --print writes pgstore's SQL without a database; run with psql it makes
// tables that migrate then finds up to date.
func TestMigratePrint(t *testing.T) {
	t.Parallel()
	sql := ok(t, "migrate", "--print", "--pg-table", "dba.leases")
	want, err := pgstore.MigrationSQL(pgstore.WithTable("dba.leases"))
	if err != nil || sql != want {
		t.Fatalf("migrate --print wrote:\n%s\nwant pgstore's MigrationSQL (%v):\n%s", sql, err, want)
	}
	// docs/backends.md shows the default table's script as it is.
	docs, err := os.ReadFile("../../docs/backends.md")
	if err != nil {
		t.Fatal(err)
	}
	if def := ok(t, "migrate", "--print"); !strings.Contains(string(docs), "```sql\n"+def+"```\n") {
		t.Errorf("docs/backends.md does not show migrate --print's SQL:\n%s", def)
	}
	srv := testserver.StartPostgres(t)
	if _, err := srv.Psql("CREATE SCHEMA dba"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Psql(sql); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, "migrate", "--postgres", srv.DSN(), "--pg-table", "dba.leases"); !strings.HasSuffix(out, ": already up to date\n") {
		t.Errorf("migrate after the printed SQL ran: %q, want up to date", out)
	}
	if out := ok(t, "ls", "--postgres", srv.DSN(), "--pg-table", "dba.leases", "*"); strings.Contains(out, "does not exist") {
		t.Errorf("ls on the printed tables: %q", out)
	}
}

// migrate's command line: wrong ones are usage errors, before any
// connection.
func TestMigrateUsage(t *testing.T) {
	t.Parallel()
	closed := "postgres://postgres@" + closedAddr(t) + "/postgres?sslmode=disable"
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"migrate"}, "migrate needs --postgres"},
		{[]string{"migrate", "--redis", "redis://" + closedAddr(t)}, "--redis needs no schema"},
		{[]string{"migrate", "--kube", "/nonexistent"}, "--kube needs no schema"},
		{[]string{"migrate", "--postgres", closed, "extra"}, "takes no arguments"},
		{[]string{"migrate", "--print", "-o", "json"}, "-o json does not apply"},
		{[]string{"migrate", "--print", "--pg-table", "a.b.c"}, `--pg-table: "a.b.c" has more than one dot`},
		// Another store's flag, which migrate would ignore.
		{[]string{"migrate", "--postgres", closed, "--etcd-prefix", "x"}, "--etcd-prefix goes with --etcd"},
		{[]string{"migrate", "--postgres", closed, "--kube-namespace", "ns"}, "--kube-namespace goes with --kube"},
		{[]string{"migrate", "--print", "--tls-ca", "/nonexistent"}, "--tls-ca goes with --redis"},
	} {
		failsWith(t, 2, []string{tc.says}, tc.args...)
	}
	failsWith(t, 1, []string{"cannot connect"}, "--timeout", "1s", "migrate", "--postgres", closed)
}

// No piece of a password reaches migrate's output or errors: hostile ones
// on a closed port, a right and a wrong one on a server that checks them.
func TestMigratePasswordsNeverShown(t *testing.T) {
	t.Parallel()
	closed := closedAddr(t)
	host, port, _ := strings.Cut(closed, ":")
	for _, pw := range hostilePasswords {
		for _, dsn := range []string{
			"postgres://opsuser:" + pw + "@" + closed + "/locks?sslmode=disable",
			"host=" + host + " port=" + port + " user=opsuser password='" + pw + "' sslmode=disable",
		} {
			args := []string{"--timeout", "1s", "migrate", "--postgres", dsn}
			r := run(t, args...)
			if r.code != 1 && r.code != 2 {
				t.Errorf("leasehold %q: exit %d, want 1 or 2; stderr %q", args, r.code, r.stderr)
			}
			checkOneLine(t, r.stderr, args)
			checkNoLeak(t, r, args, []string{closed}, pw)
		}
	}

	const pw, wrong = "Qx/7#v@Z%k:9w?'\\", "Wr0ng/#@%:?pw"
	pg := startPasswordPostgres(t, "opsuser", pw)
	safe := []string{pg.Addr()}
	args := []string{"migrate", "--postgres", userURL("postgres", "opsuser", pw, pg.Addr(), "/postgres") + "?sslmode=disable", "--pg-table", "pw_leases"}
	out := ok(t, args...)
	if !strings.Contains(out, "created table pw_leases") {
		t.Errorf("migrate with a password: %q", out)
	}
	checkNoLeak(t, result{stdout: out}, args, safe, pw, wrong)
	args = []string{"migrate", "--postgres", userURL("postgres", "opsuser", wrong, pg.Addr(), "/postgres") + "?sslmode=disable"}
	r := failsWith(t, 1, []string{"password authentication failed"}, args...)
	checkNoLeak(t, r, args, safe, pw, wrong)
}
