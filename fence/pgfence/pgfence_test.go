package pgfence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/fencetest"
	"github.com/leasehold/leasehold/fence/pgfence"
	"github.com/leasehold/leasehold/storetest/testserver"
)

var (
	pg   *testserver.PostgresServer
	pool *pgxpool.Pool
)

func TestMain(m *testing.M) {
	srv, err := testserver.NewPostgresServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pg = srv
	pool, err = pgxpool.New(context.Background(), srv.DSN())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = srv.Close()
		os.Exit(1)
	}
	code := m.Run()
	pool.Close()
	_ = srv.Close()
	os.Exit(code)
}

// runsTable creates a fresh table of runs with the fence column.
func runsTable(t testing.TB, opts ...fence.Option) (*pgfence.Table, string) {
	t.Helper()
	name := "runs_" + strings.ToLower(rand.Text()[:8])
	if _, err := pool.Exec(t.Context(), "CREATE TABLE "+name+" (run_id text PRIMARY KEY, payload text, state text)"); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgfence.NewTable(name, "run_id", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return tbl, name
}

func row(t testing.TB, table, id string) (payload string, f int64) {
	t.Helper()
	err := pool.QueryRow(t.Context(), "SELECT coalesce(payload, ''), fence_token FROM "+table+" WHERE run_id = $1", id).Scan(&payload, &f)
	if err != nil {
		t.Fatal(err)
	}
	return payload, f
}

func wantStale(t *testing.T, err error, presented, current int64) {
	t.Helper()
	var se *fence.StaleError
	if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || se.Presented != presented || se.Current != current {
		t.Fatalf("error %v, want a *fence.StaleError{%d, %d}", err, presented, current)
	}
}

func TestRegisterConformance(t *testing.T) {
	fencetest.Run(t, func(t *testing.T, mode fence.Mode) fence.Register {
		r, err := pgfence.NewRegister(pool, "register_"+strings.ToLower(rand.Text()[:8]), fence.WithMode(mode))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		return r
	})
}

func TestUpdateIsStrict(t *testing.T) {
	tbl, name := runsTable(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Update(ctx, pool, "R1", 7, "payload = $1, state = $2", "by B", "running"); err != nil {
		t.Fatal(err)
	}
	wantStale(t, tbl.Update(ctx, pool, "R1", 7, "payload = $1", "B again"), 7, 7)
	wantStale(t, tbl.Update(ctx, pool, "R1", 6, "payload = $1", "by A"), 6, 7)
	if p, f := row(t, name, "R1"); p != "by B" || f != 7 {
		t.Fatalf("row = (%q, %d), want B's write", p, f)
	}
	if err := tbl.Update(ctx, pool, "R2", 9, "payload = $1", "x"); !errors.Is(err, pgfence.ErrNoRow) {
		t.Fatalf("Update of a missing row: %v, want ErrNoRow", err)
	}
}

// SameHolder is the mode for a holder that writes a run's states one by one.
func TestUpdateSameHolder(t *testing.T) {
	tbl, name := runsTable(t, fence.WithMode(fence.SameHolder))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{"queued", "running", "done"} {
		if err := tbl.Update(ctx, pool, "R1", 7, "state = $1, payload = $1", state); err != nil {
			t.Fatalf("%s: %v", state, err)
		}
	}
	wantStale(t, tbl.Update(ctx, pool, "R1", 6, "payload = $1", "stale"), 6, 7)
	if p, _ := row(t, name, "R1"); p != "done" {
		t.Fatalf("payload %q, want done", p)
	}
}

func TestUpsert(t *testing.T) {
	tbl, name := runsTable(t)
	ctx := t.Context()
	if err := tbl.Upsert(ctx, pool, 3, map[string]any{"run_id": "R1", "payload": "created"}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Upsert(ctx, pool, 5, map[string]any{"run_id": "R1", "payload": "newer"}); err != nil {
		t.Fatal(err)
	}
	wantStale(t, tbl.Upsert(ctx, pool, 4, map[string]any{"run_id": "R1", "payload": "older"}), 4, 5)
	wantStale(t, tbl.Upsert(ctx, pool, 5, map[string]any{"run_id": "R1", "payload": "equal"}), 5, 5)
	if p, f := row(t, name, "R1"); p != "newer" || f != 5 {
		t.Fatalf("row = (%q, %d)", p, f)
	}
	for _, bad := range []map[string]any{
		{"payload": "no key"},
		{"run_id": "R1", "fence_token": 99},
	} {
		if err := tbl.Upsert(ctx, pool, 9, bad); !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("Upsert(%v): %v, want an invalid-argument error", bad, err)
		}
	}
}

// Several statements, on this table and another, commit under one fence.
func TestInTx(t *testing.T) {
	tbl, name := runsTable(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id, state) VALUES ('R1', 'queued'); CREATE TABLE "+name+"_log (run_id text, state text)"); err != nil {
		t.Fatal(err)
	}
	transition := func(f int64, state string) error {
		return tbl.InTx(ctx, pool, "R1", f, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "UPDATE "+name+" SET state = $1 WHERE run_id = 'R1'", state); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+name+"_log VALUES ('R1', $1)", state)
			return err
		})
	}
	if err := transition(4, "running"); err != nil {
		t.Fatal(err)
	}
	called := false
	err := tbl.InTx(ctx, pool, "R1", 3, func(context.Context, pgx.Tx) error { called = true; return nil })
	wantStale(t, err, 3, 4)
	if called {
		t.Fatal("fn ran under a stale fence")
	}
	boom := errors.New("boom")
	if err := tbl.InTx(ctx, pool, "R1", 9, func(ctx context.Context, tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, "UPDATE "+name+" SET state = 'half' WHERE run_id = 'R1'")
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("InTx with failing fn: %v", err)
	}
	var state string
	var f, logged int64
	if err := pool.QueryRow(ctx, "SELECT state, fence_token, (SELECT count(*) FROM "+name+"_log) FROM "+name+" WHERE run_id = 'R1'").Scan(&state, &f, &logged); err != nil {
		t.Fatal(err)
	}
	if state != "running" || f != 4 || logged != 1 {
		t.Fatalf("state %q, fence %d, %d log rows; want running, 4, 1 (the failed tx rolled back, fence included)", state, f, logged)
	}
	if err := tbl.InTx(ctx, pool, "R9", 9, func(context.Context, pgx.Tx) error { return nil }); !errors.Is(err, pgfence.ErrNoRow) {
		t.Fatalf("InTx on a missing row: %v", err)
	}
}

