// Package redisstore is the Redis backend of leasehold: single node,
// Sentinel (failover) and Cluster, through a go-redis v9
// redis.UniversalClient.
//
// Keys: the lock is the caller's key itself, a string holding the owner's
// token with a PX expiry, so redis-cli GET and PTTL show it as it is. Its
// fence counter lives in FenceKey(key), which never expires and is in the
// same cluster slot as the key for every key, with or without {hash tags}.
// Releases are announced on ReleaseChannel(key).
//
// Each operation is one Lua script, so one round trip once the script is
// cached on the server (EVALSHA, with EVAL as the fallback). Acquire and
// release must not run twice, so they are sent as commands go-redis does not
// retry once written; a lost reply is returned as an error (the Client then
// releases an acquire that may have been applied).
//
// The client must be made with ContextTimeoutEnabled: true (New checks), so
// that the deadlines on renewals and releases hold on the socket.
//
// # Guarantees
//
//   - Acquire, Release and Renew are atomic on the server holding the key;
//     Release and Renew compare the token.
//   - Fences are max(last fence + 1, server time in microseconds). They rise
//     strictly while the data lives, and keep rising after it is lost
//     (restart without persistence, FLUSHALL, failover to a replica that
//     missed writes), provided the clock of the server issuing the next fence
//     is not behind the fence already issued (NTP-disciplined clocks within
//     seconds of each other are enough after any real outage).
//
// # What it does not guarantee
//
//   - Redis replication is asynchronous. After a failover the new primary
//     may not have the lock key, and a second owner may acquire while the
//     first still believes it holds the lease. Only the fence check at the
//     storage boundary protects data then.
//   - Release notifications travel over pub/sub and may be lost (a dropped
//     connection, a failover); waiters then fall back to their backoff. In a
//     cluster they use PUBLISH, which every node forwards to every other.
//
// Store starts one goroutine, on the first WatchReleases, to read the shared
// pub/sub connection; Close stops it and waits for it.
package redisstore
