// Package drill is leasehold's game day, executable: workers take job locks
// and move jobs through their states on fenced storage while faults are
// injected, every operation is recorded, and checkers then prove what the
// lock and the fence promise. Safety, each failure a violation (UNSAFE):
//
//  1. no stale write was accepted: the storage never accepted a write whose
//     fence was older than one it had already accepted for that job;
//  2. no release or renewal by a superseded owner succeeded;
//  3. no job reached a terminal state twice;
//  4. the history is linearizable: porcupine finds, for every key, an order
//     of its lock operations that a fenced lock allows and an order of its
//     job's storage operations that fenced storage allows, consistent with
//     their real times. A check that times out, or a job log that cannot
//     be read, is a violation, never a pass; when the check fails the
//     report carries porcupine's visualization.
//
// Liveness, each failure a shortfall that a slow machine may cause, reported
// apart and never counted as a violation:
//
//  5. after a worker was paused or killed, another owner took its job over
//     within the SLO (TTL + one renewal interval);
//  6. every job was done before the drill's timeout.
//
// The drill proves it can fail: with UnsafeRelease (releases delete the key
// whoever holds it) or NoFencing (the storage accepts any fence) the same
// workload must produce violations.
//
// The parts are split as etcd's tests/robustness is. This package is the
// workload and the run: Run, Config, and the worker processes (ServeWorker).
// Below it, with no import back:
//
//   - jobs: the fenced job storage the workers write through (pgjobs keeps
//     it in PostgreSQL);
//   - faults: what is injected, each fault a value (Name, Available,
//     Inject, Heal) acting through the Env the run gives it;
//   - history: the record of every operation, event and fault, and its
//     Recorder;
//   - check: the safety checkers, the takeover SLO and the linearizability
//     check (its models are described in check/linearize.go);
//   - report: the Report, as text, JSON or one self-contained HTML page.
//
// Workers run as goroutines on any driver.Store (memstore by default),
// where a pause stops a worker's renewals and a kill ends its goroutine; or,
// with Config.Processes, as separate OS processes on shared servers (Redis,
// etcd or PostgreSQL locks; PostgreSQL jobs, package pgjobs), where a pause
// is SIGSTOP … SIGCONT and a kill SIGKILL, and the workers report their
// operations to the drill over a pipe (see ServeWorker). Store-wide faults:
// latency, a silent partition and a restart without persistence, the last
// two when the caller can freeze or restart its store.
package drill