// 32 writers with random fences on one row: the row ends with the highest
// fence's payload, and no write was accepted after a higher one had been.
func TestConcurrentUpdatesOneRow(t *testing.T) {
	tbl, name := runsTable(t)
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		t.Fatal(err)
	}
	top := fencetest.RaceWriters(t, 32, func(ctx context.Context, f int64) error {
		return tbl.Update(ctx, pool, "R1", f, "payload = $1", fmt.Sprint(f))
	})
	if p, f := row(t, name, "R1"); p != fmt.Sprint(top) || f != top {
		t.Fatalf("row = (%q, %d), want the highest fence %d's", p, f, top)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	tbl, name := runsTable(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id, payload) VALUES ('R1', 'kept')"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []int64{0, -1} {
		err := tbl.Update(ctx, pool, "R1", f, "payload = $1", "bad")
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != "fence" {
			t.Errorf("fence %d: %v, want an error naming fence", f, err)
		}
	}
	if err := tbl.Update(ctx, pool, "R1", 5, " ", "x"); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("empty set: %v", err)
	}
	if p, f := row(t, name, "R1"); p != "kept" || f != 0 {
		t.Fatalf("row = (%q, %d) after rejected calls", p, f)
	}

	missing, _ := pgfence.NewTable("no_such_table", "id")
	if err := missing.Update(ctx, pool, "R1", 5, "payload = $1", "x"); err == nil || !strings.Contains(err.Error(), "no_such_table does not exist") {
		t.Errorf("missing table: %v", err)
	}
	if err := missing.Migrate(ctx, pool); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Migrate of a missing table: %v", err)
	}
	// A table without the fence column: the error says to migrate.
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+"_bare (run_id text PRIMARY KEY, payload text); INSERT INTO "+name+"_bare VALUES ('R1', 'kept')"); err != nil {
		t.Fatal(err)
	}
	bare, _ := pgfence.NewTable(name+"_bare", "run_id")
	if err := bare.Update(ctx, pool, "R1", 5, "payload = $1", "x"); err == nil || !strings.Contains(err.Error(), "run Migrate") {
		t.Errorf("missing column: %v", err)
	}
	// A fence column of the wrong type is refused, not used.
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+"_int (run_id text PRIMARY KEY, fence_token integer)"); err != nil {
		t.Fatal(err)
	}
	wrong, _ := pgfence.NewTable(name+"_int", "run_id")
	if err := wrong.Migrate(ctx, pool); err == nil || !strings.Contains(err.Error(), "want bigint") {
		t.Errorf("Migrate over an integer column: %v", err)
	}
	for _, bad := range [][2]string{{"", "id"}, {"a.b.c", "id"}, {"t", ""}} {
		if _, err := pgfence.NewTable(bad[0], bad[1]); !errors.Is(err, leasehold.ErrInvalidArgument) {
			t.Errorf("NewTable(%q, %q): %v", bad[0], bad[1], err)
		}
	}
	// The fence column cannot be the key too: every write would change the key.
	var ae *leasehold.ArgumentError
	if _, err := pgfence.NewTable("runs", pgfence.Column); !errors.As(err, &ae) || ae.Arg != "keyColumn" {
		t.Errorf("NewTable(runs, %q): %v, want an error naming keyColumn", pgfence.Column, err)
	}
}

