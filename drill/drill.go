package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/store/memstore"
)

// Config configures a drill. The zero value runs the default drill on an
// in-process memstore.
type Config struct {
	// Store holds the job locks. Default: a new memstore.
	Store leasehold.Store
	// StoreName names it in the report. Default: "memory".
	StoreName string
	// Storage holds the jobs' states, fenced. Default: NewMemStorage().
	Storage Storage
	// StorageName names it in the report. Default: "memory".
	StorageName string
	// Workers is the number of concurrent workers. Default: 8. At most half
	// of them start new jobs at once: the rest is the headroom that takes
	// over jobs whose owner was paused, killed or fenced, as soon as their
	// lease is free, so that takeover time measures the lock, not a queue.
	Workers int
	// Jobs is the number of jobs, each moved from queued to done. Default:
	// 100: with 4 new jobs at a time and critical sections of TTL/12 to
	// 1.5 × TTL (0.8 TTL on average), about 12 seconds at the default time
	// scale, long enough for some eighty faults.
	Jobs int
	// TimeScale compresses the production lock timings of docs/design.md §5 (the
	// scheduler job path: TTL 60 s, renewal every 20 s). Default: 1/100,
	// so the TTL is 600 ms and a drill takes seconds.
	TimeScale float64
	// Faults are injected in turn, one every TTL/4, each healed a TTL
	// later (so up to four are active at once). Default: DefaultFaults();
	// an empty, non-nil slice injects none.
	Faults []Fault
	// UnsafeRelease is a negative control: releases delete the key whoever
	// holds it. The checkers must report wrong-owner releases.
	UnsafeRelease bool
	// NoFencing is a negative control: the job storage accepts any fence.
	// The checkers must report stale writes.
	NoFencing bool
	// LinearizeTimeout bounds the linearizability check of the history.
	// Default: DefaultLinearizeTimeout (30 s), which documents its reason.
	LinearizeTimeout time.Duration
	// Timeout bounds the whole drill. Default: 2 minutes.
	Timeout time.Duration
	// Progress, when set, receives a progress line every 250 ms.
	Progress io.Writer

	// Processes, when positive, runs the workers as this many separate OS
	// processes (instead of Workers goroutines), so that a pause is a real
	// SIGSTOP and a kill a real SIGKILL. The lock store and the job
	// storage must then be shared servers (not memstore, not the
	// in-process storage), and StartWorker must be set.
	Processes int
	// StartWorker returns the command that runs one worker process: a
	// program that calls ServeWorker with WorkerSpecFromEnv and the same
	// store and storage as this drill (leasehold's CLI runs itself as
	// "leasehold drill-worker"). The drill adds the spec to the command's
	// environment and takes its standard input and output.
	StartWorker func() *exec.Cmd
}

// run is one drill in progress.
type run struct {
	cfg     Config
	ttl     time.Duration
	work    time.Duration // the longest critical section's work; each draws from [work/18, work]
	poll    time.Duration // a worker's pause when no job is free
	jobKeys []string
	jobs    Storage
	refused atomic.Int64 // stale claims and writes refused
	rec     *recorder
	knobs   *knobs

	slots chan struct{} // the headroom: sections on new jobs at once

	mu      sync.Mutex
	workers []*worker
	nextID  int
	failing atomic.Pointer[worker]
	wg      sync.WaitGroup

	procs       *procs // the worker processes; nil when the workers are goroutines
	failingProc atomic.Pointer[proc]

	sections atomic.Int64
	injected map[string]int
	outages  []Window // store-wide faults that cut every worker off (partitions)
	// faultSpans are the faults injected, each from injection to heal;
	// written by injectFaults only, read by report after it returned.
	faultSpans []FaultSpan
}

