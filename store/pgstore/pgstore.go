package pgstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/driver"
)

// DefaultTable is the table New uses without WithTable. It carries the
// library's name so that it cannot be mistaken for, or clash with, an
// application's own tables, and it lives in the connection's search_path
// like the application's tables do.
const DefaultTable = "leasehold_leases"

// maxIdentLen is PostgreSQL's limit on an identifier (NAMEDATALEN − 1 bytes).
// Longer table names are truncated by the server and longer notification
// channels are refused by pg_notify, so New rejects them instead.
const maxIdentLen = 63

var (
	_ driver.Store           = (*Store)(nil)
	_ driver.ReleaseNotifier = (*Store)(nil)
	_ driver.Lister          = (*Store)(nil)
	_ driver.ForceReleaser   = (*Store)(nil)
	_ driver.Queuer          = (*Store)(nil)
)

// Option configures New.
type Option func(*config)

type config struct {
	table   string
	channel string // "" until set: then it follows the table
}

// WithTable sets the table that holds the leases, optionally
// schema-qualified ("locks.leases"). Default: DefaultTable,
// "leasehold_leases", in the connection's search_path. Name it per
// application when several share a database and must not share locks.
func WithTable(name string) Option {
	return func(c *config) { c.table = name }
}

// WithChannel sets the LISTEN/NOTIFY channel on which releases are announced
// (at most 63 bytes). Default: the table name as given to WithTable, so that
// stores on different tables never wake each other's waiters; set it when
// the table name is longer than 63 bytes.
func WithChannel(name string) Option {
	return func(c *config) { c.channel = name }
}

// Store is a driver.Store on PostgreSQL: one row per key in a table made
// by Migrate. It is safe for concurrent use.
type Store struct {
	pool    *pgxpool.Pool
	table   string // as given, for messages
	channel string

	migrateSQL, migrateQueuedSQL, acquireSQL, acquireQueueSQL, acquireQueuedSQL, releaseSQL, renewSQL, inspectSQL, listSQL string

	// waiters is the waiter queues' table (see waitersName), and its
	// statements.
	waiters                     string
	migrateWaitersSQL, leaveSQL string

	// wake is the release's wake-up function (see wakeName and
	// migrateWakeSQL), its body, and the statement that makes it.
	wake, wakeBody, migrateWakeSQL string

	// held is the plain acquire's read of a refusal (see heldName and
	// migrateHeldSQL), its body, and the statement that makes it.
	held, heldBody, migrateHeldSQL string

	// audit is the forced-release records' table, table + "_audit" (see
	// auditName), and its statements.
	audit                                                                     string
	migrateAuditSQL, migrateAuditIndexSQL, forceSelectSQL, forceSQL, auditSQL string

	// The objects Migrate makes (see migrate.go), the schema of a
	// schema-qualified table ("" when the search_path decides), and what a
	// missing table's error tells to do.
	steps       []migrationStep
	schema      string
	missingHint string

	listener *listener
}

// New returns a Store that keeps its leases in pool's database. It does not
// touch the database: call Migrate once (at deployment or start-up, and after
// an upgrade) to create the tables.
//
// The Store does not own the pool: Close the Store before the pool. Lock
// operations run on pooled connections; release notifications are read on
// one extra connection per Store, opened with the pool's configuration on
// the first WatchReleases (see WatchReleases). That connection needs a
// session of its own, so it must reach PostgreSQL directly or through a
// session-pooling proxy: LISTEN does not work through transaction pooling.
//
// New returns an *driver.ArgumentError for a nil pool or a table or
// channel name PostgreSQL would not take as it is (empty, longer than 63
// bytes, with NUL or bytes that are not UTF-8, a table with more than one
// dot, or in a temporary schema, which each connection has its own of); a
// nil option is skipped.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, &driver.ArgumentError{Arg: "pool", Reason: "nil"}
	}
	s, err := build(opts)
	if err != nil {
		return nil, err
	}
	s.pool = pool
	s.listener = newListener(pool, s.channel)
	return s, nil
}

