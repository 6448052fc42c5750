// Package faults is the trouble a drill injects, in the shape of etcd's
// robustness failpoints: each fault is a value with a Name, says whether it
// is Available to a run, and acts through the Env the drill gives it.
package faults

import (
	"context"
	"time"
)

// Fault is one kind of trouble: Inject starts it, Heal ends it (a no-op for
// faults that end by themselves), Available says whether it applies.
type Fault interface {
	Name() string
	Available(e Env) bool
	Inject(ctx context.Context, e Env) error
	Heal(ctx context.Context, e Env) error
}

// Env is what faults act on: a running drill's workers and their store.
// The drill picks the worker a worker fault hits.
type Env interface {
	// TTL is the run's (scaled) lock TTL.
	TTL() time.Duration
	// Pause freezes a worker in its critical section past its TTL, then
	// lets it carry on.
	Pause(ctx context.Context) error
	// Kill kills a worker in its critical section and starts a replacement.
	Kill(ctx context.Context) error
	// FailRenewals makes one worker's renewals fail (on), or stops that (off).
	FailRenewals(on bool)
	// SetLatency adds d to every store call of every worker.
	SetLatency(d time.Duration)
}

// PauseWorker freezes a worker in its critical section for 1.5 × TTL, its
// renewals included, as a GC pause or a stopped VM would; the worker then
// wakes and carries on: it writes its result and releases, unaware that
// another worker has taken the job over. The fence must refuse the writes
// and the token check the release.
type PauseWorker struct{}

func (PauseWorker) Name() string                            { return "pause-past-ttl" }
func (PauseWorker) Available(Env) bool                      { return true }
func (PauseWorker) Inject(ctx context.Context, e Env) error { return e.Pause(ctx) }
func (PauseWorker) Heal(context.Context, Env) error         { return nil }

// KillWorker kills a worker in its critical section: no more writes, no
// release; a new worker takes its place. Its job is taken over when the
// lease expires.
type KillWorker struct{}

func (KillWorker) Name() string                            { return "kill-holder" }
func (KillWorker) Available(Env) bool                      { return true }
func (KillWorker) Inject(ctx context.Context, e Env) error { return e.Kill(ctx) }
func (KillWorker) Heal(context.Context, Env) error         { return nil }

// RenewFailures makes every renewal of one worker fail until healed: the
// fence policy must cancel its critical section before its lease can
// expire, and the worker stops writing.
type RenewFailures struct{}

func (RenewFailures) Name() string                          { return "renew-failures" }
func (RenewFailures) Available(Env) bool                    { return true }
func (RenewFailures) Inject(_ context.Context, e Env) error { e.FailRenewals(true); return nil }
func (RenewFailures) Heal(_ context.Context, e Env) error   { e.FailRenewals(false); return nil }

// StoreLatency slows every store call of every worker by TTL/20 until
// healed: renewals get slower, none should be lost for it.
type StoreLatency struct{}

func (StoreLatency) Name() string                          { return "store-latency" }
func (StoreLatency) Available(Env) bool                    { return true }
func (StoreLatency) Inject(_ context.Context, e Env) error { e.SetLatency(e.TTL() / 20); return nil }
func (StoreLatency) Heal(_ context.Context, e Env) error   { e.SetLatency(0); return nil }

// StoreRestart restarts the lock store without persistence: every lock is
// gone at once, and the holders learn it at their next renewal. Available
// when the run has a way to restart its store (tests: testserver's
// Restart); the next fences must still beat every fence the job storage
// has accepted.
type StoreRestart struct {
	Restart func() error
}

func (StoreRestart) Name() string                        { return "store-restart" }
func (f StoreRestart) Available(Env) bool                { return f.Restart != nil }
func (f StoreRestart) Inject(context.Context, Env) error { return f.Restart() }
func (StoreRestart) Heal(context.Context, Env) error     { return nil }

// Partition freezes the network between the workers and the lock store:
// requests and replies are held, nothing is closed, so only timeouts notice
// (a silent partition). Healed a TTL later, when the held traffic flows
// again, late. Available when the run reaches its store through something
// that can freeze it (tests: testserver.Proxy's Freeze and Thaw).
type Partition struct {
	Freeze, Thaw func()
}

func (Partition) Name() string                        { return "silent-partition" }
func (f Partition) Available(Env) bool                { return f.Freeze != nil && f.Thaw != nil }
func (f Partition) Inject(context.Context, Env) error { f.Freeze(); return nil }
func (f Partition) Heal(context.Context, Env) error   { f.Thaw(); return nil }

// StoreWide reports whether the fault named name acts on the store rather
// than on one worker's critical section: it hits no critical section.
func StoreWide(name string) bool {
	switch name {
	case StoreLatency{}.Name(), StoreRestart{}.Name(), Partition{}.Name():
		return true
	}
	return false
}

// Default returns the in-process faults, injected in turn.
func Default() []Fault {
	return []Fault{PauseWorker{}, RenewFailures{}, KillWorker{}, StoreLatency{}}
}
