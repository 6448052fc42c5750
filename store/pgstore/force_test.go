package pgstore_test

import (
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
)

// A lease table made before the audit table existed gets one from Migrate,
// which leaves the lease table and its rows as they are.
func TestMigrateAddsAuditTableToOldTable(t *testing.T) {
	name := "leases_old_" + strings.ToLower(rand.Text()[:10])
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+name+` (key text PRIMARY KEY, token text, fence bigint NOT NULL, expires_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+name+` VALUES ('jobs:1', 'T~old:1', 41, now() + interval '1 minute')`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, pgstore.WithTable(name))
	if _, err := s.ForceRelease(t.Context(), "jobs:1", "r", "ops"); err == nil || !strings.Contains(err.Error(), name+"_audit") {
		t.Fatalf("ForceRelease before Migrate = %v, want an error naming the missing audit table", err)
	}
	if info, _ := s.Inspect(t.Context(), "jobs:1"); !info.Held {
		t.Fatalf("a failed ForceRelease changed the lease: %+v", info)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	rec, err := s.ForceRelease(t.Context(), "jobs:1", "r", "ops")
	if err != nil || rec.Holder != "old:1" || rec.Fence != 41 || time.Since(rec.Time) > time.Minute {
		t.Fatalf("ForceRelease after Migrate = %+v, %v", rec, err)
	}
}

// The audit table's index on (key, at) exists for every length of the
// lease table's name: at 57 bytes the audit table's name is 63, and the
// index's, cut to 63 by PostgreSQL, would have been the table's own (so
// CREATE INDEX IF NOT EXISTS made none). At 51–56 bytes the index keeps the
// name PostgreSQL cut it to, as Migrates of earlier versions made it.
func TestAuditIndexForEveryNameLength(t *testing.T) {
	for _, n := range []int{50, 51, 56, 57, 58} {
		schema := newSchema(t)
		table := schema + "." + strings.Repeat("t", n)
		var created []string
		if err := newStore(t, pool, pgstore.WithTable(table), pgstore.WithChannel("c")).Migrate(t.Context(), pgstore.WithCreated(&created)); err != nil {
			t.Fatal(err)
		}
		var names []string
		rows, err := pool.Query(t.Context(), `SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 AND indexdef LIKE '%(key, at)'`, schema)
		if err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 {
			t.Fatalf("a %d-byte table: indexes on (key, at) %q, want one (Migrate made %q)", n, names, created)
		}
		if !slices.ContainsFunc(created, func(c string) bool { return strings.HasPrefix(c, "index ") }) {
			t.Errorf("a %d-byte table: Migrate made %q, no index", n, created)
		}
		if n == 57 && !strings.HasPrefix(names[0], "leasehold_audit_key_at_") {
			t.Errorf("a 57-byte table's audit index is %q, want a hashed name", names[0])
		}
		if n == 51 && names[0] != (strings.Repeat("t", n) + "_audit_key_at")[:63] {
			t.Errorf("a 51-byte table's audit index is %q, not the name earlier versions made", names[0])
		}
		created = nil
		if err := newStore(t, pool, pgstore.WithTable(table), pgstore.WithChannel("c")).Migrate(t.Context(), pgstore.WithCreated(&created)); err != nil || len(created) != 0 {
			t.Errorf("a %d-byte table: a second Migrate made %q (%v), want nothing", n, created, err)
		}
	}
}

// A table name that leaves no room for "_audit" gets an audit table with a
// hashed name, as its waiters table and wake-up function do: forced
// releases are recorded for it too.
func TestLongTableNameHasAHashedAudit(t *testing.T) {
	for _, n := range []int{58, 63} { // the shortest with no room, the longest name
		name := "l" + strings.ToLower(rand.Text()[:10]) + strings.Repeat("x", n-11)
		s := newStore(t, pool, pgstore.WithTable(name))
		var created []string
		if err := s.Migrate(t.Context(), pgstore.WithCreated(&created)); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(created, func(c string) bool { return strings.HasPrefix(c, "table leasehold_audit_") }) {
			t.Errorf("a %d-byte table: Migrate made %q, no audit table", n, created)
		}
		if _, err := s.Acquire(t.Context(), "jobs:1", "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
		if rec, err := s.ForceRelease(t.Context(), "jobs:1", "r", "ops"); err != nil || rec.Key != "jobs:1" {
			t.Fatalf("a %d-byte table: ForceRelease = %+v, %v", n, rec, err)
		}
		if recs, err := s.Audit(t.Context(), "", 10); err != nil || len(recs) != 1 {
			t.Fatalf("a %d-byte table: Audit = %+v, %v, want the one record", n, recs, err)
		}
		if _, err := s.Acquire(t.Context(), "jobs:1", "tok", time.Minute); err != nil {
			t.Fatal(err)
		}
		// The waiters table and the wake-up function have hashed names that
		// fit: a release with a waiter queued calls the function.
		if _, err := s.AcquireQueued(t.Context(), "jobs:1", "waiter", time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("a waiter of a held key: %v", err)
		}
		if err := s.Release(t.Context(), "jobs:1", "tok"); err != nil {
			t.Fatalf("Release with a waiter queued: %v", err)
		}
	}
}

// A forced release and the audit read back work in every query mode under
// every DateStyle: in the exec and simple-protocol modes a timestamp comes
// back as text in the session's style, so the statements return the
// records' times in microseconds. Each record's time is the database's,
// to the microsecond, the same from ForceRelease and from Audit.
func TestForceReleaseInEveryModeAndDateStyle(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		for _, style := range []string{"ISO, MDY", "SQL, DMY", "German", "Postgres, YMD"} {
			t.Run(mode.String()+"/"+style, func(t *testing.T) {
				p := newPool(t, shared.DSN(), func(c *pgxpool.Config) {
					c.ConnConfig.DefaultQueryExecMode = mode
					c.ConnConfig.RuntimeParams["datestyle"] = style
				})
				s, _ := newTable(t, p)
				before := time.Now()
				if _, err := s.Acquire(t.Context(), "k", leasehold.NewToken(), time.Minute); err != nil {
					t.Fatal(err)
				}
				rec, err := s.ForceRelease(t.Context(), "k", "stuck", "ops")
				if err != nil {
					t.Fatal(err)
				}
				if d := rec.Time.Sub(before); d < -time.Minute || d > time.Minute {
					t.Errorf("the record's time %v is %v from the test's clock", rec.Time, d)
				}
				recs, err := s.Audit(t.Context(), "k", 10)
				if err != nil || len(recs) != 1 || !recs[0].Time.Equal(rec.Time) {
					t.Fatalf("Audit = %+v, %v; want the one record, at %v", recs, err, rec.Time)
				}
			})
		}
	}
}
