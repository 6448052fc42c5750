package leasehold

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Defaults of NewRenewer. Each is used when its option is not given.
const (
	// DefaultBatchWindow is how far apart in time two leases' renewals may
	// be due and still share a batch: a lease due within 20 ms of the
	// earliest due one is renewed with it, up to 20 ms early. That costs at
	// most 2 % more renewals at a 1 s interval (0.1 % at the 20 s interval
	// of a 60 s TTL), while leases acquired at nearly the same time, which
	// is how a scheduler takes them, share one round trip. A lease is never
	// renewed more than a quarter of its interval early, whatever the window.
	DefaultBatchWindow = 20 * time.Millisecond

	// DefaultBatchSize caps the leases in one driver.BatchRenewer call. On Redis a
	// batch of 1 000 renewals is one pipeline of about 100 KB that the
	// server runs in a few milliseconds: large enough that the round trip no
	// longer matters, small enough that one batch does not hold the
	// single-threaded server, or a client's buffers, for long.
	DefaultBatchSize = 1000

	// DefaultBatchConcurrency caps the driver.BatchRenewer calls in flight. Four
	// batches of 1 000 keep up with hundreds of thousands of renewals a
	// second on loopback, and keep a slow store from being flooded with
	// retries of work it has not finished.
	DefaultBatchConcurrency = 4

	// defaultFallbackConcurrency caps the Renew calls in flight for a store
	// without driver.BatchRenewer, each on a goroutine of its own while it runs.
	// 64 calls of 1 ms each renew 64 000 leases a second, enough for 100 000
	// leases at the default ttl/3 interval of any TTL above 5 s, with at
	// most 64 goroutines whatever the number of leases.
	defaultFallbackConcurrency = 64

	// maxBatchWindow bounds WithBatchWindow: a window longer than a minute
	// is a unit mistake.
	maxBatchWindow = time.Minute

	// earlyDivisor bounds how early a renewal may be sent to join a batch:
	// a quarter of the lease's interval.
	earlyDivisor = 4
)

// ErrRenewerClosed is the cause set on the Context of every KeepAlive of a
// Renewer that was closed, and the error of Renewer.KeepAlive after Close.
var ErrRenewerClosed = errors.New("leasehold: renewer closed")

// RenewerOption configures a Renewer.
type RenewerOption func(*Renewer)

// WithBatchWindow sets how far apart leases' renewals may be due and still
// be sent together. 0 batches only leases due at the same instant. Default:
// DefaultBatchWindow (20 ms); at most 1 minute.
func WithBatchWindow(d time.Duration) RenewerOption { return func(r *Renewer) { r.window = d } }

// WithBatchSize caps the leases in one driver.BatchRenewer call. Default:
// DefaultBatchSize (1 000). It has no effect on a store without
// driver.BatchRenewer, which is called once per lease.
func WithBatchSize(n int) RenewerOption { return func(r *Renewer) { r.size = n } }

// WithRenewConcurrency caps the store calls in flight at once: driver.BatchRenewer
// calls, or Renew calls for a store without driver.BatchRenewer. Each call in
// flight runs on a goroutine of its own. Default: DefaultBatchConcurrency (4)
// or defaultFallbackConcurrency (64).
func WithRenewConcurrency(n int) RenewerOption { return func(r *Renewer) { r.concurrency = n } }

// Renewer renews many leases from one goroutine, for processes that hold
// thousands of them. It keeps the leases in a min-heap of the times they
// next need attention and sleeps until the earliest; renewals due within
// the batch window are sent together, in chunks of the batch size, one
// driver.BatchRenewer call per chunk (a pipeline on Redis). A store without
// driver.BatchRenewer gets one Renew call per lease, a bounded number at a time.
// Each lease costs memory and a heap entry, never a goroutine or a timer:
// the goroutines are the Renewer's one, plus one per store call in flight
// (at most the concurrency).
//
// Every lease keeps its own failure policy (FenceAfter, ContinueOnRenewFailure,
// the drift margin): the send time of its batch counts as its renewal's send
// time, and its context is cancelled at its local deadline even while its
// batch is still in flight, as with Lease.KeepAlive.
//
// A Renewer is safe for concurrent use. NewRenewer starts its goroutine;
// Close stops it and must be called.
type Renewer struct {
	client      *Client
	batch       driver.BatchRenewer // nil: one Renew per lease
	window      time.Duration
	size        int
	concurrency int

	mu     sync.Mutex
	heap   renewHeap // every lease being renewed, by the time it needs attention
	closed bool

	poke        chan struct{}   // the heap's head moved earlier
	results     chan *renewCall // finished store calls
	quit        chan struct{}   // closed by Close
	done        chan struct{}   // closed when the goroutine has returned
	calls       context.Context // the store calls' parent; cancelled by Close
	cancelCalls context.CancelFunc
}

