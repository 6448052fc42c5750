package leasehold

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
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

	line line          // nil: no wake-ups, the waiter polls alone
	elem *list.Element // the waiter's place in a waitQueue
	turn chan struct{} // closed when the waiter is a waitQueue's head

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

// newWaiter returns a waiter for key whose backoff is capped at maxBackoff.
func (c *Client) newWaiter(key string, maxBackoff time.Duration) *waiter {
	w := &waiter{c: c, key: key, maxBackoff: maxBackoff, backoff: min(c.minBackoff, maxBackoff)}
	if c.notifier != nil {
		w.line = c.waiters.join(key, w)
	} else {
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
		// Watch, then try once more so a release before the watch is not missed.
		w.watched = true
		if w.watch(ctx) {
			return nil
		}
	}
	wait := jitter(w.backoff)
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
	released, stop, err := w.c.notifier.WatchReleases(wctx, w.key)
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
	switch {
	case err == nil:
		// The next head finds the key held by this Client until then.
		w.woken, w.heldUntil = false, time.Now().Add(ttl)
		return false
	case !errors.Is(err, ErrNotAcquired):
		return false
	}
	w.woken, w.heldUntil = false, time.Time{}
	if held := (*HeldError)(nil); errors.As(err, &held) && held.Remaining > 0 {
		w.heldUntil = time.Now().Add(held.Remaining)
	}
	return true
}

// leave ends the wait: the next waiter gets the turn and the baton.
func (w *waiter) leave() {
	if w.line != nil {
		w.line.leave(w)
	}
}

// waitQueues are the Client's lines of waiters, one per key, so a release
// wakes one waiter, not all. The zero value is ready; idle keys take no memory.
type waitQueues struct {
	mu   sync.Mutex
	keys map[string]*waitQueue
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
	if q := qs.keys[key]; q != nil {
		return q.waiters.Len()
	}
	return 0
}