// build is New without the pool: the Store's names and statements.
func build(opts []Option) (*Store, error) {
	c := config{table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.channel == "" {
		c.channel = c.table
	}
	parts := strings.Split(c.table, ".")
	if len(parts) > 2 {
		return nil, &driver.ArgumentError{Arg: "table", Reason: fmt.Sprintf("%q has more than one dot", c.table)}
	}
	for _, p := range parts {
		if err := checkIdent("table", c.table, p); err != nil {
			return nil, err
		}
	}
	if len(parts) == 2 && isTempSchema(parts[0]) {
		// pg_temp is each session's own schema: every pooled connection
		// would have a lock table of its own, and no lock would exclude.
		return nil, &driver.ArgumentError{Arg: "table", Reason: fmt.Sprintf("%q is in a temporary schema, which each connection has its own of", c.table)}
	}
	if err := checkIdent("channel", c.channel, c.channel); err != nil {
		return nil, err
	}
	t := pgx.Identifier(parts).Sanitize()
	waiterParts := slices.Clone(parts)
	waiterParts[len(parts)-1] = waitersName(parts[len(parts)-1])
	w := pgx.Identifier(waiterParts).Sanitize()
	wakeParts := slices.Clone(parts)
	wakeParts[len(parts)-1] = wakeName(parts[len(parts)-1])
	fn := pgx.Identifier(wakeParts).Sanitize()
	heldParts := slices.Clone(parts)
	heldParts[len(parts)-1] = heldName(parts[len(parts)-1])
	h := pgx.Identifier(heldParts).Sanitize()
	s := &Store{
		table:             c.table,
		channel:           c.channel,
		migrateSQL:        fmt.Sprintf(migrateSQL, t),
		migrateQueuedSQL:  fmt.Sprintf(migrateQueuedSQL, t),
		acquireSQL:        fmt.Sprintf(acquireSQL, t, w, h),
		acquireQueueSQL:   fmt.Sprintf(acquireQueueSQL, t, w),
		acquireQueuedSQL:  fmt.Sprintf(acquireQueuedSQL, t, w),
		releaseSQL:        fmt.Sprintf(releaseSQL, t, fn),
		wake:              strings.Join(wakeParts, "."),
		wakeBody:          fmt.Sprintf(wakeBody, t, w),
		held:              strings.Join(heldParts, "."),
		heldBody:          fmt.Sprintf(heldBody, t),
		renewSQL:          fmt.Sprintf(renewSQL, t),
		inspectSQL:        fmt.Sprintf(inspectSQL, t),
		listSQL:           fmt.Sprintf(listSQL, t),
		waiters:           strings.Join(waiterParts, "."),
		migrateWaitersSQL: fmt.Sprintf(migrateWaitersSQL, w),
		leaveSQL:          fmt.Sprintf(leaveSQL, t, w),
	}
	s.migrateWakeSQL = fmt.Sprintf(migrateWakeSQL, fn, sqlString(s.wakeBody))
	s.migrateHeldSQL = fmt.Sprintf(migrateHeldSQL, h, sqlString(s.heldBody))
	auditParts := slices.Clone(parts)
	auditParts[len(parts)-1] = auditName(parts[len(parts)-1])
	s.audit = strings.Join(auditParts, ".")
	a := pgx.Identifier(auditParts).Sanitize()
	s.migrateAuditSQL = fmt.Sprintf(migrateAuditSQL, t, a)
	s.migrateAuditIndexSQL = fmt.Sprintf(migrateAuditIndexSQL, t, a, pgx.Identifier{auditIndexName(auditParts[len(parts)-1])}.Sanitize())
	s.forceSelectSQL = fmt.Sprintf(forceSelectSQL, t, a)
	s.forceSQL = fmt.Sprintf(forceSQL, t, a, w)
	s.auditSQL = fmt.Sprintf(auditSQL, t, a)
	s.planMigration(parts, waiterParts, wakeParts, heldParts, auditParts)
	return s, nil
}

func checkIdent(arg, whole, part string) error {
	switch {
	case part == "":
		return &driver.ArgumentError{Arg: arg, Reason: fmt.Sprintf("%q has an empty name", whole)}
	case len(part) > maxIdentLen:
		return &driver.ArgumentError{Arg: arg, Reason: fmt.Sprintf("%q is longer than %d bytes", whole, maxIdentLen)}
	case strings.ContainsRune(part, 0):
		return &driver.ArgumentError{Arg: arg, Reason: fmt.Sprintf("%q contains NUL", whole)}
	case !utf8.ValidString(part):
		// PostgreSQL refuses it where it is bound as a parameter (the
		// channel of pg_notify) and may convert it where it is not: the
		// Store would name other objects than it checks.
		return &driver.ArgumentError{Arg: arg, Reason: fmt.Sprintf("%q is not valid UTF-8", whole)}
	}
	return nil
}

// The statements, with %[1]s standing for the quoted lease table and %[2]s
// for the quoted waiters table. Every lock operation is one statement: one
// round trip, atomic on its own, timed by the database's clock (now() is the
// statement's transaction start).
//
// The waiters table holds the FIFO queue of each key's waiters
// (driver.Queuer): one row per waiting Acquire, by arrival (seq), valid until
// deadline. Its head is the oldest row whose deadline has not passed.
const (
	// remainingSQL is a row's expires_at - now(), the holder's remaining
	// TTL, in microseconds (microsSQL), also for a row someone pinned by
	// hand at 'infinity' (or '-infinity'), whose difference PostgreSQL
	// refuses ("cannot subtract infinite timestamps"): 100 years (or minus
	// that), which a Go time.Duration holds. NULL stays NULL.
	remainingSQL = `(CASE WHEN isfinite(expires_at) THEN ` + microsOpen + `expires_at - now()` + microsClose + `
	 WHEN expires_at > now() THEN 3153600000000000
	 WHEN expires_at < now() THEN -3153600000000000 END)`

	// microsOpen and microsClose wrap an interval into its microseconds, a
	// bigint: every TTL a statement returns is one, scanned as a number
	// (remaining). An interval's text form, which pgx reads in the exec and
	// simple-protocol modes (as behind PgBouncer's transaction pooling),
	// follows the session's IntervalStyle, and pgx reads only the default
	// style's. extract(epoch …) is exact (numeric) since PostgreSQL 14, and a
	// double, exact to the microsecond for these values, before.
	microsOpen  = `(extract(epoch FROM `
	microsClose = `) * 1000000)::bigint`

	migrateSQL = `CREATE TABLE IF NOT EXISTS %[1]s (
	key        text PRIMARY KEY,
	token      text,
	fence      bigint NOT NULL,
	expires_at timestamptz,
	queued     boolean NOT NULL DEFAULT false
)`

	// migrateQueuedSQL adds the queued column to a lease table made before
	// it; Migrate runs it only when the column is missing (ALTER TABLE takes
	// the table's strongest lock, however briefly).
	migrateQueuedSQL = `ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS queued boolean NOT NULL DEFAULT false`

	// migrateWaitersSQL makes the waiters table; %[1]s is its quoted
	// name. The primary key's index is the one every queue read walks.
	migrateWaitersSQL = `CREATE TABLE IF NOT EXISTS %[1]s (
	key      text NOT NULL,
	seq      bigint GENERATED ALWAYS AS IDENTITY,
	token    text NOT NULL,
	deadline timestamptz NOT NULL,
	PRIMARY KEY (key, seq),
	UNIQUE (key, token)
)`

	// turnPayload is the notification that wakes h.token, the head of
	// key $1's queue: a byte no key starts with (keys have no control
	// characters), the hex SHA-256 of key, that byte and the token, and
	// the key. The token itself never travels: any session of the database
	// may LISTEN on any channel, and a token is what Release and Renew take.
	// The Store of the head's waiter finds its watch by the hash
	// (turnID); watches of the key (WatchReleases) are woken by the key.
	turnPayload = `chr(1) || encode(sha256(convert_to($1 || chr(1) || h.token, 'UTF8')), 'hex') || $1`

	// queueHead is the token of the live head of key $1's queue, other
	// than $2 (a releaser's token, never queued; a leaver's, whose row the
	// statement's snapshot still shows).
	queueHead = `SELECT token FROM %[2]s
	 WHERE key = $1 AND token <> $2 AND deadline > now() ORDER BY seq LIMIT 1`

	// queueAhead has a row when a live waiter other than $2 is ahead of
	// $2's row in key $1's queue, or anywhere in it when $2 has no row:
	// then $2 may not take the key. $2's own row counts as live, its
	// caller being alive and calling now.
	queueAhead = `SELECT FROM %[2]s o
	 WHERE o.key = $1 AND o.token <> $2 AND o.deadline > now()
	   AND o.seq < coalesce((SELECT m.seq FROM %[2]s m WHERE m.key = $1 AND m.token = $2), 9223372036854775807)`

	// fenceSteps takes a free key (no row, or a released or expired one)
	// and raises its fence in the same row to max(last fence + 1, the
	// database clock in microseconds since the Unix epoch): after a
	// failover to a replica that missed the last commits, or a restore,
	// the row is older or gone and the clock carries the fence past the
	// ones issued before (see "The clock condition" in the package doc).
	// extract(epoch …) is numeric since PostgreSQL 14, so the microseconds
	// are exact; before 14 it is a double, exact to well under a
	// microsecond for dates this century. {where} is a condition for
	// trying at all, {take} a further one on the row, {set} what else
	// taking it sets.
	//
	// Every acquire that tries locks the key's row (ON CONFLICT DO UPDATE
	// locks the row before it judges the WHERE), so the acquires of a key
	// run one after another, and any read from the statement's snapshot can
	// only let through a caller that the row then judges again.
	fenceSteps = `WITH acquired AS (
	INSERT INTO %[1]s AS l (key, token, fence, expires_at)
	SELECT $1, $2, floor(extract(epoch FROM now()) * 1000000)::bigint, now() + $3::interval{where}
	ON CONFLICT (key) DO UPDATE
	   SET token = EXCLUDED.token, fence = greatest(l.fence + 1, EXCLUDED.fence), expires_at = EXCLUDED.expires_at{set}
	 WHERE (l.expires_at IS NULL OR l.expires_at <= now()){take}
	RETURNING l.fence
)`

	// acquireSQL (acquireTail) is a plain Acquire when no waiter has queued
	// for the key since the last waiter took it: it takes the key only if the
	// row's queued flag is off, and touches no other table, so the common
	// case, a key no one waits for, is one statement on one row. Its second
	// column, only for a refusal, is the held function's answer (%[3]s,
	// heldBody) in microseconds, read from the statement's snapshot: the
	// holder's remaining TTL, or 0 for a free key whose flag is on, which the Store then asks
	// for again with acquireQueueSQL, reading the queue (a second round
	// trip, only while waiters queue or have queued). It is NULL in the rare
	// race where the holder's row was written after the statement started;
	// the caller then gets a HeldError without a TTL.
	//
	// The read is a function call, not a subquery, because PostgreSQL sets
	// up every subquery of a statement when it starts, whether or not it
	// runs: a second read of the lease table in the statement, even under
	// CASE WHEN, cost every acquire, taken or not, 2–3 µs of server CPU at 16
	// connections (docs/design.md §5), and a function call costs that only
	// when it is made.
	acquireTail = `
SELECT a.fence, CASE WHEN a.fence IS NULL THEN ` + microsOpen + `%[3]s($1)` + microsClose + ` END
  FROM (SELECT (SELECT fence FROM acquired) AS fence) a`

	// migrateHeldSQL makes the held function %[1]s(key), whose body, %[2]s,
	// is heldBody as a string literal: for a plain acquire's refusal, the
	// remaining TTL of key's holder (100 years for a row pinned at
	// 'infinity', as remainingSQL has it), 0 when key is free but its queued
	// flag is on, NULL when it is free and not flagged or has no row. STABLE, so
	// that it reads from the snapshot of the statement that calls it, as the
	// subquery it replaced did (a VOLATILE function would take a snapshot of
	// its own for its read), and PL/pgSQL, so that PostgreSQL plans its read once per
	// session and runs it only when it is called. It names the lease table
	// as the statements name it, and Migrate replaces a function whose body
	// is not this version's, as it does the wake-up function's.
	migrateHeldSQL = `CREATE OR REPLACE FUNCTION %[1]s(text) RETURNS interval
LANGUAGE plpgsql STABLE AS %[2]s`
	heldBody = `
BEGIN
	RETURN (SELECT CASE WHEN expires_at > now() AND isfinite(expires_at) THEN expires_at - now()
	                    WHEN expires_at > now() THEN interval '36500 days'
	                    WHEN queued THEN interval '0' END
	          FROM %[1]s WHERE key = $1);
END
`

	// acquireQueueSteps take the key only if no live waiter is queued
	// ahead of $2 (queueAhead, queueTake): a plain Acquire does not jump
	// the queue.
	// In the same statement the winner's row goes (served), and the
	// queued flag goes off if no other live waiter is queued and the row
	// has not been written since the statement's snapshot (its xmin is the
	// snapshot's): every waiter's attempt writes the row (flagged, below),
	// creating it if need be, so a waiter the snapshot misses keeps the
	// flag on.
	acquireQueueSteps = `, served AS (
	DELETE FROM %[2]s WHERE key = $1 AND token = $2 AND EXISTS (SELECT FROM acquired)
)`
	queueTake = `
	 WHERE NOT EXISTS (` + queueAhead + `)`
	queueUnflag = `,
	       queued = l.queued AND (l.xmin IS DISTINCT FROM (SELECT s.xmin FROM %[1]s s WHERE s.key = $1)
	                              OR EXISTS (SELECT FROM %[2]s o WHERE o.key = $1 AND o.token <> $2 AND o.deadline > now()))`

	// acquireQueueSQL (acquireQueueTail) is acquireSQL reading the queue:
	// a plain Acquire of a free key whose row is flagged.
	acquireQueueTail = acquireQueueSteps + `
SELECT (SELECT fence FROM acquired),
       (SELECT ` + remainingSQL + ` FROM %[1]s WHERE key = $1)`

	// acquireQueuedSQL (acquireQueuedTail) is acquireQueueSQL for a waiter:
	// refused, the caller joins the back of the queue or keeps its place, its
	// row valid for $5 from now (joined), and turns the key's queued flag on
	// (flagged), writing the row even when it is on already; and the second
	// column is NULL for a caller behind the head (it has no reason to try at
	// the holder's expiry). It also deletes up to 16 expired rows of the key's
	// queue, the oldest first (pruned): the waiters' polls collect the rows of
	// waiters that died. A poll locks its own queue row (joined), then the
	// lease row (flagged, which pruned's filter makes run first, and which
	// acquired may have locked already), and then skips the rows another
	// statement has locked: two late waiters pruning each other's rows while
	// each refreshes its own, or an acquire deleting its own row (served,
	// after it locked the lease row) that a poll would prune, wait for one
	// another at most one way, never in a deadlock. And its third column is a
	// wake-up of the head, sent when the key is free and the caller was
	// refused for it: the head may have missed its wake-up. A plain Acquire
	// does neither, and pays nothing for them.
	acquireQueuedTail = acquireQueueSteps + `, joined AS (
	INSERT INTO %[2]s (key, token, deadline)
	SELECT $1, $2, now() + $5::interval WHERE NOT EXISTS (SELECT FROM acquired)
	ON CONFLICT (key, token) DO UPDATE SET deadline = EXCLUDED.deadline
	RETURNING 1
), flagged AS (
	INSERT INTO %[1]s AS f (key, fence, queued)
	SELECT $1, 0, true WHERE EXISTS (SELECT FROM joined)
	ON CONFLICT (key) DO UPDATE SET queued = true
	RETURNING 1
), pruned AS (
	DELETE FROM %[2]s WHERE key = $1 AND seq = ANY (ARRAY(
		SELECT seq FROM %[2]s
		 WHERE key = $1 AND token <> $2 AND deadline <= now() AND (SELECT count(*) FROM flagged) >= 0
		 ORDER BY seq LIMIT 16 FOR UPDATE SKIP LOCKED))
)
SELECT a.fence,
       CASE WHEN a.fence IS NULL AND NOT EXISTS (` + queueAhead + `)
            THEN (SELECT ` + remainingSQL + ` FROM %[1]s WHERE key = $1) END,
       ` + acquireWake + `
  FROM (SELECT (SELECT fence FROM acquired) AS fence) a`

	// acquireWake is acquireQueuedSQL's wake-up of the head.
	acquireWake = `(SELECT pg_notify($4, ` + turnPayload + `) FROM (` + queueHead + `) h
         WHERE a.fence IS NULL
           AND NOT EXISTS (SELECT FROM %[1]s WHERE key = $1 AND expires_at > now()))`

	// releaseSQL clears the owner but keeps the row, so the fence goes on
	// rising, and, only when the row's queued flag is on, calls the wake-up
	// function (%[2]s, migrateWakeSQL), which queues a notification that
	// wakes the queue's live head (turnPayload), delivered when the
	// statement commits. A release nobody waits for sends nothing: no
	// NOTIFY, so no commit under the cluster-wide notification queue lock.
	// The head lookup is in a function, not in the statement, because
	// PostgreSQL sets up every subquery of a statement when it starts,
	// whether or not it runs, and locks every table the statement names: a
	// lookup of the waiters table under CASE WHEN queued cost every
	// release 5–15 µs of server CPU (docs/design.md §5); a function call
	// costs that only when it is made. One row updated means released.
	releaseSQL = `UPDATE %[1]s SET token = NULL, expires_at = NULL
 WHERE key = $1 AND token = $2 AND expires_at > now()
RETURNING CASE WHEN queued THEN %[2]s($1, $2, $3) END`

	// migrateWakeSQL makes the wake-up function %[1]s(key, releaser,
	// channel), whose body, %[2]s, is wakeBody as a string literal: it
	// notifies the live head of key's queue other than releaser on
	// channel. PL/pgSQL, so that PostgreSQL plans its lookup once per
	// session and runs it only when the function is called. Its body
	// names the waiters table as the statements name it (schema-qualified
	// when the lease table is), so they resolve alike. Migrate replaces a
	// function whose body is not this version's.
	migrateWakeSQL = `CREATE OR REPLACE FUNCTION %[1]s(text, text, text) RETURNS void
LANGUAGE plpgsql AS %[2]s`
	wakeBody = `
BEGIN
	PERFORM pg_notify($3, ` + turnPayload + `)
	   FROM (` + queueHead + `) h;
END
`

	// leaveSQL takes $2's row out of key $1's queue and, when it was
	// there and the key is free, wakes the queue's next live head.
	leaveSQL = `WITH gone AS (
	DELETE FROM %[2]s WHERE key = $1 AND token = $2 RETURNING key
)
SELECT pg_notify($3, ` + turnPayload + `)
  FROM (` + queueHead + `) h
 WHERE EXISTS (SELECT FROM gone)
   AND NOT EXISTS (SELECT FROM %[1]s WHERE key = $1 AND expires_at > now())`

	renewSQL = `UPDATE %[1]s SET expires_at = now() + $3::interval
 WHERE key = $1 AND token = $2 AND expires_at > now()`

	inspectSQL = `SELECT fence,
       CASE WHEN expires_at > now() THEN token END,
       CASE WHEN expires_at > now() THEN ` + remainingSQL + ` END
  FROM %[1]s WHERE key = $1`

	// listSQL reads a page of held locks (inspectSQL's definition of held)
	// after the key $2 whose key is LIKE $1, in the key column's order:
	// keyset pagination on the primary key, never an OFFSET. The escape
	// character is written E'\\' so that it is one backslash whatever the
	// session's standard_conforming_strings.
	listSQL = `SELECT key, token, fence, ` + remainingSQL + `
  FROM %[1]s
 WHERE key LIKE $1 ESCAPE E'\\' AND key > $2 AND token IS NOT NULL AND expires_at > now()
 ORDER BY key
 LIMIT $3`
)

// The acquire statements: fenceSteps with their condition, then their
// tails.
var (
	acquireSQL       = fenceStepsFor("", " AND NOT l.queued", "") + acquireTail
	acquireQueueSQL  = fenceStepsFor(queueTake, "", queueUnflag) + acquireQueueTail
	acquireQueuedSQL = fenceStepsFor(queueTake, "", queueUnflag) + acquireQueuedTail
)

// fenceStepsFor is fenceSteps with its conditions where and take, also
// setting set.
func fenceStepsFor(where, take, set string) string {
	return strings.NewReplacer("{where}", where, "{take}", take, "{set}", set).Replace(fenceSteps)
}

// queuePrune is the most expired rows of a key's queue that one queued
// acquire deletes (acquireQueuedSQL spells it as a literal). It bounds the
// writes of one statement however many waiters died at once: K dead rows
// take ceil(K / 16) polls of the key's waiters to clear. Expired rows not
// yet deleted are only skipped: reading past one costs an index entry. It
// matches redisstore's LH_TRIM.
const queuePrune = 16

// waitersName is the name of the waiters table that goes with the lease
// table named table (its last part): table + "_waiters", or, when that is
// longer than PostgreSQL's identifiers may be, "leasehold_waiters_" and 32
// hex digits of the name's SHA-256, so that a long table name still locks
// and two long names never share a queue.
func waitersName(table string) string { return companionName(table, "waiters") }

// wakeName is the name of the release's wake-up function that goes with the
// lease table named table, as waitersName names the waiters table.
func wakeName(table string) string { return companionName(table, "wake") }

// heldName is the name of the plain acquire's held function that goes with
// the lease table named table, as waitersName names the waiters table.
func heldName(table string) string { return companionName(table, "held") }

// auditName is the name of the forced releases' audit table that goes with
// the lease table named table, as waitersName names the waiters table. (A
// version before it made none for a name of 58 bytes or more, so no
// existing audit table is renamed.)
func auditName(table string) string { return companionName(table, "audit") }

// companionName is table + "_" + what, or "leasehold_" + what + "_" and 32
// hex digits of table's SHA-256 when that is too long for an identifier.
func companionName(table, what string) string {
	if name := table + "_" + what; len(name) <= maxIdentLen {
		return name
	}
	sum := sha256.Sum256([]byte(table))
	return "leasehold_" + what + "_" + hex.EncodeToString(sum[:16])
}

// auditIndexName is the name of the index on (key, at) of the audit table
// named audit: audit + "_key_at". PostgreSQL cuts a name longer than its
// identifiers to their length, and the indexes of audit tables of 57–62
// bytes have the names it cut them to. An audit table of 63 bytes (a lease
// table of 57) would give its index its own name, and CREATE INDEX IF NOT
// EXISTS would then make none: that index gets "leasehold_audit_key_at_"
// and 32 hex digits of the audit table's SHA-256 instead.
func auditIndexName(audit string) string {
	if len(audit) < maxIdentLen {
		return audit + "_key_at"
	}
	sum := sha256.Sum256([]byte(audit))
	return "leasehold_audit_key_at_" + hex.EncodeToString(sum[:16])
}

// turnID is the listener's name of the watch of token's turn in key's
// queue: turnPayload without the key.
func turnID(key, token string) string {
	sum := sha256.Sum256([]byte(key + "\x01" + token))
	return "\x01" + hex.EncodeToString(sum[:])
}

// interval converts a TTL to the interval PostgreSQL stores, rounding up to
// whole microseconds, its unit, so the server never holds a lease for less
// time than its owner believes it has. (pgx's own time.Duration encoding
// truncates.)
func interval(ttl time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: int64((ttl + time.Microsecond - 1) / time.Microsecond), Valid: true}
}

