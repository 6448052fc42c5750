package leasehold

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Defaults of the Client; docs/design.md §5 gives the reasoning.
const (
	// defaultMinBackoff is a waiter's first backoff step when no wake-up
	// came: small against TTLs, large against a loopback round trip.
	defaultMinBackoff = 10 * time.Millisecond

	// DefaultMaxBackoff caps the doubling backoff: a lost wake-up delays a
	// hand-off by at most about a second.
	DefaultMaxBackoff = time.Second

	// defaultCleanupTimeout bounds the release after an acquire of unknown
	// outcome, so a lost reply does not block the key for a full TTL.
	defaultCleanupTimeout = 2 * time.Second

	// releaseRetryMin and releaseRetryMax bound the jittered, doubling wait
	// before a release of unknown outcome is sent again: a blip costs
	// milliseconds, a store that is down a dozen attempts.
	releaseRetryMin = 10 * time.Millisecond
	releaseRetryMax = 500 * time.Millisecond

	// grantConfirmDelay is how long after Acquire returns a lease taken by a
	// grant (driver.Granter) its confirming renewal waits: a lease released
	// (or renewed by hand) before then needs none, so a critical section of
	// a few milliseconds costs a transfer across processes two round trips
	// instead of three, and the confirmation no longer competes with the
	// next hand-off for the cores (docs/design.md §5, "Grants"). Until it
	// lands the lease keeps the grant's term, of which it holds at least
	// half when taken: a pause longer than that in these 10 ms ends the
	// lease early, as one in the round trip of the confirmation already
	// could; it never makes two holders. A section longer than this pays
	// the confirmation as before, off its critical path.
	grantConfirmDelay = 10 * time.Millisecond
)

// Client takes leases from a Store. It is safe for concurrent use. Share one
// Client among the goroutines of a process: its waiters for a key queue
// together and hand the key to each other (see Acquire), and one goroutine
// renews all its leases in batches (see KeepAlive). Close stops that goroutine.
type Client struct {
	store          driver.Store
	notifier       driver.ReleaseNotifier // nil when the store has none
	queuer         driver.Queuer          // nil when the store has none
	handOffer      driver.HandOffer       // nil when the store has none
	granter        driver.Granter         // nil when the store has none
	dater          driver.DatedAcquirer   // nil when the store has none
	observers      []Observer
	namespace      func(key string) string
	minBackoff     time.Duration
	maxBackoff     time.Duration
	cleanupTimeout time.Duration
	tokenSuffix    string          // "~" and the encoded holder identity, ending every token
	storeName      string          // the store's package, for StoreCallEvent
	watchStore     bool            // an Observer has OnStoreCall: time every store call
	ownStore       bool            // Close closes the store too
	gate           storeGate       // with ownStore: the store calls in flight, which Close waits for
	lines          lines           // the Client's waiters, per key (wait.go)
	renew          renewer         // renews every kept-alive lease of the Client (renewal.go)
	deadlines      sharedDeadlines // of releases (release_context.go)
	err            error           // the first bad option; every call returns it
}

// setErr records the first bad option.
func (c *Client) setErr(err error) {
	if c.err == nil {
		c.err = err
	}
}

// usable returns why c cannot take or renew leases: a bad option, or Close.
func (c *Client) usable() error {
	if c.err != nil {
		return c.err
	}
	if c.renew.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Option configures a Client.
type Option func(*Client)

// WithLogger makes the Client log what needs an operator's attention
// (abandoned and expired leases, failed renewals and releases, refused
// releases) to l, as an Observer would see it. Default: nothing is logged;
// every event reaches the Observers either way.
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) {
		if l != nil {
			c.observers = append(c.observers, logObserver(slog.New(safeHandler{l.Handler()})))
		}
	}
}

// WithObserver adds a receiver of lock events (see package prom); every
// Observer given gets every event.
func WithObserver(o Observer) Option {
	return func(c *Client) { c.observers = append(c.observers, o) }
}

// WithNamespace sets the function that derives an event's namespace (its lock
// class, a metrics label) from the key. It must return few distinct values.
// If it panics, the namespace is "other". Default: DefaultNamespace.
func WithNamespace(f func(key string) string) Option {
	return func(c *Client) {
		if f != nil {
			c.namespace = f
		}
	}
}

