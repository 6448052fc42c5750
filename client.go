package leasehold

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/leasehold/leasehold/driver"
)

// Defaults of the Client. Each is the value used when the matching option is
// not given.
const (
	// defaultMinBackoff is the first wait of a waiting Acquire when the store
	// did not wake it. Wake-ups from the store handle the common hand-off; the
	// backoff only bounds the delay when a wake-up is lost or the store has
	// none. 10 ms is about two hundred loopback round trips, so a crowd of
	// waiters does not spin on the store, and small against lease TTLs of
	// seconds, so a lost wake-up costs little. With wake-ups, only the head of
	// a Client's queue of waiters for a key follows the backoff (see Acquire).
	defaultMinBackoff = 10 * time.Millisecond

	// DefaultMaxBackoff caps the doubling backoff. A waiter behind a long
	// critical section polls at most once a second, and a lost wake-up delays
	// a hand-off by at most about a second.
	DefaultMaxBackoff = time.Second

	// defaultCleanupTimeout bounds the release that follows an acquire whose
	// outcome is unknown (the store failed after the request may have been
	// applied). It keeps a lost reply from blocking the key for a full TTL
	// without holding the caller back for long when the store is down.
	defaultCleanupTimeout = 2 * time.Second

	// releaseRetryMin is the first wait before a release of unknown outcome
	// (a lost reply, a broken connection) is sent again: about the time a
	// client needs to redial on a LAN, so a blip costs a few milliseconds.
	releaseRetryMin = 10 * time.Millisecond

	// releaseRetryMax caps the doubling (jittered) wait between release
	// attempts: a store that is down gets at most about a dozen attempts
	// within the 2 s release timeout (waits of 10, 20, 40, … 500 ms), not
	// a spin, while a blip is retried within milliseconds.
	releaseRetryMax = 500 * time.Millisecond
)

// Client takes leases from a Store. It is safe for concurrent use; it starts
// no goroutines of its own. Share one Client among the goroutines of a
// process that lock the same keys: its waiters for a key queue together, so
// a release wakes one of them (see Acquire).
type Client struct {
	store          driver.Store
	notifier       driver.ReleaseNotifier // nil when the store has none or wake-ups are off
	log            *slog.Logger
	observers      []Observer
	namespace      func(key string) string
	minBackoff     time.Duration
	maxBackoff     time.Duration
	cleanupTimeout time.Duration
	waiters        waitQueues // Acquire's waiters per key, when wake-ups are on
	local          localTurns // Hold's turns per key
}

// Option configures a Client.
type Option func(*Client)

// WithLogger sets the logger for anomalies the Client cannot return to a
// caller (a failed clean-up after an ambiguous acquire). A record whose
// handler panics is dropped. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *Client) {
		if l != nil {
			c.log = l
		}
	}
}

// WithObserver adds a receiver of lock events (for metrics and traces; see
// package prom). Given more than once, every Observer gets every event.
// Default: none.
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
// backoff. Defaults: defaultMinBackoff and DefaultMaxBackoff. Values that are
// not positive, or a max below min, leave the defaults in place.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) {
		if min > 0 && max >= min {
			c.minBackoff, c.maxBackoff = min, max
		}
	}
}

// WithoutWakeups makes a waiting Acquire rely on its backoff alone even when
// the store can notify releases; every waiting goroutine then polls on its
// own, unqueued. It exists to measure what the wake-ups buy; production code
// has no reason to set it. Default: wake-ups on.
func WithoutWakeups() Option {
	return func(c *Client) { c.notifier = nil }
}

// New returns a Client that takes leases from store.
func New(store driver.Store, opts ...Option) *Client {
	if store == nil {
		store = nilStore{}
	}
	c := &Client{
		store:          store,
		log:            slog.Default(),
		namespace:      DefaultNamespace,
		minBackoff:     defaultMinBackoff,
		maxBackoff:     DefaultMaxBackoff,
		cleanupTimeout: defaultCleanupTimeout,
	}
	c.notifier, _ = store.(driver.ReleaseNotifier)
	for _, o := range opts {
		o(c)
	}
	// The Client's callbacks run on renewal goroutines too: a panic in one
	// must not crash the process or leave a lease half-handled.
	c.log = slog.New(safeHandler{c.log.Handler()})
	c.namespace = new(namespaceSet).bound(safeNamespace(c.namespace, c.log))
	return c
}

