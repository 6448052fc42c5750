package leasehold

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Renewal: one renewal state per lease, one engine per Client
// (docs/design.md §4).

// Defaults of renewal; docs/design.md §4 gives the reasoning.
const (
	// defaultFenceAfter tolerates a blip or two (a dropped connection, a
	// failover) before the fence policy gives the lease up.
	defaultFenceAfter = 3

	// DefaultRenewDivisor renews every ttl/3: two more tries after a failure
	// before the TTL runs out.
	DefaultRenewDivisor = 3

	// defaultRenewTimeout bounds one renewal call: slower than 2 s is as good
	// as failed on a store that answers in milliseconds.
	defaultRenewTimeout = 2 * time.Second

	// DefaultDriftDivisor puts the local deadline ttl/10 before the server's
	// expiry: room for clock-rate drift, expiry resolution, and fn to stop.
	DefaultDriftDivisor = 10

	// defaultBatchWindow lets renewals due within 20 ms share a store call,
	// for at most 2 % more renewals at a 1 s interval.
	defaultBatchWindow = 20 * time.Millisecond

	// defaultBatchSize makes a ~100 KB Redis pipeline: the round trip is
	// amortised, and a single-threaded server is not stalled.
	defaultBatchSize = 1000

	// defaultBatchConcurrency keeps up with 10⁵ renewals a second without
	// flooding a slow store.
	defaultBatchConcurrency = 4

	// defaultFallbackConcurrency caps Renew calls without a BatchRenewer:
	// enough for 100 000 leases at ttl/3 for any TTL above 5 s.
	defaultFallbackConcurrency = 64

	// maxRenewConcurrency bounds WithRenewConcurrency: each call in flight
	// is a goroutine and a slot of a channel made up front, and 4 096 Renew
	// calls at once already keep up with 10⁶ leases at a 1 s interval on a
	// store that answers in 4 ms.
	maxRenewConcurrency = 4096

	// maxBatchWindow bounds WithBatchWindow: a longer window is a unit mistake.
	maxBatchWindow = time.Minute

	// earlyDivisor lets a renewal join a batch at most interval/4 early.
	earlyDivisor = 4
)

// policy is how a lease is renewed and when it is given up.
type policy struct {
	maxFailures int // 0: the continue policy, never give up
	interval    time.Duration
	timeout     time.Duration // of one renewal call
	margin      time.Duration // the local deadline falls this long before the server's expiry
}

// renewPhase is where a kept-alive lease is in its renewal cycle.
type renewPhase uint8

const (
	phaseIdle     renewPhase = iota // waiting for its next renewal
	phaseQueued                     // due, waiting for a free call
	phaseInFlight                   // in a store call
	phaseEnded                      // given up or lost
)

// renewal is everything about renewing one lease: its TTL, the last renewal
// that landed (or the acquire), and while a KeepAlive runs its policy,
// failures and phase. It lives in its Lease and is guarded by the lease's
// mu; the engine takes that lock, never while holding its own.
type renewal struct {
	ttl        time.Duration
	sent, done time.Time // the last renewal that landed (or the acquire): sent and answered
	keeper     *KeepAlive
	policy     // of the running KeepAlive
	failures   int
	next       time.Time // when the next renewal is due
	phase      renewPhase
	// inflight is closed when the engine's last call for the lease returns,
	// which a stopped KeepAlive leaves running: a Renew by hand waits for
	// it, lest it land after and cut the TTL back.
	inflight <-chan struct{}
}

// deadline is when the fence policy gives up: the server's TTL restarted no
// earlier than sent.
func (r *renewal) deadline() time.Time { return r.sent.Add(r.ttl - r.margin) }

// expiredBy is when the lease has certainly expired on the server.
func (r *renewal) expiredBy() time.Time { return r.done.Add(r.ttl + r.margin) }

// limit is when a kept-alive lease ends without a renewal: the local deadline
// (fence policy) or the certain expiry (continue policy).
func (r *renewal) limit() time.Time {
	if r.maxFailures > 0 {
		return r.deadline()
	}
	return r.expiredBy()
}

// wake is when the lease next needs the engine's attention.
func (r *renewal) wake() time.Time {
	if r.phase == phaseIdle && r.next.Before(r.limit()) {
		return r.next
	}
	return r.limit()
}

