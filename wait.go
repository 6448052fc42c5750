package leasehold

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Waiting (docs/design.md §5). Every waiting call (Acquire, Hold, Lead)
// waits the same way: a waiter joins its Client's line for the key, in
// arrival order. On a store that keeps a queue (driver.Queuer) every waiter
// also holds a place of its own in the store's queue, which its first
// attempt takes, so the order is one across Clients; it keeps the place by
// attempting at least every refresh. Only the line's head watches the store
// for its turn, and only while the key is not held by this Client: a release
// by this Client hands the key to its head in process, in the release's own
// store call when the store can (driver.HandOffer) and the head is next in
// the store's queue too, else by waking it.

// queueStayMargin is what a queued waiter's entry lives beyond two refresh
// periods: room for the round trips of a watch and an attempt, and for a
// goroutine scheduled late.
const queueStayMargin = 500 * time.Millisecond

// queueStay is how long a waiter's entry in the store's queue lives after
// each attempt: 2 × maxBackoff + queueStayMargin (a live waiter attempts
// again within a backoff step plus, once, the setting up of its watch, each
// at most maxBackoff), capped at driver.MaxQueueStay so that no Client's
// backoff decides how long a crashed waiter holds a key up for everyone.
func queueStay(maxBackoff time.Duration) time.Duration {
	return min(2*maxBackoff+queueStayMargin, driver.MaxQueueStay)
}

// refreshEvery is the longest a queued waiter goes without an attempt: one
// backoff cap, or less when the stay was capped, so that two such waits and
// the margin fit in the stay.
func refreshEvery(maxBackoff, stay time.Duration) time.Duration {
	return min(maxBackoff, (stay-queueStayMargin)/2)
}

// lines are a Client's waiters, one line per key; a key takes memory only
// while a goroutine waits for it or a lease counted by its line is held
// (until the lease has certainly expired: a line kept only by expired
// leases goes at the next sweep, when the map has doubled).
type lines struct {
	mu      sync.Mutex
	keys    map[string]*line
	sweepAt int // the map's size at which join sweeps it next
}

// linesSweepMin is the map size below which join does not sweep: a sweep
// only collects the lines of leases left to expire without a release.
const linesSweepMin = 1024

// line is one key's waiters in one Client. Its fields, and the line and
// waiter fields said to be, are guarded by lines.mu.
type line struct {
	key     string
	waiters list.List // of *waiter, in arrival order; the front is the head
	held    []*Lease  // leases of this Client on key counted by the line (Lease.line), until released or certainly expired
	woken   bool      // the key may be free: a release seen and not acted on by a head

	// What one head hands the next (stores without a queue): the key's
	// release watch and when the lease last seen on the key runs out.
	released  <-chan struct{}
	stopWatch func()
	watched   bool // a release watch was set up or tried: not again
	heldUntil time.Time
}

// handed is the answer of a hand-off to a waiter.
type handed struct {
	lease  *Lease    // the key is the waiter's: granted by the hand-off
	unsure bool      // the outcome is unknown: the waiter looks
	sent   time.Time // when the hand-off was sent
}

// waiter is one waiting call for a key, from its join to its leave; only its
// own goroutine uses its unguarded fields.
type waiter struct {
	c          *Client
	key, token string
	ttl        time.Duration
	maxBackoff time.Duration
	backoff    time.Duration // the next backoff step, before jitter
	stay       time.Duration // > 0: queued in the store (Queuer), the entry living this long
	refresh    time.Duration // a queued waiter attempts at least this often
	ln         *line
	elem       *list.Element
	kick       chan struct{} // holds a pending "look again": the waiter became the head, the key may be free, or a hand-off was answered

	// Guarded by lines.mu.
	trying  bool // an attempt is in flight: no hand-off to it now
	handing bool // a hand-off to it is in flight: it attempts nothing
	leaving bool // it gave up: no hand-off to it
	// abandoned: it left while a hand-off to it was under way; the
	// releaser gives back what the hand-off gave it (answer).
	abandoned bool
	answer    *handed // a hand-off's answer, not yet taken
	nudged    bool    // the store woke it (a hand-off went to the store's head, this waiter)

	placed    bool // an attempt of it was answered: it has taken its place in the store's queue (Queuer)
	inQueue   bool // the store may hold its entry: leave takes it out
	acquired  bool // it got the key
	behind    bool // the store has a live head of another Client before it
	tryNow    bool // the next wait returns at once
	woken     bool // it took a wake-up and no attempt has answered since
	wasHead   bool // it has been the head: it took the line's heldUntil then
	heldUntil time.Time
	// unsureSince is when a hand-off to it of unknown outcome was sent, if
	// one was and it did not find the key its: the hand-off may land
	// later, and the key then holds its token, which its own attempts are
	// refused by. A refused attempt looks again (claim), and leave gives
	// its token back in case.
	unsureSince time.Time
	turn        <-chan struct{} // its own turn watch (Queuer)
	stopTurn    func()
	turnTried   bool
}

