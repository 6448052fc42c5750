// Package leasehold provides distributed locks that stay correct when timing
// is not: leases owned by key + token, renewed under an explicit failure
// policy, each issued with a fence token that only rises.
//
// A Client takes leases from a store: store/memstore in process, or
// store/redisstore, store/etcdstore, store/pgstore, store/kubestore. Share
// one Client per process and Close it at shutdown (WithOwnedStore makes that
// close the store too).
//
// A Lease is one ownership of a key. TryAcquire makes one attempt; Acquire
// waits. Send Lease.Fence with every write the lock protects, and have the
// storage refuse a fence older than the last it accepted (package fence).
// Release gives the key back only while it still holds the lease's token.
//
// Waiting has one path: every waiting call (Acquire, Hold, Lead) joins its
// Client's line for the key in arrival order, and on a store that keeps a
// queue of waiters (Redis, etcd, PostgreSQL) also takes its place in that
// queue, one order for every process. A release by a Client hands the key to
// its own next waiter in process when that waiter is next in line.
//
// Hold is the usual way to use a lock: it acquires, runs fn while renewing
// the lease, and releases. Under the default fence policy fn's context is
// cancelled before the lease can expire when renewal fails. When the
// caller's context ends, fn's context is cancelled but the lease is renewed
// until fn returns.
//
// Lease.KeepAlive renews a lease taken by hand until Stop, Release or the end
// of its context; its Context, and that context's cause, say when and why
// ownership can no longer be trusted. One goroutine per Client renews every
// lease, in batches.
//
// RunLoop (a periodic task run by one replica at a time) and Lead (leader
// election) are recipes built on these; HoldOption configures all four.
//
// The package logs nothing unless given a logger (WithLogger); every event
// reaches the Observers (WithObserver).
//
// Errors match ErrNotAcquired (held by another owner), ErrNotOwned (the lease
// is gone), ErrAbandoned (renewal gave up; the cause on fn's context),
// ErrClosed, or ErrInvalidArgument (an *ArgumentError naming the argument,
// returned before anything is written).
//
// A lock alone cannot stop an owner paused past its TTL, and a store that
// loses writes can hand a key to two owners; the fence check at the storage
// is what keeps data correct. docs/design.md gives the semantics in full.
package leasehold
