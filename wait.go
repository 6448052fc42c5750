package leasehold

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// waiter is one waiting Acquire of a key, from its first attempt to its
// return: its place in the Client's queue for the key, the release watch, the
// backoff, and the wake-up it hands on when it leaves. Acquire drives it:
// wait, try, answered, and so on until an answer ends the wait; then leave.
// Only the waiter's own goroutine uses it.
type waiter struct {
	c          *Client
	key        string
	maxBackoff time.Duration
	backoff    time.Duration // the next backoff step, before jitter

	line    line          // nil: no wake-ups, the waiter polls alone
	token   string        // the Acquire's token: its name in a store's queue
	stay    time.Duration // > 0: the waiter queues in the store (storeLine), its entry living this long
	inQueue bool          // the store may hold the waiter's entry: leave takes it out
	behind  bool          // the store's queue has another live head: wait to be woken, polling only to stay queued
	elem    *list.Element // the waiter's place in a waitQueue
	turn    chan struct{} // closed when the waiter is a waitQueue's head

	head    bool // the turn is taken: the waiter talks to the store
	tryNow  bool // the next wait returns at once
	watched bool // a release watch was set up or tried: not again

	baton // the head's state, handed from head to head through the line
}

// baton is what one head hands the next when it leaves.
type baton struct {
	released  <-chan struct{} // the key's release watch; nil: none, or it failed
	stopWatch func()          // stops the watch; called once, when the line empties
	woken     bool            // a wake-up was taken and no attempt has answered since
	heldUntil time.Time       // when the lease last seen on the key runs out; zero: unknown
}

// line is where a waiter waits for its turn to talk to the store, and what
// carries the baton from head to head. waitQueue, the Client's in-process
// queue, is the local case. A store ability that queues the waiters of every
// process and wakes only the head (docs/design.md §5) would be another line,
// chosen in newWaiter; the backoff stays the waiter's, as the fallback.
type line interface {
	// take returns when w, put in the line by newWaiter, is the head, with
	// the baton in w; or ctx's error. tryNow: the key may be free.
	take(ctx context.Context, w *waiter) (tryNow bool, err error)
	// leave takes w out of the line, handing its turn and, if w took it,
	// its baton to the next waiter.
	leave(w *waiter)
}

// newWaiter returns a waiter for key, attempting with token, whose backoff is
// capped at maxBackoff. When the store keeps a queue (driver.Queuer) every
// waiter queues there, each under its own token, and the in-process queue is
// not used: see storeLine.
func (c *Client) newWaiter(key, token string, maxBackoff time.Duration) *waiter {
	w := &waiter{c: c, key: key, token: token, maxBackoff: maxBackoff, backoff: min(c.minBackoff, maxBackoff)}
	switch {
	case c.queuer != nil:
		w.line, w.stay = storeLine{}, queueStay(maxBackoff)
		w.head, w.tryNow = true, true
		c.waiters.count(key, 1)
	case c.notifier != nil:
		w.line = c.waiters.join(key, w)
	default:
		// Without wake-ups every waiter polls: polls are how a release is seen.
		w.head, w.tryNow, w.watched = true, true, true
	}
	return w
}

// wait returns when the waiter should try the key: at once when the key may
// be free, else after a release or a backoff step. When ctx ends first it
// returns an error matching ErrNotAcquired and ctx's error.
func (w *waiter) wait(ctx context.Context) error {
	if !w.head {
		tryNow, err := w.line.take(ctx, w)
		if err != nil {
			return w.c.acquireFailed(ctx, w.key, err)
		}
		w.head, w.tryNow, w.watched = true, tryNow, w.released != nil
	}
	if w.tryNow {
		w.tryNow = false
		return nil
	}
	if !w.watched {
		// Watch, then try once more so a release before the watch is not
		// missed. A queued waiter the store put behind the head (no
		// holder's time came back) skips that attempt: a release wakes the
		// head, not it. Only if it became the head and the key was released
		// in the moment before its watch does it miss a wake-up, and its
		// first backoff step covers that.
		w.watched = true
		if w.watch(ctx) && (w.stay == 0 || !w.heldUntil.IsZero()) {
			return nil
		}
	}
	step := w.backoff
	if w.behind {
		// Behind the head, a wake-up is sent when this waiter's turn comes
		// (the release after it became the head, or the head's leave), so
		// it polls only to keep its entry alive and to trim dead heads:
		// once a backoff cap, within its stay (queueStay). A lost wake-up
		// costs it at most that step.
		step = w.maxBackoff
	}
	wait := jitter(step)
	if !w.heldUntil.IsZero() {
		// The holder's lease runs out first: try right after it does.
		wait = min(wait, max(time.Until(w.heldUntil)+time.Millisecond, 0))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctxNotAcquired(ctx, w.key)
	case <-w.released:
		w.woken = true
		w.backoff = min(w.c.minBackoff, w.maxBackoff)
	case <-timer.C:
		w.backoff = min(2*w.backoff, w.maxBackoff)
	}
	return nil
}

