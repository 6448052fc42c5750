package pgfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leasehold/leasehold/fence/pgfence"
)

// mockTx stands for a test double such as pgxmock's, whose Conn() is not
// available (pgxmock panics; here it is nil).
type mockTx struct {
	pgx.Tx
	committed bool
}

func (m *mockTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return &oneRow{}, nil
}
func (m *mockTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return pgconn.NewCommandTag("UPDATE 1"), nil
}
func (m *mockTx) Commit(ctx context.Context) error   { m.committed = true; return nil }
func (m *mockTx) Rollback(ctx context.Context) error { return nil }
func (m *mockTx) Conn() *pgx.Conn                    { return nil }

type mockDB struct{ tx *mockTx }

func (d mockDB) Begin(ctx context.Context) (pgx.Tx, error) { return d.tx, nil }

type oneRow struct{ done bool }

func (r *oneRow) Close()                        {}
func (r *oneRow) Err() error                    { return nil }
func (r *oneRow) CommandTag() pgconn.CommandTag { return pgconn.NewCommandTag("SELECT 1") }
func (r *oneRow) FieldDescriptions() []pgconn.FieldDescription {
	return []pgconn.FieldDescription{{Name: "f"}}
}
func (r *oneRow) Next() bool             { n := !r.done; r.done = true; return n }
func (r *oneRow) Scan(dest ...any) error { *(dest[0].(*int64)) = 1; return nil }
func (r *oneRow) Values() ([]any, error) { return []any{int64(1)}, nil }
func (r *oneRow) RawValues() [][]byte    { return nil }
func (r *oneRow) Conn() *pgx.Conn        { return nil }
func (r *oneRow) TypeMap() *pgtype.Map   { return pgtype.NewMap() }

// InTx works with a Tx that is not pgx's own, a test double whose Conn is
// nil (pgxmock's panics): the fence is checked and raised, and the
// transaction commits, as before InTx looked at the connection's status.
func TestInTxWithATxDouble(t *testing.T) {
	tbl, err := pgfence.NewTable("jobs", "id")
	if err != nil {
		t.Fatal(err)
	}
	tx := &mockTx{}
	defer func() {
		if v := recover(); v != nil {
			t.Fatalf("InTx panicked after fn returned nil (committed=%v): %v", tx.committed, v)
		}
	}()
	err = tbl.InTx(context.Background(), mockDB{tx}, 1, 5, func(ctx context.Context, tx pgx.Tx) error { return nil })
	if err != nil || !tx.committed {
		t.Fatalf("InTx with a Tx double: %v, committed %v", err, tx.committed)
	}
}

type oneScan struct{}

func (oneScan) Scan(dest ...any) error { *(dest[0].(*int64)) = 1; return nil }

func (m *mockTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row { return oneScan{} }
