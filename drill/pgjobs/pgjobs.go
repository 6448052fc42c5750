// Package pgjobs keeps the drill's jobs in PostgreSQL, fenced with
// pgfence: a claim is pgfence.Table.InTx (the row locked with SELECT … FOR
// UPDATE, the fence checked and raised, the state read), a write is InTx
// around an UPDATE. Every accepted claim and write also inserts a row into
// an audit table in the same transaction, under the job's row lock, so the
// audit's order for each job is the order its writes committed: the order
// the drill's checkers need.
package pgjobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/drill/jobs"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
)

// Storage is a jobs.Storage on PostgreSQL.
type Storage struct {
	pool      *pgxpool.Pool
	name      string // the jobs table; the audit table is name_writes
	table     *pgfence.Table
	noFencing bool
}

var _ jobs.Storage = (*Storage)(nil)

// New returns a Storage on pool whose tables are name and name_writes. Init
// drops and creates them: give a name no application uses.
func New(pool *pgxpool.Pool, name string) (*Storage, error) {
	t, err := pgfence.NewTable(name, "key", fence.WithMode(fence.SameHolder))
	if err != nil {
		return nil, err
	}
	return &Storage{pool: pool, name: pgx.Identifier{name}.Sanitize(), table: t}, nil
}

func (s *Storage) writes() string { return s.name[:len(s.name)-1] + `_writes"` }

// Init implements jobs.Storage: fresh tables with every job queued.
func (s *Storage) Init(ctx context.Context, keys []string, noFencing bool) error {
	s.noFencing = noFencing
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s, %[2]s;
CREATE TABLE %[1]s (key text PRIMARY KEY, state text NOT NULL);
CREATE TABLE %[2]s (seq bigserial PRIMARY KEY, job text NOT NULL, fence bigint NOT NULL, worker int NOT NULL, state text NOT NULL)`,
		s.name, s.writes()))
	if err != nil {
		return fmt.Errorf("pgjobs: create tables: %w", err)
	}
	if err := s.table.Migrate(ctx, s.pool); err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (key, state) SELECT unnest($1::text[]), $2`, s.name), keys, jobs.Queued)
	if err != nil {
		return fmt.Errorf("pgjobs: insert jobs: %w", err)
	}
	return nil
}

// Attach implements jobs.Storage: the tables exist (another process ran
// Init); this process only needs to know the negative control's setting.
func (s *Storage) Attach(ctx context.Context, noFencing bool) error {
	s.noFencing = noFencing
	var n int
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s`, s.name)).Scan(&n); err != nil {
		return fmt.Errorf("pgjobs: attach to %s: %w", s.name, err)
	}
	return nil
}

// inTx runs fn on job's locked row with the fence checked and raised, or,
// under the NoFencing control, with the row locked and no check.
func (s *Storage) inTx(ctx context.Context, job string, f int64, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if !s.noFencing {
		return s.table.InTx(ctx, s.pool, job, f, fn)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`SELECT 1 FROM %s WHERE key = $1 FOR UPDATE`, s.name), job); err != nil {
			return err
		}
		if err := fn(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET fence_token = greatest(fence_token, $2) WHERE key = $1`, s.name), job, f)
		return err
	})
}

func (s *Storage) audit(ctx context.Context, tx pgx.Tx, worker int, job string, f int64, state string) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (job, fence, worker, state) VALUES ($1, $2, $3, $4)`, s.writes()), job, f, worker, state)
	return err
}

// Claim implements jobs.Storage.
func (s *Storage) Claim(ctx context.Context, worker int, job string, f int64) (string, error) {
	var state string
	err := s.inTx(ctx, job, f, func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT state FROM %s WHERE key = $1`, s.name), job).Scan(&state); err != nil {
			return err
		}
		return s.audit(ctx, tx, worker, job, f, "")
	})
	return state, err
}

// Write implements jobs.Storage.
func (s *Storage) Write(ctx context.Context, worker int, job string, f int64, state string) error {
	return s.inTx(ctx, job, f, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET state = $2 WHERE key = $1`, s.name), job, state); err != nil {
			return err
		}
		return s.audit(ctx, tx, worker, job, f, state)
	})
}

// Pick implements jobs.Storage.
func (s *Storage) Pick(ctx context.Context, state string) (string, error) {
	var key string
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT key FROM %s WHERE state = $1 ORDER BY random() LIMIT 1`, s.name), state).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return key, err
}

// InState implements jobs.Storage.
func (s *Storage) InState(ctx context.Context, state string) ([]string, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT key FROM %s WHERE state = $1`, s.name), state)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Remaining implements jobs.Storage.
func (s *Storage) Remaining(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE state NOT IN ($1, $2)`, s.name), jobs.Done, jobs.Failed).Scan(&n)
	return n, err
}

// Log implements jobs.Storage: the audit, in commit order for each job.
func (s *Storage) Log(ctx context.Context) ([]jobs.Write, error) {
	rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT seq, job, fence, worker, state FROM %s ORDER BY seq`, s.writes()))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobs.Write, error) {
		var w jobs.Write
		err := row.Scan(&w.Seq, &w.Job, &w.Fence, &w.Worker, &w.State)
		return w, err
	})
}
