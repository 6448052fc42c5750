package drill

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/jobs"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence"
)

// The workload: workers take job locks and move jobs from queued to done
// through the fenced job storage, every call recorded.

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
	w.store = &workerStore{Store: r.cfg.Store, worker: id, rec: r.rec, knobs: r.knobs, timeout: r.ttl}
	var store driver.Store = w.store
	if d, ok := r.cfg.Store.(driver.DatedAcquirer); ok {
		store = datedWorkerStore{w.store, d} // the Client's acquires as in production (etcd)
	}
	w.client = leasehold.New(store, leasehold.WithLogger(slog.New(slog.DiscardHandler)))
	return w
}

type faultKind int

const (
	faultPause faultKind = iota + 1
	faultKill
)

// worker takes job locks and moves jobs through their states.
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
	failed := 0 // store errors in a row
	for ctx.Err() == nil && r.remaining(ctx) > 0 {
		// Recovery first: an in-flight job whose lease is no longer held
		// (its owner paused, killed or fenced) is taken over. New work only
		// within the headroom.
		result := sectionBusy
		if key := r.orphan(ctx); key != "" {
			result = w.section(ctx, key)
		} else if r.slots == nil { // a worker process
			if w.starter {
				if key, _ := r.jobs.Pick(ctx, jobs.Queued); key != "" {
					result = w.section(ctx, key)
				}
			}
		} else {
			select {
			case r.slots <- struct{}{}:
				if key, _ := r.jobs.Pick(ctx, jobs.Queued); key != "" {
					result = w.section(ctx, key)
				}
				<-r.slots
			default:
			}
		}
		if result != sectionFailed {
			failed = 0
		}
		switch result {
		case sectionKilled:
			w.dead.Store(true)
			r.spawn(ctx) // a replacement keeps the workload going
			return
		case sectionBusy:
			sleepFor(ctx, r.poll)
		case sectionFailed:
			failed++
			sleepFor(ctx, failPause(r.poll, r.ttl, failed))
		}
	}
}

// failPause is a worker's pause after its n-th store error in a row: poll
// doubled each time, up to ttl. A worker backs off from a store that is down,
// as a real one would, and still tries again within a TTL of its coming
// back. (Without it, a store down for a minute gave a history of thousands
// of attempts of unknown outcome, more than the linearizability check can
// decide in its time: every one may take effect at any later moment.)
func failPause(poll, ttl time.Duration, n int) time.Duration {
	d := poll
	for i := 1; i < n && d < ttl; i++ {
		d *= 2
	}
	return min(d, ttl)
}

type sectionResult int

const (
	sectionRan    sectionResult = iota
	sectionBusy                 // the key was held, or no job was free
	sectionFailed               // the acquire failed with a store error
	sectionKilled
)

// section is one critical section: take the job's lock, claim the job at
// the storage with the lease's fence, write running, work, write done,
// release. Faults act between the work and the final write.
func (w *worker) section(ctx context.Context, key string) sectionResult {
	r := w.run
	l, err := w.client.TryAcquire(ctx, key, r.ttl)
	switch {
	case errors.Is(err, leasehold.ErrNotAcquired):
		return sectionBusy
	case err != nil:
		return sectionFailed
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
		if !lost(k) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
			_ = l.Release(rctx)
			cancel()
		}
	}
	state, err := r.claim(k.Context(), w.id, key, l.Fence())
	if err != nil || jobs.Terminal(state) {
		release()
		return sectionRan
	}
	if r.write(ctx, w.id, key, l.Fence(), jobs.Running) != nil {
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
		if lost(k) && w.store.failRenew.Load() {
			r.rec.Event(history.Event{Fault: faults.RenewFailures{}.Name(), Worker: w.id, Key: key, Fence: l.Fence(), At: time.Now()})
		}
		release()
		return sectionRan
	}

	select {
	case f := <-w.requests:
		switch f {
		case faultKill:
			k.Stop() // the process is gone: no renewal, no write, no release
			r.rec.Event(history.Event{Fault: faults.KillWorker{}.Name(), Worker: w.id, Key: key, Fence: l.Fence(), At: time.Now()})
			return sectionKilled
		case faultPause:
			k.Stop() // a frozen process renews nothing
			r.rec.Event(history.Event{Fault: faults.PauseWorker{}.Name(), Worker: w.id, Key: key, Fence: l.Fence(), At: time.Now()})
			w.frozenUntilTakenOver(ctx, key, l.Token())
			// Awake, unaware: write and release as if nothing happened.
			_ = r.write(ctx, w.id, key, l.Fence(), jobs.Done)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
			_ = l.Release(rctx)
			cancel()
			return sectionRan
		}
	default:
	}
	if k.Context().Err() == nil {
		_ = r.write(ctx, w.id, key, l.Fence(), jobs.Done)
	}
	release()
	return sectionRan
}

