package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// Errors, matched with errors.Is.
var (
	// ErrNoLease is returned by Locker.Lease for a job that holds no lock
	// now: called outside its run, or with a name other than the job's.
	ErrNoLease = errors.New("gocronlock: the job holds no lock")

	// ErrNotLeader is returned by Elector.IsLeader and Elector.Lease while
	// this process does not lead.
	ErrNotLeader = errors.New("gocronlock: not the leader")

	// errRunEnded is the cause on a run's context after its Unlock.
	errRunEnded = errors.New("gocronlock: the run's lock was unlocked")
)

// Locker is a gocron.Locker (gocron.WithDistributedLocker): each run of a
// job takes the lease of its job's key, so one scheduler runs each slot. It
// is safe for concurrent use.
type Locker struct {
	client *leasehold.Client
	cfg    lockerConfig

	mu   sync.Mutex
	runs map[string]*run // the runs holding a lock, by job name
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker taking leases from c; share c with the rest of
// the process. Bad arguments are an *leasehold.ArgumentError naming them.
func NewLocker(c *leasehold.Client, opts ...LockerOption) (*Locker, error) {
	if c == nil {
		return nil, &leasehold.ArgumentError{Arg: "client", Reason: "nil"}
	}
	cfg, err := newLockerConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Locker{client: c, cfg: cfg, runs: make(map[string]*run)}, nil
}

var errNilLocker = &leasehold.ArgumentError{Arg: "Locker", Reason: "nil, or not made by NewLocker"}

// Lock takes the lock of job (gocron passes the job's name) for one run: one
// attempt, refused when another scheduler holds it, or when the store has
// not answered within half the minimum hold. The lease is renewed until
// Unlock, which keeps the key until the minimum hold has passed since Lock
// was called (docs/gocron.md).
func (l *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	if l == nil || l.client == nil {
		return nil, errNilLocker
	}
	if ctx == nil {
		return nil, &leasehold.ArgumentError{Arg: "ctx", Reason: "nil"}
	}
	if job == "" {
		return nil, &leasehold.ArgumentError{Arg: "job", Reason: "empty"}
	}
	start := time.Now()
	budget := l.cfg.minHold / 2
	actx, cancel := context.WithTimeout(ctx, budget)
	lease, err := l.client.TryAcquire(actx, l.cfg.prefix+job, l.cfg.ttl)
	cancel()
	if err == nil && time.Since(start) > budget {
		// Another scheduler may have run this slot and let its hold lapse.
		_ = lease.Release(context.WithoutCancel(ctx))
		err = context.DeadlineExceeded
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("gocronlock: lock job %q: not acquired within %v, half the minimum hold: %w", job, budget, err)
		}
		return nil, fmt.Errorf("gocronlock: lock job %q: %w", job, err)
	}
	// Renewed until Unlock, whatever gocron does to the job's context.
	keep, err := lease.KeepAlive(context.WithoutCancel(ctx))
	if err != nil {
		_ = lease.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("gocronlock: lock job %q: %w", job, err)
	}
	r := &run{locker: l, job: job, lease: lease, keep: keep, start: start}
	r.ctx, r.cancel = context.WithCancelCause(keep.Context())
	r.unwatch = context.AfterFunc(ctx, func() { r.cancel(context.Cause(ctx)) })
	l.mu.Lock()
	l.runs[job] = r
	l.mu.Unlock()
	return r, nil
}

// Lease returns the lock of job's current run, for the job to use: a
// context that ends when the lock is lost (cause matching
// leasehold.ErrAbandoned), when gocron cancels the job's context, or at
// Unlock; and the lease, whose Fence goes with every write. It returns
// ErrNoLease, and a done context, outside a run.
func (l *Locker) Lease(job string) (context.Context, *leasehold.Lease, error) {
	switch {
	case l == nil || l.client == nil:
		return doneContext(errNilLocker), nil, errNilLocker
	case job == "":
		err := &leasehold.ArgumentError{Arg: "job", Reason: "empty"}
		return doneContext(err), nil, err
	}
	l.mu.Lock()
	r := l.runs[job]
	l.mu.Unlock()
	if r == nil {
		err := fmt.Errorf("gocronlock: job %q: %w", job, ErrNoLease)
		return doneContext(err), nil, err
	}
	return r.ctx, r.lease, nil
}

// doneContext is a context cancelled with cause err.
func doneContext(err error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(err)
	return ctx
}

// run is one run's lock, the gocron.Lock that Lock returns.
type run struct {
	locker  *Locker
	job     string
	lease   *leasehold.Lease
	keep    *leasehold.KeepAlive
	start   time.Time // when Lock was called: the minimum hold counts from here
	ctx     context.Context
	cancel  context.CancelCauseFunc
	unwatch func() bool // stops watching the job's context

	once sync.Once
	err  error
}

// Unlock ends the run: it releases the key when the minimum hold has
// passed, and otherwise stops renewing and sets the lease to expire when it
// does. It is safe to call twice.
func (r *run) Unlock(ctx context.Context) error {
	r.once.Do(func() { r.err = r.unlock(ctx) })
	return r.err
}

func (r *run) unlock(ctx context.Context) error {
	l := r.locker
	l.mu.Lock()
	if l.runs[r.job] == r {
		delete(l.runs, r.job)
	}
	l.mu.Unlock()
	r.unwatch()
	r.cancel(errRunEnded)
	// Detached: gocron may have cancelled the job's context (Shutdown).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	left := l.cfg.minHold - time.Since(r.start)
	if left < driver.MinTTL {
		if err := r.lease.Release(ctx); err != nil {
			return fmt.Errorf("gocronlock: unlock job %q: %w", r.job, err)
		}
		return nil
	}
	// The store counts left from when the renewal reaches it, so the key is
	// held at least until start + minHold.
	r.keep.Stop()
	if err := r.lease.Renew(ctx, left); err != nil {
		return fmt.Errorf("gocronlock: unlock job %q: keep it %v more: %w", r.job, left.Round(time.Millisecond), err)
	}
	return nil
}
