package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrationStep is one object Migrate makes when it is missing.
type migrationStep struct {
	kind    string   // "table", "index", "column" or "function"
	name    string   // its name within its schema (a column's: of its table)
	table   string   // a column's table, within the schema
	args    string   // a function's argument types, as pg_proc.proargtypes spells them (text is 25)
	body    string   // a function's body, which the existing one must have
	display string   // its name in messages: schema-qualified when the table is
	sql     string   // CREATE … IF NOT EXISTS, ALTER TABLE … ADD COLUMN IF NOT EXISTS, CREATE OR REPLACE FUNCTION
	columns []string // a table's columns the Store uses, checked when it exists
}

// detail is what existsSQL checks of st beside its kind and name: a
// column's table, a function's body.
func (st migrationStep) detail() string {
	if st.kind == "function" {
		return st.body
	}
	return st.table
}

// existsSQL tells, for each $2, $3, $4 and $5 in order, whether the object
// named $4 of kind $2 is in the schema $1 as the Store needs it: a
// relation; the column $4 of the table $3; a function whose argument types
// are $5 and whose body is $3.
const existsSQL = `SELECT coalesce(array_agg(CASE k
    WHEN 'column' THEN EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass(format('%I.%I', $1::text, d))
                                AND attname = n AND attnum > 0 AND NOT attisdropped)
    WHEN 'function' THEN EXISTS (SELECT FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace
                                  WHERE ns.nspname = $1 AND p.proname = n
                                    AND p.proargtypes = a::oidvector AND p.prosrc = d)
    ELSE to_regclass(format('%I.%I', $1::text, n)) IS NOT NULL END ORDER BY i), '{}')
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS s(k, d, n, a, i)`

// migrateLockSQL serialises Migrate runs: CREATE … IF NOT EXISTS is not
// safe against itself (two runs can both pass the check, and one then fails
// on the catalog's unique index). The first lock is one for every table of
// the database, so that two Stores naming one table differently (leases and
// public.leases) exclude each other; Migrate is rare and short. The second,
// on the table's name as given, is the lock earlier versions took alone, so
// that a Migrate of this version and one of an earlier version exclude each
// other during a rolling upgrade. Every run takes them in this order.
const migrateLockSQL = "SELECT pg_advisory_xact_lock(hashtext(%s)), pg_advisory_xact_lock(hashtext(%s))"

// migrateLockKey is the first lock's key; the second's is
// migrateLockKey + ":" + the table's name as given.
const migrateLockKey = "leasehold:migrate"

// planMigration records what Migrate makes for the lease table parts, the
// waiters table waiterParts, the wake-up function wakeParts, the held
// function heldParts and the audit table auditParts, and the hint of a
// missing table's error.
func (s *Store) planMigration(parts, waiterParts, wakeParts, heldParts, auditParts []string) {
	if len(parts) == 2 {
		s.schema = parts[0]
	}
	last := func(p []string) string { return p[len(p)-1] }
	s.steps = []migrationStep{
		{kind: "table", name: last(parts), display: s.table, sql: s.migrateSQL,
			columns: []string{"key", "token", "fence", "expires_at", "queued"}},
		// A lease table made before the queued flag gets it.
		{kind: "column", name: "queued", table: last(parts), display: s.table + ".queued", sql: s.migrateQueuedSQL},
		{kind: "table", name: last(waiterParts), display: s.waiters, sql: s.migrateWaitersSQL,
			columns: []string{"key", "seq", "token", "deadline"}},
		{kind: "function", name: last(wakeParts), args: "25 25 25", body: s.wakeBody, display: s.wake, sql: s.migrateWakeSQL},
		{kind: "function", name: last(heldParts), args: "25", body: s.heldBody, display: s.held, sql: s.migrateHeldSQL},
	}
	index := auditIndexName(last(auditParts))
	s.steps = append(s.steps,
		migrationStep{kind: "table", name: last(auditParts), display: s.audit, sql: s.migrateAuditSQL,
			columns: []string{"id", "at", "key", "holder", "token", "fence", "reason", "forced_by"}},
		migrationStep{kind: "index", name: index, display: strings.Join(append(slices.Clone(parts[:len(parts)-1]), index), "."),
			sql: s.migrateAuditIndexSQL})
	var tables []string
	for _, st := range s.steps {
		if st.kind == "table" {
			tables = append(tables, fmt.Sprintf("%q", st.display))
		}
	}
	list := strings.Join(tables[:len(tables)-1], ", ") + " and " + tables[len(tables)-1]
	flag := ""
	if s.table != DefaultTable {
		flag = " --pg-table " + shellQuote(s.table)
	}
	s.missingHint = fmt.Sprintf("run Migrate, or leasehold migrate --postgres DSN%s: this version needs the tables %s, the column queued of %q and the functions %q and %q", flag, list, s.table, s.wake, s.held)
}