// Close stops the connection that carries release notifications, if one was
// opened, and waits for its goroutine. It does not close the pool; lock
// operations keep working. Waiters still blocked on the Store fall back to
// their backoff, and WatchReleases fails from now on. Close may be called
// more than once; it always returns nil.
func (s *Store) Close() error {
	s.listener.close()
	return nil
}

// Acquire implements driver.Store in one statement and one round trip,
// on the database's clock. It returns the new fence; a *driver.HeldError
// carrying the holder's remaining TTL when the key is held, or a TTL of 0
// when the key is free but waiters are queued for it (driver.Queuer: no
// one jumps the queue); an *driver.ArgumentError for bad input (nothing
// is sent then); and any other error, wrapped as "pgstore: acquire", when
// the database could not answer. After such an error the acquire may or may
// not have been applied.
func (s *Store) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	return s.acquire(ctx, key, token, ttl, 0)
}

// AcquireQueued implements driver.Queuer in the one statement of Acquire,
// which also joins or refreshes token's row in the waiters table when
// refused. A refused waiter behind the head gets a *driver.HeldError
// whose Remaining is 0. A stay is capped at
// driver.MaxQueueStay; one below driver.MinTTL is an *driver.ArgumentError.
func (s *Store) AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return 0, err
	}
	stay, err := driver.QueueStay(stay)
	if err != nil {
		return 0, err
	}
	return s.acquire(ctx, key, token, ttl, stay)
}