// Run runs a drill and returns its report; the report's Violations say
// whether the lock and the fence held. The error is for a drill that could
// not run at all.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Store == nil {
		cfg.Store, cfg.StoreName = memstore.New(), "memory"
	}
	if cfg.StoreName == "" {
		cfg.StoreName = "custom"
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.Jobs == 0 {
		cfg.Jobs = 100
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 0.01
	}
	if cfg.Faults == nil {
		cfg.Faults = DefaultFaults()
	}
	if cfg.LinearizeTimeout == 0 {
		cfg.LinearizeTimeout = DefaultLinearizeTimeout
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Storage == nil {
		cfg.Storage, cfg.StorageName = NewMemStorage(), "memory"
	}
	if cfg.StorageName == "" {
		cfg.StorageName = "custom"
	}
	if cfg.Processes > 0 {
		cfg.Workers = cfg.Processes
	}
	switch {
	case cfg.Processes > 0 && cfg.StartWorker == nil:
		return nil, &leasehold.ArgumentError{Arg: "processes", Reason: "needs StartWorker, the command that runs a worker process"}
	case cfg.Processes > 0 && isMemory(cfg.Store, cfg.Storage):
		return nil, &leasehold.ArgumentError{Arg: "processes", Reason: "worker processes cannot share the in-process memory store or job storage; give a Redis, etcd or PostgreSQL store and a PostgreSQL job storage"}
	case cfg.Workers < 2:
		return nil, &leasehold.ArgumentError{Arg: "workers", Reason: fmt.Sprintf("%d: a takeover needs at least 2", cfg.Workers)}
	case cfg.Jobs < 1:
		return nil, &leasehold.ArgumentError{Arg: "jobs", Reason: fmt.Sprintf("%d is not positive", cfg.Jobs)}
	case cfg.TimeScale <= 0 || cfg.TimeScale > 1:
		return nil, &leasehold.ArgumentError{Arg: "time scale", Reason: fmt.Sprintf("%v is not in (0, 1]", cfg.TimeScale)}
	}
	ttl, err := scaledTTL(cfg.TimeScale)
	if err != nil {
		return nil, err
	}
	r := newRun(cfg, ttl)
	r.slots = make(chan struct{}, max(1, cfg.Workers/2))
	if err := r.jobs.Init(ctx, r.jobKeys, cfg.NoFencing); err != nil {
		return nil, fmt.Errorf("drill: job storage: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	if cfg.Processes > 0 {
		if err := r.startProcs(ctx); err != nil {
			return nil, err
		}
	} else {
		for range cfg.Workers {
			r.spawn(ctx)
		}
	}
	r.injectFaults(ctx)
	if r.procs != nil {
		r.procs.stopAll()
	}
	cancel()
	r.wg.Wait()
	return r.report(time.Since(start)), nil
}

// scaledTTL is the scheduler path's 60 s TTL (docs/design.md §5) at scale.
func scaledTTL(scale float64) (time.Duration, error) {
	if scale <= 0 || scale > 1 {
		return 0, &leasehold.ArgumentError{Arg: "time scale", Reason: fmt.Sprintf("%v is not in (0, 1]", scale)}
	}
	ttl := time.Duration(float64(60*time.Second) * scale)
	if err := leasehold.ValidateTTL(ttl); err != nil {
		return 0, fmt.Errorf("drill: time scale %v gives %w", scale, err)
	}
	return ttl, nil
}

// newRun returns a run of cfg, defaults applied, before its workers start.
func newRun(cfg Config, ttl time.Duration) *run {
	r := &run{
		cfg:      cfg,
		ttl:      ttl,
		work:     ttl * 3 / 2,
		poll:     ttl / 20,
		rec:      &recorder{fences: make(map[string]int64), started: time.Now()},
		knobs:    &knobs{unsafeRelease: cfg.UnsafeRelease},
		injected: make(map[string]int),
		jobs:     cfg.Storage,
	}
	for i := range cfg.Jobs {
		r.jobKeys = append(r.jobKeys, fmt.Sprintf("drill:scheduler:job:%d", i))
	}
	return r
}

// isMemory reports whether the store or the storage lives in this process.
func isMemory(s leasehold.Store, st Storage) bool {
	_, memStore := s.(*memstore.Store)
	_, memJobs := st.(*memStorage)
	return memStore || memJobs
}

// injectFaults injects the faults in turn, one every TTL/4, healing each a
// TTL later, until every job is done or ctx ends; it prints progress.
func (r *run) injectFaults(ctx context.Context) {
	env := &Env{run: r}
	var faults []Fault
	for _, f := range r.cfg.Faults {
		if f.Available(env) {
			faults = append(faults, f)
		}
	}
	type active struct {
		f      Fault
		worker int
		since  time.Time
	}
	var live []active
	tick := time.NewTicker(r.ttl / 4)
	defer tick.Stop()
	lastProgress := time.Now()
	for i := 0; r.remaining(ctx) > 0 && !r.workersGone(); i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for len(live) > 0 && time.Since(live[0].since) >= r.ttl {
			r.heal(ctx, env, live[0].f, live[0].worker, live[0].since)
			live = live[1:]
		}
		if len(faults) > 0 {
			f := faults[i%len(faults)]
			env.target = -1
			if err := f.Inject(ctx, env); err == nil {
				r.injected[f.Name()]++
				live = append(live, active{f, env.target, time.Now()})
			}
		}
		if r.cfg.Progress != nil && time.Since(lastProgress) >= 250*time.Millisecond {
			lastProgress = time.Now()
			fmt.Fprintf(r.cfg.Progress, "\rdrill: %d/%d jobs done, %d critical sections, %d faults, %d stale writes refused ",
				r.cfg.Jobs-r.remaining(ctx), r.cfg.Jobs, r.sections.Load(), sum(r.injected), r.refused.Load())
		}
	}
	for _, a := range live {
		r.heal(ctx, env, a.f, a.worker, a.since)
	}
	if r.cfg.Progress != nil {
		fmt.Fprintln(r.cfg.Progress)
	}
}

// Window is a span of time.
type Window struct{ From, To time.Time }

// heal ends fault f, injected at since on worker (-1: store-wide), and
// records its span for the report; a partition's span is also kept as an
// outage, since no takeover can happen while every worker is cut off from
// the store.
func (r *run) heal(ctx context.Context, env *Env, f Fault, worker int, since time.Time) {
	_ = f.Heal(ctx, env)
	now := time.Now()
	r.faultSpans = append(r.faultSpans, FaultSpan{Name: f.Name(), Worker: worker, From: since, To: now})
	if _, ok := f.(Partition); ok {
		r.outages = append(r.outages, Window{since, now})
	}
}

// workersGone reports whether a multi-process drill has no worker left
// (they failed and were not replaced: see procs.read).
func (r *run) workersGone() bool {
	return r.procs != nil && len(r.procs.live()) == 0
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// spawn starts a new worker goroutine.
func (r *run) spawn(ctx context.Context) {
	r.mu.Lock()
	id := r.nextID
	r.nextID++
	w := r.newWorker(id)
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	r.wg.Go(func() { w.loop(ctx) })
}

func (r *run) newWorker(id int) *worker {
	w := &worker{id: id, run: r, requests: make(chan faultKind, 1)}
	w.store = &workerStore{Store: r.cfg.Store, worker: id, rec: r.rec, knobs: r.knobs}
	w.client = leasehold.New(w.store, leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	return w
}

func (r *run) randomWorker() *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := make([]*worker, 0, len(r.workers))
	for _, w := range r.workers {
		if !w.dead.Load() {
			live = append(live, w)
		}
	}
	return live[rand.IntN(len(live))]
}

type faultKind int

const (
	faultPause faultKind = iota + 1
	faultKill
)

// worker is one control-plane worker: it takes job locks and moves jobs on.
type worker struct {
	id       int
	run      *run
	store    *workerStore
	client   *leasehold.Client
	requests chan faultKind // a fault to act out in the next critical section
	dead     atomic.Bool
	// In a worker process: starter says whether it starts new jobs (the
	// goroutine workers share run.slots instead); careless, that it writes
	// its result and releases whatever its lease says, so that a SIGSTOP
	// past the TTL meets the fence and the token check, not a context.
	starter, careless bool
}

func (w *worker) request(f faultKind) {
	select {
	case w.requests <- f:
	default: // one pending fault per worker is enough
	}
}

// loop runs critical sections on random unfinished jobs until every job is
// done, ctx ends, or the worker is killed.
func (w *worker) loop(ctx context.Context) {
	r := w.run
	for ctx.Err() == nil && r.remaining(ctx) > 0 {
		// Recovery first, as a control plane's reconciler does: an in-flight
		// job whose lease is no longer held (its owner paused, killed or
		// fenced) is taken over. New work only within the headroom.
		result := sectionBusy
		if key := r.orphan(ctx); key != "" {
			result = w.section(ctx, key)
		} else if r.slots == nil { // a worker process
			if w.starter {
				if key, _ := r.jobs.Pick(ctx, Queued); key != "" {
					result = w.section(ctx, key)
				}
			}
		} else {
			select {
			case r.slots <- struct{}{}:
				if key, _ := r.jobs.Pick(ctx, Queued); key != "" {
					result = w.section(ctx, key)
				}
				<-r.slots
			default:
			}
		}
		switch result {
		case sectionKilled:
			w.dead.Store(true)
			r.spawn(ctx) // a replacement keeps the workload going
			return
		case sectionBusy:
			sleepFor(ctx, r.poll)
		}
	}
}

type sectionResult int

const (
	sectionRan sectionResult = iota
	sectionBusy
	sectionKilled
)

// section is one critical section: take the job's lock, claim the job at
// the storage with the lease's fence, write running, work, write done,
// release. Faults act between the work and the final write.
func (w *worker) section(ctx context.Context, key string) sectionResult {
	r := w.run
	l, err := w.client.TryAcquire(ctx, key, r.ttl)
	if err != nil {
		return sectionBusy
	}
	r.sections.Add(1)
	r.status(line{T: lineSection})
	k, err := l.KeepAlive(ctx)
	if err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return sectionRan
	}
	release := func() {
		k.Stop()
		if k.Err() == nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
			_ = l.Release(rctx)
			cancel()
		}
	}
	state, err := r.claim(k.Context(), w.id, key, l.Fence())
	if err != nil || terminal(state) {
		release()
		return sectionRan
	}
	if r.write(ctx, w.id, key, l.Fence(), Running) != nil {
		release()
		return sectionRan
	}
	if w.careless {
		w.carelessWork(ctx, k, l)
		return sectionRan
	}
	// Most sections end before the first renewal; the long ones live on
	// their renewals, which renewal faults then cut.
	select {
	case <-time.After(r.work/18 + rand.N(r.work-r.work/18)):
	case <-k.Context().Done(): // the fence policy gave the lease up: stop
		if k.Err() != nil && w.store.failRenew.Load() {
			r.rec.event(Event{Fault: "renew-failures", Worker: w.id, Key: key, Fence: l.Fence(), At: time.Now()})
		}
		release()
		return sectionRan
	}

	select {
	case f := <-w.requests:
		switch f {
		case faultKill:
			k.Stop() // the process is gone: no renewal, no write, no release
			r.rec.event(Event{Fault: "kill-holder", Worker: w.id, Key: key, Fence: l.Fence(), At: time.Now()})
			return sectionKilled
		case faultPause:
			k.Stop() // a frozen process renews nothing
			r.rec.event(Event{Fault: "pause-past-ttl", Worker: w.id, Key: key, Fence: l.Fence(), At: time.Now()})
			w.frozenUntilTakenOver(ctx, key, l.Token())
			// Awake, unaware: write and release as if nothing happened.
			_ = r.write(ctx, w.id, key, l.Fence(), Done)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
			_ = l.Release(rctx)
			cancel()
			return sectionRan
		}
	default:
	}
	if k.Context().Err() == nil {
		_ = r.write(ctx, w.id, key, l.Fence(), Done)
	}
	release()
	return sectionRan
}