// shellQuote quotes s for a POSIX shell when it has other bytes than
// letters, digits, '_', '.' and '-'.
func shellQuote(s string) string {
	plain := s != ""
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			plain = false
		}
	}
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sqlString is s as an SQL string literal, the same whatever the session's
// standard_conforming_strings: an escape string (E'…') when s has a
// backslash, which a table's name may.
func sqlString(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// MigrateOption configures Migrate.
type MigrateOption func(*migrateConfig)

type migrateConfig struct {
	created *[]string
}

// WithCreated makes Migrate append to *created what it created, in order,
// as "table NAME", "index NAME", "column TABLE.NAME" or "function NAME"
// (made, or replaced when it was another version's); nothing when the
// database was up to date, or when Migrate fails (it then changed
// nothing). Default: not reported.
func WithCreated(created *[]string) MigrateOption {
	return func(c *migrateConfig) { c.created = created }
}

// Migrate makes the Store's tables where they are missing, in one
// transaction: the lease table (key text PRIMARY KEY, token text, fence
// bigint NOT NULL, expires_at timestamptz, queued boolean NOT NULL DEFAULT
// false), the waiters table (see the package doc), the function a release
// calls to wake the queue's head (see the package doc), and the forced
// releases' table, the lease table's name + "_audit" (see ForceRelease),
// with an index on (key, at). On a database made by an earlier version it
// adds the tables that version did not have, replaces the function when
// its body is another version's (CREATE OR REPLACE FUNCTION) and adds, to
// a lease table without it, the queued column (ALTER TABLE … ADD COLUMN:
// a change of the catalog alone, with the table's ACCESS EXCLUSIVE lock
// held for that moment, which waits for the transactions using the
// table); it alters nothing else, and keeps the leases. Run it after
// upgrading: lock operations fail until the waiters table, the column and
// the function exist. MigrationSQL gives the same statements for a DBA,
// and the leasehold CLI runs them ("leasehold migrate --postgres DSN") or
// prints them (--print). It fails, changing nothing, when an existing
// table lacks a column the Store uses (another application's table of
// that name), or when the schema holds another function of the name of one
// of the Store's functions (a call of the Store's could match both).
//
// It is safe to call from many processes at once, whatever their default
// isolation and however they name the table (they queue on a transaction
// advisory lock, in a read committed transaction), and on every start-up. A few round trips. A
// nil option is skipped.
func (s *Store) Migrate(ctx context.Context, opts ...MigrateOption) error {
	var c migrateConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	var created []string
	// Read committed whatever the server's default: under repeatable read
	// or serializable the transaction's snapshot would be taken by the
	// lock's statement, before the lock is granted, and the checks below
	// would not see what a Migrate that held it made.
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		created = nil
		if _, err := tx.Exec(ctx, fmt.Sprintf(migrateLockSQL, "$1::text", "$2::text"), migrateLockKey, migrateLockKey+":"+s.table); err != nil {
			return err
		}
		// An unqualified table is made in the first schema of the
		// search_path that exists: look for the objects there.
		var schema *string
		var arg *string
		if s.schema != "" {
			arg = &s.schema
		}
		if err := tx.QueryRow(ctx, "SELECT coalesce($1::text, current_schema()::text)", arg).Scan(&schema); err != nil {
			return err
		}
		if schema == nil {
			return errors.New("no schema to make the tables in: the connection's search_path names none that exists")
		}
		kinds, details, names, args := make([]string, len(s.steps)), make([]string, len(s.steps)), make([]string, len(s.steps)), make([]string, len(s.steps))
		for i, st := range s.steps {
			kinds[i], details[i], names[i], args[i] = st.kind, st.detail(), st.name, st.args
		}
		var exists []bool
		if err := tx.QueryRow(ctx, existsSQL, *schema, kinds, details, names, args).Scan(&exists); err != nil {
			return err
		}
		if len(exists) != len(s.steps) {
			return fmt.Errorf("%d answers about %d objects", len(exists), len(s.steps))
		}
		if err := s.checkFunctions(ctx, tx, *schema); err != nil {
			return err
		}
		made := map[string]bool{} // tables made here, with every column
		for i, st := range s.steps {
			if exists[i] || st.kind == "column" && made[st.table] {
				// Nothing to make; and no ALTER TABLE, whose lock would
				// wait behind every transaction using the table and stop
				// every lock operation behind it, on each start-up.
				continue
			}
			if st.kind == "table" {
				made[st.name] = true
			}
			created = append(created, st.kind+" "+st.display)
			if _, err := tx.Exec(ctx, st.sql); err != nil {
				return err
			}
		}
		return s.checkColumns(ctx, tx, *schema)
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate %q: %w", s.table, err)
	}
	if c.created != nil {
		*c.created = append(*c.created, created...)
	}
	return nil
}