// acquire runs acquireSQL, and acquireQueueSQL when the key is free but
// flagged (a refusal's remaining TTL of 0, heldBody); a stay > 0 runs
// acquireQueuedSQL, which joins the queue.
func (s *Store) acquire(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, error) {
	var (
		fence     *int64
		remaining *int64 // microseconds
		err       error
	)
	switch {
	case stay > 0:
		err = s.pool.QueryRow(ctx, s.acquireQueuedSQL, key, token, interval(ttl), s.channel, interval(stay)).
			Scan(&fence, &remaining, nil)
	default:
		err = s.pool.QueryRow(ctx, s.acquireSQL, key, token, interval(ttl)).Scan(&fence, &remaining)
		if err == nil && fence == nil && remaining != nil && *remaining == 0 {
			err = s.pool.QueryRow(ctx, s.acquireQueueSQL, key, token, interval(ttl)).Scan(&fence, &remaining)
		}
	}
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == numericOutOfRange {
		// The only arithmetic that can overflow here is the fence's + 1.
		return 0, fmt.Errorf("pgstore: acquire %q: its fence is at %d and cannot rise; nothing was written: %w", key, int64(math.MaxInt64), err)
	}
	if err != nil {
		return 0, s.opError(fmt.Sprintf("acquire %q", key), err)
	}
	if fence != nil {
		return *fence, nil
	}
	held := &driver.HeldError{Key: key}
	if remaining != nil && *remaining > 0 {
		held.Remaining = time.Duration(*remaining) * time.Microsecond
	}
	return 0, held
}

