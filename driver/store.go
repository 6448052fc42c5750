package driver

import (
	"context"
	"time"
)

// Store is the backend interface: the four operations every lock backend
// provides. Client is the caller-facing type in front of it; applications
// rarely call a Store directly.
//
// Every method validates its arguments first (see ValidateAcquire and
// ValidateRelease) and returns an *ArgumentError, writing nothing, when they
// are bad. The conformance suite in package storetest checks all of this.
type Store interface {
	// Acquire sets key to token for ttl only if no owner holds key, and in the
	// same atomic step issues the fence token for this ownership. Fences are
	// strictly increasing per key, forever: across releases and expiries, and
	// (for stores that say so) across loss of the store's data.
	//
	// It returns ErrNotAcquired (possibly as a *HeldError) when another owner
	// holds the key, and any other error when the store could not answer; in
	// that case the caller cannot know whether the write happened.
	Acquire(ctx context.Context, key, token string, ttl time.Duration) (fence int64, err error)

	// Release deletes key only if it still holds token (compare-and-delete).
	// It returns ErrNotOwned when the key is absent or holds another token;
	// nothing is changed then.
	Release(ctx context.Context, key, token string) error

	// Renew resets key's TTL to ttl only if it still holds token
	// (compare-and-expire). It returns ErrNotOwned when the key is absent
	// (released or expired) or holds another token; nothing is changed then.
	Renew(ctx context.Context, key, token string, ttl time.Duration) error

	// Inspect reports the key's current owner, remaining TTL and last fence.
	// A key that is not held is not an error: Info.Held is false and
	// Info.Fence still reports the last fence issued for it (0 if never).
	Inspect(ctx context.Context, key string) (Info, error)
}

// Info is what a store knows about one key.
type Info struct {
	Key   string
	Held  bool          // an owner holds the key now
	Token string        // the owner's token; empty when not held
	TTL   time.Duration // remaining lease time; 0 when not held
	Fence int64         // the last fence issued for the key; 0 if never acquired
}

// ReleaseNotifier is an optional Store ability: telling waiters that a key was
// released, so that a waiting Acquire tries again at once instead of at its
// next backoff step. Notifications are a latency optimisation only: they may
// be lost (a dropped connection, a missed message), so the Client always keeps
// a jittered backoff as the fallback, and correctness never depends on them.
type ReleaseNotifier interface {
	// WatchReleases returns a channel that receives a value after key is
	// released by its owner, and a function that stops the watch and must be
	// called exactly once. Several releases may be coalesced into one value.
	// Expiries are not notified. A store that is also a Queuer may announce
	// only the releases of keys with a live waiter in its queue (the Client
	// then watches its waiters' turns, not releases).
	WatchReleases(ctx context.Context, key string) (released <-chan struct{}, stop func(), err error)
}

// DatedAcquirer is an optional Store ability: an acquire that may put the
// key on a term that began shortly before the call, and says when, to save
// the write that would restart the term. etcd's Store puts a lock on a lease
// it reuses, and a lease kept alive moments ago needs no keep-alive of its
// own (store/etcdstore). The Client acquires through it when the store has
// it, and counts the lease from the time it reports.
//
// A wrapper that embeds a store with this ability and overrides Acquire or
// AcquireQueued must wrap AcquireDated too, or its Acquire is bypassed.
type DatedAcquirer interface {
	// AcquireDated is Acquire when stay is 0, and Queuer.AcquireQueued when
	// stay > 0 (validated as they do), except that the key may be held for
	// ttl from from, not from the call: from is when the term began, no
	// later than the call's start; the zero time means the call's start,
	// as for Acquire. A store bounds how far back from may lie, and says
	// so; a term that does not cover most of ttl is no saving.
	AcquireDated(ctx context.Context, key, token string, ttl, stay time.Duration) (fence int64, from time.Time, err error)
}

// RenewItem is one lease to renew in a batch: the arguments of Store.Renew.
type RenewItem struct {
	Key   string
	Token string
	TTL   time.Duration
}

// BatchRenewer is an optional Store ability: renewing many leases in one
// call, so that a process holding thousands of leases does not pay a round
// trip per renewal. The Client's renewal engine uses it when the store has it,
// and makes concurrent Renew calls when it does not.
// A wrapper that embeds a store with this ability and overrides Renew must
// wrap RenewBatch too, or its Renew is bypassed.
type BatchRenewer interface {
	// RenewBatch renews every item as Renew would, and returns one result
	// per item, in the items' order (len(results) == len(items)): nil when
	// the item was renewed, an error matching ErrNotOwned when the key no
	// longer holds the item's token (nothing changed for it), an
	// *ArgumentError for a bad item (nothing sent for it), and any other
	// error when the store could not say, for instance because the whole
	// call failed or timed out; such an item may or may not have been
	// renewed. Items are independent: one item's failure does not undo
	// another's renewal.
	RenewBatch(ctx context.Context, items []RenewItem) []error
}

// MaxListLimit is the largest limit Lister.List takes: one call stays one
// short read for the store (a SCAN step, a range, a page of rows).
const MaxListLimit = 10_000

// Lister is an optional Store ability: listing the locks held now whose keys
// match a pattern, one page per call. The operator CLI's ls is built on it.
type Lister interface {
	// List returns up to limit locks held now whose key matches pattern,
	// each as Inspect would report it (Held true, Token, TTL, Fence), sorted
	// by key (bytewise) within the call, and next, the after of the next
	// call; next is "" when the listing is done. after is "" to start, or
	// the next of an earlier call with the same pattern.
	//
	// A call may return fewer than limit locks, even none, and a non-empty
	// next: only next == "" ends the listing. Infos is never nil without an
	// error. Keys not held now (released, expired, never taken) are not
	// listed, even when a fence remains: Inspect shows those.
	//
	// A key held and matching from the first call to the last is listed at
	// least once; a key acquired, released or expired meanwhile may or may
	// not be. Across calls the order is the store's own, which each store
	// documents; a store whose order is not key order (Redis) may list a
	// key on more than one page, so callers that want each key once keep
	// the keys they have seen.
	//
	// The pattern is matched against the whole key: * is any run of
	// characters (possibly empty, ':' and '/' included), ? one character (a
	// code point), [set] one character in set and [^set] one not in it (set
	// is characters and ranges such as a-z), and \c the character c itself,
	// in a set or not. Every other character stands for itself.
	//
	// It returns an *ArgumentError, reading nothing, for a bad pattern
	// (empty, longer than 2×MaxKeyLen bytes, not UTF-8, a control
	// character, an unclosed or empty set, a range whose ends are reversed,
	// a trailing lone \), a limit outside 1..MaxListLimit, or an after the
	// store cannot have returned (Arg "pattern", "limit" or "after").
	// ValidateList checks pattern and limit so, and its Glob matches keys.
	List(ctx context.Context, pattern, after string, limit int) (infos []Info, next string, err error)
}