// A NULL key equals no row, and never conflicts in a unique index: an
// Upsert of one would insert a row whatever its fence, a stale writer's
// too. Every helper refuses it, naming the argument, and writes nothing.
func TestNullKeyIsRefused(t *testing.T) {
	ctx := t.Context()
	name := "runs_" + strings.ToLower(rand.Text()[:8])
	// A key column that is unique but nullable: Migrate accepts it.
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+" (run_id text UNIQUE, payload text)"); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgfence.NewTable(name, "run_id")
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var nilText *string
	for _, id := range []any{nil, nilText, sql.NullString{}, pgtype.Text{}, []byte(nil)} {
		wantArg := func(op string, err error, arg string) {
			t.Helper()
			var ae *leasehold.ArgumentError
			if !errors.As(err, &ae) || ae.Arg != arg {
				t.Errorf("%s with key %#v: %v, want an error naming %s", op, id, err, arg)
			}
		}
		wantArg("Upsert, fence 100", tbl.Upsert(ctx, pool, 100, map[string]any{"run_id": id, "payload": "new"}), "row")
		wantArg("Upsert, fence 1", tbl.Upsert(ctx, pool, 1, map[string]any{"run_id": id, "payload": "stale"}), "row")
		wantArg("Update", tbl.Update(ctx, pool, id, 5, "payload = $1", "x"), "id")
		wantArg("InTx", tbl.InTx(ctx, pool, id, 5, func(context.Context, pgx.Tx) error { return nil }), "id")
		_, err := tbl.Fence(ctx, pool, id)
		wantArg("Fence", err, "id")
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after the refused calls (%v), want none", n, err)
	}
	// An empty key is a key, not NULL.
	if err := tbl.Upsert(ctx, pool, 3, map[string]any{"run_id": "", "payload": "empty"}); err != nil {
		t.Fatalf("Upsert of the empty key: %v", err)
	}
	wantStale(t, tbl.Upsert(ctx, pool, 2, map[string]any{"run_id": "", "payload": "stale"}), 2, 3)
}