// lost says whether k stopped trusting its lease (given up, or found gone),
// as against stopped or ended with its context.
func lost(k *leasehold.KeepAlive) bool {
	cause := context.Cause(k.Context())
	return errors.Is(cause, leasehold.ErrAbandoned) || errors.Is(cause, leasehold.ErrNotOwned)
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
	if lost(k) && w.store.failRenew.Load() {
		r.rec.Event(history.Event{Fault: faults.RenewFailures{}.Name(), Worker: w.id, Key: l.Key(), Fence: l.Fence(), At: time.Now()})
	}
	_ = r.write(ctx, w.id, l.Key(), l.Fence(), jobs.Done)
	k.Stop()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
	_ = l.Release(rctx)
	cancel()
}

// status tells the parent of a worker process what the worker is doing.
func (r *run) status(l line) {
	if r.out != nil {
		r.out.send(l)
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
	o := history.Op{Kind: history.OpClaim, Worker: worker, Key: key, Fence: f, Call: time.Now()}
	seq := r.rec.Call(o)
	state, err := r.jobs.Claim(ctx, worker, key, f)
	o.State = state
	r.storageOp(seq, o, err)
	return state, err
}

// write is a job write, recorded, with stale refusals counted.
func (r *run) write(ctx context.Context, worker int, key string, f int64, state string) error {
	o := history.Op{Kind: history.OpWrite, Worker: worker, Key: key, Fence: f, State: state, Call: time.Now()}
	seq := r.rec.Call(o)
	err := r.jobs.Write(context.WithoutCancel(ctx), worker, key, f, state)
	r.storageOp(seq, o, err)
	return err
}

func (r *run) storageOp(seq int64, o history.Op, err error) {
	o.Return, o.OK, o.Err = time.Now(), err == nil, errString(err)
	o.Stale = errors.Is(err, fence.ErrStale)
	r.rec.Return(seq, o, "")
	r.countRefused(err)
}

func (r *run) countRefused(err error) {
	if errors.Is(err, fence.ErrStale) {
		r.refused.Add(1)
	}
}

// inspect reads key's lock, bounded like every store call of the drill
// (see workerStore.timeout).
func (r *run) inspect(ctx context.Context, key string) (driver.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, r.ttl)
	defer cancel()
	return r.cfg.Store.Inspect(ctx, key)
}

