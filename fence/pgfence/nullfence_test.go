package pgfence_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
)

// handMadeTable creates a table whose fence column was added by hand with
// columnDef, and rows R1 (fence NULL) and R2 (fence 7) when it takes them.
func handMadeTable(t *testing.T, columnDef string, rows bool) (*pgfence.Table, string) {
	t.Helper()
	name := "hand_" + strings.ToLower(rand.Text()[:8])
	sql := "CREATE TABLE " + name + " (run_id text PRIMARY KEY, payload text, fence_token " + columnDef + ")"
	if rows {
		sql += "; INSERT INTO " + name + " VALUES ('R1', 'one', NULL), ('R2', 'two', 7)"
	}
	if _, err := pool.Exec(t.Context(), sql); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgfence.NewTable(name, "run_id")
	if err != nil {
		t.Fatal(err)
	}
	return tbl, name
}

// Before Migrate, a row with a NULL fence reads as fence 0 everywhere and
// every helper writes it.
func TestNullFenceReadsAsZero(t *testing.T) {
	ctx := t.Context()
	tbl, name := handMadeTable(t, "bigint", true)
	if err := tbl.Update(ctx, pool, "R1", 1, "payload = $1", "updated"); err != nil {
		t.Fatalf("Update of a NULL row: %v", err)
	}
	if p, f := row(t, name, "R1"); p != "updated" || f != 1 {
		t.Fatalf("row = (%q, %d)", p, f)
	}

	tbl, name = handMadeTable(t, "bigint", true)
	if err := tbl.Upsert(ctx, pool, 1, map[string]any{"run_id": "R1", "payload": "upserted"}); err != nil {
		t.Fatalf("Upsert over a NULL row: %v", err)
	}
	if p, f := row(t, name, "R1"); p != "upserted" || f != 1 {
		t.Fatalf("row = (%q, %d)", p, f)
	}

	for _, mode := range []fence.Mode{fence.Strict, fence.SameHolder} {
		_, name = handMadeTable(t, "bigint", true)
		tbl, err := pgfence.NewTable(name, "run_id", fence.WithMode(mode))
		if err != nil {
			t.Fatal(err)
		}
		var seen int64 = -1
		err = tbl.InTx(ctx, pool, "R1", 1, func(ctx context.Context, tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT fence_token FROM "+name+" WHERE run_id = 'R1'").Scan(&seen)
		})
		if err != nil || seen != 1 {
			t.Fatalf("%v: InTx on a NULL row = %v, fn saw fence %d; want nil, 1", mode, err, seen)
		}
	}

	// A register table made by hand: Read says 0, Write works.
	name = "hand_register_" + strings.ToLower(rand.Text()[:8])
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+" (key text PRIMARY KEY, value bytea, fence_token bigint); INSERT INTO "+name+" VALUES ('k', 'v', NULL), ('w', 'x', NULL)"); err != nil {
		t.Fatal(err)
	}
	reg, err := pgfence.NewRegister(pool, name)
	if err != nil {
		t.Fatal(err)
	}
	if v, f, err := reg.Read(ctx, "k"); err != nil || string(v) != "v" || f != 0 {
		t.Fatalf("Read of a NULL fence = (%q, %d, %v), want (v, 0, nil)", v, f, err)
	}
	if err := reg.Write(ctx, "k", 1, []byte("new")); err != nil {
		t.Fatalf("Write over a NULL fence: %v", err)
	}
}