// A nil option is skipped; an unknown Mode is refused, not taken as Strict.
func TestNewTableOptions(t *testing.T) {
	tbl, err := pgfence.NewTable("runs", "run_id", nil, fence.WithMode(fence.SameHolder), nil)
	if err != nil || tbl == nil {
		t.Fatalf("NewTable with nil options: %v", err)
	}
	if _, err := pgfence.NewRegister(pool, "register", nil); err != nil {
		t.Fatalf("NewRegister with a nil option: %v", err)
	}
	var ae *leasehold.ArgumentError
	if _, err := pgfence.NewTable("runs", "run_id", fence.WithMode(fence.Mode(7))); !errors.As(err, &ae) || ae.Arg != "opts" {
		t.Errorf("NewTable with Mode(7): %v, want an error naming opts", err)
	}
	if _, err := pgfence.NewRegister(pool, "register", fence.WithMode(fence.Mode(7))); !errors.As(err, &ae) || ae.Arg != "opts" {
		t.Errorf("NewRegister with Mode(7): %v, want an error naming opts", err)
	}
}

// A nil Querier or Beginner, or a nil pool or conn in one, is refused by
// name, not a panic.
func TestNilQuerierOrBeginner(t *testing.T) {
	tbl, name := runsTable(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id, payload) VALUES ('R1', 'kept')"); err != nil {
		t.Fatal(err)
	}
	var nilPool *pgxpool.Pool
	var nilConn *pgx.Conn
	for _, db := range []struct {
		name string
		q    pgfence.Querier
		b    pgfence.Beginner
	}{{"nil interface", nil, nil}, {"nil pool", nilPool, nilPool}, {"nil conn", nilConn, nilConn}} {
		for call, fn := range map[string]func() error{
			"Update": func() error { return tbl.Update(ctx, db.q, "R1", 5, "payload = $1", "x") },
			"Upsert": func() error { return tbl.Upsert(ctx, db.q, 5, map[string]any{"run_id": "R1", "payload": "x"}) },
			"InTx": func() error {
				return tbl.InTx(ctx, db.b, "R1", 5, func(context.Context, pgx.Tx) error { return nil })
			},
			"Fence":       func() error { _, err := tbl.Fence(ctx, db.q, "R1"); return err },
			"Migrate":     func() error { return tbl.Migrate(ctx, db.q) },
			"NewRegister": func() error { _, err := pgfence.NewRegister(db.q, "register"); return err },
		} {
			want := "q"
			if call == "InTx" {
				want = "db"
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s with a %s: panic %v", call, db.name, p)
					}
				}()
				var ae *leasehold.ArgumentError
				if err := fn(); !errors.As(err, &ae) || ae.Arg != want {
					t.Errorf("%s with a %s: %v, want an error naming %s", call, db.name, err, want)
				}
			}()
		}
	}
	if p, f := row(t, name, "R1"); p != "kept" || f != 0 {
		t.Fatalf("row = (%q, %d) after refused calls", p, f)
	}
}