// WithBackoff sets the bounds of a waiting Acquire's jittered exponential
// backoff: at least driver.MinTTL (1 ms: no lease expires sooner, and
// releases wake waiters without polling) and at most driver.MaxTTL (a day:
// no lease outlives it). Default: 10 ms to 1 s.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) {
		switch {
		case min <= 0 || max < min:
			c.setErr(&ArgumentError{Arg: "WithBackoff", Reason: fmt.Sprintf("%v to %v is not a positive range", min, max)})
			return
		case min < driver.MinTTL:
			c.setErr(&ArgumentError{Arg: "WithBackoff", Reason: fmt.Sprintf("a minimum of %v is shorter than the shortest lease, %v", min, driver.MinTTL)})
			return
		case max > driver.MaxTTL:
			c.setErr(&ArgumentError{Arg: "WithBackoff", Reason: fmt.Sprintf("a maximum of %v is longer than the longest lease, %v", max, driver.MaxTTL)})
			return
		}
		c.minBackoff, c.maxBackoff = min, max
	}
}

// WithIdentity sets the holder identity stored with every lease the Client
// takes (in its token), which the CLI's inspect and ls show. Default:
// "hostname:pid", which tells an operator where to look.
func WithIdentity(id string) Option {
	return func(c *Client) {
		var ae *ArgumentError
		if errors.As(driver.ValidateIdentity(id), &ae) {
			c.setErr(&ArgumentError{Arg: "WithIdentity", Reason: ae.Reason})
			return
		}
		c.tokenSuffix = driver.HolderToken("", id)
	}
}

// hostPID returns "hostname:pid", the identity of a Client made without
// WithIdentity; the host name is cut to fit driver.MaxIdentityLen.
func hostPID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	pid := ":" + strconv.Itoa(os.Getpid())
	for driver.ValidateIdentity(host+pid) != nil && host != "" {
		host = host[:len(host)-1]
	}
	return host + pid
}

// WithOwnedStore makes Close close the store too (when it has a Close
// method), after the Client has stopped using it, so one Close is enough.
// Default: the caller closes the store, after the Client.
func WithOwnedStore() Option {
	return func(c *Client) { c.ownStore = true }
}

// New returns a Client that takes leases from store. A nil store or a bad
// option is an *ArgumentError naming it, returned by every call of the
// Client; a nil option is skipped.
func New(store driver.Store, opts ...Option) *Client {
	nilArg := store == nil
	if nilArg {
		store = nilStore{}
	}
	c := &Client{
		store:          store,
		namespace:      DefaultNamespace,
		minBackoff:     defaultMinBackoff,
		maxBackoff:     DefaultMaxBackoff,
		cleanupTimeout: defaultCleanupTimeout,
		tokenSuffix:    defaultTokenSuffix(),
		renew:          renewer{window: defaultBatchWindow, size: defaultBatchSize},
	}
	c.notifier, _ = store.(driver.ReleaseNotifier)
	c.queuer, _ = store.(driver.Queuer)
	c.dater, _ = store.(driver.DatedAcquirer)
	if c.queuer != nil {
		c.handOffer, _ = store.(driver.HandOffer)
		c.granter, _ = store.(driver.Granter)
	}
	c.storeName = storeName(store)
	if nilArg {
		c.setErr(&ArgumentError{Arg: "store", Reason: "nil"})
	}
	for _, o := range opts {
		if o != nil { // as Hold skips a nil HoldOption
			o(c)
		}
	}
	for _, o := range c.observers {
		c.watchStore = c.watchStore || o.OnStoreCall != nil
	}
	c.renew.init(c)
	c.namespace = new(namespaceSet).bound(c.safeNamespace(c.namespace))
	return c
}

// storeCall makes one store call with f and reports it (OnStoreCall).
func (c *Client) storeCall(ctx context.Context, op string, items int, f func() error) error {
	ev, err := c.timedCall(op, items, f)
	if ev.Op != "" {
		c.reportCall(ctx, ev)
	}
	return err
}

// timedCall makes one store call with f and returns what OnStoreCall
// reports of it, with no Op when no Observer listens: the renewal engine's
// workers make their calls with it and leave the report to the engine.
func (c *Client) timedCall(op string, items int, f func() error) (StoreCallEvent, error) {
	var start time.Time
	if c.watchStore {
		start = time.Now()
	}
	err := errStoreClosed // refused by the gate: it never reaches the store
	if !c.ownStore || c.gate.enter(op) {
		if c.ownStore {
			defer c.gate.exit()
		}
		err = f()
	}
	if !c.watchStore {
		return StoreCallEvent{}, err
	}
	return StoreCallEvent{Op: op, Store: c.storeName, Items: items, Took: time.Since(start), Err: err}, err
}

