package lockbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
)

// lockTTL is the lease time of every lock taken by the run: redsync's
// default expiry, given to the other libraries too. No critical section of
// the run comes near it.
const lockTTL = 8 * time.Second

// redislockBackoff is the retry interval of redislock's waiting Obtain in the
// contended runs: its LinearBackoff, at a value typical of its users.
const redislockBackoff = 25 * time.Millisecond

// errNotObtained is what a handle's acquire returns when the lock was not
// obtained: the key was held and the library stopped trying, or the context
// ended first. Any other error is a failure of the run.
var errNotObtained = errors.New("lockbench: not obtained")

// handle is one worker's lock on one key, through one library.
type handle interface {
	acquire(ctx context.Context) error
	release(ctx context.Context) error
	renew(ctx context.Context) error
}

// library is one go-redis client with its round-trip counter; each library
// under test gets its own, made with the same options.
type library struct {
	name   string
	client *redis.Client
	hook   *counter
}

func newLibrary(name string, opts *redis.Options) *library {
	o := *opts
	l := &library{name: name, client: redis.NewClient(&o), hook: &counter{}}
	l.client.AddHook(l.hook)
	return l
}

// contender is one library in one configuration.
type contender struct {
	id        string // short, for keys and progress lines
	label     string // for the report
	lib       *library
	newHandle func(key string) handle
	// worker, when set, gives worker w its handle through clients of its
	// own (the processes section); newHandle is then unused.
	worker func(key string, w int) handle
}

// contenders are the configurations of one run.
type contenders struct {
	raw, lh, rs, rl, rd *library
	unbatched           *library // Config.Unbatched; nil otherwise
	store               *redisstore.Store
	lockers             []rueidislock.Locker // closed with the contenders
	scripts             *library             // the scriptsID row's counter
	leaseholdScripts    *leaseholdScripts    // the scriptsID row's scripts
	rueidisClients      []rueidis.Client     // closed with the contenders
	extra               []*redis.Client      // the processes section's own clients
	stores              []*redisstore.Store  // their Stores
	opts                *redis.Options

	// uncontended: one attempt, no waiting.
	cycle []*contender
	// contended: waiting acquires with each library's own waiting.
	handoff []*contender
	// processes section: a client per worker (see setupProcesses).
	procs []*contender
}

func newContenders(opts *redis.Options) (*contenders, error) {
	c := &contenders{
		raw: newLibrary("go-redis", opts),
		lh:  newLibrary("leasehold", opts),
		rs:  newLibrary("redsync", opts),
		rl:  newLibrary("redislock", opts),
		// rueidislock brings its own client (rueidis); its library has
		// the counter alone.
		rd:      &library{name: "rueidislock", hook: &counter{}},
		scripts: &library{name: scriptsID, hook: &counter{}},
		opts:    opts,
	}
	store, err := redisstore.New(c.lh.client)
	if err != nil {
		c.close()
		return nil, err
	}
	c.store = store
	ls, err := readLeaseholdScripts()
	if err != nil {
		c.close()
		return nil, err
	}
	c.leaseholdScripts = ls // checked by checkScripts
	// Client-side caching off: nothing here reads a key twice, and its
	// invalidations are rueidislock's wake-up, which these scripts do not
	// use. Auto-pipelining, rueidis's default, stays on.
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{opts.Addr}, DisableCache: true})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("lockbench: %s: %w", scriptsID, err)
	}
	c.rueidisClients = append(c.rueidisClients, rc)
	counted := &countingRueidis{Client: rc, hook: c.scripts.hook}

	lhClient := leasehold.New(store)
	lhPolling := leasehold.New(pollingStore{s: store})
	rsync := redsync.New(goredis.NewPool(c.rs.client))
	rlock := redislock.New(c.rl.client)
	rdLocker, err := c.newLocker()
	if err != nil {
		c.close()
		return nil, err
	}

	c.cycle = []*contender{
		{id: "leasehold", label: "leasehold", lib: c.lh, newHandle: func(key string) handle {
			return &leaseholdHandle{c: lhClient, key: key, try: true}
		}},
		{id: "redsync", label: "redsync", lib: c.rs, newHandle: func(key string) handle {
			return &redsyncHandle{m: rsync.NewMutex(key, redsync.WithTries(1))}
		}},
		{id: "redislock", label: "redislock", lib: c.rl, newHandle: func(key string) handle {
			return &redislockHandle{c: rlock, key: key}
		}},
		{id: "rueidislock", label: "rueidislock", lib: c.rd, newHandle: func(key string) handle {
			return &rueidisHandle{l: rdLocker, key: key, try: true}
		}},
		{id: scriptsID, label: "parts: leasehold's scripts on rueidis", lib: c.scripts, newHandle: func(key string) handle {
			return newScriptsHandle(ls, counted, key)
		}},
	}
	c.handoff = []*contender{
		{id: "leasehold", label: "leasehold", lib: c.lh, newHandle: func(key string) handle {
			return &leaseholdHandle{c: lhClient, key: key}
		}},
		{id: "leasehold-nowake", label: "leasehold, polling (no wake-ups)", lib: c.lh, newHandle: func(key string) handle {
			return &leaseholdHandle{c: lhPolling, key: key}
		}},
		{id: "redsync", label: "redsync, default retry", lib: c.rs, newHandle: func(key string) handle {
			return &redsyncHandle{m: rsync.NewMutex(key)}
		}},
		{id: "redislock", label: "redislock, LinearBackoff(25ms)", lib: c.rl, newHandle: func(key string) handle {
			return &redislockHandle{c: rlock, key: key, opt: &redislock.Options{
				RetryStrategy: redislock.LinearBackoff(redislockBackoff),
			}}
		}},
		{id: "rueidislock", label: "rueidislock, one Locker", lib: c.rd, newHandle: func(key string) handle {
			return &rueidisHandle{l: rdLocker, key: key}
		}},
	}
	return c, nil
}