// KeepAlive renews a lease on its Client's renewal engine under a failure
// policy. Its Context tells its holder when ownership can no longer be
// trusted.
type KeepAlive struct {
	lease  *Lease
	ctx    context.Context
	cancel context.CancelCauseFunc
	onLoss func(error) // told of a loss that leaves ctx alone (continue policy); may be nil

	// report is held while an outcome is decided and reported; stopped,
	// set under it, silences reports once Stop has begun.
	report  sync.Mutex
	stopped bool
	lost    error // why ownership is no longer trusted; under report

	mu      sync.Mutex
	unwatch func() bool // ends the watch of the context KeepAlive was given

	// The engine's bookkeeping, under renewer.mu.
	wakeAt  time.Time
	index   int  // in the engine's heap; -1 when out of it
	removed bool // stopped: the engine drops it
}

// KeepAlive renews l every ttl/3 (WithRenewInterval) until Stop, l.Release,
// the end of ctx or Client.Close; none of them releases l. Under the fence
// policy a lease whose renewals fail is given up before it can expire: the
// KeepAlive's Context is cancelled with a cause matching ErrAbandoned. A
// lease has one KeepAlive at a time. Options that are not about renewal
// (WithWaitBudget, WithReleaseTimeout, WithTTL) are an *ArgumentError.
func (l *Lease) KeepAlive(ctx context.Context, opts ...HoldOption) (*KeepAlive, error) {
	if err := l.valid(); err != nil {
		return nil, err
	}
	return l.keepAlive(ctx, nil, func(ttl time.Duration) (policy, error) {
		cfg, err := newHoldConfig(ttl, opts, "KeepAlive", optRenewal)
		return cfg.policy, err
	})
}

// keepAlive starts renewing l under the policy configure makes for l's TTL,
// with l's operation slot held so no Renew changes the TTL under it.
func (l *Lease) keepAlive(ctx context.Context, onLoss func(error), configure func(ttl time.Duration) (policy, error)) (*KeepAlive, error) {
	c := l.client
	if err := c.usable(); err != nil {
		return nil, err
	}
	if !l.begin(ctx.Done()) {
		return nil, fmt.Errorf("leasehold: KeepAlive of %q: still waiting for another call on the lease: %w", l.key, context.Cause(ctx))
	}
	defer l.finish()
	// As a Renew does, or the Renew after this KeepAlive stops would wait
	// for this one's call alone.
	if err := l.awaitInflight(ctx); err != nil {
		return nil, fmt.Errorf("leasehold: KeepAlive of %q: %w", l.key, err)
	}
	pol, err := configure(l.TTL())
	if err != nil {
		return nil, err
	}
	k := &KeepAlive{lease: l, onLoss: onLoss, index: -1}
	k.ctx, k.cancel = context.WithCancelCause(ctx)
	l.mu.Lock()
	switch {
	case l.r.keeper != nil:
		l.mu.Unlock()
		return nil, fmt.Errorf("leasehold: %q already has a KeepAlive", l.key)
	case l.ended || l.released:
		l.mu.Unlock()
		return nil, fmt.Errorf("leasehold: %q was released or given up: %w", l.key, ErrNotOwned)
	}
	l.r.keeper, l.r.policy, l.r.failures, l.r.phase = k, pol, 0, phaseIdle
	l.r.next = l.r.sent.Add(pol.interval)
	wake := l.r.wake()
	l.mu.Unlock()
	if err := c.renew.add(k, wake); err != nil {
		l.mu.Lock()
		l.r.keeper = nil
		l.mu.Unlock()
		k.cancel(err)
		return nil, err
	}
	k.mu.Lock()
	k.unwatch = context.AfterFunc(ctx, func() { k.shut(context.Cause(ctx)) })
	k.mu.Unlock()
	if k.ctx.Err() != nil && k.unwatch() {
		// Ended before the watch was in place (by Close, or ctx's end,
		// which the watch then never saw): shut it again, now with the
		// watch ended too (shut may run twice).
		k.shut(context.Cause(k.ctx))
	}
	return k, nil
}

// errNilKeepAlive is what a nil (or zero) *KeepAlive reports.
var errNilKeepAlive = &ArgumentError{Arg: "KeepAlive", Reason: "nil, or not made by KeepAlive (a failed KeepAlive returns none)"}