// watch sets up the key's release watch, waiting for the store at most one
// backoff step or until the holder's lease runs out, and reports whether it
// is set up.
func (w *waiter) watch(ctx context.Context) bool {
	bound := w.maxBackoff
	if !w.heldUntil.IsZero() {
		bound = min(bound, max(time.Until(w.heldUntil), 0)+time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	var released <-chan struct{}
	var stop func()
	var err error
	if w.stay > 0 {
		released, stop, err = w.c.queuer.WatchTurn(wctx, w.key, w.token)
	} else {
		released, stop, err = w.c.notifier.WatchReleases(wctx, w.key)
	}
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.c.log.WarnContext(ctx, "leasehold: release notifications unavailable, waiting on backoff only",
				slog.String("key", w.key), slog.Any("error", err))
		}
		return false
	}
	w.released, w.stopWatch = released, stop
	return true
}

// answered records the answer of an attempt the waiter's wait let through,
// and reports whether it found the key busy, so the waiter waits again. A
// wake-up taken for an attempt that failed is kept: the attempt may not have
// reached the store, so leave passes it on.
func (w *waiter) answered(err error, ttl time.Duration) (busy bool) {
	if w.stay > 0 {
		// Granted, the script took the entry out; refused, it made or
		// refreshed it; failed, it may have.
		w.inQueue = err != nil && !errors.Is(err, ErrInvalidArgument)
	}
	switch {
	case err == nil:
		// The next head finds the key held by this Client until then.
		w.woken, w.heldUntil = false, time.Now().Add(ttl)
		return false
	case !errors.Is(err, ErrNotAcquired):
		return false
	}
	w.woken, w.heldUntil = false, time.Time{}
	held := (*HeldError)(nil)
	if errors.As(err, &held) && held.Remaining > 0 {
		w.heldUntil = time.Now().Add(held.Remaining)
	}
	// A store's queue answers a waiter behind its head with no holder's
	// time (driver.Queuer). Only a waiter whose turn watch was in place
	// before this attempt is sure to hear of its turn; until then it keeps
	// its backoff, since its turn may have come before the watch.
	w.behind = w.stay > 0 && w.released != nil && held != nil && held.Remaining <= 0
	return true
}

// leave ends the wait: the next waiter gets the turn and the baton.
func (w *waiter) leave() {
	if w.line != nil {
		w.line.leave(w)
	}
}

// queueStayMargin is what a queued waiter's entry lives beyond two backoff
// steps: room for the round trips of a watch and an attempt, and for a
// goroutine scheduled late.
const queueStayMargin = 500 * time.Millisecond

// queueStay is how long a waiter's entry in the store's queue lives after
// each attempt. A live waiter attempts again, refreshing it, within a backoff
// step (at most maxBackoff) plus, once, the setting up of its watch (at most
// maxBackoff too): 2×maxBackoff plus queueStayMargin covers both. So a head
// that crashed, paused or left without a word holds the queue up for at most
// queueStay after its last attempt, plus the backoff step of the waiter behind
// it, whose next attempt removes the expired entry: 3.5 s with the default
// 1 s cap. A live waiter slower than this (a store round trip over the
// margin) only loses its place: it joins again at the back.
//
// It is capped at driver.MaxTTL, the longest span a store takes, so a
// backoff cap of 12 hours or more does not make every attempt invalid: such
// a waiter's entry may lapse between attempts, and it joins again.
func queueStay(maxBackoff time.Duration) time.Duration {
	return min(2*maxBackoff+queueStayMargin, driver.MaxTTL)
}

