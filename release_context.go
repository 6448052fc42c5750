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
// §9). The releases that start within a millisecond share one context
// instead, which ends no later than any of their bounds.
type sharedDeadlines struct {
	cur atomic.Pointer[sharedDeadline]
}

// sharedDeadline is a context that ends at end.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // called by its own timer at end; kept for vet
	end    time.Time
}

// maxDeadlineShare is how much earlier than its bound a release's deadline
// may end, at most: the releases that start within it share one timer. At
// the rates where a timer per release costs anything (thousands of releases
// a second), 1 ms holds several releases; against the default 2 s bound it
// is 0.05 %. A bound under 16 ms shares a sixteenth of itself instead.
const maxDeadlineShare = time.Millisecond

// maxSharedBound is the longest release bound that shares deadlines: a
// shared context lives until its bound has passed, one for each
// millisecond of releases, so this bounds them to 10 000 live (about
// 3 MB) however long WithReleaseTimeout is. A longer bound gets a context
// of its own, cancelled when its release returns.
const maxSharedBound = 10 * time.Second

// deadlineShare is how early a deadline of bound may end.
func deadlineShare(bound time.Duration) time.Duration { return min(bound/16, maxDeadlineShare) }

// within returns a context that ends between bound - deadlineShare(bound)
// and bound after now, never later.
func (s *sharedDeadlines) within(now time.Time, bound time.Duration) context.Context {
	latest := now.Add(bound)
	earliest := latest.Add(-deadlineShare(bound))
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