// observe hands ev to the handler pick chooses of each Observer, with ctx;
// a panic is recovered and logged, and a broken adapter loses only its event.
func observe[E any](c *Client, ctx context.Context, ev E, pick func(*Observer) func(context.Context, E)) {
	if ctx == nil {
		ctx = context.Background()
	}
	for i := range c.observers {
		if f := pick(&c.observers[i]); f != nil {
			func() {
				defer func() {
					if v := recover(); v != nil {
						c.log.Error("leasehold: an Observer panicked; its event is dropped",
							slog.String("event", fmt.Sprintf("%T", ev)), slog.Any("panic", v), slog.String("stack", string(debug.Stack())))
					}
				}()
				f(ctx, ev)
			}()
		}
	}
}

// safeNamespace makes a panic in the namespace function log and give "other".
func safeNamespace(f func(string) string, log *slog.Logger) func(string) string {
	return func(key string) (ns string) {
		defer func() {
			if v := recover(); v != nil {
				ns = "other"
				log.Error("leasehold: the namespace function panicked; using \"other\"",
					slog.String("key", key), slog.Any("panic", v))
			}
		}()
		return f(key)
	}
}

// safeHandler drops a log record whose handler panics, instead of letting
// the panic reach a renewal goroutine.
type safeHandler struct{ h slog.Handler }

func (s safeHandler) Enabled(ctx context.Context, level slog.Level) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return s.h.Enabled(ctx, level)
}

func (s safeHandler) Handle(ctx context.Context, r slog.Record) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("leasehold: log handler panicked: %v", v)
		}
	}()
	return s.h.Handle(ctx, r)
}

func (s safeHandler) WithAttrs(attrs []slog.Attr) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = s
		}
	}()
	return safeHandler{s.h.WithAttrs(attrs)}
}

func (s safeHandler) WithGroup(name string) (h slog.Handler) {
	defer func() {
		if recover() != nil {
			h = s
		}
	}()
	return safeHandler{s.h.WithGroup(name)}
}

// Store returns the store the Client was made with.
func (c *Client) Store() driver.Store { return c.store }

// Waiting returns how many goroutines wait in a waiting acquire of key
// through c (Acquire, Hold, Lead): the length of the Client's
// queue for key. It is 0 when wake-ups are off (WithoutWakeups, or a store
// without driver.ReleaseNotifier), since waiters then poll on their own and are not
// queued. It is meant for diagnosis and tests; the value may be stale as soon
// as it is returned.
func (c *Client) Waiting(key string) int { return c.waiters.waiting(key) }

// TryAcquire makes one attempt to take key for ttl. It returns ErrNotAcquired
// (as a *HeldError when the store reports the holder's remaining TTL) when
// another owner holds the key, an *ArgumentError for bad input, and the
// store's error when the store failed.
//
// When ctx is done, or its deadline has passed on the clock (ctx may not
// have noticed yet), before an answer arrives, the error matches ctx's error
// (context.DeadlineExceeded for a deadline), joined with the store's error if
// the attempt failed, and never ErrNotAcquired: an attempt without an answer
// says nothing about the key. The Observer counts it as TimedOut.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	start := time.Now()
	l, err := c.tryAcquire(ctx, key, ttl)
	c.reportAcquire(ctx, key, l, err, Busy, time.Since(start))
	return l, err
}

func (c *Client) tryAcquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	if err := validateKeyTTL(key, ttl); err != nil {
		return nil, err
	}
	l, err := c.try(ctx, key, NewToken(), ttl)
	if err == nil || errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrInvalidArgument) {
		return l, err
	}
	if cerr := expired(ctx); cerr != nil && !errors.Is(err, cerr) {
		// A socket timeout at the caller's deadline is the deadline.
		return nil, errors.Join(ctxError(ctx, cerr), err)
	}
	return nil, err
}

// Acquire takes key for ttl, waiting while another owner holds it. It is woken
// by releases when the store can notify them (see driver.ReleaseNotifier) and
// otherwise retries with jittered exponential backoff, never waiting past the
// holder's remaining TTL when the store reports it.
//
// When the store notifies releases, the goroutines waiting for one key
// through one Client queue in arrival order (FIFO), and only the first of
// them talks to the store: it watches for releases, makes the attempts and
// keeps the backoff, while the others wait in the process for their turn. A
// release thus costs one acquire attempt per Client, not one per waiting
// goroutine, and a waiter is not overtaken by goroutines of its own Client
// that came after it. A call that finds others of its Client queued for key
// joins the back of the queue without an attempt of its own. The queue orders
// one Client's waiters only: waiters in other processes, or of other Clients,
// still race the head at the store. Waking is a latency optimisation, never a
// condition: a waiter that gives up or fails passes its turn (and any wake-up
// it did not act on) to the next, and a lost wake-up delays the head by at
// most one backoff step.
//
// When ctx is done first, or its deadline has passed on the clock, it returns
// an error matching both ErrNotAcquired and ctx's error (for a deadline,
// context.DeadlineExceeded, even when the store's attempt failed with a
// socket timeout before ctx noticed); the Observer counts it as TimedOut. A
// store failure before then is returned at once, not retried: whether to
// keep waiting through an outage is the caller's decision.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (*Lease, error) {
	return c.acquireBackoff(ctx, key, ttl, c.maxBackoff)
}