// carelessWork is a worker process's critical section after its claim: it
// works, writes done and releases, never looking at its lease's context. A
// SIGSTOP during the work makes it wake past its TTL, write with its old
// fence and release a key it no longer holds: the fence and the token
// check alone must refuse both.
func (w *worker) carelessWork(ctx context.Context, k *leasehold.KeepAlive, l *leasehold.Lease) {
	r := w.run
	r.status(line{T: lineWorking, Key: l.Key(), Fence: l.Fence()})
	defer r.status(line{T: lineIdle})
	sleepFor(ctx, r.work/18+rand.N(r.work-r.work/18))
	if k.Err() != nil && w.store.failRenew.Load() {
		r.rec.event(Event{Fault: "renew-failures", Worker: w.id, Key: l.Key(), Fence: l.Fence(), At: time.Now()})
	}
	_ = r.write(ctx, w.id, l.Key(), l.Fence(), Done)
	k.Stop()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
	_ = l.Release(rctx)
	cancel()
}

// status tells the parent of a worker process what the worker is doing.
func (r *run) status(l line) {
	if r.rec.out != nil {
		r.rec.out.send(l)
	}
}

// remaining counts unfinished jobs; a storage error counts as "some".
func (r *run) remaining(ctx context.Context) int {
	n, err := r.jobs.Remaining(ctx)
	if err != nil {
		return 1
	}
	return n
}

