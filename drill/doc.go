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
//     within the SLO (TTL + one renewal interval).
//
// The drill proves it can fail: with UnsafeRelease (releases delete the key
// whoever holds it) or NoFencing (the storage accepts any fence) the same
// workload must produce violations.
//
// This first version runs in-process on any leasehold.Store (memstore by
// default) with in-process faults: a worker paused past its TTL (renewals
// stop, then it wakes and carries on), renewal failures, a killed worker,
// and store latency. Not yet built: real-store job storage (pgfence and
// redisfence already provide the primitives), multi-process workers with
// SIGSTOP/SIGKILL, a store restart, and the linearizability check with
// porcupine. Report.WriteHTML draws a run as one self-contained HTML page.
package drill