// acquireBackoff is Acquire with its backoff capped at maxBackoff.
func (c *Client) acquireBackoff(ctx context.Context, key string, ttl, maxBackoff time.Duration) (*Lease, error) {
	start := time.Now()
	l, err := c.acquire(ctx, key, ttl, maxBackoff)
	c.reportAcquire(ctx, key, l, err, TimedOut, time.Since(start))
	return l, err
}

// reportAcquire tells the observer how an acquire call ended; busy is the
// result to report when the key was held at the end.
func (c *Client) reportAcquire(ctx context.Context, key string, l *Lease, err error, busy AcquireResult, wait time.Duration) {
	ev := AcquireEvent{Lock: c.lock(key, 0), Result: Acquired, Wait: wait}
	switch {
	case err == nil:
		ev.Fence = l.fence
	case errors.Is(err, ErrNotAcquired):
		ev.Result = busy
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		ev.Result = TimedOut
	default:
		ev.Result = StoreFailed
	}
	observe(c, ctx, ev, func(o *Observer) func(context.Context, AcquireEvent) { return o.OnAcquire })
}

func (c *Client) lock(key string, fence int64) Lock {
	return Lock{Key: key, Namespace: c.namespace(key), Fence: fence}
}

func (c *Client) acquire(ctx context.Context, key string, ttl, maxBackoff time.Duration) (*Lease, error) {
	if err := validateKeyTTL(key, ttl); err != nil {
		return nil, err
	}
	token := NewToken()
	if c.notifier == nil {
		// Without wake-ups every waiter polls: the polls are the only way
		// to see a release, and spread over many waiters they see it
		// sooner than one waiter's backoff would.
		return c.poll(ctx, key, token, ttl, maxBackoff)
	}

	// Queue behind this Client's other waiters for key; only the head talks
	// to the store (see waitQueues).
	q, w, head := c.waiters.join(key)
	woken := false // a wake-up was taken and no attempt has answered since
	defer func() { c.waiters.leave(key, q, w, woken) }()
	if !head {
		select {
		case <-w.turn:
		case <-ctx.Done():
			return nil, ctxNotAcquired(ctx, key)
		}
	}
	st := c.waiters.takeTurn(q)
	woken = st.pending
	// The first head tries at once. A later head takes over from one that
	// just acquired the key or gave up: the key is as busy as it was, so
	// it waits for a wake-up or its backoff first, unless it was handed a
	// wake-up.
	attemptNow := head || st.pending
	watched := st.released != nil
	backoff := min(c.minBackoff, maxBackoff)
	for {
		if !attemptNow && !watched {
			// About to wait, and the queue has no watch yet: set one up,
			// then try once more at once, so that a release landing
			// before the watch started is not missed.
			watched = true
			if st.released = c.watch(ctx, q, key, st.heldUntil, maxBackoff); st.released != nil {
				attemptNow = true
			}
		}
		if !attemptNow {
			wait := backoff/2 + rand.N(backoff/2+1)
			if !st.heldUntil.IsZero() {
				// The holder's lease runs out first: try right after it does.
				wait = min(wait, max(time.Until(st.heldUntil)+time.Millisecond, 0))
			}
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, ctxNotAcquired(ctx, key)
			case <-st.released:
				timer.Stop()
				woken = true
				backoff = min(c.minBackoff, maxBackoff)
			case <-timer.C:
				backoff = min(2*backoff, maxBackoff)
			}
		}
		attemptNow = false
		l, err := c.try(ctx, key, token, ttl)
		if err == nil {
			woken = false
			c.waiters.setHeldUntil(q, time.Now().Add(ttl))
			return l, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			// The attempt may not have reached the store: a wake-up
			// taken for it is passed on by the deferred leave.
			return nil, c.acquireFailed(ctx, key, err)
		}
		woken = false
		st.heldUntil = time.Time{}
		if held := (*HeldError)(nil); errors.As(err, &held) && held.Remaining > 0 {
			st.heldUntil = time.Now().Add(held.Remaining)
		}
		c.waiters.setHeldUntil(q, st.heldUntil)
	}
}

