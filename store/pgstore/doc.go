// Package pgstore is the PostgreSQL backend of leasehold, on a pgx v5
// connection pool (*pgxpool.Pool).
//
// Table: one row per key, made by Store.Migrate, by the leasehold CLI's
// "leasehold migrate", or by a DBA running MigrationSQL's script ("leasehold
// migrate --print") (default name "leasehold_leases"; see WithTable):
//
//	key        text PRIMARY KEY   the lock key
//	token      text               the owner's token; NULL when released
//	fence      bigint NOT NULL    the last fence issued for the key
//	expires_at timestamptz        end of the lease; NULL when released
//	queued     boolean NOT NULL   a waiter may be queued (default false)
//
// A key is held while token is set and expires_at is in the future, so psql
// shows the locks as they are:
//
//	SELECT key, token, fence, expires_at - now() AS ttl FROM leasehold_leases
//	 WHERE expires_at > now();
//
// The row is never deleted: a release clears token and expires_at and keeps
// fence, an expiry leaves the row as it was, and the next acquire raises the
// fence in the same row. (A table of many short-lived keys therefore grows
// by one small row per key ever locked; deleting rows of keys that are not
// held is safe only if their fences never need to rise again, for example
// run IDs that are never reused.)
//
// A second table, the lease table's name + "_waiters" (or
// "leasehold_waiters_" and a hash of the name when that would pass 63
// bytes), also made by Migrate, holds the FIFO queue of each key's waiters,
// shared by every process (driver.Queuer; docs/design.md §5):
//
//	key      text NOT NULL                         the lock key
//	seq      bigint GENERATED ALWAYS AS IDENTITY   arrival order
//	token    text NOT NULL                         the waiting Acquire's token
//	deadline timestamptz NOT NULL                  the row is skipped after it
//	PRIMARY KEY (key, seq), UNIQUE (key, token)
//
// A free key goes only to the live head of a non-empty queue, Acquire
// included. Expired rows are skipped, and deleted up to 16 at a time by the
// polls of the key's waiters; deleting rows whose deadline has passed is
// always safe. A waiter turns its key's queued flag on; the waiter that takes
// the key last turns it off. While it is off, Acquire and Release touch the
// lease row alone, which is what keeps a key no one waits for cheap.
//
// A release that a queued waiter waits for wakes the queue's head with
// pg_notify on the Store's channel (default: the table's name; see
// WithChannel), in the release's own statement: when the row's queued flag
// is on, the statement calls a PL/pgSQL function, also made by Migrate (the
// lease table's name + "_wake", or "leasehold_wake_" and a hash of the name
// when that would pass 63 bytes), which looks the head up. A release no one
// waits for reads no other table and sends no notification. The payload
// names the head by the SHA-256 of its key and token (never the token: any
// session may LISTEN on any channel), followed by the key.
//
// A refused Acquire answers with the holder's remaining TTL, read by a
// second PL/pgSQL function that Migrate makes (the lease table's name +
// "_held", or "leasehold_held_" and a hash), which the acquire statement
// calls only when it took nothing: a subquery of the statement would cost
// every acquire its set-up, taken or not.
//
// # Round trips
//
// Acquire (taken or busy), AcquireQueued, Release, LeaveQueue, Renew and
// Inspect are one statement each (an Acquire of a free key whose queued flag
// is on sends a second one, which reads the queue),
// so one round trip, once pgx has prepared the statement on the pooled
// connection: under pgx's default QueryExecModeCacheStatement the first use
// of each statement on each connection adds one round trip to prepare it;
// under QueryExecModeExec or the simple protocol there is no such first
// round trip. Those two modes read results as text, so the statements return
// TTLs and times as microseconds, which read the same under every
// IntervalStyle and DateStyle. The pool may add a ping before handing out a connection idle
// for more than a second (pgxpool.Config.ShouldPing). Migrate takes a few
// round trips in one transaction. WatchReleases and WatchTurn take none once
// the Store's listening connection is up. List (driver.Lister) is one statement per
// page: held rows after the last key read, in the key column's order.
//
// # Guarantees
//
//   - Acquire, Release and Renew are each one atomic statement; Release and
//     Renew compare the token and the expiry in their WHERE clause, and a
//     busy key is decided on the latest committed row (INSERT … ON CONFLICT
//     DO UPDATE … WHERE), so two acquirers never both win.
//   - Time is the database's: leases start at now() (the statement's
//     transaction start, which is after the caller sent it) and end at
//     now() + ttl, with ttl rounded up to whole microseconds; expiry is
//     judged by the database's now(). Clients' clocks play no part in the
//     store's decisions, and a lease is never shorter on the server than
//     its owner believes.
//   - Fences are max(last fence + 1, the database clock in microseconds
//     since the Unix epoch), kept in the key's durable row and raised in
//     the acquiring statement. They rise strictly, per key, across
//     releases, expiries, PostgreSQL restarts and crashes (whatever
//     committed survives), and keep rising when the row is lost or goes
//     back (failover to an asynchronous replica that missed the last
//     commits, a restore from an older backup) under the clock condition
//     below. A failed call is an error and never "acquired" or
//     ErrNotAcquired; after an error the acquire may have been applied (a
//     lost reply), and leasehold.Client releases its token then.
//   - WatchReleases uses one connection per Store, whatever the number of
//     waiters and keys, and returns only once that connection LISTENs.
//
// # The clock condition
//
// A fence is the issuing server's clock at that moment (now(), the
// transaction start, in microseconds), or the row's last fence + 1 when
// that is higher, which in normal operation happens only for acquires of
// one key within one microsecond. So the fences issued before a loss were
// at most the old server's clock then. After the rows are lost or go back,
// the next fence is the new server's clock, past every fence issued
// before, as long as that clock is no more than D behind the old one,
// where D is the time from the last acquire before the loss to the first
// one after it (at least the failover or restore time). A primary and a
// replica both kept by NTP are milliseconds apart, far inside any
// failover; the e2e test TestMultiNodePostgres promotes a replica that
// missed the last acquires and checks that no stale write gets through.
// A row whose fence is above the clock (raised by hand, or restored with
// one) keeps counting from there: the higher value always wins.
//
// # What it does not guarantee
//
//   - A lagging replica promoted, or a restore, loses leases: a key held
//     on the old primary may be free on the new one, and a second owner
//     may acquire while the first still believes it holds the lease (with
//     a higher fence, so only the fence check at the storage boundary
//     protects data then). Use synchronous replication
//     (synchronous_standby_names, synchronous_commit = on or stricter) if
//     failover must not lose leases. With synchronous_commit = off (for the
//     session or the server) even a crash of a single server can lose the
//     last acquires in the same way.
//   - Outside the clock condition a fence may be issued again: a server
//     clock stepped back by more than D, or a loss of rows whose fences
//     had been raised above the clock. Then stop lock users and raise
//     every fence past the highest one that can have been issued
//     (UPDATE leasehold_leases SET token = NULL, expires_at = NULL,
//     fence = fence + <margin>) before letting them back.
//   - Release notifications may be lost: a broken connection, a database
//     restart, or a release committed before the Store's connection
//     listens. The listening connection reconnects with bounded backoff
//     (10 ms doubling to 1 s, jittered) and LISTENs again; a lost
//     notification costs waiters only their own backoff. Expiries are not
//     notified. WatchReleases hears only the releases that a queued waiter
//     waits for (or forced ones); the Client's waiters are always queued.
//   - A notifying release commits under PostgreSQL's cluster-wide
//     notification queue lock, which serialises the commits of notifying
//     transactions; only releases that a waiter waits for notify, so that
//     lock limits contended keys, not uncontended cycles. Every listening
//     Store receives every notification on its channel and keeps only its
//     own waiters' wake-ups.
//   - Queue order is decided at the key's lease row, as the statements run:
//     a waiter that joins while a newcomer's Acquire runs may lose the key
//     to it. A waiter that stops polling (a crash) holds the queue up for
//     the stay of its row after its last poll, plus a backoff step of the
//     waiter behind it.
//   - LISTEN needs a session: the pool's configuration must reach
//     PostgreSQL directly or through a session-pooling proxy, not a
//     transaction-pooling one.
//
// Store starts one goroutine, on the first WatchReleases, to read its
// listening connection; Close stops it, closes that connection and waits.
package pgstore
