package driver

import (
	"context"
	"time"
)

// Queuer is an optional Store ability: a first-in, first-out queue of the
// waiters of a key, kept by the store and shared by every process, so that a
// release wakes only the waiter at the head and a newcomer cannot take a key
// that a queued waiter is waiting for (docs/design.md §5).
//
// A waiter is identified by the token of its Acquire, the same for all its
// attempts. Its entry lives for stay after the attempt that last made or
// refreshed it, and an expired entry is skipped and removed by the store's
// next call on the key: a waiter that crashes, pauses or gives up without
// leaving holds the queue up for about stay, never longer. Wake-ups are a
// latency optimisation, as for ReleaseNotifier: the waiter's backoff stays the
// fallback, and correctness never depends on them.
//
// A store with this ability refuses in Acquire, too, a free key to anyone but
// the live head of a non-empty queue (a caller that does not wait cannot jump
// the queue either), answering ErrNotAcquired.
type Queuer interface {
	// AcquireQueued is Acquire for a waiter: it takes key for ttl, issuing
	// the fence as Acquire does, only if no owner holds key and the queue
	// is empty or token is its live head, and then removes token's entry
	// in the same atomic step. Otherwise it puts token at the back of the
	// queue, or keeps its place, with its entry valid for stay from now
	// (store time), and returns ErrNotAcquired: a *HeldError whose
	// Remaining is the holder's remaining lease when token is the head, and
	// 0 when it is not (a waiter behind the head has no reason to try at
	// the holder's expiry). stay must be positive.
	AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (fence int64, err error)

	// WatchTurn returns a channel that receives a value when key may be
	// free with token at the head of its queue (a release, or a head that
	// left), and a function that stops the watch and must be called exactly
	// once. Wake-ups may be lost or spurious.
	WatchTurn(ctx context.Context, key, token string) (turn <-chan struct{}, stop func(), err error)

	// LeaveQueue takes token's entry out of key's queue, if it is there,
	// and wakes the next head when the key is free. Leaving twice, or
	// without an entry, is not an error.
	LeaveQueue(ctx context.Context, key, token string) error
}
