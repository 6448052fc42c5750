package leasehold

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Defaults of the Client's renewal engine; docs/design.md §4 has the arithmetic.
const (
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

	// maxBatchWindow bounds WithBatchWindow: a longer window is a unit mistake.
	maxBatchWindow = time.Minute

	// earlyDivisor lets a renewal join a batch at most interval/4 early.
	earlyDivisor = 4
)

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

// WithRenewConcurrency caps the renewal calls in flight. Default: 4 batch
// calls, or 64 Renew calls for a store without driver.BatchRenewer.
func WithRenewConcurrency(n int) Option {
	return func(c *Client) {
		c.renew.concurrency = n
		if n < 1 {
			c.setErr(&ArgumentError{Arg: "WithRenewConcurrency", Reason: fmt.Sprintf("%d is not positive", n)})
		}
	}
}

// Close stops renewing c's leases, cancelling each KeepAlive's Context with
// cause ErrClosed, without releasing them, and waits for the renewal calls in
// flight, which it cancels. Later acquires return ErrClosed.
func (c *Client) Close() error {
	c.renew.close()
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
	heap    renewHeap     // every lease being renewed, by the time it needs attention
	running chan struct{} // closed when the running goroutine returns; nil: none runs

	closed      atomic.Bool
	closeOnce   sync.Once
	poke        chan struct{}   // the heap's head moved earlier
	results     chan *renewCall // finished store calls
	quit        chan struct{}   // closed by Close
	calls       context.Context // the store calls' parent; cancelled by Close
	cancelCalls context.CancelFunc
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
	r.calls, r.cancelCalls = context.WithCancel(context.Background())
}

// close stops every lease's renewal and the goroutine, and refuses new leases.
func (r *renewer) close() {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closed.Store(true)
		live := append([]*KeepAlive(nil), r.heap...)
		running := r.running
		r.mu.Unlock()
		for _, k := range live {
			k.shut(ErrClosed)
		}
		close(r.quit)
		if running != nil {
			<-running
		}
	})
}

// len returns the number of leases being renewed.
func (r *renewer) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.heap)
}

// renewPhase is where a lease is in its renewal cycle (the goroutine's alone).
type renewPhase uint8

const (
	phaseIdle     renewPhase = iota // waiting for its next renewal
	phaseQueued                     // due, waiting for a free call
	phaseInFlight                   // in a store call
	phaseEnded                      // given up or lost; out of the heap
)

// renewSlot is a lease's place in the renewer.
type renewSlot struct {
	st    renewState // r's goroutine only (and add, before the lease is in the heap)
	next  time.Time  // when the next renewal is due; r's goroutine only
	phase renewPhase // r's goroutine only
	wake  time.Time  // the heap's key; under r.mu
	index int        // in r.heap, -1 when out of it; under r.mu
}

// add starts renewing k from st, starting the goroutine if none runs.
func (r *renewer) add(k *KeepAlive, st renewState) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	k.slot = renewSlot{st: st, next: st.lastSent.Add(k.cfg.interval), index: -1}
	k.slot.wake = k.wakeAt(&k.slot.st, k.slot.next)
	heap.Push(&r.heap, k)
	switch {
	case r.running == nil:
		r.running = make(chan struct{})
		go r.run(r.running)
	case k.slot.index == 0:
		select {
		case r.poke <- struct{}{}:
		default: // a poke is pending already
		}
	}
	return nil
}

// remove stops renewing k; a call in flight for it is ignored for k.
func (r *renewer) remove(k *KeepAlive) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k.slot.index < 0 {
		return
	}
	heap.Remove(&r.heap, k.slot.index)
	if len(r.heap) == 0 { // let the goroutine see it is idle
		select {
		case r.poke <- struct{}{}:
		default:
		}
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
	leases  []*KeepAlive
	items   []driver.RenewItem
	errs    []error
	timeout time.Duration
	sent    time.Time // when the call was made: every item's send time
	done    time.Time // when it returned
}

// run sleeps until a lease needs attention, ends the lapsed ones and sends
// the due ones in chunks.
func (r *renewer) run(running chan struct{}) {
	defer close(running)
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
		if inFlight == 0 && r.idle(running) {
			return
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

// collect pops the leases past their limit into lapsed and queues the ones
// due within the window (they stay in the heap, keyed by their limit). wake
// is when the heap next needs attention; zero when it is empty.
func (r *renewer) collect(now time.Time, lapsed, queue []*KeepAlive) (_, _ []*KeepAlive, wake time.Time) {
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

// chunk takes up to r.size live leases from queue into a call; nil if none.
func (r *renewer) chunk(queue []*KeepAlive) (c *renewCall, rest []*KeepAlive) {
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

// call makes one store call, bounded by its leases' smallest renewal timeout;
// their deadlines are kept by run, so one lease cannot cut a batch short.
func (r *renewer) call(c *renewCall) {
	ctx, cancel := context.WithTimeout(r.calls, c.timeout)
	defer cancel()
	c.sent = time.Now()
	if r.batch != nil {
		_ = r.client.storeCall(ctx, "renew_batch", len(c.items), func() error {
			c.errs = r.batch.RenewBatch(ctx, c.items)
			return batchErr(c.errs)
		})
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
			c.errs[i] = r.client.storeCall(ctx, "renew", 1, func() error { return r.client.store.Renew(ctx, it.Key, it.Token, it.TTL) })
		}
	}
	c.done = time.Now()
	r.results <- c // never blocks: room for every call in flight
}

// apply settles a call's results and reschedules its leases.
func (r *renewer) apply(c *renewCall) {
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
