package pgfence_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
)

// bound is how long a step that should be instant may take before the test
// fails instead of hanging: a lock wait, pool.Close, an InTx call.
const bound = 5 * time.Second

// ownPool is a pool for one test, so that the test can close it.
func ownPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(t.Context(), pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// closeWithin fails the test unless p.Close returns within bound: Close
// waits for every connection taken from p, so a leaked one hangs it.
func closeWithin(t *testing.T, p *pgxpool.Pool) {
	t.Helper()
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("pool.Close did not return within %v: a connection was not released", bound)
	}
}

// intxOutcome is how an InTx call ended.
type intxOutcome struct {
	err       error
	returned  bool // false after a panic or runtime.Goexit
	recovered any
}

// runInTx calls InTx in a goroutine of its own, so that fn may panic or call
// runtime.Goexit, and waits for it within bound.
func runInTx(t *testing.T, call func() error) intxOutcome {
	t.Helper()
	var out intxOutcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { out.recovered = recover() }()
		out.err = call()
		out.returned = true
	}()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("InTx did not return within %v", bound)
	}
	return out
}

// A transaction fn leaves in any way but returning nil is rolled back: the
// row is unlocked for the next writer and the connection goes back to the
// pool, whose Close then returns.
func TestInTxHostileFn(t *testing.T) {
	boom := errors.New("boom")
	wantPanic := func(t *testing.T, out intxOutcome) {
		if out.returned || out.recovered != boom {
			t.Fatalf("InTx returned %v (returned %v), recovered %v; want fn's panic to go on", out.err, out.returned, out.recovered)
		}
	}
	cases := []struct {
		name string
		then func(ctx context.Context, tx pgx.Tx, cancel context.CancelFunc) error // after fn's write
		want func(t *testing.T, out intxOutcome)
	}{
		{"panic", func(context.Context, pgx.Tx, context.CancelFunc) error { panic(boom) }, wantPanic},
		{"panic with rows open", func(ctx context.Context, tx pgx.Tx, _ context.CancelFunc) error {
			rows, err := tx.Query(ctx, "SELECT generate_series(1, 1000)")
			if err != nil {
				return err
			}
			_ = rows // left open: the connection is busy when InTx rolls back
			panic(boom)
		}, wantPanic},
		{"Goexit", func(context.Context, pgx.Tx, context.CancelFunc) error {
			runtime.Goexit() // what t.FailNow does inside fn
			return nil
		}, func(t *testing.T, out intxOutcome) {
			if out.returned || out.recovered != nil {
				t.Fatalf("InTx returned %v, recovered %v; want the goroutine to exit", out.err, out.recovered)
			}
		}},
		{"context canceled in fn", func(_ context.Context, _ pgx.Tx, cancel context.CancelFunc) error {
			cancel()
			return nil
		}, func(t *testing.T, out intxOutcome) {
			if !out.returned || !errors.Is(out.err, context.Canceled) {
				t.Fatalf("InTx returned %v (returned %v), want context.Canceled", out.err, out.returned)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tbl, name := runsTable(t)
			if _, err := pool.Exec(t.Context(), "INSERT INTO "+name+" (run_id, payload) VALUES ('R1', 'kept')"); err != nil {
				t.Fatal(err)
			}
			own := ownPool(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			out := runInTx(t, func() error {
				return tbl.InTx(ctx, own, "R1", 5, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "UPDATE "+name+" SET payload = 'half' WHERE run_id = 'R1'"); err != nil {
						return err
					}
					return tc.then(ctx, tx, cancel)
				})
			})
			tc.want(t, out)

			if p, f := row(t, name, "R1"); p != "kept" || f != 0 {
				t.Fatalf("row = (%q, fence %d), want fn's write and the fence rolled back", p, f)
			}
			// Another connection writes the row at once; a lock wait runs
			// into the deadline and fails the test.
			wctx, wcancel := context.WithTimeout(t.Context(), bound)
			defer wcancel()
			if err := tbl.Update(wctx, pool, "R1", 6, "payload = $1", "next"); err != nil {
				t.Fatalf("the next writer: %v", err)
			}
			closeWithin(t, own)
		})
	}
}

// InTx giving up while it waits for a locked row leaves nothing behind once
// the lock's holder is done.
func TestInTxDeadlineWhileWaitingForRow(t *testing.T) {
	tbl, name := runsTable(t)
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+name+" (run_id, payload) VALUES ('R1', 'kept')"); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.WithoutCancel(t.Context())) }()
	if _, err := holder.Exec(t.Context(), "SELECT 1 FROM "+name+" WHERE run_id = 'R1' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	own := ownPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond) // fires while InTx waits
	defer cancel()
	called := false
	out := runInTx(t, func() error {
		return tbl.InTx(ctx, own, "R1", 5, func(context.Context, pgx.Tx) error { called = true; return nil })
	})
	if !out.returned || !errors.Is(out.err, context.DeadlineExceeded) || called {
		t.Fatalf("InTx = %v (fn called: %v), want context.DeadlineExceeded without calling fn", out.err, called)
	}
	if err := holder.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), bound)
	defer wcancel()
	if err := tbl.Update(wctx, pool, "R1", 6, "payload = $1", "next"); err != nil {
		t.Fatalf("the next writer: %v", err)
	}
	closeWithin(t, own)
}

