package leasehold

import (
	"container/list"
	"sync"
	"time"
)

// waitQueues queues a Client's waiters per key so a release wakes one, not
// all. Only the head talks to the store and owns the key's release watch; a
// wake-up it could not act on passes to the next head (docs/design.md §5).
// The zero value is ready; idle keys take no memory.
type waitQueues struct {
	mu   sync.Mutex
	keys map[string]*waitQueue
}

// waitQueue is one key's waiters. Its fields are guarded by waitQueues.mu.
type waitQueue struct {
	waiters list.List // of *waiter, in arrival order; the front one is the head

	released  <-chan struct{} // the key's release watch; nil until set up, or when it failed
	stopWatch func()          // stops the watch; called once, when the queue empties
	pending   bool            // a head left with a wake-up it had not acted on

	// heldUntil is when the lease last seen on the key runs out; zero: unknown.
	heldUntil time.Time
}

// waiter is one goroutine in a waitQueue.
type waiter struct {
	turn chan struct{} // closed when the waiter becomes the head
	elem *list.Element
}

// join adds a waiter for key at the back of its queue and reports whether it
// is the head already (the queue was empty).
func (qs *waitQueues) join(key string) (*waitQueue, *waiter, bool) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q := qs.keys[key]
	if q == nil {
		if qs.keys == nil {
			qs.keys = make(map[string]*waitQueue)
		}
		q = &waitQueue{}
		qs.keys[key] = q
	}
	w := &waiter{turn: make(chan struct{})}
	w.elem = q.waiters.PushBack(w)
	return q, w, q.waiters.Front() == w.elem
}

// headState is what a new head takes over from the queue.
type headState struct {
	released  <-chan struct{}
	pending   bool
	heldUntil time.Time
}

// takeTurn hands the queue's state to its head, taking the pending wake-up.
func (qs *waitQueues) takeTurn(q *waitQueue) headState {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	st := headState{released: q.released, pending: q.pending, heldUntil: q.heldUntil}
	q.pending = false
	return st
}

// setWatch records the release watch the head set up.
func (qs *waitQueues) setWatch(q *waitQueue, released <-chan struct{}, stop func()) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.released, q.stopWatch = released, stop
}

// setHeldUntil records when the lease last seen on the key runs out.
func (qs *waitQueues) setHeldUntil(q *waitQueue, t time.Time) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.heldUntil = t
}

// leave removes w from key's queue, passing the head's turn and an unused
// wake-up (woken) on; the last waiter out stops the watch.
func (qs *waitQueues) leave(key string, q *waitQueue, w *waiter, woken bool) {
	qs.mu.Lock()
	wasHead := q.waiters.Front() == w.elem
	q.waiters.Remove(w.elem)
	if woken {
		q.pending = true
	}
	var stop func()
	switch front := q.waiters.Front(); {
	case front == nil:
		delete(qs.keys, key)
		stop = q.stopWatch
	case wasHead:
		close(front.Value.(*waiter).turn)
	}
	qs.mu.Unlock()
	if stop != nil {
		stop() // may talk to the store (an UNSUBSCRIBE): not under the lock
	}
}

// waiting returns how many goroutines wait for key in the queue.
func (qs *waitQueues) waiting(key string) int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.keys[key]; q != nil {
		return q.waiters.Len()
	}
	return 0
}
