// Package etcdstore is the etcd v3 backend of leasehold, on the official
// client go.etcd.io/etcd/client/v3. It lives in a Go module of its own, so
// that users of the other backends never download etcd's dependencies.
//
// Keys: a lock is LockKey(key) (by default "leasehold/lock/" + key), a key
// holding the owner's token and attached to an etcd lease of its own, so
// "etcdctl get leasehold/lock/KEY -w json" shows the owner and its lease. Its
// last fence is the ModRevision of FenceKey(key) ("leasehold/fence/" + key),
// a key without a lease that every successful Acquire rewrites. The waiters
// of key queue under QueuePrefix(key) ("leasehold/queue/LEN:KEY/"), one key
// per waiter, named by its token, on a lease of its own.
//
// # Leases
//
// Every lock has a lease of its own, so it expires on its own TTL whatever
// the Store's other locks do. A lease that no key is on any more (after a
// release, a refused acquire, a TTL change, a waiter taking the key) is kept
// by the Store, idle, and carries the next lock (or queue entry) of the same
// TTL, rounded up to seconds: the acquire sends a keep-alive of that lease
// alongside its transaction, so whichever etcd handles first, the lease lasts
// its whole TTL from after the acquire was sent, as a lease granted for it
// would. A keep-alive is answered by etcd's leader without a raft write, and
// the Store sends all its one-off keep-alives (reused leases, queue entries,
// renewals) as messages on one LeaseKeepAlive stream of its own, where
// clientv3's KeepAliveOnce opens a stream per call; a keep-alive that
// finds no stream (it cannot be opened), or whose stream breaks first, is
// sent again with KeepAliveOnce, which rides out a short outage within the
// caller's context, and the next one opens a new stream. So
// in the steady state an acquire is one transaction (and the keep-alive, in
// parallel) and a release is one transaction: two raft writes per cycle, as
// with concurrency.Mutex on a session lease, where a lease per acquire cost
// a grant and a revoke more. An acquire whose transaction or keep-alive
// finds its lease gone (it ran out, or was revoked from outside, as
// etcdctl lease revoke does) tries once more on a new lease, never on
// another idle one, and the Store drops and revokes its idle leases of that
// TTL, likely revoked too: revoking the idle leases costs the next acquire
// of each TTL a failed transaction and a grant, and fails none. One whose
// keep-alive failed otherwise revokes the lease, which undoes the acquire,
// and returns the error. A lease revoked under a held lock ends the lock,
// as an expiry does: Renew and Release answer ErrNotOwned. An idle lease is not reused within 250 ms of the end of its TTL,
// counted from the sending of its grant or last keep-alive; it is dropped,
// and expires in etcd by itself. Close revokes the idle leases. Up to 256
// idle leases per TTL are kept, for up to 16 TTLs.
//
// AcquireDated (driver.DatedAcquirer), which leasehold's Client uses, spares
// that keep-alive when the reused lease was kept alive (or granted) less
// than a twentieth of the TTL before: the lock's term is then the lease's,
// and the call reports when it began, so the Client counts the lock from
// there. A key reused at any rate costs a keep-alive at most 20 times per
// TTL instead of one per acquire, and a lock nobody renews lasts at least
// 95 % of its TTL from such an acquire. Acquire and AcquireQueued always
// keep a reused lease alive, as above.
//
// # Operations and round trips
//
//   - Acquire: one Txn: if the lock key does not exist (CreateRevision == 0)
//     and the key's queue is empty (the CreateRevision compare over its
//     prefix is 0: an empty range compares as 0, a key never does), put the
//     lock key on a lease and put the fence key. One round trip, with a
//     keep-alive of the reused lease in parallel (none for AcquireDated on
//     a lease kept alive within the last TTL/20), or a lease Grant before
//     it when no idle lease is at hand. When the key is held, one more round
//     trip asks for the holder's TimeToLive.
//   - Release: one Txn deletes the lock key only if its value is the
//     caller's token, never by key alone (the mistake of etcd#22082): one
//     round trip. The owner's lease is kept for reuse.
//   - Renew: keep the lease the Store put the lock on alive once, then Get
//     the lock key and check that it still holds the token on that lease:
//     two round trips (three on a Store that did not acquire the lock, which
//     Gets the key first to learn its lease). A renew to a different TTL
//     then grants a lease of that TTL, moves the key onto it in a Txn that
//     requires the key unchanged since the Get, and keeps the old lease for
//     reuse: four round trips.
//   - AcquireQueued (driver.Queuer): the Acquire Txn, which also requires
//     that no queue entry was created before the waiter's own, and deletes
//     that entry when it takes the key. Refused, a waiter without an entry
//     is put at the back of the queue in the same Txn, and a waiter with one
//     has the entry's lease kept alive once, at the same time as the
//     holder's TimeToLive is asked for: two round trips.
//   - WatchTurn: one read, then a watch on the waiter's predecessor in the
//     queue (the entry created just before its own) and, once the waiter is
//     the head, on the lock key. LeaveQueue: one Delete.
//   - Inspect: one Txn reads the lock key and the fence key; a held key
//     takes one more round trip for its lease's TimeToLive.
//   - WatchReleases: a watch on the lock key for DELETE events, created once
//     per key and shared by that key's waiters in this Store.
//   - List (driver.Lister): one range over the lock keys, a Txn of fence
//     reads at that revision per 64 matching keys, and a TimeToLive per
//     matching lock, 16 in flight.
//
// # Guarantees
//
//   - Every decision is a linearizable etcd request: the acquire, the
//     token-checked delete and the token-checked move are transactions
//     committed through raft by a quorum of the cluster, and reads go
//     through the leader. A lost member, or a minority partition, changes
//     nothing while a quorum remains; a member without a quorum answers
//     nothing rather than something stale.
//   - The fence is the cluster revision of the acquiring transaction. The
//     revision is consensus-backed and rises with every write to the
//     cluster, so fences rise strictly per key, and across all keys, through
//     releases, expiries, leader changes and member restarts.
//   - Time is etcd's: a lease expires when the leader's clock says so; the
//     clients' clocks play no part (the Store's own clock only decides
//     whether an idle lease is too close to its end to be worth reusing). A
//     lease TTL is a whole number of seconds, so the Store rounds every TTL
//     up: the server never holds a lock for less time than its owner asked
//     for, but may hold it for up to a second more. etcd also raises a lease to its minimum TTL, 1.5
//     election timeouts rounded up to seconds (2 s with etcd's default
//     election timeout of 1 s): a TTL of 100 ms holds the key for 2 s on
//     such a cluster. etcd revokes expired leases on a timer, so a key
//     disappears up to about half a second after its lease ran out.
//   - Inspect and the Remaining of a *driver.HeldError report the lease's
//     remaining time as etcd does, in whole seconds, rounded up here
//     (never above the lease's TTL) so that a waiter does not try again
//     before the lease can be gone.
//   - An etcd that cannot be reached, or cannot reach a quorum, gives an
//     error, never a false "acquired" and never driver.ErrNotAcquired.
//     Every request is bounded by the caller's context, which the client
//     enforces: its deadline is not sent to etcd (grpc-timeout), whose
//     gRPC server would arm a timer for it on every request; a call whose
//     context ends is cancelled, which ends it on the server too.
//
// # What it does not guarantee
//
//   - A lock can outlive its TTL: besides the rounding above, a leader change
//     gives every lease its full TTL again, plus an election timeout, on
//     etcd before 3.6 (unless the servers run with
//     --experimental-enable-lease-checkpoint), and a leader that is paused
//     revokes late. Longer, never shorter: mutual exclusion holds, but a
//     crashed holder's key is free only TTL + an election timeout after the
//     last leader change, so leader changes in a row push a takeover back
//     again and again. Measured by the e2e test TestMultiNodeEtcd (TTL 1 s,
//     election timeout 500 ms, a leader change every few seconds): takeover
//     p99 4.6–5.1 s from the holder's crash, but 2.6–3.1 s from the later of
//     the crash and the last leader change.
//   - A client that is paused, or cut off, still believes it holds a lock
//     that etcd has expired and given to someone else. Only the fence
//     checked where the data is written protects against that.
//   - Losing a majority of the members stops all lock operations until the
//     quorum is back. Restoring a cluster from a snapshot (etcdutl snapshot
//     restore) rolls its data back to the snapshot: the locks taken since
//     are forgotten and the revision goes back, so fences already handed
//     out may be issued again. After such a restore, raise the revision past
//     the last fence the protected storage has seen (etcdutl snapshot
//     restore --bump-revision N --mark-compacted, in etcd 3.5 and later)
//     before serving locks.
//   - Waiters of every process queue in etcd, in order of their entries'
//     CreateRevision (driver.Queuer), and a free key is refused to anyone
//     but the queue's head, TryAcquire included. An entry lives on a lease
//     of the waiter's stay (rounded up to seconds) from its last attempt: a waiter that crashed, paused or left
//     without a word holds the queue up until etcd expires that lease (up
//     to about half a second late), and then the waiter behind it, whose
//     watch sees the entry go, attempts at once. A waiter whose entry
//     expired while it lived joins again at the back.
//   - Release notifications are a latency optimisation. A watch that breaks
//     (its member lost its leader, the cluster went away) is made again,
//     and its waiters are then woken once to look for themselves; a release
//     in the gap costs waiters at most their backoff step.
//   - Renew with the lock's current TTL only keeps its lease alive; only a
//     renew to another TTL writes to the key (a new ModRevision, the same
//     CreateRevision and fence). A renew succeeds only if the key holds the
//     token on the lease it kept alive, read after the keep-alive: never on
//     a lease whose key a forced release deleted meanwhile. A renew whose
//     move's reply is lost may have moved the key to its new lease, and the
//     move may still be applied later; until a renew of the lock has written
//     the key again, every renew moves it (the late move, which requires
//     the key as it read it, then changes nothing), so a late move never
//     puts the key back on a lease whose term began before a later renew.
//
// # Storage
//
// Each lock name ever acquired leaves its fence key behind (a few dozen
// bytes), so that fences keep rising after the lock is released. Every
// acquire, release and TTL change is a write, and etcd keeps the history of
// writes until it is compacted: run etcd with --auto-compaction-retention,
// as any etcd serving frequent writes should.
//
// # Goroutines
//
// The Store starts one goroutine per key that has waiters, to read its
// watch (WatchReleases), and one per waiter that watches its turn
// (WatchTurn); the key's last waiter, or the waiter, stops it, and Close
// stops all of them and waits for them. A lease that cannot be kept for
// reuse, and the idle leases of a TTL dropped when one was found gone, are
// revoked on a goroutine of their own, bounded by 2 s. One goroutine
// reads the keep-alive stream while it is open; Close ends it. List looks
// leases up on up to 16 goroutines of its own, which end before it returns.
package etcdstore
