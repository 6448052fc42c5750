package leasehold

import (
	"context"
	"errors"
	"sync"
	"time"
)

// LocalFirst queues the goroutines of one process that contend for the same
// key on a local, per-key mutex, so that only the head of that queue talks
// to the store: the pattern of workflow runs, where many goroutines of one
// replica want the same run. A Client's Acquire already queues its waiters
// and wakes one per release; LocalFirst goes further: a goroutine's turn
// spans its whole Hold (acquire, fn, release), so while a sibling holds the
// key no goroutine of this LocalFirst waits at the store at all, not even
// with the head's backoff polls.
//
// It is safe for concurrent use. Idle keys take no memory: an entry lives
// only while some goroutine holds or waits for its key.
type LocalFirst struct {
	c    *Client
	mu   sync.Mutex
	keys map[string]*localKey
}

type localKey struct {
	turn chan struct{} // a one-slot semaphore; holding a slot is holding the key locally
	refs int           // goroutines holding or waiting for the key
}

// LocalFirst returns a LocalFirst in front of c.
func (c *Client) LocalFirst() *LocalFirst {
	return &LocalFirst{c: c, keys: make(map[string]*localKey)}
}

// Hold is Client.Hold behind the local queue: it waits its turn among this
// LocalFirst's callers for key, then holds the key at the store as
// Client.Hold does. Waiting for the local turn ends with ctx (an error
// matching ErrNotAcquired and ctx's error) or the wait budget, like the
// store wait.
func (lf *LocalFirst) Hold(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, l *Lease) error, opts ...HoldOption) error {
	if err := validateKeyTTL(key, ttl); err != nil {
		return err
	}
	cfg, err := newHoldConfig(ttl, opts)
	if err != nil {
		return err
	}
	k := lf.ref(key)
	defer lf.unref(key, k)

	start := time.Now()
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.waitBudget > 0 {
		wctx, cancel = context.WithTimeoutCause(ctx, cfg.waitBudget, errWaitBudget)
	}
	select {
	case k.turn <- struct{}{}:
		cancel()
	case <-wctx.Done():
		defer cancel()
		if ctx.Err() != nil {
			return ctxNotAcquired(ctx, key)
		}
		return errors.Join(ErrNotAcquired, context.Cause(wctx))
	}
	defer func() { <-k.turn }()
	// The store wait gets what is left of the budget.
	if cfg.waitBudget > 0 {
		if left := cfg.waitBudget - time.Since(start); left > 0 {
			opts = append(opts[:len(opts):len(opts)], WithWaitBudget(left))
		} else {
			return errors.Join(ErrNotAcquired, errWaitBudget)
		}
	}
	return lf.c.Hold(ctx, key, ttl, fn, opts...)
}

func (lf *LocalFirst) ref(key string) *localKey {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	k := lf.keys[key]
	if k == nil {
		k = &localKey{turn: make(chan struct{}, 1)}
		lf.keys[key] = k
	}
	k.refs++
	return k
}

func (lf *LocalFirst) unref(key string, k *localKey) {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	if k.refs--; k.refs == 0 {
		delete(lf.keys, key)
	}
}

// Len returns how many keys have goroutines holding or waiting for them.
func (lf *LocalFirst) Len() int {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return len(lf.keys)
}
