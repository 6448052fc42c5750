package leasehold

import (
	"context"
	"errors"
	"sync"
	"time"
)

// localTurns are Hold's per-key turns among one Client's goroutines. An
// entry lives only while some goroutine holds or waits for its key.
type localTurns struct {
	mu   sync.Mutex
	keys map[string]*localKey
}

type localKey struct {
	turn chan struct{} // a one-slot semaphore; holding a slot is holding the key locally
	refs int           // goroutines holding or waiting for the key
}

// take waits for key's local turn, at most budget when budget > 0, and
// returns the func that gives it back. Waiting ends with ctx as a store wait
// does: an error matching ErrNotAcquired and ctx's error.
func (lt *localTurns) take(ctx context.Context, key string, budget time.Duration) (func(), error) {
	k := lt.ref(key)
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if budget > 0 {
		wctx, cancel = context.WithTimeoutCause(ctx, budget, errWaitBudget)
	}
	defer cancel()
	select {
	case k.turn <- struct{}{}:
		return func() { <-k.turn; lt.unref(key, k) }, nil
	case <-wctx.Done():
		lt.unref(key, k)
		if expired(ctx) != nil {
			return nil, ctxNotAcquired(ctx, key)
		}
		return nil, errors.Join(ErrNotAcquired, context.Cause(wctx))
	}
}

func (lt *localTurns) ref(key string) *localKey {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.keys == nil {
		lt.keys = make(map[string]*localKey)
	}
	k := lt.keys[key]
	if k == nil {
		k = &localKey{turn: make(chan struct{}, 1)}
		lt.keys[key] = k
	}
	k.refs++
	return k
}

func (lt *localTurns) unref(key string, k *localKey) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if k.refs--; k.refs == 0 {
		delete(lt.keys, key)
	}
}

// len is how many keys have goroutines holding or waiting for them.
func (lt *localTurns) len() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.keys)
}