// reportCall reports a store call (OnStoreCall).
func (c *Client) reportCall(ctx context.Context, ev StoreCallEvent) {
	observe(c, ctx, ev, func(o *Observer) func(context.Context, StoreCallEvent) { return o.OnStoreCall })
}

// storeName is the package of store's type: "redisstore" for a
// *redisstore.Store.
func storeName(store driver.Store) string {
	t := reflect.TypeOf(store)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := t.PkgPath()
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[i+1:]
	}
	if p == "" {
		return "unknown"
	}
	return p
}

// safeNamespace makes a panic in the namespace function give "other".
func (c *Client) safeNamespace(f func(string) string) func(string) string {
	return func(key string) (ns string) {
		if v := callSafely(func() { ns = f(key) }); v != nil {
			c.reportError(context.Background(), "", 0, "namespace",
				fmt.Errorf("leasehold: the namespace function panicked on key %q; using \"other\": %v", key, v))
			return otherNamespace
		}
		return ns
	}
}

// Store returns the store the Client was made with.
func (c *Client) Store() driver.Store { return c.store }

// TryAcquire makes one attempt to take key for ttl. It returns an error
// matching ErrNotAcquired (a *HeldError) when another owner holds the key
// or, on a store that keeps a queue of waiters (Redis, etcd, PostgreSQL),
// when a waiter of any Client is queued for it: a free key goes to the
// waiter that came first, not to whoever asks without waiting
// (docs/design.md §5). It returns the store's error when the store failed,
// and ctx's error, never ErrNotAcquired, when ctx ended before an answer.
//
// The lease counts ttl from the attempt's send, or from earlier on a store
// that puts the key on a term begun before the call and says so
// (driver.DatedAcquirer: etcd, a lease kept alive less than ttl/20 before),
// as Acquire's does.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	start := time.Now()
	l, err := c.tryAcquire(ctx, key, ttl)
	c.reportAcquire(ctx, key, ttl, l, err, false, time.Since(start))
	return l, err
}

func (c *Client) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := validateKeyTTL(key, ttl); err != nil {
		return nil, err
	}
	l, err := c.try(ctx, key, c.newToken(), ttl, 0)
	if err == nil || errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrInvalidArgument) {
		return l, err
	}
	if cerr := expired(ctx); cerr != nil && !errors.Is(err, cerr) {
		// A socket timeout at the caller's deadline is the deadline.
		return nil, errors.Join(ctxError(ctx, cerr), err)
	}
	return nil, err
}

// Acquire takes key for ttl, waiting while another owner holds it: woken by
// the store's release notifications, else on a jittered backoff. Waiters are
// served in arrival order: a Client's waiters for a key queue together, and
// on a store that keeps a queue (driver.Queuer: Redis, etcd, PostgreSQL) each
// also holds its place in the store's queue, shared with every other Client.
// A release by this Client hands the key to its own next waiter in process
// when that waiter is next in the store's queue too (docs/design.md §5).
//
// On a store that grants a released key to its queue's head
// (driver.Granter: Redis) the lease may come from such a grant, without an
// attempt: it is held first for the waiter's queue stay at most (2.5 s by
// default), counted from the send of the attempt the grant names, and
// renewed to ttl in the background 10 ms after Acquire returns, unless a
// Release, Renew or KeepAlive came first. Should that renewal fail, the
// Observer hears of it (OnRenewFailure, OnNotOwned) and the lease ends with
// the grant's shorter term (docs/design.md §5, "Grants").
//
// When ctx ends first the error matches ErrNotAcquired and ctx's error. A
// store failure is returned at once, not retried.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	l, err := c.acquireReported(ctx, key, ttl, c.maxBackoff, 0)
	if l != nil && !l.unconfirmed.IsZero() {
		time.AfterFunc(grantConfirmDelay, l.confirm)
	}
	return l, err
}