// NewRenewer returns a Renewer that renews leases of c, and starts its
// goroutine. It returns an *ArgumentError for an option out of range.
func NewRenewer(c *Client, opts ...RenewerOption) (*Renewer, error) {
	if c == nil {
		return nil, &ArgumentError{Arg: "client", Reason: "nil"}
	}
	r := &Renewer{client: c, window: DefaultBatchWindow, size: DefaultBatchSize}
	r.batch, _ = c.store.(driver.BatchRenewer)
	if r.batch != nil {
		r.concurrency = DefaultBatchConcurrency
	} else {
		r.concurrency = defaultFallbackConcurrency
	}
	for _, o := range opts {
		o(r)
	}
	switch {
	case r.window < 0 || r.window > maxBatchWindow:
		return nil, &ArgumentError{Arg: "batch window", Reason: fmt.Sprintf("%v is not between 0 and %v", r.window, maxBatchWindow)}
	case r.size < 1:
		return nil, &ArgumentError{Arg: "batch size", Reason: fmt.Sprintf("%d is not positive", r.size)}
	case r.concurrency < 1:
		return nil, &ArgumentError{Arg: "renew concurrency", Reason: fmt.Sprintf("%d is not positive", r.concurrency)}
	}
	if r.batch == nil {
		r.size = 1
	}
	r.poke = make(chan struct{}, 1)
	r.results = make(chan *renewCall, r.concurrency)
	r.quit, r.done = make(chan struct{}), make(chan struct{})
	r.calls, r.cancelCalls = context.WithCancel(context.Background())
	go r.run()
	return r, nil
}

// KeepAlive starts renewing l on r, under the same policy and options as
// Lease.KeepAlive, and returns the same kind of KeepAlive: Context is
// cancelled (cause matching ErrAbandoned) and Lost closed when the lease is
// given up; Stop ends its renewal without disturbing r's other leases.
// Renewal does not stop when ctx is cancelled; ctx is only the parent of
// Context. The store calls are made with a context of r's, not ctx.
//
// It returns an *ArgumentError for options that cannot work with the
// lease's TTL or a lease of another Client, ErrRenewerClosed after Close,
// and an error if l already has a KeepAlive or was released.
func (r *Renewer) KeepAlive(ctx context.Context, l *Lease, opts ...RenewOption) (*KeepAlive, error) {
	if r == nil || r.client == nil {
		return nil, &ArgumentError{Arg: "Renewer", Reason: "nil, or not made by NewRenewer"}
	}
	if err := l.valid(); err != nil {
		return nil, err
	}
	return l.keepAlive(ctx, func(ttl time.Duration) (holdConfig, error) {
		cfg, err := newHoldConfig(ttl, opts)
		if err != nil {
			return cfg, err
		}
		if cfg.renewer != nil && cfg.renewer != r {
			return cfg, &ArgumentError{Arg: "WithRenewer", Reason: "names another Renewer than the one called"}
		}
		cfg.renewer = r
		return cfg, nil
	})
}

// Len returns the number of leases r is renewing (0 for a nil Renewer).
func (r *Renewer) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.heap)
}

// Close stops renewing every lease, as Stop would, cancelling each
// KeepAlive's Context with cause ErrRenewerClosed; no lease is released.
// It cancels the store calls in flight and waits for them and for r's
// goroutine, so it returns once the store has returned from every call
// (promptly for a store that honours contexts). It is safe to call more
// than once, and on a nil Renewer; it always returns nil.
func (r *Renewer) Close() error {
	if r == nil || r.client == nil {
		return nil
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.done
		return nil
	}
	r.closed = true
	live := make([]*KeepAlive, len(r.heap))
	copy(live, r.heap)
	r.mu.Unlock()
	for _, k := range live {
		k.shut(ErrRenewerClosed)
	}
	close(r.quit)
	<-r.done
	return nil
}

