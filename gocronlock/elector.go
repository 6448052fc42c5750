package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-co-op/gocron/v2"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// Elector is a gocron.Elector (gocron.WithDistributedElector): it campaigns
// for a key with leasehold's Lead from NewElector until Close, and only
// while this process leads do its scheduler's jobs run. It is safe for
// concurrent use.
type Elector struct {
	client *leasehold.Client
	key    string
	stop   context.CancelFunc
	done   chan struct{} // closed when the campaign has ended

	mu     sync.Mutex
	term   *term // the current term; nil while not leading
	failed error // why Lead returned, when not for Close: a bad or closed Client
}

var _ gocron.Elector = (*Elector)(nil)

// term is one term of leadership: the Lead term's context and lease, and
// the contexts handed to jobs, one per job context (see Lease).
type term struct {
	ctx   context.Context
	lease *leasehold.Lease
	jobs  map[context.Context]*jobContext
}

// jobContext is a job's context merged with the term's.
type jobContext struct {
	ctx     context.Context
	unwatch func() bool // stops watching the job's context
}

// NewElector starts campaigning for key on c in a goroutine that Close
// stops; close the Elector before c. Bad arguments are an
// *leasehold.ArgumentError naming them.
func NewElector(c *leasehold.Client, key string, opts ...ElectorOption) (*Elector, error) {
	if c == nil {
		return nil, &leasehold.ArgumentError{Arg: "client", Reason: "nil"}
	}
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	cfg, err := newElectorConfig(opts)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	e := &Elector{client: c, key: key, stop: stop, done: make(chan struct{})}
	go e.campaign(ctx, cfg)
	return e, nil
}

// campaign leads, term after term, until ctx ends, or until Lead returns
// for a reason of its own, which it keeps for IsLeader and Lease.
func (e *Elector) campaign(ctx context.Context, cfg electorConfig) {
	defer close(e.done)
	err := e.client.Lead(ctx, e.key, func(ctx context.Context, l *leasehold.Lease) {
		t := &term{ctx: ctx, lease: l, jobs: make(map[context.Context]*jobContext)}
		e.mu.Lock()
		e.term = t
		e.mu.Unlock()
		<-ctx.Done() // the term ended: lost, given up, or Close
		e.mu.Lock()
		e.term = nil
		jobs := t.jobs
		t.jobs = nil
		e.mu.Unlock()
		for _, j := range jobs {
			j.unwatch() // the job contexts, children of the term's, are done
		}
	}, leasehold.WithTTL(cfg.ttl))
	if err != nil && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
		e.mu.Lock()
		e.failed = err
		e.mu.Unlock()
	}
}

// notLeader is the error of IsLeader and Lease while this process does not
// lead: it matches ErrNotLeader, and the campaign's error when Lead has
// returned (a Client made with a bad option, or closed before the Elector),
// for which the Elector will never lead. e.mu must be held.
func (e *Elector) notLeader() error {
	if e.failed != nil {
		return fmt.Errorf("gocronlock: %q: %w: the campaign has stopped: %w", e.key, ErrNotLeader, e.failed)
	}
	return fmt.Errorf("gocronlock: %q: %w", e.key, ErrNotLeader)
}

var errNilElector = &leasehold.ArgumentError{Arg: "Elector", Reason: "nil, or not made by NewElector"}

// IsLeader returns nil while this process leads, and an error matching
// ErrNotLeader otherwise; gocron asks before each run. When the campaign
// has stopped for good because Lead returned an error (the Client's bad
// option or ErrClosed, not the Elector's Close), the error matches that
// one too.
func (e *Elector) IsLeader(context.Context) error {
	if e == nil || e.client == nil {
		return errNilElector
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term == nil || e.term.ctx.Err() != nil {
		return e.notLeader()
	}
	return nil
}

// Lease returns the leader's lease for a job to use, given the job's
// context: a context that ends when ctx does or when the term ends (lost,
// given up under the fence policy with cause matching
// leasehold.ErrAbandoned, or Close), and the term's lease, whose Fence goes
// with every write. It returns ErrNotLeader, and a done context, while this
// process does not lead (matching Lead's error too, as IsLeader's does).
func (e *Elector) Lease(ctx context.Context) (context.Context, *leasehold.Lease, error) {
	switch {
	case e == nil || e.client == nil:
		return doneContext(errNilElector), nil, errNilElector
	case ctx == nil:
		err := &leasehold.ArgumentError{Arg: "ctx", Reason: "nil"}
		return doneContext(err), nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.term
	if t == nil || t.ctx.Err() != nil {
		err := e.notLeader()
		return doneContext(err), nil, err
	}
	// One merged context per job context and term: gocron hands a job the
	// same context on every run, and nothing tells when a run ends.
	if j := t.jobs[ctx]; j != nil {
		return j.ctx, t.lease, nil
	}
	jctx, cancel := context.WithCancelCause(t.ctx)
	j := &jobContext{ctx: jctx}
	j.unwatch = context.AfterFunc(ctx, func() {
		cancel(context.Cause(ctx))
		e.mu.Lock()
		if t.jobs != nil && t.jobs[ctx] == j {
			delete(t.jobs, ctx)
		}
		e.mu.Unlock()
	})
	t.jobs[ctx] = j
	return jctx, t.lease, nil
}

// Close stops campaigning: a term in progress ends, its lease is released
// (within 2 s), and Close returns when the campaign has. Calling it again
// does nothing.
func (e *Elector) Close() error {
	if e == nil || e.client == nil {
		return errNilElector
	}
	e.stop()
	<-e.done
	return nil
}