// orphan returns an in-flight job whose lock nobody holds, or "".
func (r *run) orphan(ctx context.Context) string {
	running, _ := r.jobs.InState(ctx, jobs.Running)
	for _, key := range running {
		if info, err := r.inspect(ctx, key); err == nil && !info.Held {
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
		if info, err := r.inspect(ctx, key); err == nil && info.Held && info.Token != token {
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

// workerStore is the store as one worker sees it: every call is recorded,
// and the faults' knobs act on it.
type workerStore struct {
	driver.Store
	worker    int
	rec       *history.Recorder
	knobs     *knobs
	failRenew atomic.Bool
	// timeout bounds each store call, as a production worker bounds its
	// own: one TTL, since an answer later than that is of no use (a new
	// lease would be over, a holder seen busy would have expired). Without
	// it a call sent to a replica that stopped answering (frozen, cut off
	// without a reset) waits for the client's keepalive to drop the
	// connection, 10 s and more for etcd's gRPC, and the drill measures
	// that instead of the lock's takeover.
	timeout time.Duration
}

// errInjectedRenewFailure is the renew-failures fault: the renewal never
// reaches the store.
var errInjectedRenewFailure = errors.New(history.InjectedRenewFailure)

// knobs are the faults that act on every worker's store at once.
type knobs struct {
	latency       atomic.Int64 // nanoseconds added to every store call
	unsafeRelease bool         // negative control: delete the key whoever holds it
}

func (s *workerStore) delay(ctx context.Context) error {
	d := time.Duration(s.knobs.latency.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (s *workerStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	return s.acquire(ctx, key, token, func(ctx context.Context) (int64, error) {
		return s.Store.Acquire(ctx, key, token, ttl)
	})
}

// acquire records an acquire that call makes.
func (s *workerStore) acquire(ctx context.Context, key, token string, call func(context.Context) (int64, error)) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	o := history.Op{Kind: history.OpAcquire, Worker: s.worker, Key: key, Call: time.Now()}
	seq := s.rec.Call(o)
	err := s.delay(ctx)
	if err == nil {
		o.Fence, err = call(ctx)
	}
	o.Return, o.OK = time.Now(), err == nil
	if err != nil && !errors.Is(err, leasehold.ErrNotAcquired) {
		o.Err = err.Error()
	}
	s.rec.Return(seq, o, token)
	return o.Fence, err
}

// datedWorkerStore is a workerStore over a store whose acquire may date the
// lock's term (driver.DatedAcquirer), recorded as an acquire.
type datedWorkerStore struct {
	*workerStore
	dater driver.DatedAcquirer
}

func (s datedWorkerStore) AcquireDated(ctx context.Context, key, token string, ttl, stay time.Duration) (int64, time.Time, error) {
	var from time.Time
	fence, err := s.acquire(ctx, key, token, func(ctx context.Context) (fence int64, err error) {
		fence, from, err = s.dater.AcquireDated(ctx, key, token, ttl, stay)
		return fence, err
	})
	return fence, from, err
}

func (s *workerStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	o := history.Op{Kind: history.OpRenew, Worker: s.worker, Key: key, Fence: s.rec.FenceOf(token), Call: time.Now()}
	seq := s.rec.Call(o)
	err := s.delay(ctx)
	if err == nil && s.failRenew.Load() {
		err = errInjectedRenewFailure
	}
	if err == nil {
		err = s.Store.Renew(ctx, key, token, ttl)
	}
	o.Return, o.OK, o.Err = time.Now(), err == nil, errString(err)
	s.rec.Return(seq, o, "")
	return err
}

func (s *workerStore) Release(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	o := history.Op{Kind: history.OpRelease, Worker: s.worker, Key: key, Fence: s.rec.FenceOf(token), Call: time.Now()}
	seq := s.rec.Call(o)
	err := s.delay(ctx)
	if err == nil {
		if s.knobs.unsafeRelease {
			err = s.releaseByKey(ctx, key)
		} else {
			err = s.Store.Release(ctx, key, token)
		}
	}
	o.Return, o.OK, o.Err = time.Now(), err == nil, errString(err)
	s.rec.Return(seq, o, "")
	return err
}

// releaseByKey is the bug the negative control plants: DEL key, whoever
// holds it.
func (s *workerStore) releaseByKey(ctx context.Context, key string) error {
	info, err := s.Store.Inspect(ctx, key)
	if err != nil {
		return err
	}
	if !info.Held {
		return leasehold.ErrNotOwned
	}
	return s.Store.Release(ctx, key, info.Token)
}