// A nil *KeepAlive's Context is done: it renews nothing.
var nilKeepAliveCtx = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errNilKeepAlive)
	return ctx
}()

func (k *KeepAlive) isNil() bool { return k == nil || k.lease == nil }

// Context returns the context to run the critical section under. It is
// cancelled when renewal ends: with a cause matching ErrAbandoned when the
// lease was given up (fence policy) or the store said it is no longer
// ours, ErrClosed after Client.Close, the cause of the context KeepAlive
// was given when that ended, and context.Canceled after Stop or Release.
// Under the continue policy a lost lease does not cancel it.
func (k *KeepAlive) Context() context.Context {
	if k.isNil() {
		return nilKeepAliveCtx
	}
	return k.ctx
}

// Stop ends renewal and cancels Context without releasing the lease; nothing
// is reported for the lease after it returns. It is safe to call twice, and
// from an Observer method.
func (k *KeepAlive) Stop() {
	if k.isNil() {
		return
	}
	k.shut(context.Canceled)
}

// shut ends renewal and cancels Context with cause before detaching k from
// its lease, so a Release that finds no KeepAlive finds its Context cancelled.
func (k *KeepAlive) shut(cause error) {
	l := k.lease
	switch {
	case k.report.TryLock():
		k.stopped = true
		k.report.Unlock()
	case l.client.renew.reporting.Load() == k && l.client.renew.onEngine():
		// An Observer Stops or Releases the lease it is told about: the
		// engine holds k.report on this very goroutine, in decide, which
		// reads stopped on it.
		k.stopped = true
	default:
		// A report is under way on the engine: wait for it, so that
		// nothing is reported once Stop has returned.
		k.report.Lock()
		k.stopped = true
		k.report.Unlock()
	}
	l.client.renew.remove(k)
	k.cancel(cause)
	k.mu.Lock()
	unwatch := k.unwatch
	k.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	l.mu.Lock()
	if l.r.keeper == k {
		l.r.keeper = nil
	}
	l.mu.Unlock()
}

// lossErr is why k stopped trusting its lease, or nil.
func (k *KeepAlive) lossErr() error {
	k.report.Lock()
	defer k.report.Unlock()
	return k.lost
}

// outcome is what the engine decided for one lease, reported by report.
type outcome struct {
	renewed     bool          // a renewal landed
	ttl         time.Duration // its TTL
	failure     error         // a renewal failed without the store saying the lease is gone
	consecutive int
	deadline    time.Time // the fence policy's deadline then
	notOwned    bool      // the store said the lease is no longer ours
	lost        error     // the lease ended: the cause (ErrAbandoned, or ErrNotOwned under continue)
	fenced      bool      // the fence policy ended it: cancel the critical section
	overrun     time.Duration
	why         string
}

// lapse decides for a lease whose limit passed at now, with a renewal in
// flight or not. l.mu is held.
func (r *renewal) lapse(now time.Time, inFlight bool) outcome {
	r.phase = phaseEnded
	switch {
	case r.maxFailures == 0:
		return outcome{lost: errExpiredContinuing, overrun: now.Sub(r.expiredBy()),
			why: "its TTL ran out without a successful renewal"}
	case inFlight:
		return outcome{fenced: true, lost: fmt.Errorf("%w: a renewal was still in flight at the local deadline (ttl %v − drift margin %v)",
			ErrAbandoned, r.ttl, r.margin)}
	default:
		return outcome{fenced: true, lost: fmt.Errorf("%w: no renewal succeeded within ttl %v − drift margin %v (%d failed in a row)",
			ErrAbandoned, r.ttl, r.margin, r.failures)}
	}
}

// settle applies a renewal's answer, sent at sent and answered at done. l.mu
// is held.
func (r *renewal) settle(err error, sent, done time.Time) outcome {
	r.next = sent.Add(r.interval)
	switch {
	case err == nil:
		r.sent, r.done, r.failures, r.phase = sent, done, 0, phaseIdle
		return outcome{renewed: true, ttl: r.ttl}
	case errors.Is(err, ErrNotOwned):
		r.phase = phaseEnded
		if r.maxFailures > 0 {
			return outcome{notOwned: true, fenced: true,
				lost: fmt.Errorf("%w: the store says the lease is no longer ours (%w)", ErrAbandoned, err)}
		}
		return outcome{notOwned: true, lost: errExpiredContinuing, overrun: max(done.Sub(r.expiredBy()), 0),
			why: "the store says the lease is no longer ours"}
	}
	r.failures++
	o := outcome{failure: err, consecutive: r.failures}
	if r.maxFailures > 0 {
		o.deadline = r.deadline()
		if r.failures >= r.maxFailures {
			r.phase = phaseEnded
			o.fenced = true
			o.lost = fmt.Errorf("%w: %d renewals failed in a row, the last with: %w", ErrAbandoned, r.failures, err)
			return o
		}
	}
	r.phase = phaseIdle
	return o
}