// join puts a new waiter for key at the back of its line.
func (c *Client) join(key, token string, ttl, maxBackoff time.Duration) *waiter {
	w := &waiter{c: c, key: key, token: token, ttl: ttl, maxBackoff: maxBackoff,
		backoff: min(c.minBackoff, maxBackoff), kick: make(chan struct{}, 1)}
	if c.queuer != nil {
		// Its first attempt takes its place in the store's queue.
		w.stay = queueStay(maxBackoff)
		w.refresh = refreshEvery(maxBackoff, w.stay)
		w.tryNow = true
	}
	ls := &c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.sweep()
	w.ln = ls.line(key)
	w.elem = w.ln.waiters.PushBack(w)
	if w.ln.waiters.Front() == w.elem {
		// The first head tries at once; a later one is kicked when its turn
		// comes, and tries at once only if the key may be free by then.
		w.tryNow = true
		w.heldUntil, w.wasHead = w.ln.heldUntil, true
	}
	return w
}

// sweep drops the lines that nothing waits on and that count only leases
// that have certainly expired (left to expire, never released), once the
// map has doubled since the last sweep. ls.mu is held.
func (ls *lines) sweep() {
	if len(ls.keys) < max(ls.sweepAt, linesSweepMin) {
		return
	}
	now := time.Now()
	for key, ln := range ls.keys {
		if ln.waiters.Len() == 0 && !ln.holding(now) {
			delete(ls.keys, key)
		}
	}
	ls.sweepAt = 2 * len(ls.keys)
}

// holding reports whether a lease counted by ln may still be held at now:
// it was neither released nor has it certainly expired. The leases that
// have are no longer counted (a line that waiters keep would otherwise
// count every lease left to expire on its key). ls.mu is held.
func (ln *line) holding(now time.Time) bool {
	ln.held = slices.DeleteFunc(ln.held, func(l *Lease) bool { return l.certainEnd.Load() <= now.UnixNano() })
	return len(ln.held) > 0
}

// line returns key's line, made if there is none. ls.mu is held.
func (ls *lines) line(key string) *line {
	ln := ls.keys[key]
	if ln == nil {
		if ls.keys == nil {
			ls.keys = make(map[string]*line)
		}
		ln = &line{key: key}
		ls.keys[key] = ln
	}
	return ln
}

// drop deletes ln from the map once nothing needs it; it returns the release
// watch to stop, outside the lock. ls.mu is held.
func (ls *lines) drop(ln *line) (stop func()) {
	if ln.waiters.Len() > 0 {
		return nil
	}
	stop, ln.stopWatch, ln.released, ln.watched = ln.stopWatch, nil, nil, false
	if !ln.holding(time.Now()) && ls.keys[ln.key] == ln {
		delete(ls.keys, ln.key)
	}
	return stop
}

// hold counts l as held by its Client for the waiters of its key, when the
// key has waiters or counted leases.
func (ls *lines) hold(l *Lease) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ln := ls.keys[l.key]; ln != nil {
		ln.held = append(ln.held, l)
		l.line = ln
	}
}