// watch sets up the release watch of key's queue. The watch may wait for the
// store to confirm it; it gets no longer than one backoff step, or until the
// holder's lease runs out (heldUntil, when known) if that is sooner, since
// waiting on it must never be slower than waiting without it. It returns nil
// when the store could not watch: the head then relies on its backoff.
func (c *Client) watch(ctx context.Context, q *waitQueue, key string, heldUntil time.Time, maxBackoff time.Duration) <-chan struct{} {
	bound := maxBackoff
	if !heldUntil.IsZero() {
		bound = min(bound, max(time.Until(heldUntil), 0)+time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, bound)
	ch, stop, werr := c.notifier.WatchReleases(wctx, key)
	cancel()
	if werr != nil {
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "leasehold: release notifications unavailable, waiting on backoff only",
				slog.String("key", key), slog.Any("error", werr))
		}
		return nil
	}
	c.waiters.setWatch(q, ch, stop)
	return ch
}

// poll is a waiting Acquire on its backoff alone: one attempt at once, then
// one after each jittered, doubling wait, never waiting past the holder's
// remaining TTL when the store reports it.
func (c *Client) poll(ctx context.Context, key, token string, ttl, maxBackoff time.Duration) (*Lease, error) {
	backoff := min(c.minBackoff, maxBackoff)
	for {
		l, err := c.try(ctx, key, token, ttl)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			return nil, c.acquireFailed(ctx, key, err)
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		var held *HeldError
		if errors.As(err, &held) && held.Remaining > 0 && held.Remaining+time.Millisecond < wait {
			// The holder's lease runs out first: try right after it does.
			wait = held.Remaining + time.Millisecond
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctxNotAcquired(ctx, key)
		case <-timer.C:
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// try is one acquire attempt with a given token.
func (c *Client) try(ctx context.Context, key, token string, ttl time.Duration) (*Lease, error) {
	if err := expired(ctx); err != nil {
		return nil, err
	}
	sent := time.Now()
	fence, err := c.store.Acquire(ctx, key, token, ttl)
	switch {
	case err == nil && fence > 0:
		return newLease(c, key, token, fence, ttl, sent, time.Now()), nil
	case err == nil:
		// A store that breaks the fence contract gives no lease; the key it
		// took for token is given back below.
		err = fmt.Errorf("leasehold: acquire %q: the store issued fence %d; a fence must be positive", key, fence)
	case errors.Is(err, ErrNotAcquired), errors.Is(err, ErrInvalidArgument), err == errNilStore:
		return nil, err
	}
	// The store failed. It may have applied the acquire before the failure
	// (a lost reply), which would block the key for a full TTL under a token
	// nobody holds. Release that token, bounded and detached from ctx, which
	// may be the very thing that failed; a release of unknown outcome is
	// retried, and "not owned" then or at once means the key is not ours.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cleanupTimeout)
	defer cancel()
	if rerr, _ := c.releaseRetrying(cctx, key, token); rerr != nil && !errors.Is(rerr, ErrNotOwned) {
		c.log.WarnContext(ctx, "leasehold: could not clean up after a failed acquire; the key may stay blocked until its TTL runs out",
			slog.String("key", key), slog.Duration("ttl", ttl), slog.Any("error", rerr))
	}
	return nil, err
}

// acquireFailed shapes the error of a waiting Acquire whose attempt did not
// get a busy answer: when ctx has ended (or its deadline passed) the attempt
// failed because of it, and Acquire promises ErrNotAcquired joined with the
// context's error then.
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
	return errors.Join(&HeldError{Key: key}, ctxError(ctx, expired(ctx)))
}

// ctxError is err (ctx's error, or DeadlineExceeded from expired) joined with
// ctx's cause when that says more.
func ctxError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return errors.Join(err, cause)
	}
	return err
}

// expired returns ctx's error, or context.DeadlineExceeded when ctx's
// deadline has passed on the clock but ctx has not noticed yet (its timer
// fires a moment late, and a socket timeout can come first). nil: neither.
func expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// jitter returns a wait in [d/2, d].
func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

func validateKeyTTL(key string, ttl time.Duration) error {
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	return driver.ValidateTTL(ttl)
}

// NewToken returns a fresh owner token: 130 random bits from crypto/rand,
// as 26 base32 characters.
func NewToken() string { return crand.Text() }

// nilStore stands in for a nil Store given to New, so that misuse is an error
// at the first call instead of a panic.
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