// PostgreSQL's SQLSTATEs this Store tells apart: a number out of range,
// a table, a column and a function that do not exist, and a call that
// matches more than one function (another function of a companion's name:
// Migrate refuses it, naming it).
const (
	numericOutOfRange = "22003" // a bigint past MaxInt64
	undefinedTable    = "42P01"
	undefinedColumn   = "42703"
	undefinedFunction = "42883"
	ambiguousFunction = "42725"
)

// isTempSchema reports whether schema names a session's temporary schema:
// pg_temp, or pg_temp_N as PostgreSQL names it (the Store quotes names, so
// case matters).
func isTempSchema(schema string) bool { return strings.HasPrefix(schema, "pg_temp") }

// opError wraps the error of op, the operation and what it was on
// ("acquire \"k\""). A missing table, column or function is most likely a
// database not migrated, or not since an upgrade that added one (the
// waiters table, the queued column, the wake-up function): the error says
// so, naming what the Store needs and how to make it.
func (s *Store) opError(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == undefinedTable || pe.Code == undefinedColumn || pe.Code == undefinedFunction || pe.Code == ambiguousFunction) {
		return fmt.Errorf("pgstore: %s: %w (%s)", op, err, s.missingHint)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// Release implements driver.Store in one round trip: it clears the owner
// if the key holds token and has not expired, and, when a waiter is queued
// for the key, wakes the queue's head (pg_notify) in the same statement. It
// returns driver.ErrNotOwned when the key is not held with token.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.releaseSQL, key, token, s.channel)
	if err != nil {
		return s.opError(fmt.Sprintf("release %q", key), err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrNotOwned
	}
	return nil
}

// LeaveQueue implements driver.Queuer in one statement and one round trip:
// it deletes token's row from key's queue and, when there was one and the
// key is free, wakes the queue's next head.
func (s *Store) LeaveQueue(ctx context.Context, key, token string) error {
	if err := driver.ValidateRelease(key, token); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.leaveSQL, key, token, s.channel); err != nil {
		return s.opError(fmt.Sprintf("leave the queue of %q", key), err)
	}
	return nil
}

