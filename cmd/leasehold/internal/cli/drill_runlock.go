package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
)

// drillRunKey is the lock a drill holds on a real store while it runs: two
// drills on one store would take each other's job locks (reported as
// violations) and remove each other's keys.
const drillRunKey = "drill:run"

// drillKeysPrefix starts every key a drill creates: its job locks
// (drill.KeyPrefix) and drillRunKey.
const drillKeysPrefix = "drill:"

// drillRunTTL is the run lock's TTL: renewed every 10 s, so a drill that
// crashed blocks the next one for at most 30 s.
const drillRunTTL = 30 * time.Second

// lockDrillRun takes drillRunKey on b for the drill, and returns the function
// that releases it (and, on Redis, deletes its fence key). A drill already
// running is an error naming its holder.
func (a *app) lockDrillRun(ctx context.Context, b *backend) (unlock func(), err error) {
	c := leasehold.New(b.store, leasehold.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	l, err := callFor(ctx, b, func(ctx context.Context) (*leasehold.Lease, error) {
		return c.TryAcquire(ctx, drillRunKey, drillRunTTL)
	})
	if errors.Is(err, leasehold.ErrNotAcquired) {
		_ = c.Close()
		holder := "?"
		if info, ierr := b.inspect(ctx, drillRunKey); ierr == nil && info.Held && info.Holder() != "" {
			holder = printable(info.Holder())
		}
		return nil, fmt.Errorf("another drill is running on %s (%s is held by %s): two drills on one store take each other's job locks and remove each other's keys; wait for it to end, or use another store", b, drillRunKey, holder)
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("taking %s: %w", drillRunKey, err)
	}
	ka, err := l.KeepAlive(context.WithoutCancel(ctx))
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return func() {
		ka.Stop()
		rctx := context.WithoutCancel(ctx)
		_ = b.call(rctx, func(ctx context.Context) error { return l.Release(ctx) })
		_ = c.Close()
		if b.deleteKeys != nil {
			_ = b.call(rctx, func(ctx context.Context) error { return b.deleteKeys(ctx, redisstore.FenceKey(drillRunKey)) })
		}
	}, nil
}