// errExpiredContinuing is the loss of a lease under the continue policy.
var errExpiredContinuing = fmt.Errorf("%w: the lease expired while the critical section kept running (continue policy)", ErrNotOwned)

// decide runs f on k's renewal state, if k still renews its lease, and
// reports the outcome; it says whether the lease ended. Nothing is reported
// once Stop has begun.
func (k *KeepAlive) decide(f func(r *renewal) outcome) (ended bool) {
	l := k.lease
	r := &l.client.renew
	k.report.Lock()
	r.reporting.Store(k)
	defer func() {
		r.reporting.Store(nil)
		k.report.Unlock()
	}()
	if k.stopped || k.lost != nil {
		return true
	}
	l.mu.Lock()
	if l.r.keeper != k {
		l.mu.Unlock()
		return true
	}
	o := f(&l.r)
	l.noteEnd()
	l.mu.Unlock()
	k.reportLocked(o)
	return o.lost != nil
}

// reportLocked reports o: the one path of every renewal event. k.report is held.
func (k *KeepAlive) reportLocked(o outcome) {
	l := k.lease
	c := l.client
	if o.renewed {
		l.renewed(k.ctx, o.ttl)
		return
	}
	// A loss takes effect before any Observer hears of it: the holder is
	// told first, and an Observer that ends this goroutine
	// (runtime.Goexit) leaves no live context behind, nor a lease the
	// engine that takes over would decide, and report, again (decide).
	first := false
	if o.lost != nil {
		k.lost = o.lost
		if o.fenced {
			k.cancel(o.lost)
		} else if k.onLoss != nil {
			k.onLoss(o.lost)
		}
		first = l.markEnded()
	}
	if o.notOwned {
		l.notOwned(k.ctx, "renew")
	}
	if o.failure != nil {
		observe(c, k.ctx, RenewFailureEvent{Event: l.event(), Err: o.failure, Consecutive: o.consecutive, Deadline: o.deadline},
			func(o *Observer) func(context.Context, RenewFailureEvent) { return o.OnRenewFailure })
	}
	if o.lost == nil {
		return
	}
	if o.fenced {
		observe(c, k.ctx, AbandonEvent{Event: l.event(), Reason: o.lost},
			func(o *Observer) func(context.Context, AbandonEvent) { return o.OnAbandon })
	} else {
		observe(c, k.ctx, LeaseExpiredEvent{Event: l.event(), Overrun: o.overrun, Why: o.why},
			func(o *Observer) func(context.Context, LeaseExpiredEvent) { return o.OnLeaseExpired })
	}
	if first {
		l.reportEnd(k.ctx)
	}
}

// WithBatchWindow sets how far apart renewals may be due and still share a
// store call. Default: 20 ms; at most 1 minute.
func WithBatchWindow(d time.Duration) Option {
	return func(c *Client) {
		c.renew.window = d
		if d < 0 || d > maxBatchWindow {
			c.setErr(&ArgumentError{Arg: "WithBatchWindow", Reason: fmt.Sprintf("%v is not between 0 and %v", d, maxBatchWindow)})
		}
	}
}

// WithBatchSize caps the leases in one driver.BatchRenewer call. Default: 1 000.
func WithBatchSize(n int) Option {
	return func(c *Client) {
		c.renew.size = n
		if n < 1 {
			c.setErr(&ArgumentError{Arg: "WithBatchSize", Reason: fmt.Sprintf("%d is not positive", n)})
		}
	}
}

