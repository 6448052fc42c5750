package drill

import (
	"context"
	"time"
)

// Fault is one kind of trouble the drill injects, in the shape of etcd's
// robustness failpoints: Inject starts it, Heal ends it (a no-op for faults
// that end by themselves), Available says whether it applies to this run.
type Fault interface {
	Name() string
	Available(e *Env) bool
	Inject(ctx context.Context, e *Env) error
	Heal(ctx context.Context, e *Env) error
}

// Env is what faults act on: the running drill's workers and store knobs.
type Env struct {
	run    *run
	target int // the worker the fault being injected picked; -1 for none
}

// pick picks a live worker at random as the target of the fault being
// injected, and remembers it for the fault's span in the report.
func (e *Env) pick() *worker {
	w := e.run.randomWorker()
	e.target = w.id
	return w
}

// TTL is the run's (scaled) lock TTL.
func (e *Env) TTL() time.Duration { return e.run.ttl }

// setLatency sets the store latency every worker sees.
func (r *run) setLatency(d time.Duration) {
	if r.procs != nil {
		r.procs.latency(d)
		return
	}
	r.knobs.latency.Store(int64(d))
}

// PauseWorker freezes a worker in its critical section for 1.5 × TTL, its
// renewals included, as a GC pause or a stopped VM would; the worker then
// wakes and carries on: it writes its result and releases, unaware that
// another worker has taken the job over. The fence must refuse the writes
// and the token check the release.
type PauseWorker struct{}

func (PauseWorker) Name() string                     { return "pause-past-ttl" }
func (PauseWorker) Available(*Env) bool              { return true }
func (PauseWorker) Heal(context.Context, *Env) error { return nil }
func (PauseWorker) Inject(ctx context.Context, e *Env) error {
	if e.run.procs != nil {
		return e.run.procs.pause(ctx, e)
	}
	e.pick().request(faultPause)
	return nil
}

// KillWorker kills a worker in its critical section: no more writes, no
// release; a new worker takes its place. Its job is taken over when the
// lease expires.
type KillWorker struct{}

func (KillWorker) Name() string                     { return "kill-holder" }
func (KillWorker) Available(*Env) bool              { return true }
func (KillWorker) Heal(context.Context, *Env) error { return nil }
func (KillWorker) Inject(ctx context.Context, e *Env) error {
	if e.run.procs != nil {
		return e.run.procs.kill(ctx, e)
	}
	e.pick().request(faultKill)
	return nil
}

// RenewFailures makes every renewal of one worker fail until healed: the
// fence policy must cancel its critical section before its lease can
// expire, and the worker stops writing.
type RenewFailures struct{}

func (RenewFailures) Name() string        { return "renew-failures" }
func (RenewFailures) Available(*Env) bool { return true }
func (RenewFailures) Inject(_ context.Context, e *Env) error {
	if e.run.procs != nil {
		e.run.procs.failRenew(true, e)
		return nil
	}
	w := e.pick()
	w.store.failRenew.Store(true)
	e.run.failing.Store(w)
	return nil
}
func (RenewFailures) Heal(_ context.Context, e *Env) error {
	if e.run.procs != nil {
		e.run.procs.failRenew(false, e)
		return nil
	}
	if w := e.run.failing.Swap(nil); w != nil {
		w.store.failRenew.Store(false)
	}
	return nil
}

// StoreLatency slows every store call of every worker by TTL/20 until
// healed: renewals get slower, none should be lost for it.
type StoreLatency struct{}

func (StoreLatency) Name() string        { return "store-latency" }
func (StoreLatency) Available(*Env) bool { return true }
func (StoreLatency) Inject(_ context.Context, e *Env) error {
	e.run.setLatency(e.run.ttl / 20)
	return nil
}
func (StoreLatency) Heal(_ context.Context, e *Env) error {
	e.run.setLatency(0)
	return nil
}

// StoreRestart restarts the lock store without persistence: every lock is
// gone at once, and the holders learn it at their next renewal. Available
// when the run has a way to restart its store (tests: testserver's
// Restart); the next fences must still beat every fence the job storage
// has accepted.
type StoreRestart struct {
	Restart func() error
}

func (StoreRestart) Name() string                         { return "store-restart" }
func (f StoreRestart) Available(*Env) bool                { return f.Restart != nil }
func (StoreRestart) Heal(context.Context, *Env) error     { return nil }
func (f StoreRestart) Inject(context.Context, *Env) error { return f.Restart() }

// Partition freezes the network between the workers and the lock store:
// requests and replies are held, nothing is closed, so only timeouts notice
// (a silent partition). Healed a TTL later, when the held traffic flows
// again, late. Available when the run reaches its store through something
// that can freeze it (tests: testserver.Proxy's Freeze and Thaw).
type Partition struct {
	Freeze, Thaw func()
}

func (Partition) Name() string                         { return "silent-partition" }
func (f Partition) Available(*Env) bool                { return f.Freeze != nil && f.Thaw != nil }
func (f Partition) Inject(context.Context, *Env) error { f.Freeze(); return nil }
func (f Partition) Heal(context.Context, *Env) error   { f.Thaw(); return nil }

// storeWide names the faults that act on the store rather than on one
// worker's critical section: the report counts no hits for them.
var storeWide = map[string]bool{StoreLatency{}.Name(): true, StoreRestart{}.Name(): true, Partition{}.Name(): true}

// DefaultFaults are the in-process faults, injected in turn.
func DefaultFaults() []Fault {
	return []Fault{PauseWorker{}, RenewFailures{}, KillWorker{}, StoreLatency{}}
}