// acquireKept is Acquire for a lease a KeepAlive renews next (Hold, Lead):
// a lease from a grant is renewed to its TTL by that KeepAlive, at once.
// budget > 0 bounds the waiting (WithWaitBudget; see acquire).
func (c *Client) acquireKept(ctx context.Context, key string, ttl, budget time.Duration) (*Lease, error) {
	return c.acquireReported(ctx, key, ttl, c.maxBackoff, budget)
}

// acquireReported is Acquire with its backoff capped at maxBackoff.
func (c *Client) acquireReported(ctx context.Context, key string, ttl, maxBackoff, budget time.Duration) (*Lease, error) {
	start := time.Now()
	if len(c.observers) > 0 {
		observe(c, ctx, c.event(key, 0), func(o *Observer) func(context.Context, Event) { return o.OnAcquireStart })
	}
	l, err := c.acquire(ctx, key, ttl, maxBackoff, budget)
	c.reportAcquire(ctx, key, ttl, l, err, true, time.Since(start))
	return l, err
}

// reportAcquire reports how an acquire ended; blocking for Acquire, whose
// held key means it timed out.
func (c *Client) reportAcquire(ctx context.Context, key string, ttl time.Duration, l *Lease, err error, blocking bool, wait time.Duration) {
	if len(c.observers) == 0 {
		return
	}
	ev := AcquireEvent{Event: c.event(key, 0), Result: Acquired, Wait: wait, TTL: ttl, Blocking: blocking, Err: err}
	switch {
	case err == nil:
		ev.Fence = l.fence
	case errors.Is(err, ErrNotAcquired) && blocking:
		ev.Result = TimedOut
	case errors.Is(err, ErrNotAcquired):
		ev.Result = Busy
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		ev.Result = TimedOut
	default:
		ev.Result = StoreFailed
	}
	observe(c, ctx, ev, func(o *Observer) func(context.Context, AcquireEvent) { return o.OnAcquire })
}

// event is the Event of key with fence.
func (c *Client) event(key string, fence int64) Event {
	return Event{Key: key, Namespace: c.namespace(key), Fence: fence}
}

// try is one acquire attempt with a given token; stay > 0 makes it a queued
// waiter's attempt (driver.Queuer), whose entry lives for stay.
func (c *Client) try(ctx context.Context, key, token string, ttl, stay time.Duration) (*Lease, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := expired(ctx); err != nil {
		return nil, err
	}
	sent := time.Now()
	var (
		fence int64
		from  time.Time // when the key's term began, if before sent (driver.DatedAcquirer)
	)
	err := c.storeCall(ctx, "acquire", 1, func() (err error) {
		switch {
		case c.dater != nil:
			fence, from, err = c.dater.AcquireDated(ctx, key, token, ttl, stay)
		case stay > 0:
			fence, err = c.queuer.AcquireQueued(ctx, key, token, ttl, stay)
		default:
			fence, err = c.store.Acquire(ctx, key, token, ttl)
		}
		return err
	})
	switch {
	case err == nil && fence > 0:
		if !from.IsZero() && from.Before(sent) {
			sent = from // the lease counts from its term's start
		}
		return c.newLease(key, token, fence, ttl, sent, time.Now()), nil
	case err == nil:
		// A store that breaks the fence contract gives no lease; the key it
		// took for token is given back below.
		err = fmt.Errorf("leasehold: acquire %q: the store issued fence %d; a fence must be positive", key, fence)
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrInvalidArgument), err == errNilStore, err == errStoreClosed:
		return nil, err
	}
	// The store may have applied the acquire before failing (a lost reply):
	// release the token, detached from ctx, so the key is not blocked a TTL.
	c.cleanUp(ctx, key, token, 0)
	return nil, err
}

// cleanUp releases token, which may hold key after a call of unknown
// outcome, detached from ctx and bounded by the cleanup timeout; a failure is
// reported (the TTL frees the key).
func (c *Client) cleanUp(ctx context.Context, key, token string, fence int64) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cleanupTimeout)
	defer cancel()
	if rerr, _ := c.releaseRetrying(cctx, key, token); rerr != nil && !errors.Is(rerr, ErrNotOwned) {
		c.releaseFailed(ctx, key, fence, fmt.Errorf("leasehold: cleaning up %q after a call of unknown outcome: %w", key, rerr))
	}
}

// releaseFailed reports a release the store could not answer.
func (c *Client) releaseFailed(ctx context.Context, key string, fence int64, err error) {
	if len(c.observers) == 0 {
		return
	}
	observe(c, ctx, ReleaseFailureEvent{Event: c.event(key, fence), Err: err},
		func(o *Observer) func(context.Context, ReleaseFailureEvent) { return o.OnReleaseFailure })
}