// storeLine is the line of a waiter queued in the store (driver.Queuer):
// every waiter of every Client has its own entry there, in arrival order, so
// the order is the same across processes, and the store wakes the head
// alone. Each waiter attempts on its own: the head when woken, and every
// waiter at its backoff step, which is also what keeps its entry alive. The
// in-process queue is not put in front: with one entry per Client, a
// Client's waiters would wait for their local turn and then join the store's
// queue at its back, behind waiters of other processes that came later, and
// a Client that re-acquires in a loop would still go ahead of its own
// earlier waiters' peers. A store queue for every waiter keeps arrival order
// exact, at the cost of one poll per waiter per backoff step (at most one a
// second by default).
type storeLine struct{}

var _ line = storeLine{}

// take is not called: every waiter of a storeLine is its own head.
func (storeLine) take(context.Context, *waiter) (bool, error) { return true, nil }

// leave stops the waiter's watch and takes its entry out of the store's
// queue, when the store may hold one, so the waiter behind it is woken at
// once if the key is free. A failed leave costs the queue at most the
// entry's stay.
func (storeLine) leave(w *waiter) {
	c := w.c
	if w.stopWatch != nil {
		w.stopWatch()
	}
	if w.inQueue {
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		err := c.storeCall(ctx, "leave", 1, func() error { return c.queuer.LeaveQueue(ctx, w.key, w.token) })
		cancel()
		if err != nil {
			c.log.Warn("leasehold: could not leave the store's queue; the entry expires on its own",
				slog.String("key", w.key), slog.Duration("stay", w.stay), slog.Any("error", err))
		}
	}
	c.waiters.count(w.key, -1)
}

// waitQueues are the Client's lines of waiters, one per key, so a release
// wakes one waiter, not all. The zero value is ready; idle keys take no memory.
type waitQueues struct {
	mu     sync.Mutex
	keys   map[string]*waitQueue
	queued map[string]int // waiters queued in the store (storeLine), per key
}

// count adds n to key's waiters queued in the store.
func (qs *waitQueues) count(key string, n int) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.queued == nil {
		qs.queued = make(map[string]int)
	}
	if qs.queued[key] += n; qs.queued[key] == 0 {
		delete(qs.queued, key)
	}
}

// waitQueue is the in-process line of one key: its waiters in arrival order,
// the front one the head. Its fields are guarded by qs.mu.
type waitQueue struct {
	qs      *waitQueues
	key     string
	waiters list.List // of *waiter
	taken   bool      // a head took its turn: later heads try at once only when woken
	baton             // the last head's, for the next
}

var _ line = (*waitQueue)(nil)

// join puts w at the back of key's queue, made when no waiter waits for key.
func (qs *waitQueues) join(key string, w *waiter) *waitQueue {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.keys[key]
	if q == nil {
		if qs.keys == nil {
			qs.keys = make(map[string]*waitQueue)
		}
		q = &waitQueue{qs: qs, key: key}
		qs.keys[key] = q
	}
	if w.elem = q.waiters.PushBack(w); q.waiters.Front() == w.elem {
		w.turn = turnNow
	} else {
		w.turn = make(chan struct{})
	}
	return q
}

// turnNow is the turn of a waiter that is the head as it joins: closed, so an
// uncontended Acquire makes no channel.
var turnNow = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// take waits for w's turn. The first head tries at once; a later one finds
// the key as busy as it was and waits first, unless it was handed a wake-up.
func (q *waitQueue) take(ctx context.Context, w *waiter) (bool, error) {
	select {
	case <-w.turn: // a head's turn wins over its ended ctx, as its attempt checks ctx
	default:
		select {
		case <-w.turn:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	q.qs.mu.Lock()
	defer q.qs.mu.Unlock()
	first := !q.taken
	q.taken = true
	w.baton, q.woken = q.baton, false
	return first || w.woken, nil
}

func (q *waitQueue) leave(w *waiter) {
	q.qs.mu.Lock()
	wasHead := q.waiters.Front() == w.elem
	q.waiters.Remove(w.elem)
	if w.head {
		q.baton = w.baton
	}
	var stop func()
	switch front := q.waiters.Front(); {
	case front == nil:
		delete(q.qs.keys, q.key)
		stop = q.stopWatch
	case wasHead:
		close(front.Value.(*waiter).turn)
	}
	q.qs.mu.Unlock()
	if stop != nil {
		stop() // may talk to the store (an UNSUBSCRIBE): not under the lock
	}
}

// waiting returns how many goroutines wait for key in its queue.
func (qs *waitQueues) waiting(key string) int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	n := qs.queued[key]
	if q := qs.keys[key]; q != nil {
		n += q.waiters.Len()
	}
	return n
}