// WithRenewConcurrency caps the renewal calls in flight, at most 4 096.
// Default: 4 batch calls, or 64 Renew calls for a store without
// driver.BatchRenewer.
func WithRenewConcurrency(n int) Option {
	return func(c *Client) {
		switch {
		case n < 1:
			c.setErr(&ArgumentError{Arg: "WithRenewConcurrency", Reason: fmt.Sprintf("%d is not positive", n)})
		case n > maxRenewConcurrency:
			c.setErr(&ArgumentError{Arg: "WithRenewConcurrency", Reason: fmt.Sprintf("%d is more than %d", n, maxRenewConcurrency)})
		default:
			c.renew.concurrency = n
		}
	}
}

// Close stops renewing c's leases, cancelling each KeepAlive's Context with
// cause ErrClosed, without releasing them, and waits for the renewal calls in
// flight, which it cancels. Later acquires return ErrClosed. With
// WithOwnedStore it then closes the store, once the Client's other store
// calls in flight have returned, waiting for them at most 2 s
// (defaultCleanupTimeout: a call that still runs then is on a store that
// does not answer), and returns its error. Acquires, watches and renewals
// after that never reach the store; releases and leaving a store's queue
// (a Hold whose fn returns after Close) still go to it, which every bundled
// store serves after its Close, so that the key is not held for a TTL by
// a Client that is gone. Calling Close again does nothing.
func (c *Client) Close() error {
	first := c.renew.close()
	if first && c.ownStore {
		c.gate.shut(defaultCleanupTimeout)
		if cl, ok := c.store.(interface{ Close() error }); ok {
			return cl.Close()
		}
	}
	return nil
}

// renewer is a Client's renewal engine: one goroutine, running while any
// lease is kept alive, renews them from a min-heap of the times they next
// need attention, in batches (docs/design.md §4).
type renewer struct {
	client      *Client
	batch       driver.BatchRenewer // nil: one Renew per lease
	window      time.Duration
	size        int
	concurrency int

	mu      sync.Mutex
	heap    renewHeap     // every KeepAlive running, by the time it needs attention
	running chan struct{} // closed when the running goroutine returns; nil: none runs
	engine  atomic.Uint64 // the running goroutine's id (goid), 0 when none runs

	closed      atomic.Bool
	closing     atomic.Bool               // the first close has begun
	closeDone   chan struct{}             // closed when the first close has returned
	reporting   atomic.Pointer[KeepAlive] // the KeepAlive the engine decides and reports, if any
	poke        chan struct{}             // the heap's head moved earlier
	results     chan *renewCall           // finished store calls
	quit        chan struct{}             // closed by Close
	calls       context.Context           // the store calls' parent; cancelled by Close
	cancelCalls context.CancelFunc

	// The engine's own state, used by the one goroutine running it; kept
	// here, not in run's locals, so that an engine whose goroutine an
	// Observer ended (runtime.Goexit) is taken over where it stood.
	queue    []*KeepAlive // due, waiting for a free call, oldest first
	inFlight int          // store calls whose results have not come back
	due      []*KeepAlive // taken out of the heap, being sorted
	dueDone  int          // how many of due are sorted
	// settling is the call whose results are being reported and applied,
	// and how many of its events and leases are done: a new engine
	// finishes it.
	settling               *renewCall
	eventsDone, leasesDone int
}

// init sets r up for c's store once the options are applied.
func (r *renewer) init(c *Client) {
	r.client = c
	r.batch, _ = c.store.(driver.BatchRenewer)
	if r.concurrency == 0 {
		r.concurrency = defaultBatchConcurrency
		if r.batch == nil {
			r.concurrency = defaultFallbackConcurrency
		}
	}
	if r.batch == nil {
		r.size = 1
	}
	r.poke = make(chan struct{}, 1)
	r.results = make(chan *renewCall, max(r.concurrency, 1))
	r.quit = make(chan struct{})
	r.closeDone = make(chan struct{})
	r.calls, r.cancelCalls = context.WithCancel(context.Background())
}

// close stops every lease's renewal and the goroutine, and refuses new
// leases; it reports whether this was the first call.
// A later call returns once the first has, or at once on the engine's
// goroutine (an Observer's Close while another is under way, which may be
// waiting for that goroutine).
func (r *renewer) close() (first bool) {
	if !r.closing.CompareAndSwap(false, true) {
		if !r.onEngine() {
			<-r.closeDone
		}
		return false
	}
	defer close(r.closeDone)
	r.mu.Lock()
	r.closed.Store(true)
	live := append([]*KeepAlive(nil), r.heap...)
	running := r.running
	r.mu.Unlock()
	for _, k := range live {
		k.shut(ErrClosed)
	}
	close(r.quit)
	if running != nil && !r.onEngine() { // from an Observer, the engine ends once it returns
		<-running
	}
	return true
}

