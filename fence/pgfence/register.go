package pgfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence"
)

// Register is a fence.Register on a PostgreSQL table of (key text primary
// key, value bytea, fence_token bigint). It is safe for concurrent use.
type Register struct {
	t *Table
	q Querier
}

var _ fence.Register = (*Register)(nil)

// NewRegister returns a Register on table through q (a pool, usually).
// Options: fence.WithMode and fence.OnReject, as for NewTable. Call Migrate
// once to create the table.
func NewRegister(q Querier, table string, opts ...fence.Option) (*Register, error) {
	if err := checkDB("q", q); err != nil {
		return nil, err
	}
	t, err := NewTable(table, "key", opts...)
	if err != nil {
		return nil, err
	}
	return &Register{t: t, q: q}, nil
}

// Migrate creates the register's table if it does not exist, and otherwise
// checks and repairs its fence column as Table.Migrate does.
func (r *Register) Migrate(ctx context.Context) error {
	_, err := r.q.Exec(ctx, fmt.Sprintf(
		"CREATE TABLE IF NOT EXISTS %s (key text PRIMARY KEY, value bytea, %s bigint NOT NULL DEFAULT 0)", r.t.qname, qcol))
	if err != nil {
		return r.t.translate("create", err)
	}
	return r.t.Migrate(ctx, r.q)
}

// Write implements fence.Register with an upsert.
func (r *Register) Write(ctx context.Context, key string, fenceToken int64, value []byte) error {
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	return r.t.Upsert(ctx, r.q, fenceToken, map[string]any{"key": key, "value": value})
}

// Read implements fence.Register; a NULL fence reads as 0.
func (r *Register) Read(ctx context.Context, key string) ([]byte, int64, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, 0, err
	}
	var value []byte
	var f int64
	err := r.q.QueryRow(ctx, fmt.Sprintf("SELECT value, %s FROM %s WHERE key = $1", fenceOf(""), r.t.qname), key).Scan(&value, &f)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, 0, nil
	case err != nil:
		return nil, 0, r.t.translate("read", err)
	}
	return value, f, nil
}