// othersSQL lists the functions in the schema $1 named as one of $2 whose
// argument types are not the matching one of $3: another application's, or
// made by hand.
const othersSQL = `SELECT coalesce(array_agg(p.oid::regprocedure::text ORDER BY p.oid), '{}')
  FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace
  JOIN unnest($2::text[], $3::text[]) AS f(name, args) ON p.proname = f.name
 WHERE ns.nspname = $1 AND p.proargtypes <> f.args::oidvector`

// checkFunctions fails, naming them, when the schema holds other functions
// of the names of the Store's functions: a call with the Store's arguments
// could then match more than one (a second parameter with a default), and
// every acquire or release would fail after a Migrate that said nothing.
func (s *Store) checkFunctions(ctx context.Context, tx pgx.Tx, schema string) error {
	var names, args []string
	for _, st := range s.steps {
		if st.kind == "function" {
			names, args = append(names, st.name), append(args, st.args)
		}
	}
	var others []string
	if err := tx.QueryRow(ctx, othersSQL, schema, names, args).Scan(&others); err != nil {
		return err
	}
	if len(others) > 0 {
		return fmt.Errorf("the schema %q has the function %s, of a name pgstore uses for a function of its own: drop or rename it; nothing was changed",
			schema, strings.Join(others, " and "))
	}
	return nil
}

// checkColumns checks that each table of the Store in schema has the
// columns the Store uses.
func (s *Store) checkColumns(ctx context.Context, tx pgx.Tx, schema string) error {
	for _, st := range s.steps {
		if st.kind != "table" {
			continue
		}
		var have []string
		if err := tx.QueryRow(ctx, `SELECT coalesce(array_agg(attname::text), '{}') FROM pg_attribute
 WHERE attrelid = to_regclass(format('%I.%I', $1::text, $2::text)) AND attnum > 0 AND NOT attisdropped`,
			schema, st.name).Scan(&have); err != nil {
			return err
		}
		var missing []string
		for _, col := range st.columns {
			if !slices.Contains(have, col) {
				missing = append(missing, col)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("the table %q has no column %s: it was not made by pgstore (another application's table of that name?); nothing was changed",
				st.display, strings.Join(missing, ", "))
		}
	}
	return nil
}

// MigrationSQL returns what Migrate runs for a Store made with opts, as an
// SQL script for a DBA to run instead (psql -f): one transaction, which
// makes only what is missing, so running it again changes nothing. Unlike
// Migrate, it does not check the columns of tables that exist. It returns
// New's *leasehold.ArgumentError for a table or channel name PostgreSQL
// would not take as it is; a nil option is skipped, as in New.
func MigrationSQL(opts ...Option) (string, error) {
	s, err := build(opts)
	if err != nil {
		return "", err
	}
	return s.migrationSQL(), nil
}

// migrationSQL is MigrationSQL of the Store's options.
func (s *Store) migrationSQL() string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- The tables of leasehold's pgstore for the lease table %q:\n", s.table)
	b.WriteString("-- made where missing (the queued column where an older lease table lacks it; the two functions\n")
	b.WriteString("-- replaced, as this version has them); running this again changes nothing.\n")
	b.WriteString("BEGIN ISOLATION LEVEL READ COMMITTED;\n")
	fmt.Fprintf(&b, migrateLockSQL+";\n", sqlString(migrateLockKey), sqlString(migrateLockKey+":"+s.table))
	for _, st := range s.steps {
		b.WriteString(st.sql + ";\n")
	}
	b.WriteString("COMMIT;\n")
	return b.String()
}