// renewPhase is where a lease is in its renewal cycle. Only r's goroutine
// reads or writes it.
type renewPhase uint8

const (
	phaseIdle     renewPhase = iota // waiting for its next renewal
	phaseQueued                     // due, waiting for a free call
	phaseInFlight                   // in a store call
	phaseEnded                      // given up or lost; out of the heap
)

// renewSlot is a lease's place in a Renewer.
type renewSlot struct {
	st    renewState // r's goroutine only (and add, before the lease is in the heap)
	next  time.Time  // when the next renewal is due; r's goroutine only
	phase renewPhase // r's goroutine only
	wake  time.Time  // the heap's key; under r.mu
	index int        // in r.heap, -1 when out of it; under r.mu
}

// add starts renewing k, whose renewal state is st.
func (r *Renewer) add(k *KeepAlive, st renewState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrRenewerClosed
	}
	k.renewer = r
	k.slot = renewSlot{st: st, next: st.lastSent.Add(k.cfg.interval), index: -1}
	k.slot.wake = k.wakeAt(&k.slot.st, k.slot.next)
	heap.Push(&r.heap, k)
	if k.slot.index == 0 {
		select {
		case r.poke <- struct{}{}:
		default: // a poke is pending already
		}
	}
	return nil
}

// remove stops renewing k. A store call in flight for it finishes for the
// others in it; its result for k is then ignored.
func (r *Renewer) remove(k *KeepAlive) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k.slot.index >= 0 {
		heap.Remove(&r.heap, k.slot.index)
	}
}

// renewCall is one store call: a chunk of leases renewed together.
type renewCall struct {
	leases  []*KeepAlive
	items   []driver.RenewItem
	errs    []error
	timeout time.Duration
	sent    time.Time // when the call was made: every item's send time
	done    time.Time // when it returned
}

// run is r's goroutine: it sleeps until a lease needs attention, ends the
// leases whose limit has passed, and sends the due ones in chunks.
func (r *Renewer) run() {
	defer close(r.done)
	var (
		queue    []*KeepAlive // due, waiting for a free call, oldest first
		lapsed   []*KeepAlive // scratch
		inFlight int
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var wake time.Time
		lapsed, queue, wake = r.collect(now, lapsed[:0], queue)
		for _, k := range lapsed {
			k.lapse(&k.slot.st, now, k.slot.phase == phaseInFlight)
			k.slot.phase = phaseEnded
		}
		clear(lapsed) // drop the references
		for inFlight < r.concurrency && len(queue) > 0 {
			var c *renewCall
			if c, queue = r.chunk(queue); c != nil {
				inFlight++
				go r.call(c)
			}
		}
		if wake.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(time.Until(wake))
		}
		select {
		case <-timer.C:
		case <-r.poke:
		case c := <-r.results:
			inFlight--
			r.apply(c)
		case <-r.quit:
			r.cancelCalls()
			for ; inFlight > 0; inFlight-- {
				<-r.results
			}
			return
		}
	}
}

// collect takes from the heap the leases whose limit has passed at now,
// appending them to lapsed, and moves the idle leases due by now + window
// (but no more than a quarter of their interval early) to queue. Queued
// leases stay in the heap, keyed by their limit. It returns when the heap
// next needs attention (zero: never, it is empty).
func (r *Renewer) collect(now time.Time, lapsed, queue []*KeepAlive) (_, _ []*KeepAlive, wake time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	horizon := now.Add(r.window)
	var back []*KeepAlive
	for len(r.heap) > 0 && !r.heap[0].slot.wake.After(horizon) {
		k := heap.Pop(&r.heap).(*KeepAlive)
		s := &k.slot
		limit := k.limit(&s.st)
		switch {
		case !now.Before(limit):
			lapsed = append(lapsed, k)
			continue
		case s.phase == phaseIdle && !s.next.After(now.Add(min(r.window, k.cfg.interval/earlyDivisor))):
			s.phase, s.wake = phaseQueued, limit
			queue = append(queue, k)
		}
		back = append(back, k)
	}
	for _, k := range back {
		heap.Push(&r.heap, k)
	}
	if len(r.heap) > 0 {
		wake = r.heap[0].slot.wake
	}
	return lapsed, queue, wake
}

