package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/driver"
)

// The forced releases' statements: %[1]s is the lease table, %[2]s the
// audit table, %[3]s the audit index's name.
const (
	migrateAuditSQL = `CREATE TABLE IF NOT EXISTS %[2]s (
	id        bigserial PRIMARY KEY,
	at        timestamptz NOT NULL DEFAULT now(),
	key       text NOT NULL,
	holder    text NOT NULL,
	token     text NOT NULL,
	fence     bigint NOT NULL,
	reason    text NOT NULL,
	forced_by text NOT NULL
)`
	migrateAuditIndexSQL = `CREATE INDEX IF NOT EXISTS %[3]s ON %[2]s (key, at)`

	// forceSelectSQL locks the held row, so the lease it reads is the one
	// forceSQL clears.
	forceSelectSQL = `SELECT token, fence FROM %[1]s
 WHERE key = $1 AND token IS NOT NULL AND expires_at > now() FOR UPDATE`

	// The records' times come back in microseconds since the Unix epoch
	// (microsOpen, microsClose), as the TTLs do: in pgx's exec and
	// simple-protocol modes a timestamp's text form follows the session's
	// DateStyle, and pgx reads only the ISO style.

	// forceSQL clears the owner as releaseSQL does, records it, and queues
	// a notification, delivered at commit: the wake-up of the queue's live
	// head (turnPayload; %[3]s is the waiters table), or the key alone for
	// watches of the key (WatchReleases) when no one is queued. A forced
	// release is rare, so it always notifies.
	forceSQL = `WITH cleared AS (
	UPDATE %[1]s SET token = NULL, expires_at = NULL WHERE key = $1 RETURNING key
), logged AS (
	INSERT INTO %[2]s (key, holder, token, fence, reason, forced_by)
	SELECT key, $2, $3, $4, $5, $6 FROM cleared
	RETURNING at
)
SELECT ` + microsOpen + `at` + microsClose + `, pg_notify($7, coalesce((SELECT ` + turnPayload + ` FROM (
	SELECT token FROM (
		SELECT token, seq, deadline FROM %[3]s WHERE key = $1 ORDER BY seq LIMIT 17
	) f WHERE deadline > now() ORDER BY seq LIMIT 1) h), $1))
  FROM logged`

	auditSQL = `SELECT ` + microsOpen + `at` + microsClose + `, key, holder, token, fence, reason, forced_by FROM %[2]s
 WHERE $1 = '' OR key = $1
 ORDER BY at DESC, id DESC
 LIMIT $2`
)

// ForceRelease implements driver.ForceReleaser in one transaction of two
// statements, on the database's clock. Records are rows of the audit table
// (see Migrate), kept until deleted.
func (s *Store) ForceRelease(ctx context.Context, key, reason, by string) (driver.AuditRecord, error) {
	if err := driver.ValidateForceRelease(key, reason, by); err != nil {
		return driver.AuditRecord{}, err
	}
	var rec driver.AuditRecord
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var (
			token string
			fence int64
		)
		if err := tx.QueryRow(ctx, s.forceSelectSQL, key).Scan(&token, &fence); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return driver.ErrNotOwned
			}
			return err
		}
		rec = driver.NewAuditRecord(time.Time{}, key, token, fence, reason, by)
		var at int64
		err := tx.QueryRow(ctx, s.forceSQL, key, rec.Holder, rec.Token, rec.Fence, reason, by, s.channel).Scan(&at, nil)
		rec.Time = time.UnixMicro(at)
		return err
	})
	switch {
	case errors.Is(err, driver.ErrNotOwned):
		return driver.AuditRecord{}, err
	case err != nil:
		return driver.AuditRecord{}, s.opError(fmt.Sprintf("force release %q", key), err)
	}
	return rec, nil
}

// Audit implements driver.ForceReleaser in one statement, newest first by
// the database's clock.
func (s *Store) Audit(ctx context.Context, key string, limit int) ([]driver.AuditRecord, error) {
	if err := driver.ValidateAudit(key, limit); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.auditSQL, key, limit)
	if err != nil {
		return nil, s.opError("audit", err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.AuditRecord, error) {
		var (
			a  driver.AuditRecord
			at int64
		)
		err := r.Scan(&at, &a.Key, &a.Holder, &a.Token, &a.Fence, &a.Reason, &a.By)
		a.Time = time.UnixMicro(at)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: audit: %w", err)
	}
	if recs == nil {
		recs = []driver.AuditRecord{}
	}
	return recs, nil
}