// acquireFailed shapes the error of a waiting Acquire's failed attempt: after
// ctx ended it is ErrNotAcquired joined with ctx's error.
func (c *Client) acquireFailed(ctx context.Context, key string, err error) error {
	cerr := expired(ctx)
	if cerr == nil {
		return err
	}
	if errors.Is(err, cerr) {
		return ctxNotAcquired(ctx, key)
	}
	return errors.Join(ctxNotAcquired(ctx, key), err)
}

func ctxNotAcquired(ctx context.Context, key string) error {
	return errors.Join(notAcquiredInTime{key}, ctxError(ctx, expired(ctx)))
}

// notAcquiredInTime is an Acquire that ended with its context: it matches
// ErrNotAcquired, and says nothing of a holder, which there may not be (the
// context may have ended during the store call).
type notAcquiredInTime struct{ key string }

func (e notAcquiredInTime) Error() string {
	return fmt.Sprintf("leasehold: not acquired: %q: the context ended first", e.key)
}

func (e notAcquiredInTime) Is(target error) bool { return target == ErrNotAcquired }

// ctxError is err (ctx's error, or DeadlineExceeded from expired) joined with
// ctx's cause when that says more.
func ctxError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return errors.Join(err, cause)
	}
	return err
}

// expired returns ctx's error, or DeadlineExceeded when ctx's deadline has
// passed but its timer has not fired yet.
func expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// jitter returns a duration in [d/2, d], and at least 1 ns: a wait of 0 is
// no timer at all (waiter.sleep).
func jitter(d time.Duration) time.Duration { return max(d/2+rand.N(max(d, 0)/2+1), 1) }

func validateKeyTTL(key string, ttl time.Duration) error {
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	return driver.ValidateTTL(ttl)
}

// NewToken returns a fresh owner token: 130 random bits from crypto/rand,
// as 26 base32 characters.
func NewToken() string { return crand.Text() }

// newToken is a fresh token carrying c's identity, encoded once per Client.
func (c *Client) newToken() string { return NewToken() + c.tokenSuffix }

// defaultTokenSuffix is hostPID's token suffix, computed once per process.
var defaultTokenSuffix = sync.OnceValue(func() string { return driver.HolderToken("", hostPID()) })

// nilStore stands in for a nil Store, so misuse is an error, not a panic.
type nilStore struct{}

var errNilStore = errors.New("leasehold: New was given a nil Store")

func (nilStore) Acquire(context.Context, string, string, time.Duration) (int64, error) {
	return 0, errNilStore
}
func (nilStore) Release(context.Context, string, string) error              { return errNilStore }
func (nilStore) Renew(context.Context, string, string, time.Duration) error { return errNilStore }
func (nilStore) Inspect(context.Context, string) (driver.Info, error) {
	return driver.Info{}, errNilStore
}

// errStoreClosed is a store call refused by a Client that closed the store
// it owns: it never reached the store.
var errStoreClosed = fmt.Errorf("%w: the Client has closed the store it owns", ErrClosed)

// storeGate counts the store calls in flight of a Client that owns its
// store (WithOwnedStore), so that Close closes the store only after them.
// Once Close has begun it refuses the calls that would take or watch a key;
// the ones that give a key up (a Hold's release after Close cancelled its
// fn, a waiter leaving the store's queue) still go, since every bundled
// store serves them after its Close, and a key given back is not held for
// a TTL by a Client that is gone.
type storeGate struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // closed by the last call to leave after shut
}

// enter counts a call of op in, unless the gate is shut and op takes or
// watches a key.
func (g *storeGate) enter(op string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed && (op == "acquire" || op == "watch" || op == "renew" || op == "renew_batch") {
		return false
	}
	g.n++
	return true
}

func (g *storeGate) exit() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// shut refuses later calls and waits for those in flight, at most bound:
// a call that hangs on a store that does not answer is left to fail when
// the store closes.
func (g *storeGate) shut(bound time.Duration) {
	g.mu.Lock()
	g.closed = true
	if g.n == 0 {
		g.mu.Unlock()
		return
	}
	idle := make(chan struct{})
	g.idle = idle
	g.mu.Unlock()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}