// checkScripts confirms, before anything is measured, that the scriptsID
// row sends the scripts redisstore runs; it takes and releases key.
func (c *contenders) checkScripts(ctx context.Context, admin *redis.Client, key string) error {
	return c.leaseholdScripts.check(ctx, c.store, admin, key)
}

func (c *contenders) libraries() []*library {
	libs := []*library{c.raw, c.lh, c.rs, c.rl, c.rd, c.scripts}
	if c.unbatched != nil {
		libs = append(libs, c.unbatched)
	}
	return libs
}

// addUnbatched adds leasehold on a Store made with
// redisstore.WithoutBatching to the uncontended cycles (Config.Unbatched).
func (c *contenders) addUnbatched() error {
	c.unbatched = newLibrary("leasehold-unbatched", c.opts)
	store, err := redisstore.New(c.unbatched.client, redisstore.WithoutBatching())
	if err != nil {
		return err
	}
	c.stores = append(c.stores, store)
	client := leasehold.New(store)
	c.cycle = append(c.cycle, &contender{id: "leasehold-unbatched", label: "leasehold, WithoutBatching", lib: c.unbatched,
		newHandle: func(key string) handle { return &leaseholdHandle{c: client, key: key, try: true} }})
	return nil
}

// newLocker is a rueidislock Locker of its own (its own rueidis client and
// connection), counted on the rueidislock library's counter.
func (c *contenders) newLocker() (rueidislock.Locker, error) {
	l, err := rueidislock.NewLocker(rueidisLockerOption(c.opts.Addr, c.rd))
	if err != nil {
		return nil, fmt.Errorf("lockbench: rueidislock: %w", err)
	}
	c.lockers = append(c.lockers, l)
	return l, nil
}

func (c *contenders) close() {
	if c.store != nil {
		_ = c.store.Close()
	}
	for _, st := range c.stores {
		_ = st.Close()
	}
	for _, l := range c.lockers {
		l.Close()
	}
	for _, rc := range c.rueidisClients {
		rc.Close()
	}
	for _, cl := range c.extra {
		_ = cl.Close()
	}
	for _, l := range c.libraries() {
		if l.client != nil {
			_ = l.client.Close()
		}
	}
}

// notObtained turns err into errNotObtained when it means "not obtained"
// (by busy, the library's own sentinel, or ctx done) and leaves it alone
// otherwise.
func notObtained(ctx context.Context, err error, busy bool) error {
	if busy || ctx.Err() != nil {
		return fmt.Errorf("%w: %w", errNotObtained, err)
	}
	return err
}

type leaseholdHandle struct {
	c   *leasehold.Client
	key string
	try bool // TryAcquire instead of Acquire
	l   *leasehold.Lease
}

func (h *leaseholdHandle) acquire(ctx context.Context) (err error) {
	if h.try {
		h.l, err = h.c.TryAcquire(ctx, h.key, lockTTL)
	} else {
		h.l, err = h.c.Acquire(ctx, h.key, lockTTL)
	}
	if err != nil {
		return notObtained(ctx, err, errors.Is(err, leasehold.ErrNotAcquired))
	}
	return nil
}

func (h *leaseholdHandle) release(ctx context.Context) error { return h.l.Release(ctx) }

func (h *leaseholdHandle) renew(ctx context.Context) error { return h.l.Renew(ctx, lockTTL) }

type redsyncHandle struct{ m *redsync.Mutex }

func (h *redsyncHandle) acquire(ctx context.Context) error {
	err := h.m.LockContext(ctx)
	if err != nil {
		var taken *redsync.ErrTaken
		return notObtained(ctx, err, errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken))
	}
	return nil
}

func (h *redsyncHandle) release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock reported false")
	}
	return err
}

func (h *redsyncHandle) renew(ctx context.Context) error {
	ok, err := h.m.ExtendContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: extend reported false")
	}
	return err
}

type redislockHandle struct {
	c   *redislock.Client
	key string
	opt *redislock.Options // nil: redislock's default, no retry
	l   *redislock.Lock
}

func (h *redislockHandle) acquire(ctx context.Context) (err error) {
	h.l, err = h.c.Obtain(ctx, h.key, lockTTL, h.opt)
	if err != nil {
		return notObtained(ctx, err, errors.Is(err, redislock.ErrNotObtained))
	}
	return nil
}

func (h *redislockHandle) release(ctx context.Context) error { return h.l.Release(ctx) }

func (h *redislockHandle) renew(ctx context.Context) error { return h.l.Refresh(ctx, lockTTL, nil) }

// pollingStore is the Redis store with its wake-ups and queue hidden: its
// Client's waiters poll on their backoff alone, which is what the wake-ups
// are measured against. Renewals are still batched.
type pollingStore struct{ s *redisstore.Store } // not embedded: its other abilities stay hidden

func (s pollingStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	return s.s.Acquire(ctx, key, token, ttl)
}

func (s pollingStore) Release(ctx context.Context, key, token string) error {
	return s.s.Release(ctx, key, token)
}

func (s pollingStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	return s.s.Renew(ctx, key, token, ttl)
}

func (s pollingStore) Inspect(ctx context.Context, key string) (driver.Info, error) {
	return s.s.Inspect(ctx, key)
}

func (s pollingStore) RenewBatch(ctx context.Context, items []driver.RenewItem) []error {
	return s.s.RenewBatch(ctx, items)
}
