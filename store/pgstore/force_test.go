package pgstore_test

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
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

// A table name that leaves no room for "_audit" still locks; only forced
// releases and the audit say why they cannot run.
func TestLongTableNameHasNoAudit(t *testing.T) {
	name := "l" + strings.Repeat("x", 62)
	s := newStore(t, pool, pgstore.WithTable(name))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), "jobs:1", "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := s.ForceRelease(t.Context(), "jobs:1", "r", "ops")
	var ae *driver.ArgumentError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "_audit") {
		t.Fatalf("ForceRelease = %v, want an error about the audit table's name", err)
	}
	if _, err := s.Audit(t.Context(), "", 1); err == nil {
		t.Fatal("Audit without an audit table succeeded")
	}
	// The waiters table and the wake-up function have hashed names that
	// fit: a release with a waiter queued calls the function.
	if _, err := s.AcquireQueued(t.Context(), "jobs:1", "waiter", time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a waiter of a held key: %v", err)
	}
	if err := s.Release(t.Context(), "jobs:1", "tok"); err != nil {
		t.Fatalf("Release with a waiter queued: %v", err)
	}
	if _, err := pool.Exec(t.Context(), `DROP TABLE `+name); err != nil {
		t.Fatal(err)
	}
}
