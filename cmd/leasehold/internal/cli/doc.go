// Package cli implements the leasehold operator command: the lock inventory
// (inspect, ls) on a live store and the TTL arithmetic (ttl) of
// docs/design.md §8. The main package only calls Main.
//
// # Conventions
//
//   - One store per run, chosen with --redis, --etcd or --postgres, or else
//     with one of EnvRedisURL, EnvEtcdEndpoints, EnvPostgresDSN (a flag
//     wins). A refused connection fails at once (dialProbe); every call to
//     the store is bounded by --timeout (default DefaultTimeout).
//   - Output is a table or key/value lines for people, -o json (alias
//     --json) for scripts: durations in *_seconds numbers, [] for no items.
//     Errors are one line on stderr, prefixed "leasehold: ", and the exit
//     code says what kind of failure it was: ExitOK, ExitFailure (the
//     command ran and failed: a store unreachable or answering an error, an
//     SLO that cannot be met, a metric missing), ExitUsage (the command line
//     was wrong: an unknown command or flag, a bad value, a missing
//     argument, no store or two stores, an invalid key).
//   - No message, report or output shows a password: stores are named by
//     host:port/database, URLs by safeURL, unusable addresses by addrError.
//   - A numeric flag out of its range (bounds.go) is a usage error naming
//     it, never clamped or replaced by a default.
//   - The commands only read: nothing here writes to a store.
//
// # Lock class
//
// The class of a key comes from its namespace (leasehold.DefaultNamespace),
// following the key convention of docs/lock-inventory.md: namespace "loops"
// is a per-loop TTL hold (RunLoop), "leader" a leader lease (Lead), and
// every other namespace a per-item lock with explicit release (Hold,
// its local turn). See ClassOf.
package cli
