package pgstore_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
)

// newSchema makes a schema of the test's own, dropped with everything in it
// when the test ends.
func newSchema(t *testing.T) string {
	t.Helper()
	name := "s_" + strings.ToLower(rand.Text()[:10])
	if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(t.Context(), "DROP SCHEMA "+name+" CASCADE") })
	return name
}

// describe lists what schema holds: every relation with its columns (type,
// NOT NULL, identity, default), constraints, indexes and functions (with
// their bodies), with the schema's
// name written S so that two schemas can be compared.
func describe(t *testing.T, schema string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `
SELECT c.relname || ' ' || c.relkind::text || ' ' || coalesce(a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' notnull=' || a.attnotnull || ' identity=' || a.attidentity::text
       || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), ''), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
 WHERE n.nspname = $1
UNION ALL
SELECT conname || ' ' || pg_get_constraintdef(o.oid)
  FROM pg_constraint o JOIN pg_namespace n ON n.oid = o.connamespace WHERE n.nspname = $1
UNION ALL
SELECT indexdef FROM pg_indexes WHERE schemaname = $1
UNION ALL
SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') '
       || format_type(p.prorettype, NULL) || ' ' || l.lanname || ' ' || p.prosrc
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
 WHERE n.nspname = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, schema, "S")
	}
	slices.Sort(lines)
	return lines
}

// Migrate says what it made, and nothing on a second run: the database is
// then up to date.
func TestMigrateReportsWhatItCreated(t *testing.T) {
	schema := newSchema(t)
	table := schema + ".leases"
	s := newStore(t, pool, pgstore.WithTable(table))
	var created []string
	if err := s.Migrate(t.Context(), pgstore.WithCreated(&created)); err != nil {
		t.Fatal(err)
	}
	want := []string{"table " + table, "table " + table + "_waiters", "function " + table + "_wake", "function " + table + "_held", "table " + table + "_audit", "index " + table + "_audit_key_at"}
	if !slices.Equal(created, want) {
		t.Errorf("first Migrate created %q, want %q", created, want)
	}
	var again []string
	if err := s.Migrate(t.Context(), pgstore.WithCreated(&again)); err != nil || len(again) != 0 {
		t.Errorf("second Migrate: created %q, %v; want nothing", again, err)
	}
	// An upgrade from the version before the waiters table adds only it.
	if _, err := pool.Exec(t.Context(), "DROP TABLE "+table+"_waiters"); err != nil {
		t.Fatal(err)
	}
	var upgrade []string
	if err := s.Migrate(t.Context(), pgstore.WithCreated(&upgrade)); err != nil || !slices.Equal(upgrade, []string{"table " + table + "_waiters"}) {
		t.Errorf("Migrate after the waiters table was dropped: created %q, %v", upgrade, err)
	}
	// An upgrade from the version before the queued flag adds the column,
	// keeping the rows; until then lock operations say to migrate.
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+table+" (key, token, fence, expires_at) VALUES ('k', 'old-owner', 7, now() + interval '1 hour')"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "ALTER TABLE "+table+" DROP COLUMN queued"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), "k", leasehold.NewToken(), time.Minute); err == nil || !strings.Contains(err.Error(), "run Migrate") || !strings.Contains(err.Error(), "queued") {
		t.Errorf("Acquire without the queued column: %v, want an error saying to run Migrate", err)
	}
	var column []string
	if err := s.Migrate(t.Context(), pgstore.WithCreated(&column)); err != nil || !slices.Equal(column, []string{"column " + table + ".queued"}) {
		t.Errorf("Migrate after the queued column was dropped: created %q, %v", column, err)
	}
	if info, err := s.Inspect(t.Context(), "k"); err != nil || info.Token != "old-owner" || info.Fence != 7 {
		t.Errorf("the lease after the column was added: %+v, %v", info, err)
	}
	// An upgrade from the version before the wake-up function adds it;
	// until then a release says to migrate, and keeps the lease.
	if _, err := pool.Exec(t.Context(), "DROP FUNCTION "+table+"_wake"); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(t.Context(), "k", "old-owner"); err == nil || !strings.Contains(err.Error(), "run Migrate") || !strings.Contains(err.Error(), table+"_wake") {
		t.Errorf("Release without the wake-up function: %v, want an error saying to run Migrate", err)
	}
	// Migrate makes a dropped function back, and replaces one of another
	// version's body (other: an upgrade that changed it).
	remakes := func(name, other string) {
		t.Helper()
		want := []string{"function " + table + name}
		var fn []string
		if err := s.Migrate(t.Context(), pgstore.WithCreated(&fn)); err != nil || !slices.Equal(fn, want) {
			t.Errorf("Migrate after %s was dropped: created %q, %v", name, fn, err)
		}
		if _, err := pool.Exec(t.Context(), "CREATE OR REPLACE FUNCTION "+table+name+other); err != nil {
			t.Fatal(err)
		}
		fn = nil
		if err := s.Migrate(t.Context(), pgstore.WithCreated(&fn)); err != nil || !slices.Equal(fn, want) {
			t.Errorf("Migrate over another body of %s: created %q, %v", name, fn, err)
		}
	}
	remakes("_wake", "(text, text, text) RETURNS void LANGUAGE plpgsql AS 'BEGIN END'")
	// An upgrade from the version before the held function adds it; until
	// then an acquire, taken or refused, says to migrate and writes
	// nothing.
	if _, err := pool.Exec(t.Context(), "DROP FUNCTION "+table+"_held"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k", "free"} {
		if _, err := s.Acquire(t.Context(), key, leasehold.NewToken(), time.Minute); err == nil || !strings.Contains(err.Error(), "run Migrate") || !strings.Contains(err.Error(), table+"_held") {
			t.Errorf("Acquire of %q without the held function: %v, want an error saying to run Migrate", key, err)
		}
	}
	if info, err := s.Inspect(t.Context(), "free"); err != nil || info.Token != "" || info.Fence != 0 {
		t.Errorf("the free key after an acquire without the held function: %+v, %v, want nothing written", info, err)
	}
	remakes("_held", "(text) RETURNS interval LANGUAGE plpgsql STABLE AS 'BEGIN RETURN NULL; END'")
	var held *leasehold.HeldError
	if _, err := s.Acquire(t.Context(), "k", leasehold.NewToken(), time.Minute); !errors.As(err, &held) || held.Remaining <= 0 || held.Remaining > time.Hour {
		t.Errorf("Acquire of the held key after Migrate: %v, want held with the holder's TTL", err)
	}
	if err := s.Release(t.Context(), "k", "old-owner"); err != nil {
		t.Errorf("Release after Migrate: %v", err)
	}
}

// An unqualified table is looked for where CREATE TABLE makes it, the
// first schema of the search_path, even when another schema of the path
// has a table of that name.
func TestMigrateLooksInTheSchemaItCreatesIn(t *testing.T) {
	first, second := newSchema(t), newSchema(t)
	name := "leases_" + strings.ToLower(rand.Text()[:6])
	other := newStore(t, pool, pgstore.WithTable(second+"."+name))
	if err := other.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, shared.DSN()+"&search_path="+first+","+second, nil)
	s := newStore(t, p, pgstore.WithTable(name))
	var created []string
	if err := s.Migrate(t.Context(), pgstore.WithCreated(&created)); err != nil {
		t.Fatal(err)
	}
	if len(created) != 6 || created[0] != "table "+name {
		t.Fatalf("Migrate with %s first in the search_path created %q, want the 6 objects", first, created)
	}
	var n, f int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = $1),
       (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1)`, first).Scan(&n, &f); err != nil || n != 3 || f != 2 {
		t.Fatalf("%d tables and %d functions in %s (%v), want 3 and 2", n, f, first, err)
	}
}

