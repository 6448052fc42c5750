package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
)

// pgListSQL reads one page of held locks, in key order, after the key $2.
// %s is the quoted table. The WHERE clause is pgstore's own definition of
// held (a token, and an expiry in the database's future).
const pgListSQL = `SELECT key, token, fence, expires_at - now()
  FROM %s
 WHERE key LIKE $1 ESCAPE '\' AND key > $2 AND token IS NOT NULL AND expires_at > now()
 ORDER BY key
 LIMIT $3`

// openPostgres makes a backend on the PostgreSQL database at dsn, whose
// pgstore keeps its leases in table. The pool holds at most two
// connections: the commands run one statement at a time.
func openPostgres(ctx context.Context, dsn, table string, timeout time.Duration) (*backend, error) {
	if dsn == "" {
		return nil, usagef("--postgres needs a DSN, such as postgres://user@127.0.0.1:5432/db")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, usagef("--postgres: %v", err) // pgconn leaves the password out
	}
	cfg.MaxConns = 2
	if cc := cfg.ConnConfig; cc.ConnectTimeout == 0 || cc.ConnectTimeout > timeout {
		cc.ConnectTimeout = timeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, usagef("--postgres: %v", err)
	}
	st, err := pgstore.New(pool, pgstore.WithTable(table))
	if err != nil {
		pool.Close()
		return nil, err
	}
	cc := cfg.ConnConfig
	b := &backend{
		kind:    "postgres",
		where:   net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))) + "/" + cc.Database,
		timeout: timeout,
		store:   &pgTableHint{Store: st, table: table},
		close:   func() { st.Close(); pool.Close() },
	}
	quoted := pgx.Identifier(strings.Split(table, ".")).Sanitize()
	b.list = func(ctx context.Context, pattern string, pageSize int, emit func(leasehold.Info) bool) error {
		return pgList(ctx, b, pool, quoted, table, pattern, pageSize, emit)
	}
	return b, nil
}

// pgList pages through the held locks whose key matches pattern (translated
// to LIKE), pageSize rows per statement, in key order (keyset pagination, so
// each page is an index range scan, never an OFFSET).
func pgList(ctx context.Context, b *backend, pool *pgxpool.Pool, quoted, table, pattern string, pageSize int, emit func(leasehold.Info) bool) error {
	like := compileGlob(pattern).like
	query := fmt.Sprintf(pgListSQL, quoted)
	after := ""
	for {
		var page []leasehold.Info
		err := b.call(ctx, func(ctx context.Context) error {
			rows, err := pool.Query(ctx, query, like, after, pageSize)
			if err != nil {
				return tableHint(err, table)
			}
			page, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (leasehold.Info, error) {
				info := leasehold.Info{Held: true}
				err := row.Scan(&info.Key, &info.Token, &info.Fence, &info.TTL)
				return info, err
			})
			return tableHint(err, table)
		})
		if err != nil {
			return err
		}
		for _, info := range page {
			if !emit(info) {
				return nil
			}
		}
		if len(page) < pageSize {
			return nil
		}
		after = page[len(page)-1].Key
	}
}

// pgTableHint is pgstore's Store with a clearer error when its table is
// missing.
type pgTableHint struct {
	*pgstore.Store
	table string
}

// Inspect is pgstore's, with tableHint on its error.
func (s *pgTableHint) Inspect(ctx context.Context, key string) (leasehold.Info, error) {
	info, err := s.Store.Inspect(ctx, key)
	return info, tableHint(err, s.table)
}

// tableHint turns PostgreSQL's "relation does not exist" into the likely
// cause.
func tableHint(err error, table string) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("table %q does not exist (another --pg-table, or pgstore's Migrate never ran on this database): %w", table, err)
	}
	return err
}