// unhold stops counting l as held. When no lease of the Client is left on
// the key, the head looks again: the key may be free, or held by another
// Client, and then the head watches for its turn.
func (ls *lines) unhold(l *Lease) {
	ls.mu.Lock()
	ln := l.line
	l.line = nil
	var stop func()
	if ln != nil {
		if i := slices.Index(ln.held, l); i >= 0 {
			ln.held = slices.Delete(ln.held, i, i+1)
		}
		if !ln.holding(time.Now()) {
			ln.woken = true
			if f := ln.waiters.Front(); f != nil {
				f.Value.(*waiter).poke()
			}
		}
		stop = ls.drop(ln)
	}
	ls.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// poke gives w a pending "look again", without blocking.
func (w *waiter) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// view is what a waiter sees of its line at one moment.
type view struct {
	head, held, handing bool
	// early: on a store with a queue, the waiter before w in the line has
	// not taken its place in the store's queue yet, so w's first attempt
	// waits for it: a Client's waiters reach the store's queue in the
	// order they joined its line.
	early  bool
	answer *handed
}

// look returns w's view, taking a hand-off's answer and, at the head, the
// line's wake-up and what the last head knew.
func (w *waiter) look() view {
	ls := &w.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	v := view{head: w.ln.waiters.Front() == w.elem, held: w.ln.holding(time.Now()), handing: w.handing, answer: w.answer}
	w.answer = nil
	if v.head && !w.wasHead {
		// It became the head when the one before it left: what that head
		// knew of the holder's lease is now its own to act on.
		w.wasHead = true
		if w.heldUntil.IsZero() {
			w.heldUntil = w.ln.heldUntil
		}
	}
	if w.stay > 0 && !w.placed {
		if p := w.elem.Prev(); p != nil && !p.Value.(*waiter).placed {
			v.early = true
		}
	}
	if w.nudged {
		w.nudged, w.tryNow = false, true
	}
	if v.head && w.ln.woken {
		w.ln.woken, w.woken = false, true
		w.tryNow = true
		select {
		case <-w.ln.released: // the store's word of the same release: not twice
		default:
		}
	}
	return v
}

// wait returns when w should try the key, with a hand-off's answer if one
// came. When ctx ends first it returns an error matching ErrNotAcquired and
// ctx's error; a hand-off already under way is waited for and returned.
func (w *waiter) wait(ctx context.Context) (*handed, error) {
	for {
		v := w.look()
		switch {
		case v.answer != nil:
			return v.answer, nil
		case v.handing:
			// The releaser answers within its release timeout; a waiter
			// whose ctx ends or whose Client closes meanwhile leaves now,
			// and the releaser gives back what it was handed (answer).
			select {
			case <-w.kick:
			case <-ctx.Done():
				if w.abandon() {
					return nil, ctxNotAcquired(ctx, w.key)
				}
			case <-w.c.renew.quit:
				if w.abandon() {
					return nil, ErrClosed
				}
			}
			continue
		case w.tryNow && !v.early:
			w.tryNow = false
			return nil, nil
		}
		var wait time.Duration // 0: no timer
		switch {
		case !v.head && w.stay == 0:
			// Waits for its turn in process; the head talks to the store.
		case !v.head:
			// Queued in the store behind another waiter of this Client: it
			// only keeps its entry alive until it is the head. Early, it
			// waits for the waiter before it to take its place (placed
			// kicks it), at most a refresh: a stalled attempt of another
			// waiter holds up its place in the order, never its wait.
			wait = jitter(w.refresh)
		default:
			if !v.held && w.watch(ctx) {
				// A release before the watch was in place would be
				// missed: try once more, unless the store put this waiter
				// behind another Client's head (that head is woken, not
				// this one; a wake-up missed in the moment before the
				// watch costs one first backoff step).
				if w.stay == 0 || !w.heldUntil.IsZero() {
					return nil, nil
				}
			}
			step := w.backoff
			if w.behind || v.held {
				// A wake-up comes when this waiter's turn comes (a release
				// by the store's head, or by this Client, which kicks it),
				// so it polls only to keep its entry and trim dead heads.
				step = w.maxBackoff
			}
			if w.stay > 0 {
				step = min(step, w.refresh)
			}
			wait = jitter(step)
			if !w.heldUntil.IsZero() {
				// The holder's lease runs out first: try right after it does.
				wait = min(wait, max(time.Until(w.heldUntil)+time.Millisecond, time.Nanosecond))
			}
		}
		switch w.sleep(ctx, wait) {
		case sleptCtx:
			if w.quit() {
				return nil, ctxNotAcquired(ctx, w.key)
			}
			// A hand-off to w began just now: take its answer.
		case sleptClosed:
			if w.quit() {
				return nil, ErrClosed
			}
			// A hand-off to w began just now: take its answer.
		case sleptWoken:
			w.woken, w.tryNow = true, false
			w.backoff = min(w.c.minBackoff, w.maxBackoff)
			return nil, nil
		case sleptTimer:
			w.tryNow = false // an early waiter's wait ran out: it attempts now
			w.backoff = min(2*w.backoff, w.maxBackoff)
			return nil, nil
		}
	}
}

// What ended a waiter's sleep.
const (
	sleptKick = iota
	sleptCtx
	sleptWoken
	sleptTimer
	sleptClosed
)

// sleep waits for ctx's end, a kick, a wake-up from the store, the
// Client's Close, or wait to pass (0: no timer).
func (w *waiter) sleep(ctx context.Context, wait time.Duration) int {
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return sleptCtx
	case <-w.kick:
		return sleptKick
	case <-w.released():
		return sleptWoken
	case <-w.c.renew.quit:
		return sleptClosed
	case <-timer:
		return sleptTimer
	}
}