// onEngine says whether the caller runs on r's goroutine: an Observer
// method called by the engine. It is asked only when a KeepAlive's report
// lock is taken, so its cost (a stack header) is off the common path.
func (r *renewer) onEngine() bool {
	id := r.engine.Load()
	return id != 0 && id == goid()
}

// goid is the calling goroutine's id, read from its stack header
// ("goroutine 18 [running]:"), or 0 if that cannot be read.
func goid() uint64 {
	var buf [64]byte
	b, ok := strings.CutPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	if !ok {
		return 0
	}
	b, _, _ = strings.Cut(b, " ")
	id, err := strconv.ParseUint(b, 10, 64)
	if err != nil {
		return 0
	}
	return id
}

// len returns the number of leases being renewed.
func (r *renewer) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.heap)
}

// add starts renewing k, first at wake, starting the goroutine if none runs.
func (r *renewer) add(k *KeepAlive, wake time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	k.wakeAt = wake
	heap.Push(&r.heap, k)
	switch {
	case r.running == nil:
		r.running = make(chan struct{})
		go r.run(r.running)
	case k.index == 0:
		r.pokeLocked()
	}
	return nil
}

func (r *renewer) pokeLocked() {
	select {
	case r.poke <- struct{}{}:
	default: // a poke is pending already
	}
}

// remove stops renewing k; a call in flight for it is ignored for k.
func (r *renewer) remove(k *KeepAlive) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k.removed = true
	if k.index < 0 {
		return
	}
	heap.Remove(&r.heap, k.index)
	if len(r.heap) == 0 { // let the goroutine see it is idle
		r.pokeLocked()
	}
}

// idle says the heap is empty and ends the goroutine's turn; the next add
// starts another.
func (r *renewer) idle(running chan struct{}) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.heap) > 0 {
		return false
	}
	if r.running == running {
		r.running = nil
	}
	return true
}

// renewCall is one store call: a chunk of leases renewed together.
type renewCall struct {
	leases   []*KeepAlive
	items    []driver.RenewItem
	errs     []error
	timeout  time.Duration
	limit    time.Time     // the earliest limit of its leases: the call ends by it
	returned chan struct{} // closed when the call returns
	sent     time.Time     // when the call was made: every item's send time
	done     time.Time     // when it returned
	// events are the store calls it made, for OnStoreCall: reported by the
	// engine, whose goroutine an Observer may Close the Client from, not by
	// the worker, which Close waits for.
	events []StoreCallEvent
}

// run sleeps until a lease needs attention, ends the lapsed ones and sends
// the due ones in chunks.
func (r *renewer) run(running chan struct{}) {
	returned := false
	defer func() {
		if returned {
			close(running)
			return
		}
		// An Observer called runtime.Goexit on this goroutine (t.FailNow
		// in a test's Observer does) while the engine reported to it:
		// Goexit cannot be recovered, and without an engine no lease of
		// the Client would be renewed or given up again. A new goroutine
		// goes on from the state this one left (resume); the event under
		// way is not reported again.
		go r.run(running)
	}()
	id := goid()
	r.engine.Store(id)
	defer r.engine.CompareAndSwap(id, 0) // a next run may have started already
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	r.resume()
	for {
		now := time.Now()
		r.popDue(now)
		r.sort(now)
		for r.inFlight < r.concurrency && len(r.queue) > 0 {
			var c *renewCall
			if c, r.queue = r.chunk(r.queue, now); c != nil {
				r.inFlight++
				go r.call(c)
			}
		}
		if r.inFlight == 0 && r.idle(running) {
			returned = true
			return
		}
		if wake := r.nextWake(); wake.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(time.Until(wake))
		}
		select {
		case <-timer.C:
		case <-r.poke:
		case c := <-r.results:
			r.inFlight--
			r.settling, r.eventsDone, r.leasesDone = c, 0, 0
			r.settle(c)
		case <-r.quit:
			r.cancelCalls()
			for r.inFlight > 0 {
				c := <-r.results
				r.inFlight--
				r.settling, r.eventsDone, r.leasesDone = c, 0, len(c.leases)
				r.settle(c)
			}
			returned = true
			return
		}
	}
}