// WatchTurn implements driver.Queuer on the Store's one listening
// connection, as WatchReleases does: the wake-ups of a queue's head carry a
// hash of its key and token (never the token), and only the watch of that
// head is woken. It takes no round trip once the connection listens.
func (s *Store) WatchTurn(ctx context.Context, key, token string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateRelease(key, token); err != nil {
		return nil, nil, err
	}
	return s.listener.watch(ctx, turnID(key, token), key)
}

// Renew implements driver.Store in one round trip: it sets the lease to
// end ttl from now (it may shorten it) if the key holds token and has not
// expired. It returns driver.ErrNotOwned otherwise.
func (s *Store) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := driver.ValidateAcquire(key, token, ttl); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.renewSQL, key, token, interval(ttl))
	if err != nil {
		return s.opError(fmt.Sprintf("renew %q", key), err)
	}
	if tag.RowsAffected() == 0 {
		return driver.ErrNotOwned
	}
	return nil
}

// Inspect implements driver.Store in one round trip. A key never
// acquired has no row and reports the zero Info.
func (s *Store) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	info := driver.Info{Key: key}
	var (
		token *string
		ttl   *int64 // microseconds
	)
	err := s.pool.QueryRow(ctx, s.inspectSQL, key).Scan(&info.Fence, &token, &ttl)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return info, nil
	case err != nil:
		return driver.Info{Key: key}, s.opError(fmt.Sprintf("inspect %q", key), err)
	}
	if token != nil {
		info.Held, info.Token = true, *token
		if ttl != nil && *ttl > 0 {
			info.TTL = time.Duration(*ttl) * time.Microsecond
		}
	}
	return info, nil
}

