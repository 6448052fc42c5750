package driver

import (
	"context"
	"fmt"
	"sync"
)

// Fanout shares one watch per key among that key's waiters: the per-key
// fan-out every store's WatchReleases and WatchTurn need. The first waiter of
// a key makes the Fanout call start(key), which begins the store's own watch
// of it (a subscription, an etcd or Kubernetes watch); the last waiter's stop
// calls the func start returned. The store calls Ready(key) once its watch is
// in place and Wake(key) for each release it sees.
//
// start and the func it returns run under the Fanout's lock, in the order the
// waiters came and went: they must not block nor call back into the Fanout.
// A store that runs a goroutine per watch starts it in start and cancels it
// in the returned func. With a nil start (an in-process store) every key is
// ready at once.
type Fanout struct {
	start  func(key string) (stop func())
	closed error // what Watch returns after Close

	mu     sync.Mutex
	keys   map[string]*fanKey
	isShut bool
}

type fanKey struct {
	waiters map[chan struct{}]struct{}
	ready   chan struct{} // closed by Ready
	isReady bool
	stop    func()
}

// NewFanout returns a Fanout that starts a key's watch with start and
// answers closed to a Watch after Close.
func NewFanout(start func(key string) (stop func()), closed error) *Fanout {
	return &Fanout{start: start, closed: closed, keys: make(map[string]*fanKey)}
}

// Watch adds a waiter of key and returns once the key's watch is in place
// (Ready), with the waiter's channel, which holds at most one pending
// wake-up, and the func that removes the waiter (call it exactly once; more
// calls do nothing). It fails, having added nothing, when ctx ends first
// (an error wrapping ctx's cause, for the store to name the key in) or the
// Fanout is closed (its closed error, as it is).
func (f *Fanout) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	if f.isShut {
		f.mu.Unlock()
		return nil, nil, f.closed
	}
	k := f.keys[key]
	if k == nil {
		k = &fanKey{waiters: make(map[chan struct{}]struct{}), ready: make(chan struct{})}
		f.keys[key] = k
		if f.start == nil {
			k.isReady = true
			close(k.ready)
		} else {
			k.stop = f.start(key)
		}
	}
	k.waiters[ch] = struct{}{}
	ready := k.ready
	f.mu.Unlock()

	var once sync.Once
	stop := func() { once.Do(func() { f.remove(key, k, ch) }) }
	inPlace := func() (<-chan struct{}, func(), error) {
		if f.isClosed() { // Close readies every key to unblock its waiters
			stop()
			return nil, nil, f.closed
		}
		return ch, stop, nil
	}
	select {
	case <-ready: // no wait once the watch is up, even if ctx is done
		return inPlace()
	default:
	}
	select {
	case <-ready:
		return inPlace()
	case <-ctx.Done():
		stop()
		if f.isClosed() {
			return nil, nil, f.closed
		}
		return nil, nil, fmt.Errorf("not in place: %w", context.Cause(ctx))
	}
}

func (f *Fanout) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.isShut
}

// remove takes ch out of k, and ends k's watch with its last waiter.
func (f *Fanout) remove(key string, k *fanKey, ch chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(k.waiters, ch)
	if len(k.waiters) > 0 || f.keys[key] != k {
		return
	}
	delete(f.keys, key)
	if k.stop != nil {
		k.stop()
	}
}

// Ready marks key's watch as in place, letting its waiters' Watch calls
// return. It does nothing for a key without waiters, or when called again.
func (f *Fanout) Ready(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := f.keys[key]; k != nil && !k.isReady {
		k.isReady = true
		close(k.ready)
	}
}

// Wake gives every waiter of key a pending wake-up, without blocking.
func (f *Fanout) Wake(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := f.keys[key]; k != nil {
		wakeAll(k)
	}
}

// WakeAll wakes every waiter of every key: after a watch or a connection
// was down, when any release may have gone unseen.
func (f *Fanout) WakeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.keys {
		wakeAll(k)
	}
}

func wakeAll(k *fanKey) {
	for ch := range k.waiters {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// Keys returns the keys that have waiters now, in no order: what a store
// re-establishes after its connection was replaced.
func (f *Fanout) Keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.keys))
	for key := range f.keys {
		keys = append(keys, key)
	}
	return keys
}

// Close ends every key's watch (calling each stop func) and makes later
// Watch calls, and those still waiting for Ready, fail with the Fanout's
// closed error. Waiters' channels stay open: their owners stop them as
// usual. Calling Close again does nothing.
func (f *Fanout) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.isShut {
		return
	}
	f.isShut = true
	for key, k := range f.keys {
		delete(f.keys, key)
		if k.stop != nil {
			k.stop()
		}
		if !k.isReady { // unblock a Watch waiting for it: it sees the Fanout closed
			k.isReady = true
			close(k.ready)
		}
	}
}
