package leasehold

import (
	"context"
	"sync/atomic"
	"time"
)

// sharedDeadlines hands out the deadlines of releases. A release runs under
// a context of its own whatever the caller's does (Lease.Release), and a
// context.WithDeadline per release costs a timer started and stopped, five
// allocations and, once a driver watches it, a map of children: about half
// of the Client's own CPU in an uncontended cycle on pgstore (docs/design.md
// §9). The releases that start close together share one context instead,
// which ends no later than any of their bounds.
type sharedDeadlines struct {
	cur atomic.Pointer[sharedDeadline]
}

// sharedDeadline is a context that ends at end.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // called by its own timer at end; kept for vet
	end    time.Time
}

// deadlineShare says how early a shared deadline may end, as a fraction of
// the bound: a release bounded by d gets between d - d/16 and d. The
// releases that start within a sixteenth of the bound share a timer, so a
// busy Client keeps about 16 live timers whatever its rate, and a bound cut
// by 6 % leaves the 2 s default's reason (the store is in trouble) intact.
const deadlineShare = 16

// within returns a context that ends between bound - bound/deadlineShare and
// bound after now, never later.
func (s *sharedDeadlines) within(now time.Time, bound time.Duration) context.Context {
	latest := now.Add(bound)
	earliest := latest.Add(-bound / deadlineShare)
	if d := s.cur.Load(); d != nil && !d.end.Before(earliest) && !d.end.After(latest) {
		return d.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), latest)
	s.cur.Store(&sharedDeadline{ctx: ctx, cancel: cancel, end: latest})
	return ctx
}

// detachedContext is a caller's context without its cancellation (its values
// stay), ending when end does.
type detachedContext struct {
	context.Context // context.WithoutCancel of the caller's
	end             context.Context
}

func (c *detachedContext) Deadline() (time.Time, bool) { return c.end.Deadline() }
func (c *detachedContext) Done() <-chan struct{}       { return c.end.Done() }
func (c *detachedContext) Err() error                  { return c.end.Err() }

// Value is the caller's value for key, else end's: the context package asks
// a context for its own cancellation through Value, so what watches this
// one (context.AfterFunc, which pgx calls for every statement, and contexts
// made from it) joins end's list of children, and context.Cause reads end's.
func (c *detachedContext) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.end.Value(key)
}

// AfterFunc is the way in for the same watchers, should the context package
// stop finding end through Value: without either, each would wait on a
// goroutine of its own.
func (c *detachedContext) AfterFunc(f func()) func() bool { return context.AfterFunc(c.end, f) }