// Update leaves the caller's args alone, spare capacity included, so that
// callers sharing one slice do not send each other's key and fence.
func TestUpdateLeavesCallersArgs(t *testing.T) {
	tbl, name := runsTable(t)
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+name+" (run_id) VALUES ('A'), ('B')"); err != nil {
		t.Fatal(err)
	}
	args := make([]any, 1, 3)
	args[0] = "p"
	if err := tbl.Update(t.Context(), pool, "A", 7, "payload = $1", args...); err != nil {
		t.Fatal(err)
	}
	if spare := args[:3]; spare[1] != nil || spare[2] != nil {
		t.Fatalf("Update wrote %v and %v into the caller's slice past its length", spare[1], spare[2])
	}

	var wg sync.WaitGroup
	for _, w := range []struct {
		id   string
		base int64
	}{{"A", 7}, {"B", 1000}} {
		wg.Go(func() {
			for i := range int64(100) {
				if err := tbl.Update(t.Context(), pool, w.id, w.base+i+1, "payload = $1", args...); err != nil {
					t.Errorf("%s, fence %d: %v", w.id, w.base+i+1, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, f := row(t, name, "A"); f != 107 {
		t.Fatalf("row A carries fence %d, want its own last, 107", f)
	}
}

// dupTable is a table made by hand whose key column is not unique, with
// rows as given; Migrate would refuse it.
func dupTable(t *testing.T, rows string, opts ...fence.Option) (*pgfence.Table, string) {
	t.Helper()
	name := "dup_" + strings.ToLower(rand.Text()[:8])
	if _, err := pool.Exec(t.Context(), "CREATE TABLE "+name+" (run_id text, payload text, fence_token bigint NOT NULL DEFAULT 0); "+
		"INSERT INTO "+name+" (run_id, payload, fence_token) VALUES "+rows); err != nil {
		t.Fatal(err)
	}
	tbl, err := pgfence.NewTable(name, "run_id", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tbl, name
}

// On a key column that is not unique, Update that writes two rows says so,
// and is not a stale write.
func TestUpdateOfAKeyThatIsNotUnique(t *testing.T) {
	obs := &fencetest.Rejections{}
	tbl, name := dupTable(t, "('R1', 'a', 0), ('R1', 'b', 0)", fence.OnReject(obs.Record))
	err := tbl.Update(t.Context(), pool, "R1", 5, "payload = $1", "new")
	if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "not unique: 2 rows were written") {
		t.Fatalf("Update = %v, want an error saying the key is not unique and 2 rows were written", err)
	}
	if events := obs.Events(); len(events) != 0 {
		t.Fatalf("OnReject got %+v for a write that was not stale", events)
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+name+" WHERE payload = 'new'").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows written (%v), want the 2 the error reports", n, err)
	}
}

// On a key column that is not unique, InTx refuses before fn and never
// lowers either row's fence.
func TestInTxOfAKeyThatIsNotUnique(t *testing.T) {
	tbl, name := dupTable(t, "('R1', 'first', 0), ('R1', 'second', 10)")
	called := false
	err := tbl.InTx(t.Context(), pool, "R1", 5, func(context.Context, pgx.Tx) error { called = true; return nil })
	if err == nil || errors.Is(err, fence.ErrStale) || !strings.Contains(err.Error(), "not unique") || called {
		t.Fatalf("InTx = %v (fn called: %v), want an error saying the key is not unique, fn not called", err, called)
	}
	var lo, hi int64
	if err := pool.QueryRow(t.Context(), "SELECT min(fence_token), max(fence_token) FROM "+name).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if lo != 0 || hi != 10 {
		t.Fatalf("fences now %d and %d, want 0 and 10 left as they were", lo, hi)
	}
}

// On a key column that is not unique, Upsert is refused by PostgreSQL and
// says why.
func TestUpsertOfAKeyThatIsNotUnique(t *testing.T) {
	tbl, name := dupTable(t, "('R1', 'a', 0)")
	err := tbl.Upsert(t.Context(), pool, 5, map[string]any{"run_id": "R1", "payload": "new"})
	if err == nil || !strings.Contains(err.Error(), "key column "+name+".run_id is not unique") {
		t.Fatalf("Upsert = %v, want an error saying the key column is not unique", err)
	}
	if p, f := row(t, name, "R1"); p != "a" || f != 0 {
		t.Fatalf("row = (%q, %d), want it unchanged", p, f)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	tbl, _ := runsTable(t)
	for range 2 {
		if err := tbl.Migrate(t.Context(), pool); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRejectionsAreReported(t *testing.T) {
	obs := &fencetest.Rejections{}
	tbl, name := runsTable(t, fence.OnReject(obs.Record))
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		t.Fatal(err)
	}
	_ = tbl.Update(t.Context(), pool, "R1", 10, "payload = $1", "new")
	_ = tbl.Update(t.Context(), pool, "R1", 3, "payload = $1", "old")
	want := fence.Rejection{Store: "postgres", Resource: name + "/R1", Presented: 3, Current: 10}
	if events := obs.Events(); len(events) != 1 || events[0] != want {
		t.Fatalf("events %+v, want %+v", obs.Events(), want)
	}
}