// released is the channel of the release or turn watch w's wait selects on.
func (w *waiter) released() <-chan struct{} {
	if w.stay > 0 {
		return w.turn
	}
	ls := &w.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if w.ln.waiters.Front() != w.elem {
		return nil
	}
	return w.ln.released
}

// quit marks w as giving up, unless a hand-off to it is under way.
func (w *waiter) quit() bool {
	ls := &w.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if w.handing || w.answer != nil {
		return false
	}
	w.leaving = true
	return true
}

// watch sets up the head's watch, once: its turn watch on a store with a
// queue, else the line's release watch, which passes from head to head. It
// waits for the store at most one backoff step (or refresh) or until the
// holder's lease runs out, and reports whether a watch is in place now.
func (w *waiter) watch(ctx context.Context) bool {
	c := w.c
	if w.stay > 0 {
		if w.turnTried {
			return false
		}
		w.turnTried = true
	} else {
		c.lines.mu.Lock()
		tried := w.ln.watched
		w.ln.watched = true
		c.lines.mu.Unlock()
		if tried || c.notifier == nil {
			return false
		}
	}
	bound := w.maxBackoff
	if w.stay > 0 {
		bound = w.refresh
	}
	if !w.heldUntil.IsZero() {
		bound = min(bound, max(time.Until(w.heldUntil), 0)+time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	var ch <-chan struct{}
	var stop func()
	err := c.storeCall(ctx, "watch", 1, func() (err error) {
		if w.stay > 0 {
			ch, stop, err = c.queuer.WatchTurn(wctx, w.key, w.token)
		} else {
			ch, stop, err = c.notifier.WatchReleases(wctx, w.key)
		}
		return err
	})
	if err != nil {
		return false
	}
	if w.stay > 0 {
		w.turn, w.stopTurn = ch, stop
		return true
	}
	c.lines.mu.Lock()
	mine := w.ln.waiters.Front() == w.elem && w.ln.released == nil
	if mine {
		w.ln.released, w.ln.stopWatch = ch, stop
	}
	c.lines.mu.Unlock()
	if !mine {
		stop()
	}
	return mine
}

// doneCtx is a context that is already done: WatchTurn called with it
// returns a watch only if it takes no round trip (driver.Queuer).
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// prewatch puts w's turn watch in place before an attempt, when the store
// can without a round trip (its turn watches are up already): a refusal
// behind another Client's head is then followed by the wake-up of w's turn,
// with no second look to cover a turn that came before the watch. Without
// it the first refused attempt sets the watch up (watch), and looks once
// more.
func (w *waiter) prewatch() {
	if w.stay == 0 || w.turnTried || w.c.usable() != nil {
		return // a closed Client's attempt does not reach the store
	}
	ch, stop, err := w.c.queuer.WatchTurn(doneCtx, w.key, w.token)
	if err != nil {
		return
	}
	w.turn, w.stopTurn, w.turnTried = ch, stop, true
}

// abandon marks w as leaving while a hand-off to it is under way, so that
// its answer is given back by the releaser instead of waited for; it
// reports false when the answer is in already (w takes it) or the hand-off
// is over.
func (w *waiter) abandon() bool {
	ls := &w.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if !w.handing || w.answer != nil {
		return false
	}
	w.abandoned, w.leaving = true, true
	return true
}

// startTry marks an attempt in flight, unless a hand-off to w is under way
// or answered (then w takes that instead).
func (w *waiter) startTry() bool {
	ls := &w.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if w.handing || w.answer != nil {
		return false
	}
	w.trying = true
	return true
}

// endTry marks w's attempt answered. An answer other than "busy" is final
// (the key is w's, or the call returns an error): w is leaving from then
// on, in the same step, so that no release hands the key to a token whose
// call has returned.
func (w *waiter) endTry(err error) {
	ls := &w.c.lines
	ls.mu.Lock()
	w.trying = false
	if !errors.Is(err, ErrNotAcquired) {
		w.leaving = true
	}
	ls.mu.Unlock()
}

// answered records the answer of an attempt and reports whether it found
// the key busy, so the waiter waits again. A wake-up taken for an attempt
// that failed is kept: the attempt may not have reached the store, so leave
// passes it on.
func (w *waiter) answered(err error) (busy bool) {
	if w.stay > 0 {
		// Granted, the script took the entry out; refused, it made or
		// refreshed it; failed, it may have; refused by a closed Client, it
		// did not reach the store, and an entry made before stays as it is.
		if !errors.Is(err, ErrClosed) {
			w.inQueue = err != nil && !errors.Is(err, ErrInvalidArgument)
		}
		if !w.placed {
			w.place()
		}
	}
	switch {
	case err == nil:
		w.woken, w.acquired = false, true
		w.heldUntil = time.Now().Add(w.ttl) // the next head finds the key held by this Client until then
		return false
	case !errors.Is(err, ErrNotAcquired):
		return false
	}
	w.woken, w.heldUntil = false, time.Time{}
	held := (*HeldError)(nil)
	if errors.As(err, &held) && held.Remaining > 0 {
		w.heldUntil = time.Now().Add(heldFor(held))
		if w.stay > 0 {
			w.toFront() // the store's head is the first of this Client's waiters
		}
	}
	// A store's queue answers a waiter behind its head with no holder's
	// time (driver.Queuer). Only a waiter whose turn watch was in place
	// before this attempt is sure to hear of its turn; until then it keeps
	// its backoff, since its turn may have come before the watch.
	w.behind = w.stay > 0 && w.turn != nil && held != nil && held.Remaining <= 0
	return true
}

// place records that w's attempt was answered and kicks the waiter after
// it in the line, whose first attempt may wait for this (view.early).
func (w *waiter) place() {
	ls := &w.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	w.placed = true
	if n := w.elem.Next(); n != nil {
		n.Value.(*waiter).poke()
	}
}

// toFront moves w, which the store says is the head of its queue, to the
// front of its line: two waiters of one Client can reach the store in the
// other order than they joined the line, and the head of the line is the
// one that watches for its turn and that a release hands the key to.
func (w *waiter) toFront() {
	ls := &w.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if f := w.ln.waiters.Front(); f != w.elem {
		w.ln.waiters.MoveToFront(w.elem)
		f.Value.(*waiter).poke() // no longer the head: it looks again
	}
}

// leave ends the wait: a head hands the next head its turn and what it
// knew, and a queued waiter leaves the store's queue.
func (w *waiter) leave() {
	c := w.c
	ls := &c.lines
	ls.mu.Lock()
	w.leaving = true
	wasHead := w.ln.waiters.Front() == w.elem
	if n := w.elem.Next(); n != nil && w.stay > 0 && !w.placed && !wasHead {
		n.Value.(*waiter).poke() // it may wait for w's place (view.early): no longer
	}
	w.ln.waiters.Remove(w.elem)
	if wasHead {
		w.ln.heldUntil = w.heldUntil
		switch {
		case w.acquired:
			w.ln.woken = false // a release seen meanwhile was the one it acted on
		case w.woken:
			w.ln.woken = true // a wake-up this head could not act on
		}
		if f := w.ln.waiters.Front(); f != nil {
			f.Value.(*waiter).poke()
		}
	}
	stop := ls.drop(w.ln)
	ls.mu.Unlock()
	if stop != nil {
		stop() // may talk to the store (an UNSUBSCRIBE): not under the lock
	}
	if w.stopTurn != nil {
		w.stopTurn()
	}
	if !w.unsureSince.IsZero() && !w.acquired {
		// A hand-off of unknown outcome may have given it the key since it
		// last looked: give its token back rather than leave the key held
		// for a TTL by a token no one has.
		c.cleanUp(context.Background(), w.key, w.token, 0)
	}
	if w.inQueue {
		ctx, cancel := context.WithTimeout(context.Background(), c.cleanupTimeout)
		_ = c.storeCall(ctx, "leave", 1, func() error {
			if c.granter != nil && !w.acquired {
				// A grant to it may have come unseen: give it back.
				return c.granter.Decline(ctx, w.key, w.token)
			}
			return c.queuer.LeaveQueue(ctx, w.key, w.token)
		})
		cancel()
	}
}

// acquire is Acquire's wait: attempts go out until one is answered with more
// than "busy", or a release by this Client hands the key over.
//
// budget > 0 bounds the waiting (WithWaitBudget): it counts from the first
// attempt's answer, which goes under the caller's ctx alone, so that a
// budget shorter than a round trip still takes a free key.
func (c *Client) acquire(parent context.Context, key string, ttl, maxBackoff, budget time.Duration) (l *Lease, err error) {
	if err := validateKeyTTL(key, ttl); err != nil {
		return nil, err
	}
	w := c.join(key, c.newToken(), ttl, maxBackoff)
	defer w.leave()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	var budgetTimer *time.Timer
	if budget > 0 {
		defer func() {
			if budgetTimer != nil {
				budgetTimer.Stop()
			}
			if err != nil && expired(parent) == nil && context.Cause(ctx) == errWaitBudget {
				err = fmt.Errorf("leasehold: %q still held after the %v wait budget: %w", key, budget, ErrNotAcquired)
			}
		}()
	}
	for {
		h, err := w.wait(ctx)
		if h != nil {
			if l := w.take(ctx, h); l != nil {
				return l, nil
			}
			if cerr := expired(ctx); cerr != nil {
				return nil, ctxNotAcquired(ctx, key)
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if !w.startTry() {
			continue // a hand-off is under way: wait for it
		}
		if l := w.granted(ctx); l != nil {
			w.endTry(nil)
			w.answered(nil)
			return l, nil
		}
		w.prewatch()
		l, err := c.try(ctx, key, w.token, ttl, w.stay)
		w.endTry(err)
		if budget > 0 && budgetTimer == nil {
			budgetTimer = time.AfterFunc(budget, func() { cancel(errWaitBudget) })
		}
		if !w.unsureSince.IsZero() && errors.Is(err, ErrNotAcquired) && expired(ctx) == nil {
			// Refused, perhaps by its own token: a hand-off of unknown
			// outcome to it that landed late.
			if l := w.claim(ctx, w.unsureSince); l != nil {
				if w.stay > 0 {
					w.inQueue = true // the refused attempt joined the queue again: leave takes it out
				}
				if time.Since(l.r.sent) < w.ttl/2 {
					w.unsureSince = time.Time{}
					w.acquired, w.heldUntil = true, time.Now().Add(w.ttl)
					return l, nil
				}
				// Counted from the hand-off's send time, as it must be, half
				// its TTL or more is gone: give it back and take it anew
				// (if the release fails, leave gives the token back).
				l.quiet = true // taken and given back: the caller never had it
				if l.release(ctx, c.cleanupTimeout) == nil {
					w.unsureSince = time.Time{}
				}
				w.forgetGrant()
				w.tryNow = true
			}
		}
		if w.answered(err) {
			continue
		}
		if err != nil {
			return nil, c.acquireFailed(ctx, key, err)
		}
		return l, nil
	}
}

// granted returns w's lease from a grant of the key to it that its store
// told of (driver.Granter), or nil. The grant holds the key for w's TTL or
// the rest of its entry's stay if that is shorter, so the lease counts
// min(ttl, stay) from the send time of the attempt the grant names, and its
// first renewal (Lease.confirm, or the KeepAlive that follows) brings it to
// the TTL. A grant with less than half of that left before its local
// deadline is left to w's next attempt, which finds the key held by w's
// token and renews it (driver.Granter), as is any grant once w's ctx ended
// or its Client closed: the attempt then fails, and w declines the grant
// as it leaves. An attempt is marked in flight (startTry).
func (w *waiter) granted(ctx context.Context) *Lease {
	c := w.c
	if c.granter == nil || w.turn == nil || c.usable() != nil || expired(ctx) != nil {
		return nil
	}
	fence, from, ok := c.granter.Granted(w.key, w.token)
	if !ok {
		return nil
	}
	first := min(w.ttl, w.stay)
	if time.Until(from.Add(first-w.ttl/DefaultDriftDivisor)) < first/2 {
		return nil
	}
	// Counted so that sent + ttl is the grant's term, and its certain
	// expiry (renewal.expiredBy) no later than the grant's.
	sent, done := from.Add(first-w.ttl), time.Now().Add(first-w.ttl)
	l := c.newLease(w.key, w.token, fence, w.ttl, sent, time.Now())
	l.r.done = done
	l.noteEnd()
	l.unconfirmed = sent
	return l
}

// forgetGrant drops the word of a grant to w that may still wait in its
// store: w gave its token's hold of the key back, and keeps waiting.
func (w *waiter) forgetGrant() {
	if w.c.granter != nil {
		w.c.granter.Granted(w.key, w.token)
	}
}

// take makes a hand-off's answer w's lease, or nil. A lease handed to a
// waiter whose ctx ended meanwhile is released (to the next waiter).
func (w *waiter) take(ctx context.Context, h *handed) *Lease {
	l := h.lease
	if h.unsure {
		if l = w.claim(ctx, h.sent); l == nil && w.unsureSince.IsZero() {
			w.unsureSince = h.sent
		}
	}
	if l == nil {
		w.tryNow = true // the key may be free
		return nil
	}
	w.inQueue = false // the hand-off took the entry out
	if expired(ctx) != nil {
		w.quit() // no hand-off to w: it is leaving
		l.quiet = true
		_ = l.release(ctx, w.c.cleanupTimeout)
		return nil
	}
	w.acquired, w.heldUntil = true, time.Now().Add(w.ttl)
	return l
}

// claim finds out whether a hand-off of unknown outcome, sent at sent, gave
// w the key, and returns the lease if so. When the store cannot say, w's
// token is released in case.
func (w *waiter) claim(ctx context.Context, sent time.Time) *Lease {
	c := w.c
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cleanupTimeout)
	defer cancel()
	var info driver.Info
	asked := time.Now()
	err := c.storeCall(cctx, "inspect", 1, func() (err error) {
		info, err = c.store.Inspect(cctx, w.key)
		return err
	})
	switch {
	case err != nil:
		c.cleanUp(ctx, w.key, w.token, 0)
		w.forgetGrant()
		return nil
	case !info.Held || info.Token != w.token || info.Fence <= 0:
		return nil
	}
	// The key may hold w's token by a grant (driver.Granter), not by the
	// hand-off, for less than ttl from sent: the lease ends no later than
	// the store says, and is then renewed to its TTL as a grant's is.
	from := sent
	if end := asked.Add(info.TTL); end.Before(sent.Add(w.ttl)) {
		from = end.Add(-w.ttl)
	}
	l := c.newLease(w.key, w.token, info.Fence, w.ttl, from, time.Now())
	if !from.Equal(sent) {
		l.unconfirmed = from
	}
	return l
}

// giveBack ends l in the store: by a hand-off to the head of the Client's
// line for its key when the store can, else by a release (retried while its
// outcome is unknown, within ctx).
func (c *Client) giveBack(ctx context.Context, l *Lease) error {
	var w *waiter
	waiting := false
	if c.handOffer != nil {
		w, waiting = c.lines.handOffTo(l)
	}
	if !waiting { // no waiter of this Client: the store's head, if any, is another's
		err, unsure := c.releaseRetrying(ctx, l.key, l.token)
		if err != nil && unsure && errors.Is(err, ErrNotOwned) {
			err = nil // released by an attempt whose reply was lost, or expired
		}
		return err
	}
	next, ttl := "", time.Duration(0) // no waiter to hand to: a release that names the store's head
	if w != nil {
		next, ttl = w.token, w.ttl
	}
	h := &handed{sent: time.Now()}
	if w != nil {
		defer func() {
			if h != nil { // a panic in the store: the waiter must not wait for an answer forever
				c.lines.answer(w, &handed{unsure: true, sent: h.sent})
			}
		}()
	}
	var fence int64
	var head string
	err := c.storeCall(ctx, "handoff", 1, func() (err error) {
		fence, head, err = c.handOffer.HandOff(ctx, l.key, l.token, next, ttl)
		return err
	})
	if w == nil {
		if err == nil {
			c.lines.wake(l.key, head)
		} else if unknownOutcome(err) {
			rerr, _ := c.releaseRetrying(ctx, l.key, l.token)
			if err = rerr; errors.Is(rerr, ErrNotOwned) {
				err = nil // released by the hand-off whose reply was lost, or expired
			}
		}
		return err
	}
	switch {
	case err == nil && fence > 0:
		h.lease = c.newLease(l.key, w.token, fence, w.ttl, h.sent, time.Now())
	case err == nil:
		c.lines.wake(l.key, head) // released; the store's head may be another waiter of this Client
	case unknownOutcome(err):
		h.unsure = true
		rerr, _ := c.releaseRetrying(ctx, l.key, l.token)
		if err = rerr; errors.Is(rerr, ErrNotOwned) {
			err = nil // handed over, released, or expired: either way not ours
		}
	}
	c.lines.answer(w, h)
	h = nil
	return err
}

// handOffTo picks the head of the line of l's key for a hand-off of l,
// marking it, or nil when there is none it can go to now; waiting says
// whether the Client has waiters for the key at all.
func (ls *lines) handOffTo(l *Lease) (w *waiter, waiting bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.keys[l.key]
	if ln == nil || ln.waiters.Len() == 0 {
		return nil, false
	}
	w = ln.waiters.Front().Value.(*waiter)
	if w.trying || w.handing || w.leaving || w.answer != nil || w.token == l.token {
		return nil, true
	}
	w.handing = true
	return w, true
}

// answer gives w the answer of a hand-off to it. A waiter that left while
// the hand-off was under way (abandon) takes none: a lease handed to it is
// released here, and a hand-off of unknown outcome is cleaned up, so that
// its token does not hold the key for a TTL.
func (ls *lines) answer(w *waiter, h *handed) {
	ls.mu.Lock()
	w.handing = false
	gone := w.abandoned
	if !gone {
		w.answer = h
	}
	ls.mu.Unlock()
	switch {
	case !gone:
		w.poke()
	case h.lease != nil:
		h.lease.quiet = true
		_ = h.lease.release(context.Background(), w.c.cleanupTimeout)
	case h.unsure:
		w.c.cleanUp(context.Background(), w.key, w.token, 0)
	}
}

// wake tells the waiter of key with token, if it is this Client's, that
// the store woke it: it tries at once.
func (ls *lines) wake(key, token string) {
	if token == "" {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ln := ls.keys[key]
	if ln == nil {
		return
	}
	for e := ln.waiters.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*waiter); w.token == token {
			w.nudged = true
			w.poke()
			return
		}
	}
}
