package leasehold

import (
	"context"
	"log/slog"
	"time"
)

// Lease is one ownership of a key: the key, the owner's token and the fence
// token issued with it. Its methods are safe for concurrent use.
type Lease struct {
	client *Client
	key    string
	token  string
	fence  int64
	ttl    time.Duration
}

// Key returns the locked key.
func (l *Lease) Key() string { return l.key }

// Token returns the owner token: the value that proves ownership to the store.
// Treat it like a credential: anyone holding it can renew or release the lease.
func (l *Lease) Token() string { return l.token }

// Fence returns the fence token issued with this lease. It is strictly larger
// than every fence issued earlier for the same key; pass it with every
// correctness-critical write so that storage can reject a stale owner.
func (l *Lease) Fence() int64 { return l.fence }

// TTL returns the duration the lease was acquired with.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Renew resets the lease's remaining time to ttl, only if the key still holds
// this lease's token. It returns ErrNotOwned when it does not (the lease
// expired or was released; a new owner, if any, is untouched), an
// *ArgumentError for a bad ttl, and the store's error when the store failed.
// Renew does not change the fence.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	return l.client.store.Renew(ctx, l.key, l.token, ttl)
}

// Release gives the key up, only if it still holds this lease's token. It
// returns ErrNotOwned when it does not: the lease expired, was already
// released, or the key belongs to another owner, whose lock is left alone.
func (l *Lease) Release(ctx context.Context) error {
	return l.client.store.Release(ctx, l.key, l.token)
}

// LogValue makes a Lease log as its key and fence. The token is left out: it
// is a credential.
func (l *Lease) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key", l.key), slog.Int64("fence", l.fence))
}