// An fn that ends the transaction itself commits the raised fence with its
// write, or rolls both back: never its write without the fence. InTx returns
// an error either way, as it does when fn returns nil from a failed
// transaction.
func TestInTxFnEndsTheTransaction(t *testing.T) {
	cases := []struct {
		name     string
		end      func(ctx context.Context, tx pgx.Tx, table string) error
		wantErr  bool
		payload  string
		fenceNow int64
	}{
		{"Commit", func(ctx context.Context, tx pgx.Tx, _ string) error { return tx.Commit(ctx) }, true, "by 9", 9},
		{"COMMIT statement", func(ctx context.Context, tx pgx.Tx, _ string) error { _, err := tx.Exec(ctx, "COMMIT"); return err }, true, "by 9", 9},
		{"Rollback", func(ctx context.Context, tx pgx.Tx, _ string) error { return tx.Rollback(ctx) }, true, "by 4", 4},
		{"ROLLBACK statement", func(ctx context.Context, tx pgx.Tx, _ string) error { _, err := tx.Exec(ctx, "ROLLBACK"); return err }, true, "by 4", 4},
		{"failed statement ignored", func(ctx context.Context, tx pgx.Tx, _ string) error { _, _ = tx.Exec(ctx, "SELECT 1/0"); return nil }, true, "by 4", 4},
		// A statement that ends the transaction and opens another leaves the
		// status 'T': the write in the second, made without the row lock
		// and the fence, must not commit.
		{"ROLLBACK AND CHAIN, then a write", chainThenWrite("ROLLBACK AND CHAIN"), true, "by 4", 4},
		{"ROLLBACK; BEGIN, then a write", chainThenWrite("ROLLBACK; BEGIN"), true, "by 4", 4},
		{"COMMIT AND CHAIN, then a write", chainThenWrite("COMMIT AND CHAIN"), true, "by 9", 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tbl, name := runsTable(t)
			ctx := t.Context()
			if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
				t.Fatal(err)
			}
			if err := tbl.Update(ctx, pool, "R1", 4, "payload = $1", "by 4"); err != nil {
				t.Fatal(err)
			}
			own := ownPool(t)
			err := tbl.InTx(ctx, own, "R1", 9, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "UPDATE "+name+" SET payload = 'by 9' WHERE run_id = 'R1'"); err != nil {
					return err
				}
				return tc.end(ctx, tx, name)
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("InTx = %v, want an error: %v", err, tc.wantErr)
			}
			if p, f := row(t, name, "R1"); p != tc.payload || f != tc.fenceNow {
				t.Fatalf("row = (%q, fence %d), want (%q, fence %d)", p, f, tc.payload, tc.fenceNow)
			}
			wctx, wcancel := context.WithTimeout(ctx, bound)
			defer wcancel()
			// Fence 5 was issued before 9: refused once 9 is in.
			err = tbl.Update(wctx, pool, "R1", 5, "payload = $1", "by 5")
			if tc.fenceNow == 9 {
				wantStale(t, err, 5, 9)
			} else if err != nil {
				t.Fatalf("fence 5 after InTx rolled back: %v", err)
			}
			closeWithin(t, own)
		})
	}
}

// chainThenWrite ends fn's transaction with stmt, which opens another, and
// writes the row again in that one, without the fence.
func chainThenWrite(stmt string) func(ctx context.Context, tx pgx.Tx, table string) error {
	return func(ctx context.Context, tx pgx.Tx, table string) error {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET payload = 'unfenced' WHERE run_id = 'R1'")
		return err
	}
}

// Once fn commits through tx, the pool may give the connection to another
// caller at once: InTx returns its error without looking at the connection
// (the race detector catches a read of its transaction status).
func TestInTxFnCommitsThenThePoolReusesTheConnection(t *testing.T) {
	tbl, name := runsTable(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		t.Fatal(err)
	}
	own := onePool(t)
	other := make(chan error, 1)
	err := tbl.InTx(ctx, own, "R1", 9, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		go func() {
			other <- pgx.BeginFunc(ctx, own, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "SELECT 1")
				return err
			})
		}()
		return nil
	})
	if err == nil {
		t.Fatal("InTx = nil after fn committed tx itself")
	}
	if err := <-other; err != nil {
		t.Fatalf("the next caller on the connection: %v", err)
	}
	closeWithin(t, own)
}

// onePool is a pool for one test with a single connection, so that a
// connection InTx does not give back blocks the next caller.
func onePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The OnReject hook of a stale InTx runs after the rollback: with the row
// unlocked and the connection back in the pool, it may read the table.
func TestInTxRejectionHookRunsUnlocked(t *testing.T) {
	own := onePool(t)
	var tbl *pgfence.Table
	var seen int64
	var hookErr error
	tbl, name := runsTable(t, fence.OnReject(func(ctx context.Context, rej fence.Rejection) {
		ctx, cancel := context.WithTimeout(ctx, bound) // a bound, so that a hang fails the test
		defer cancel()
		seen, hookErr = tbl.Fence(ctx, own, "R1")
	}))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id, fence_token) VALUES ('R1', 7)"); err != nil {
		t.Fatal(err)
	}
	err := tbl.InTx(ctx, own, "R1", 5, func(context.Context, pgx.Tx) error { return nil })
	wantStale(t, err, 5, 7)
	if hookErr != nil || seen != 7 {
		t.Fatalf("the hook read fence %d, %v; want 7 (it ran while InTx held the pool's only connection)", seen, hookErr)
	}
	closeWithin(t, own)
}
