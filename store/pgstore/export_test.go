package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

// ReleaseWatched is releaseWatched, for the package's external tests.
var ReleaseWatched = releaseWatched

// releaseWatched releases key, held with tok, with a waiter queued for it, so
// that the release is announced (a Store announces only the releases a
// queued waiter waits for), and takes the waiter out of the queue again.
func releaseWatched(ctx context.Context, s *Store, key, tok string) error {
	w := leasehold.NewToken()
	if _, err := s.AcquireQueued(ctx, key, w, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		if err == nil {
			err = errors.New("the waiter took a held key")
		}
		return err
	}
	err := s.Release(ctx, key, tok)
	if lerr := s.LeaveQueue(ctx, key, w); err == nil {
		err = lerr
	}
	return err
}

// AcquireQueuedStatement is AcquireQueued's statement and arguments, for a
// test that runs it in a transaction of its own.
func AcquireQueuedStatement(s *Store, key, token string, ttl, stay time.Duration) (string, []any) {
	return s.acquireQueuedSQL, []any{key, token, interval(ttl), s.channel, interval(stay)}
}