// claim is a job claim, recorded, with stale refusals counted.
func (r *run) claim(ctx context.Context, worker int, key string, f int64) (string, error) {
	o := Op{Kind: OpClaim, Worker: worker, Key: key, Fence: f, Call: time.Now()}
	seq := r.rec.begin(o)
	state, err := r.jobs.Claim(ctx, worker, key, f)
	o.State = state
	r.storageOp(seq, o, err)
	return state, err
}

// write is a job write, recorded, with stale refusals counted.
func (r *run) write(ctx context.Context, worker int, key string, f int64, state string) error {
	o := Op{Kind: OpWrite, Worker: worker, Key: key, Fence: f, State: state, Call: time.Now()}
	seq := r.rec.begin(o)
	err := r.jobs.Write(context.WithoutCancel(ctx), worker, key, f, state)
	r.storageOp(seq, o, err)
	return err
}

func (r *run) storageOp(seq int64, o Op, err error) {
	o.Return, o.OK, o.Err = time.Now(), err == nil, errString(err)
	o.Stale = errors.Is(err, fence.ErrStale)
	r.rec.op(seq, o, "")
	r.countRefused(err)
}

func (r *run) countRefused(err error) {
	if errors.Is(err, fence.ErrStale) {
		r.refused.Add(1)
	}
}

// orphan returns an in-flight job whose lock nobody holds, or "".
func (r *run) orphan(ctx context.Context) string {
	running, _ := r.jobs.InState(ctx, Running)
	for _, key := range running {
		if info, err := r.cfg.Store.Inspect(ctx, key); err == nil && !info.Held {
			return key
		}
	}
	return ""
}

// frozenUntilTakenOver stands for a pause past the TTL: the worker does
// nothing until another worker holds its key (the worst moment to wake up:
// its stale write and release meet a live owner), or three TTLs pass.
func (w *worker) frozenUntilTakenOver(ctx context.Context, key, token string) {
	r := w.run
	deadline := time.Now().Add(3 * r.ttl)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if info, err := r.cfg.Store.Inspect(ctx, key); err == nil && info.Held && info.Token != token {
			return
		}
		sleepFor(ctx, r.poll)
	}
}

func sleepFor(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
