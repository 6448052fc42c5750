// Package redisstore is the Redis backend of leasehold: single node,
// Sentinel (failover) and Cluster, through a go-redis v9
// redis.UniversalClient.
//
// Keys: the lock is the caller's key itself, a string holding the owner's
// token with a PX expiry, so redis-cli GET and PTTL show it as it is. Its
// fence counter lives in FenceKey(key), which never expires and is in the
// same cluster slot as the key for every key, with or without {hash tags}.
// Releases of a key with queued waiters are announced on ReleaseChannel(key).
//
// Waiters queue (driver.Queuer) in QueueKey(key), a sorted set of their
// tokens by arrival, and QueueDeadlinesKey(key), a hash of each entry's
// deadline in server milliseconds; both are in the key's slot, exist only
// while someone waits, and expire with their latest entry. The acquire
// script refuses a free key to anyone but the live head of a non-empty
// queue, and a queued waiter's refused attempt joins or refreshes its entry
// in the same call. Every script that reads the queue removes up to 16
// expired heads first. A release of a key with queued waiters publishes on
// ReleaseChannel(key) and, to wake the head alone, on the turn channel of
// the head's Store ("leasehold:turns:" and a random name, which its entry in
// QueueDeadlinesKey(key) names, with a hash of key and token as the message:
// WatchTurn); a key nobody queues for is released without a PUBLISH.
//
// A waiter whose turn its Store watches when it attempts asks for a grant
// (driver.Granter): the release then gives it the key in the same script,
// with a new fence, for its TTL or the rest of its entry's stay if that is
// shorter, and publishes its message followed by the fence, which Granted
// returns. Its next attempt finds a grant whose word was lost (the key
// holds its token): it renews the key to its TTL and answers the fence.
// Decline gives back a grant never taken. While writes wait for replicas
// the word is not used: the waiter's acknowledged attempt takes the grant.
//
// Each operation is one Lua script, so one round trip once the script is
// cached on the server (EVALSHA, with EVAL as the fallback). Acquire and
// release must not run twice, so they are sent as commands go-redis does not
// retry once written; a lost reply is returned as an error (the Client then
// releases an acquire that may have been applied).
//
// # Batching
//
// Concurrent Acquire, Release and Renew calls of one Store share round
// trips. A call made while fewer than three flushes are in flight is sent
// at once, alone, on the caller's goroutine under its own context, so a
// lone caller waits for nothing more than before. Calls made while three
// are in flight queue, and go out together as one go-redis Pipeline on the
// application's client (the pipeline pool of go-redis) when one returns: up
// to 64 calls per flush (the server runs them back to back, in well under a
// millisecond), at most three flushes in flight per Store. A cluster client splits
// a flush by node and sends the parts concurrently, following MOVED and ASK
// per call; a failover client sends it to the current primary. Calls the
// server answers NOSCRIPT (not run: a restart or SCRIPT FLUSH) are sent
// again as EVAL in a second pipeline, so each runs once.
//
// Each call keeps its own answer, its own error and its own context. A flush
// runs under a context no caller can cancel, holding the latest deadline of
// its calls (none if one has none). A caller whose context ends while its
// call waits for a flush gets an error saying it was not sent, and it is
// not; once sent, it gets an error of unknown outcome, exactly as for a lost
// reply (the Client releases such an acquire, and the Store releases the key
// if the reply then says granted), while the calls sent with it go on.
//
// What batching changes, and WithoutBatching restores: go-redis hooks see
// pipelines (ProcessPipelineHook) instead of single commands; a pipeline
// carries the context values (trace spans) of its first caller; a pipeline
// holding an acquire or release is never sent twice by go-redis, so a Renew
// sent in it is not retried after a network error either (its caller gets
// the error, which the Client's renewal treats as any failed renewal); and
// on a client with ContextTimeoutEnabled and no ReadTimeout, a call without
// a deadline keeps the calls queued behind it waiting (each still returns by
// its own context's end).
//
// List (driver.Lister) is one SCAN step and one pipeline of the inspect
// script per call, never KEYS; across calls it follows SCAN's order, not key
// order, and on a cluster it walks the primaries one after the other.
//
// The client is taken as the application made it, one pool for the
// application and its locks. Every call returns by its context's deadline:
// with ContextTimeoutEnabled go-redis puts the deadline on the socket;
// without it the Store runs each call on a goroutine of its own and leaves it
// at the context's end (New says what that leaves behind, and for how long,
// and when a cancel waits for the client's ReadTimeout).
//
// # Guarantees
//
//   - Acquire, Release and Renew are atomic on the server holding the key;
//     Release and Renew compare the token.
//   - Fences are max(last fence + 1, server time in microseconds), computed
//     exactly over the whole int64 range (never in Lua's doubles). They rise
//     strictly while the data lives, and keep rising after it is lost
//     (restart without persistence, FLUSHALL, failover to a replica that
//     missed writes) under the clock condition below.
//   - A fence counter holding anything leasehold would not write (a decimal
//     outside 1..MaxInt64, "nan", "1e300") makes Acquire fail, writing
//     nothing, with an error naming the counter; deleting the counter
//     restarts it from the clock. Keys starting with "leasehold:" are
//     refused (driver.ReservedPrefix), so no lock key reaches a counter.
//
// # The clock condition
//
// After the data is lost, the next fence is the issuing server's clock in
// microseconds. Fences issued before the loss were at most the old server's
// clock at that time (plus one per acquire within the same microsecond). So
// if the server issuing the next fence has a clock Δ behind the old one, its
// first fence is the last one before the loss plus D − Δ, where D is the
// time from the last acquire to the first one after it (at least the
// failover time): below those issued in the last Δ − D before the last
// acquire when Δ > D, above all of them when Δ < D. A clock ahead only adds
// to the margin. Example: Sentinel with down-after-milliseconds
// 5000 fails over in about 5–6 s; a replica clock up to 5 s behind is safe
// even for a key acquired just before the failure. NTP keeps clocks within
// milliseconds, far inside that; a clock stepped back by minutes is not
// covered, and an operator who sees one should delete no counters and let
// the old fences stand (a higher stored counter always wins over the clock).
//
// Measured with real servers, the second under libfaketime (clock_test.go:
// go test -race -run ClockCondition -v, Redis 7.0.15, Debian 12, 2 shared
// cores): a key acquired on A, then, D later, on B, a fresh server Δ behind.
// F_B − F_A in ms, one run; D as slept (the real D is a few ms longer):
//
//	Δ behind   D = 0     D = 100 ms   D = 1 s
//	0            +0.5      +101.1      +1001.1
//	100 ms      −99.6        +1.2       +901.7
//	1 s        −999.6      −899.0         +1.8
//	5 s       −4994.6     −4898.6      −3998.1
//
// In every case, over several runs, F_B − F_A lay within D − Δ, with D
// bracketed by the start and end of the two Acquire calls (0.5–85 ms wide
// under load): the bound above holds to the microsecond, and Δ = D is its
// edge. B 1 s ahead gave +1000.7 ms at D = 0; a promoted replica 1 min
// behind that had the counter gave F_A + 1.
//
// In a failover drill (e2e TestMultiNodeRedisClock: replicas 250 ms or 10 s
// behind, D over 1 s), no fence was issued again at 250 ms; at 10 s,
// without replica acknowledgement, 1 to 4 a run were, and the drill's
// checker reported them; with it (the default), none, since every fence
// returned had reached the replica promoted. D counts to the last acquire the old
// primary took: one cut off from its replicas but still reached by clients
// takes acquires until they move, so D can be milliseconds, a case replica
// acknowledgement removes.
//
// Acquire refuses a server whose maxmemory-policy is not noeviction (or
// warns, with WithEvictionWarning): any other policy may evict a held lock key,
// and volatile-* policies pick exactly such keys, since they have a TTL.
//
// # Replica acknowledgement
//
// Redis replicates asynchronously: an acquire only the primary has is lost
// in a failover, and the promoted replica gives the key to a second owner
// while the first still holds its lease. So by default, on a primary that
// lists a replica (INFO replication: online, or connected and syncing),
// Acquire, AcquireQueued, Renew and RenewBatch end their round trip with
// WAIT 1: a lease is returned, or a renewal counted, only once a replica
// has the write (the lock key, its fence counter, the new expiry). One
// WAIT waits for every write sent before it on its connection, so a batch
// of calls shares one; on a cluster each shard's primary gets its own, on
// that primary's own client (go-redis's node client: hooks added with
// OnNewNode see those calls), and the Store follows MOVED itself. Releases
// do not wait.
//
// A write too few replicas acknowledged within the bound
// (DefaultReplicaAckTimeout, cut to three quarters of the call's time
// left) fails with an error matching ErrNotReplicated, never
// ErrNotAcquired or ErrNotOwned: an acquire's key is released and no lease
// returned; a renewal counts as failed (the primary keeps the new TTL). The
// Store does not retry: a replica silent for a second is down, cut off,
// resyncing or overloaded, which rarely ends within a caller's wait, and
// each retry would take the key on the primary again.
//
// The replicas are read at the Store's first acquire on a primary (a round
// trip of its own), then at most once a second at the end of an acquire's
// or renewal's pipeline (no round trip of its own; on a cluster, for a
// primary without replicas, one a second). A primary whose replicas all
// left less than 10 s ago refuses writes: it may have been failed over
// while cut off, and be demoted once Sentinel or the Cluster reaches it,
// dropping them. After that, a primary that had a replica in the last hour
// (its replication backlog is active) awaits one: each round trip there
// waits a millisecond for a replica and reads INFO after it, and a write
// goes through only if INFO still lists none, so one that comes back is
// waited for from its first moment. A primary that never had a replica
// costs nothing more.
//
// The cost: a round trip to a replica per batch of calls (figures in
// docs/benchmarks.md); while a primary's only replica resyncs (Redis 7
// waits repl-diskless-sync-delay, 5 s by default, before a full sync), its
// acquires wait up to the bound and fail; a primary whose replicas left
// refuses acquires for 10 s; a primary awaiting a replica adds a
// millisecond a round trip. WithReplicaAcks sets the count and the
// bound whatever the primary reports, WithReplicaFsync waits with WAITAOF
// (Redis 7.2), WithoutReplicaAcks turns it off.
//
// # What it does not guarantee
//
//   - Replica acknowledgement covers the replicas that acknowledged: a
//     failover to another one (with two replicas and the default of one,
//     when the one that acknowledged is lost too: Sentinel and Cluster
//     promote the replica with the most data), or the loss of every
//     replica with the primary, still loses the write, and a second owner
//     may acquire while the first believes it holds the lease. So does a
//     failover to a replica that was disconnected when the write was made,
//     since the default lets a primary with no replica connected take
//     writes. Only the fence check at the storage boundary protects data
//     then.
//   - Release notifications travel over pub/sub and may be lost (a dropped
//     connection, a failover); waiters then fall back to their backoff. In a
//     cluster they use PUBLISH, which every node forwards to every other.
//
// Store starts two goroutines, on the first WatchReleases, to read the shared
// pub/sub connection and to send its subscription changes; Close stops them
// and waits for them. Without ContextTimeoutEnabled each call also runs on a
// goroutine of its own (see New). A batched flush runs on a goroutine that
// ends when the queue is empty, at the latest when the client's timeouts or
// the calls' deadlines end its round trip, and the release of an acquire
// whose caller left the batch on one that ends within 2 s; Close waits for
// both.
package redisstore