// The SQL a DBA runs instead of Migrate makes the same schema, and Migrate
// finds nothing to do after it.
func TestMigrationSQLMakesTheSameSchema(t *testing.T) {
	migrated, printed := newSchema(t), newSchema(t)
	if err := newStore(t, pool, pgstore.WithTable(migrated+".leases")).Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	sql, err := pgstore.MigrationSQL(pgstore.WithTable(printed + ".leases"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(sql, "\n")
	first := slices.IndexFunc(lines, func(l string) bool { return !strings.HasPrefix(l, "--") })
	if lines[first] != "BEGIN ISOLATION LEVEL READ COMMITTED;" || !strings.HasSuffix(sql, "COMMIT;\n") {
		t.Errorf("MigrationSQL is not one transaction:\n%s", sql)
	}
	if _, err := shared.Psql(sql); err != nil { // as a DBA would: psql
		t.Fatal(err)
	}
	if _, err := shared.Psql(sql); err != nil {
		t.Fatalf("the script run twice: %v", err)
	}
	if a, b := describe(t, migrated), describe(t, printed); !slices.Equal(a, b) {
		t.Errorf("Migrate made:\n%s\nMigrationSQL made:\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	var created []string
	if err := newStore(t, pool, pgstore.WithTable(printed+".leases")).Migrate(t.Context(), pgstore.WithCreated(&created)); err != nil || len(created) != 0 {
		t.Errorf("Migrate after MigrationSQL: created %q, %v; want nothing", created, err)
	}
	if _, err := pgstore.MigrationSQL(pgstore.WithTable("a.b.c")); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("MigrationSQL of a bad table name: %v, want an ArgumentError", err)
	}
}

// Names that need quoting stay quoted in the script: a name cannot end a
// statement or a comment.
func TestMigrationSQLQuotesNames(t *testing.T) {
	schema := newSchema(t)
	table := schema + ".odd';\n--\"name"
	sql, err := pgstore.MigrationSQL(pgstore.WithTable(table), pgstore.WithChannel("ch"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Psql(sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
	var created []string
	s := newStore(t, pool, pgstore.WithTable(table), pgstore.WithChannel("ch"))
	if err := s.Migrate(t.Context(), pgstore.WithCreated(&created)); err != nil || len(created) != 0 {
		t.Fatalf("Migrate after the script: created %q, %v; want nothing", created, err)
	}
	// A release with a waiter queued calls the function, whose body names
	// the tables too.
	tok := leasehold.NewToken()
	if _, err := s.Acquire(t.Context(), "k", tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireQueued(t.Context(), "k", "waiter", time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a waiter of a held key: %v", err)
	}
	if err := s.Release(t.Context(), "k", tok); err != nil {
		t.Fatal(err)
	}
}

// A table of that name made by someone else is refused, and the
// transaction leaves nothing behind.
func TestMigrateRefusesAForeignTable(t *testing.T) {
	schema := newSchema(t)
	if _, err := pool.Exec(t.Context(), "CREATE TABLE "+schema+".leases (id int PRIMARY KEY, token text)"); err != nil {
		t.Fatal(err)
	}
	err := newStore(t, pool, pgstore.WithTable(schema+".leases")).Migrate(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no column key, fence, expires_at") {
		t.Fatalf("Migrate over a foreign table: %v, want an error naming the missing columns", err)
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1", schema).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d relations in the schema after the refused Migrate (%v), want the foreign table and its index", n, err)
	}
}

// Another function of a name pgstore uses for one of its own is refused,
// naming it, with nothing changed: one whose second parameter has a
// default would make every acquire's call of the held function ambiguous.
// An acquire that meets such a function says to run Migrate, which then
// names it.
func TestMigrateRefusesAForeignFunction(t *testing.T) {
	for _, fn := range []string{"held(text, int DEFAULT 0) RETURNS int", "wake(text) RETURNS int"} {
		schema := newSchema(t)
		table := schema + ".leases"
		s := newStore(t, pool, pgstore.WithTable(table))
		if err := s.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		before := describe(t, schema)
		if _, err := pool.Exec(t.Context(), "CREATE FUNCTION "+table+"_"+fn+" LANGUAGE sql AS 'SELECT 1'"); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(t.Context(), "DROP TABLE "+table+"_waiters"); err != nil {
			t.Fatal(err)
		}
		err := s.Migrate(t.Context())
		if err == nil || !strings.Contains(err.Error(), "the function "+schema+".leases_"+fn[:strings.IndexByte(fn, '(')+1]) ||
			!strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("Migrate beside %s: %v, want an error naming it", fn, err)
		}
		if _, err := pool.Exec(t.Context(), "DROP FUNCTION "+table+"_"+strings.Replace(fn[:strings.IndexByte(fn, ')')+1], " DEFAULT 0", "", 1)); err != nil {
			t.Fatal(err)
		}
		if after := describe(t, schema); len(after) >= len(before) {
			t.Errorf("the refused Migrate made the waiters table again: %d lines described, %d before it was dropped", len(after), len(before))
		}
	}

	// The acquire's hint.
	table := newSchema(t) + ".leases"
	s := newStore(t, pool, pgstore.WithTable(table))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "CREATE FUNCTION "+table+"_held(text, int DEFAULT 0) RETURNS int LANGUAGE sql AS 'SELECT 1'"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), "k", leasehold.NewToken(), time.Minute); err == nil || !strings.Contains(err.Error(), "run Migrate") {
		t.Errorf("Acquire beside an ambiguous held function: %v, want the hint to run Migrate", err)
	}
}

// Every operation on a database without the tables says which tables are
// missing and the command that makes them.
func TestMissingTablesNameTheMigrateCommand(t *testing.T) {
	table := newSchema(t) + ".leases"
	s := newStore(t, pool, pgstore.WithTable(table))
	ctx, tok := t.Context(), leasehold.NewToken()
	for op, err := range map[string]error{
		"acquire":       func() error { _, err := s.Acquire(ctx, "k", tok, time.Minute); return err }(),
		"acquireQueued": func() error { _, err := s.AcquireQueued(ctx, "k", tok, time.Minute, time.Minute); return err }(),
		"release":       s.Release(ctx, "k", tok),
		"renew":         s.Renew(ctx, "k", tok, time.Minute),
		"leave":         s.LeaveQueue(ctx, "k", tok),
		"inspect":       func() error { _, err := s.Inspect(ctx, "k"); return err }(),
		"list":          func() error { _, _, err := s.List(ctx, "*", "", 10); return err }(),
		"forceRelease":  func() error { _, err := s.ForceRelease(ctx, "k", "r", "ops"); return err }(),
		"audit":         func() error { _, err := s.Audit(ctx, "", 10); return err }(),
	} {
		want := []string{"does not exist", "run Migrate", "leasehold migrate --postgres DSN --pg-table " + table,
			fmt.Sprintf("%q, %q and %q", table, table+"_waiters", table+"_audit")}
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s without the tables: %v; want it to say %q", op, err, w)
			}
		}
	}
}
