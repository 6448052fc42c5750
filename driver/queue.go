package driver

import (
	"context"
	"fmt"
	"time"
)

// MaxQueueStay bounds how long a queued waiter's entry lives after the
// attempt that last made or refreshed it, whatever stay the caller asks for:
// a waiter that crashed holds a key's queue up for at most this long, so no
// one Client's backoff setting decides every other process's liveness. 5 s
// is twice a default waiter's stay (2.5 s), and a live waiter refreshes its
// entry at least every half of it (see the Client's waiting), so a stalled
// process has seconds of slack before it merely loses its place.
const MaxQueueStay = 5 * time.Second

// QueueStay checks a waiter's stay for AcquireQueued and returns the stay a
// store keeps: stay itself, capped at MaxQueueStay. A stay that is not
// positive or is below MinTTL is an *ArgumentError naming "stay".
func QueueStay(stay time.Duration) (time.Duration, error) {
	if stay < MinTTL {
		return 0, &ArgumentError{Arg: "stay", Reason: fmt.Sprintf("%v is shorter than %v", stay, MinTTL)}
	}
	return min(stay, MaxQueueStay), nil
}

// Queuer is an optional Store ability: a first-in, first-out queue of the
// waiters of a key, kept by the store and shared by every process, so that a
// release wakes only the waiter at the head and a newcomer cannot take a key
// that a queued waiter is waiting for (docs/design.md §5).
//
// A waiter is identified by the token of its Acquire, the same for all its
// attempts. Its entry lives for its stay (capped at MaxQueueStay) after the
// attempt that last made or refreshed it, and an expired entry is skipped and
// removed by the store's next call on the key: a waiter that crashes, pauses
// or gives up without leaving holds the queue up for about its stay, never
// longer. Wake-ups are a latency optimisation, as for ReleaseNotifier: the
// waiter's backoff stays the fallback, and correctness never depends on them.
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
	// (store time; stay capped at MaxQueueStay, see QueueStay), and
	// returns ErrNotAcquired: a *HeldError whose Remaining is the holder's
	// remaining lease when token is the head, and 0 when it is not (a
	// waiter behind the head has no reason to try at the holder's expiry).
	AcquireQueued(ctx context.Context, key, token string, ttl, stay time.Duration) (fence int64, err error)

	// WatchTurn returns a channel that receives a value when key may be
	// free with token at the head of its queue (a release, or a head that
	// left), and a function that stops the watch and must be called exactly
	// once. Wake-ups may be lost or spurious.
	//
	// Called with a ctx that is already done, WatchTurn returns a watch
	// only if it can without a round trip to the store (the store's watch
	// is in place already), and otherwise fails at once, having started
	// nothing per key: a Client asks so before a waiter's first attempt,
	// so that a refusal is followed by its turn's wake-up without a
	// second look.
	WatchTurn(ctx context.Context, key, token string) (turn <-chan struct{}, stop func(), err error)

	// LeaveQueue takes token's entry out of key's queue, if it is there,
	// and wakes the next head when the key is free. Leaving twice, or
	// without an entry, is not an error.
	LeaveQueue(ctx context.Context, key, token string) error
}

// HandOffer is an optional ability of a Queuer: ending one lease and
// granting the key to a chosen waiter in one atomic step, so that a Client
// whose own waiter is next in line passes the key on in one round trip
// instead of a release, a wake-up and an attempt.
type HandOffer interface {
	// HandOff releases key if it holds token and, in the same atomic step,
	// takes it for next with ttl, issuing a new fence as Acquire does, if
	// next may take a free key: the queue is empty or next is its live
	// head; next's entry is then removed. It returns that fence (> 0).
	//
	// If next may not take it, or next is "", the key is released as by
	// Release (the queue's head is woken) and HandOff returns fence 0 with
	// head, the token of the live head it woke ("" when none), so that a
	// Client whose waiter that is can tell it at once. ErrNotOwned means key
	// does not hold token and nothing changed; an *ArgumentError, that an
	// argument is bad and nothing was sent. Any other error leaves the
	// outcome unknown: the key may be released, handed to next, or still
	// held with token.
	HandOff(ctx context.Context, key, token, next string, ttl time.Duration) (fence int64, head string, err error)
}

// Granter is an optional ability of a Queuer: a release grants the key, in
// the same atomic step, to the live head of its queue, with a new fence,
// and tells the head's store client the fence, so that the new owner starts
// without an attempt of its own (docs/design.md §5, "Grants").
//
// A grant holds the key for the TTL the head asked, or the rest of the stay
// of its entry when that is shorter: a head that died holds the key no
// longer than its entry would have held the queue up. The entry's stay was
// last counted from an AcquireQueued of the head, which the grant names, so
// the grant's lease runs at least min(ttl, stay) from that call's send time
// (stay as QueueStay caps it).
type Granter interface {
	Queuer

	// Granted reports the fence of a grant of key to token that the store
	// told this client of since token's turn watch (WatchTurn) began, and
	// the send time of the AcquireQueued of token whose entry the grant
	// was sized from, and forgets it. ok is false when no word of one came:
	// words may be lost, and a store may withhold them (for instance until
	// a write is acknowledged by replicas). A waiter whose grant went
	// unseen finds it by its next AcquireQueued, which renews the key it
	// holds to that call's ttl and returns the grant's fence. A waiter that
	// gave the key back since (Decline, Release) must ignore a word that
	// was still waiting.
	Granted(key, token string) (fence int64, from time.Time, ok bool)

	// Decline is LeaveQueue for a waiter that does not take the key: when
	// key holds token, a grant the waiter will not use, it is released as
	// by Release (and may be granted to the next head) in the same step.
	// A waiter that got the key leaves with LeaveQueue, which never
	// releases it.
	Decline(ctx context.Context, key, token string) error
}
