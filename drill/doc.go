// Package drill is leasehold's game day, executable: workers take job locks
// and move jobs through their states on fenced storage while faults are
// injected, every operation is recorded, and checkers then prove what the
// lock and the fence promise:
//
//  1. no stale write was accepted: the storage never accepted a write whose
//     fence was older than one it had already accepted for that job;
//  2. no release or renewal by a superseded owner succeeded;
//  3. no job reached a terminal state twice;
//  4. after a worker was paused or killed, another owner took its job over
//     within the SLO (TTL + one renewal interval);
//  5. the history is linearizable: porcupine finds, for every key, an order
//     of its lock operations that a fenced lock allows and an order of its
//     job's storage operations that fenced storage allows, consistent with
//     their real times (see linearize.go for the models, and how expiry and
//     unknown outcomes are treated). A check that times out is reported,
//     never passed; when the check fails the report carries porcupine's
//     HTML visualization.
//
// The drill proves it can fail: with UnsafeRelease (releases delete the key
// whoever holds it) or NoFencing (the storage accepts any fence) the same
// workload must produce violations.
//
// Workers run as goroutines on any leasehold.Store (memstore by default),
// where a pause stops a worker's renewals and a kill ends its goroutine; or,
// with Config.Processes, as separate OS processes on shared servers (Redis,
// etcd or PostgreSQL locks; PostgreSQL jobs, package pgjobs), where a pause
// is SIGSTOP … SIGCONT and a kill SIGKILL, and the workers report their
// operations to the drill over a pipe (see ServeWorker). Store-wide faults:
// latency, a silent partition and a restart without persistence, the last
// two when the caller can freeze or restart its store.
//
// Report.WriteHTML draws a run as one self-contained HTML page: a timeline
// of lock ownership per worker, fences, faults and refused writes.
package drill