// resume takes up what an engine whose goroutine ended mid-way (run)
// left: the leases it had taken out of the heap and not put back (the one
// whose report it was in, and the ones after it) go back, due now, and a
// call's results it was settling are settled.
func (r *renewer) resume() {
	if len(r.due) > 0 {
		now := time.Now()
		r.mu.Lock()
		for _, k := range r.due[max(r.dueDone-1, 0):] {
			if k.index < 0 && !k.removed {
				k.wakeAt = now
				heap.Push(&r.heap, k)
			}
		}
		r.mu.Unlock()
		clear(r.due)
		r.due, r.dueDone = r.due[:0], 0
	}
	if c := r.settling; c != nil {
		r.settle(c)
	}
}

// popDue takes the KeepAlives that need attention within the window out of
// the heap, into r.due.
func (r *renewer) popDue(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	horizon := now.Add(r.window)
	for len(r.heap) > 0 && !r.heap[0].wakeAt.After(horizon) {
		r.due = append(r.due, heap.Pop(&r.heap).(*KeepAlive))
	}
}

// sort ends the due leases (r.due) past their limit, queues the ones whose
// renewal is due within the window (r.queue), and puts the live ones back
// in the heap at their next wake. Not deferred: an engine ended mid-way
// leaves r.due for the next (resume).
func (r *renewer) sort(now time.Time) {
	for r.dueDone < len(r.due) {
		k := r.due[r.dueDone]
		r.dueDone++
		var wake time.Time
		queued := false
		ended := k.decide(func(rn *renewal) outcome {
			if !now.Before(rn.limit()) {
				return rn.lapse(now, rn.phase == phaseInFlight)
			}
			if rn.phase == phaseIdle && !rn.next.After(now.Add(min(r.window, rn.interval/earlyDivisor))) {
				rn.phase, queued = phaseQueued, true
			}
			wake = rn.wake()
			return outcome{}
		})
		if ended {
			continue
		}
		r.mu.Lock()
		closed := r.closed.Load() // Close took its list of leases from the heap, without k
		if !k.removed && !closed {
			k.wakeAt = wake
			heap.Push(&r.heap, k)
		}
		r.mu.Unlock()
		if closed {
			k.shut(ErrClosed)
			continue
		}
		if queued {
			r.queue = append(r.queue, k)
		}
	}
	clear(r.due) // drop the references
	r.due, r.dueDone = r.due[:0], 0
}

// nextWake is when the heap next needs attention; zero when it is empty.
func (r *renewer) nextWake() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.heap) == 0 {
		return time.Time{}
	}
	return r.heap[0].wakeAt
}

// chunk takes up to r.size live leases from queue into a call; nil if none.
// The call ends by the earliest limit of its leases (their local deadline,
// or under the continue policy their certain expiry), so the leases near
// their limit, which only failed renewals bring there, go in calls of their
// own and do not cut a healthy call short: a call takes the leases of the
// first one's kind, and leaves the others queued in order.
func (r *renewer) chunk(queue []*KeepAlive, now time.Time) (c *renewCall, rest []*KeepAlive) {
	c = &renewCall{leases: make([]*KeepAlive, 0, min(r.size, len(queue))), returned: make(chan struct{})}
	c.items = make([]driver.RenewItem, 0, cap(c.leases))
	var urgent bool // the kind of the call's leases: a limit within their timeout
	kept := 0
	for _, k := range queue {
		if len(c.leases) == r.size {
			queue[kept] = k
			kept++
			continue
		}
		l := k.lease
		l.mu.Lock()
		live := l.r.keeper == k && l.r.phase == phaseQueued
		take := false
		if live {
			limit := l.r.limit()
			u := limit.Before(now.Add(l.r.timeout))
			if len(c.leases) == 0 {
				urgent = u
			}
			if take = u == urgent; take {
				l.r.phase = phaseInFlight
				l.r.inflight = c.returned
				c.items = append(c.items, driver.RenewItem{Key: l.key, Token: l.token, TTL: l.r.ttl})
				if c.timeout == 0 || l.r.timeout < c.timeout {
					c.timeout = l.r.timeout
				}
				if c.limit.IsZero() || limit.Before(c.limit) {
					c.limit = limit
				}
			}
		}
		l.mu.Unlock()
		switch {
		case take:
			c.leases = append(c.leases, k)
		case live: // of the other kind: the next call takes it
			queue[kept] = k
			kept++
		}
	}
	clear(queue[kept:]) // drop the references
	rest = queue[:kept]
	if len(c.leases) == 0 {
		return nil, rest
	}
	return c, rest
}

