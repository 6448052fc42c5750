package rscript

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
)

// Caller runs the calls on one client so that the end of their context
// bounds them, whatever the client's ContextTimeoutEnabled (see Do).
type Caller struct {
	// detach: go-redis does not put the context's deadline on the socket,
	// so each call runs on a goroutine of its own and is left at ctx's end.
	detach bool
	// detachUndated: the socket has no deadline but the context's (a
	// ReadTimeout or WriteTimeout of -1), so a call whose context can end
	// without a deadline (canceled only) is detached: inline, go-redis
	// would read on after the cancel for as long as the server is silent.
	detachUndated bool
	// flights counts the goroutines Do started that have not ended, late
	// handlers included (Wait); nil in a Caller not made by CheckClient.
	flights *flights
}

// flights is a count of running goroutines that can be waited for at zero.
// Not a sync.WaitGroup: a call may start while Close waits.
type flights struct {
	mu   sync.Mutex
	idle sync.Cond
	n    int
}

func newFlights() *flights {
	f := &flights{}
	f.idle.L = &f.mu
	return f
}

func (f *flights) add(d int) {
	if f == nil {
		return
	}
	f.mu.Lock()
	if f.n += d; f.n == 0 {
		f.idle.Broadcast()
	}
	f.mu.Unlock()
}

// Wait returns once no goroutine Do started for c is running: the detached
// calls left at their context's end have ended (when go-redis gives up on a
// silent socket, see Do) and so have their late handlers. Calls made
// meanwhile are waited for too.
func (c Caller) Wait() {
	f := c.flights
	if f == nil {
		return
	}
	f.mu.Lock()
	for f.n > 0 {
		f.idle.Wait()
	}
	f.mu.Unlock()
}

// CheckClient returns the Caller for client, or an *ArgumentError naming
// "client" for nil (a nil *redis.Client or *redis.ClusterClient too), a
// *redis.Ring (its own sharding can split keys that must share a server) or
// a client whose socket reads or writes may wait forever after a call is
// left: ReadTimeout or WriteTimeout -2 (no socket deadline at all), or -1
// (none) without ContextTimeoutEnabled. A client of another
// type cannot be inspected: its calls are detached, and a call left at its
// deadline runs on for as long as that client lets it.
func CheckClient(client redis.UniversalClient) (Caller, error) {
	switch c := client.(type) {
	case nil:
		return Caller{}, badClient("nil")
	case *redis.Ring:
		return Caller{}, badClient("a *redis.Ring spreads keys by its own hashing, so a lock key and the key beside it " +
			"could land on different servers; use a *redis.Client, a failover client or a *redis.ClusterClient")
	case *redis.Client:
		if c == nil {
			return Caller{}, badClient("nil *redis.Client")
		}
		o := c.Options()
		return checkTimeouts(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	case *redis.ClusterClient:
		if c == nil {
			return Caller{}, badClient("nil *redis.ClusterClient")
		}
		o := c.Options()
		return checkTimeouts(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout)
	}
	return Caller{detach: true, flights: newFlights()}, nil
}

// checkTimeouts reads timeouts as go-redis keeps them once the client is made:
// below 0 no socket deadline is ever set, 0 only the context's.
func checkTimeouts(ctxTimeouts bool, read, write time.Duration) (Caller, error) {
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"ReadTimeout", read}, {"WriteTimeout", write}} {
		switch {
		case t.d < 0:
			return Caller{}, badClient(fmt.Sprintf("its %s is -2, which turns socket deadlines off, "+
				"the context's too, so a server that stops answering would hold a call forever; set a %[1]s", t.name))
		case t.d == 0 && !ctxTimeouts:
			return Caller{}, badClient(fmt.Sprintf("its %s is -1 (none) and ContextTimeoutEnabled is off, so a call "+
				"left at its deadline would hold its goroutine and connection for as long as the server is silent; "+
				"set a %[1]s or ContextTimeoutEnabled: true", t.name))
		}
	}
	return Caller{detach: !ctxTimeouts, detachUndated: read == 0 || write == 0, flights: newFlights()}, nil
}

// inline reports whether a call under ctx goes out on the caller's
// goroutine, where go-redis ends it at ctx's deadline or at the client's
// socket timeouts, but not at a cancel. It does when ctx cannot end, and on
// a client with ContextTimeoutEnabled unless ctx has no deadline and the
// client no socket timeouts. The other calls are detached: they return at
// ctx's end. So on a client with socket timeouts a call canceled first
// waits up to its ReadTimeout (3 s by default) on a silent server:
// detaching every call that can be canceled would put a goroutine hand-off
// on each (12 % fewer acquire+release cycles at one goroutine,
// BenchmarkAcquireRelease of store/redisstore, four interleaved runs).
func (c Caller) inline(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	if c.detach {
		return false
	}
	if _, dated := ctx.Deadline(); !dated && c.detachUndated {
		return false
	}
	return true
}

func badClient(reason string) error { return &driver.ArgumentError{Arg: "client", Reason: reason} }

// Do runs f under ctx and returns its result. For a call c does not run
// inline (Caller.inline), f runs on a goroutine of its own and Do returns
// at ctx's end, if f has not, with an error wrapping ctx's: f's commands may
// still be applied. f then ends when go-redis gives up on the silent
// socket: after the client's WriteTimeout and ReadTimeout (once more for a
// connection dialled for it), or, on a client without them, when the server
// answers or the connection breaks; closing the client ends it at once.
// late, if not nil, then gets f's result on that goroutine.
func Do[T any](ctx context.Context, c Caller, f func(context.Context) (T, error), late func(T, error)) (T, error) {
	if c.inline(ctx) {
		return f(ctx)
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("not sent: %w", ctxError(ctx, err))
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result) // unbuffered: a send lands only while Do waits
	gone := make(chan struct{})
	c.flights.add(1)
	go func() {
		defer c.flights.add(-1)
		v, err := f(ctx)
		select {
		case done <- result{v, err}:
		case <-gone:
			if late != nil {
				late(v, err)
			}
		}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-done: // ready at the same instant: a known outcome wins
		return r.v, r.err
	default:
		close(gone)
	}
	return zero, fmt.Errorf("no reply before the context ended; it may still be applied: %w", ctxError(ctx, ctx.Err()))
}

// ctxError is err, ctx's error, joined with ctx's cause when that says more.
func ctxError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
		return errors.Join(err, cause)
	}
	return err
}
