// Package leasehold provides distributed locks that stay correct when timing
// is not: token-owned leases with fence tokens, in front of a small Store
// interface with backends for Redis (store/redisstore) and in-process use
// (store/memstore).
//
// # Safety model
//
//   - Ownership is key + token. Release and Renew compare the token
//     atomically in the store and return ErrNotOwned instead of touching a
//     lock that now belongs to someone else.
//   - Every acquire issues a fence token, strictly larger than every fence
//     issued before for that key. Pass it with each correctness-critical
//     write and have the storage reject writes whose fence is not newer than
//     the last one it accepted.
//   - A lease is time-bound. Its owner can be paused (GC, swap, a stopped
//     VM, a slow network) past its TTL without knowing it; another owner may
//     then hold the key. Nothing in a lock service can stop the paused owner
//     from acting on stale belief; only the fence check at the storage can
//     reject its writes.
//   - Bad input (an empty key, a key with control characters or starting
//     with ReservedPrefix, a TTL outside [MinTTL, MaxTTL], a token that is
//     not 1–256 bytes of printable ASCII) is an *ArgumentError naming the
//     argument, returned before anything is written. The rules are the same
//     on every backend.
//   - A fence is an exact int64 on every backend, and the Client refuses a
//     fence that is not positive from any store.
//   - "Held by someone else" (ErrNotAcquired) is never confused with "the
//     store failed" (the store's own error, wrapped).
//
// # What it does not guarantee
//
// Mutual exclusion holds only as long as the store's own view of time and
// data holds: a Redis failover to a replica that missed the last writes can
// hand the same key to two owners at once. The fence still rises in that case
// (see store/redisstore), which is why the fence check at the storage
// boundary, not the lock, is what keeps data correct.
//
// An acquire request delayed in the network can land after its caller gave
// up and after the caller's clean-up release: the key is then held under a
// token nobody has until its TTL runs out. That costs liveness (one TTL),
// never safety.
//
// Client starts no goroutines. A store may (redisstore keeps one for release
// notifications) and documents who stops it. A Lease.KeepAlive runs one
// until Stop or Release; a Renewer runs one for all its leases until Close.
package leasehold