// chunk takes up to r.size leases from the head of queue into a store call;
// leases that ended or were stopped while queued are dropped. c is nil when
// none was left.
func (r *Renewer) chunk(queue []*KeepAlive) (c *renewCall, rest []*KeepAlive) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(r.size, len(queue))
	c = &renewCall{leases: make([]*KeepAlive, 0, n), items: make([]driver.RenewItem, 0, n)}
	i := 0
	for ; i < len(queue) && len(c.leases) < r.size; i++ {
		k := queue[i]
		queue[i] = nil
		if k.slot.phase != phaseQueued || k.slot.index < 0 {
			continue // ended, or stopped
		}
		k.slot.phase = phaseInFlight
		l := k.lease
		c.leases = append(c.leases, k)
		c.items = append(c.items, driver.RenewItem{Key: l.key, Token: l.token, TTL: k.slot.st.ttl})
		if c.timeout == 0 || k.cfg.renewTimeout < c.timeout {
			c.timeout = k.cfg.renewTimeout
		}
	}
	rest = queue[i:]
	if len(rest) == 0 {
		rest = queue[:0] // reuse the array
	}
	if len(c.leases) == 0 {
		return nil, rest
	}
	return c, rest
}

// call makes one store call on its own goroutine and hands the result to
// r's goroutine. The call is bounded by the smallest renewal timeout of its
// leases; their local deadlines are kept by r's goroutine, not by the call,
// so that one lease near its deadline does not cut its batch short.
func (r *Renewer) call(c *renewCall) {
	ctx, cancel := context.WithTimeout(r.calls, c.timeout)
	defer cancel()
	c.sent = time.Now()
	if r.batch != nil {
		c.errs = r.batch.RenewBatch(ctx, c.items)
		if len(c.errs) != len(c.items) {
			err := fmt.Errorf("leasehold: the store's RenewBatch returned %d results for %d items", len(c.errs), len(c.items))
			c.errs = make([]error, len(c.items))
			for i := range c.errs {
				c.errs[i] = err
			}
		}
	} else {
		c.errs = make([]error, len(c.items))
		for i, it := range c.items {
			c.errs[i] = r.client.store.Renew(ctx, it.Key, it.Token, it.TTL)
		}
	}
	c.done = time.Now()
	r.results <- c // never blocks: room for every call in flight
}

// apply settles the results of a finished call under each lease's policy
// and puts the leases back in the heap at their next renewal.
func (r *Renewer) apply(c *renewCall) {
	for i, k := range c.leases {
		if k.slot.phase != phaseInFlight {
			continue // given up at its deadline while the call was in flight
		}
		k.slot.next = c.sent.Add(k.cfg.interval)
		if k.settle(&k.slot.st, c.errs[i], c.sent, c.done) {
			k.slot.phase = phaseEnded
		} else {
			k.slot.phase = phaseIdle
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range c.leases {
		s := &k.slot
		switch {
		case s.index < 0: // stopped, or ended at its deadline
		case s.phase == phaseEnded:
			heap.Remove(&r.heap, s.index)
		default:
			s.wake = k.wakeAt(&s.st, s.next)
			heap.Fix(&r.heap, s.index)
		}
	}
}

// renewHeap orders leases by the time they next need attention.
type renewHeap []*KeepAlive

func (h renewHeap) Len() int           { return len(h) }
func (h renewHeap) Less(i, j int) bool { return h[i].slot.wake.Before(h[j].slot.wake) }
func (h renewHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].slot.index, h[j].slot.index = i, j
}

func (h *renewHeap) Push(x any) {
	k := x.(*KeepAlive)
	k.slot.index = len(*h)
	*h = append(*h, k)
}

func (h *renewHeap) Pop() any {
	old := *h
	k := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	k.slot.index = -1
	return k
}