// batchErr is a batch's error for OnStoreCall: the first item's failure
// other than ErrNotOwned (a lease gone is an answer), else nil.
func batchErr(errs []error) error {
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrNotOwned) {
			return err
		}
	}
	return nil
}

// call makes one store call, bounded by its leases' smallest renewal timeout
// and their earliest limit: a renewal never runs past the point where its
// lease is given up (see chunk).
func (r *renewer) call(c *renewCall) {
	c.sent = time.Now()
	end := c.sent.Add(c.timeout)
	if c.limit.Before(end) {
		end = c.limit
	}
	ctx, cancel := context.WithDeadline(r.calls, end)
	defer cancel()
	c.errs, c.events = r.send(ctx, c.items)
	c.done = time.Now()
	close(c.returned)
	r.results <- c // never blocks: room for every call in flight
}

// send is the engine's one way to the store: every item renewed, in one
// RenewBatch call when the store can, else one Renew each. It returns the
// calls' events for the engine to report (renewCall.events).
func (r *renewer) send(ctx context.Context, items []driver.RenewItem) ([]error, []StoreCallEvent) {
	cl := r.client
	var events []StoreCallEvent
	if r.batch == nil {
		errs := make([]error, len(items))
		for i, it := range items {
			var ev StoreCallEvent
			ev, errs[i] = cl.timedCall("renew", 1, func() error { return cl.store.Renew(ctx, it.Key, it.Token, it.TTL) })
			if ev.Op != "" {
				events = append(events, ev)
			}
		}
		return errs, events
	}
	var errs []error
	ev, err := cl.timedCall("renew_batch", len(items), func() error {
		errs = r.batch.RenewBatch(ctx, items)
		return batchErr(errs)
	})
	if ev.Op != "" {
		events = append(events, ev)
	}
	if errs == nil && errors.Is(err, ErrClosed) { // refused before the store (WithOwnedStore)
		errs = make([]error, len(items))
		for i := range errs {
			errs[i] = err
		}
	}
	if len(errs) != len(items) {
		err := fmt.Errorf("leasehold: the store's RenewBatch returned %d results for %d items", len(errs), len(items))
		errs = make([]error, len(items))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs, events
}

// reportCalls reports c's store calls (OnStoreCall), on the engine's
// goroutine.
func (r *renewer) reportCalls(c *renewCall) {
	for r.eventsDone < len(c.events) {
		ev := c.events[r.eventsDone]
		r.eventsDone++
		r.client.reportCall(r.calls, ev)
	}
}

// settle reports c's store calls and applies its results, from where an
// engine before this one stopped (r.settling).
func (r *renewer) settle(c *renewCall) {
	r.reportCalls(c)
	r.apply(c)
	r.settling = nil
}

// apply settles a call's results and puts its leases back at their next wake.
func (r *renewer) apply(c *renewCall) {
	for r.leasesDone < len(c.leases) {
		i, k := r.leasesDone, c.leases[r.leasesDone]
		r.leasesDone++
		var wake time.Time
		ended := k.decide(func(rn *renewal) outcome {
			if rn.phase != phaseInFlight {
				return outcome{} // ended at its deadline while the call was in flight
			}
			o := rn.settle(c.errs[i], c.sent, c.done)
			wake = rn.wake()
			return o
		})
		r.mu.Lock()
		switch {
		case k.index < 0: // stopped, or ended at its deadline
		case ended:
			heap.Remove(&r.heap, k.index)
		case !wake.IsZero():
			k.wakeAt = wake
			heap.Fix(&r.heap, k.index)
		}
		r.mu.Unlock()
	}
}

// renewHeap orders KeepAlives by the time they next need attention.
type renewHeap []*KeepAlive

func (h renewHeap) Len() int           { return len(h) }
func (h renewHeap) Less(i, j int) bool { return h[i].wakeAt.Before(h[j].wakeAt) }
func (h renewHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *renewHeap) Push(x any) {
	k := x.(*KeepAlive)
	k.index = len(*h)
	*h = append(*h, k)
}

func (h *renewHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.index = -1
	return k
}