// WatchReleases implements driver.ReleaseNotifier with LISTEN/NOTIFY. A
// release is announced only when a waiter is queued for the key (a Client's
// waiters always are) and on a forced release: driver.ReleaseNotifier allows
// that of a Queuer.
// All watches of a Store share one connection, which LISTENs on the Store's
// channel once; the key travels in the notification's payload. The first
// watch opens that connection and starts the goroutine that reads it (Close
// stops both).
//
// WatchReleases returns once the connection's LISTEN has been executed, so a
// release committed after it returns is announced to the watch, unless the
// connection breaks first. It returns at once when the connection is
// already listening. It returns an *driver.ArgumentError for a bad key, an
// error when ctx ends before the connection listens (the database may be
// down; the error says why the last attempt failed), and ErrClosed after
// Close.
func (s *Store) WatchReleases(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return s.listener.watch(ctx, key, key)
}

// List implements driver.Lister in one statement per call (more only to read
// past pages of foreign rows, below). Across calls
// the order is the key column's collation (byte order under COLLATE "C"), and
// next is the last key read. The statement filters with LIKE, the pattern
// with ? and each [set] widened to "_%" (one character or more, in any
// encoding), and reads limit + 1 rows; the exact pattern is then applied
// here, so a call may return fewer than limit locks before the end. Rows
// whose key is not a valid lock key (written by another tool) are skipped
// and never given as next: next is the last valid key read, and a call
// whose page held none reads on.
func (s *Store) List(ctx context.Context, pattern, after string, limit int) ([]driver.Info, string, error) {
	g, err := driver.ValidateList(pattern, limit)
	if err != nil {
		return nil, "", err
	}
	if err := driver.ValidateAfterKey(after); err != nil {
		return nil, "", err
	}
	like := g.Coarse(func(r rune) string {
		if r == '%' || r == '_' || r == '\\' {
			return `\` + string(r)
		}
		return string(r)
	}, "%", "_%")
	infos, next := []driver.Info{}, ""
	for {
		rows, err := s.pool.Query(ctx, s.listSQL, like, after, limit+1)
		if err != nil {
			return nil, "", s.opError(fmt.Sprintf("list %q", pattern), err)
		}
		page, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.Info, error) {
			info := driver.Info{Held: true}
			var ttl int64 // microseconds
			err := row.Scan(&info.Key, &info.Token, &info.Fence, &ttl)
			info.TTL = time.Duration(ttl) * time.Microsecond
			return info, err
		})
		if err != nil {
			return nil, "", fmt.Errorf("pgstore: list %q: %w", pattern, err)
		}
		more := len(page) > limit
		if more {
			page = page[:limit]
		}
		for _, info := range page {
			if driver.ValidateKey(info.Key) == nil && g.Match(info.Key) {
				infos = append(infos, info)
			}
		}
		if !more {
			break
		}
		for i := len(page) - 1; i >= 0 && next == ""; i-- {
			if driver.ValidateKey(page[i].Key) == nil {
				next = page[i].Key
			}
		}
		if next != "" {
			break
		}
		after = page[len(page)-1].Key // a page of foreign rows only: read on
	}
	slices.SortFunc(infos, func(a, b driver.Info) int { return cmp.Compare(a.Key, b.Key) })
	return infos, next, nil
}
