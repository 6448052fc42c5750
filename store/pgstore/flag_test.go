package pgstore_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest"
)

// queuedFlag is the queued column of key's lease row in the default table.
func queuedFlag(t *testing.T, key string) bool {
	t.Helper()
	var q bool
	if err := pool.QueryRow(t.Context(), "SELECT queued FROM leasehold_leases WHERE key = $1", key).Scan(&q); err != nil {
		t.Fatal(err)
	}
	return q
}

// The queued flag follows the queue: a waiter turns it on, the last waiter
// to take the key turns it off, and a plain Acquire is refused a free key
// while it is on and a waiter is queued.
func TestQueuedFlagFollowsTheQueue(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, pool)
	key := storetest.Key(t)
	holder, waiter := leasehold.NewToken(), leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	if queuedFlag(t, key) {
		t.Fatal("flag on before anyone queued")
	}
	if _, err := s.AcquireQueued(ctx, key, waiter, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("waiter: %v", err)
	}
	if !queuedFlag(t, key) {
		t.Fatal("flag off with a waiter queued")
	}
	if err := s.Release(ctx, key, holder); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a newcomer on a free key with a waiter queued: %v, want ErrNotAcquired", err)
	}
	if _, err := s.AcquireQueued(ctx, key, waiter, time.Minute, time.Minute); err != nil {
		t.Fatalf("the head's attempt: %v", err)
	}
	if queuedFlag(t, key) {
		t.Error("flag still on after the last waiter took the key")
	}
	if err := s.Release(ctx, key, waiter); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute); err != nil {
		t.Errorf("a newcomer once the queue is empty: %v", err)
	}
}

// A waiter of a key whose lease row was deleted by hand makes the row, with
// the flag on, so the queue still holds.
func TestWaiterOfAKeyWithoutARowFlagsIt(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, pool)
	key := storetest.Key(t)
	holder, first, second := leasehold.NewToken(), leasehold.NewToken(), leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireQueued(ctx, key, first, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("first waiter: %v", err)
	}
	if _, err := pool.Exec(ctx, "DELETE FROM leasehold_leases WHERE key = $1", key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireQueued(ctx, key, second, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("second waiter, behind the first: %v", err)
	}
	if !queuedFlag(t, key) {
		t.Fatal("no flagged row after a waiter queued for a key without one")
	}
	if _, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Errorf("a newcomer ahead of two waiters: %v, want ErrNotAcquired", err)
	}
	if _, err := s.AcquireQueued(ctx, key, first, time.Minute, time.Minute); err != nil {
		t.Errorf("the head's attempt: %v", err)
	}
}

// A waiter that joins while the head's acquire runs, unseen by that
// acquire's snapshot, keeps the flag on: the head's statement waits on the
// lease row the joiner's transaction wrote, and clears the flag only for a
// row its snapshot saw. Without that check a newcomer takes the key ahead
// of the joiner.
func TestJoinUnseenByTheHeadKeepsTheFlag(t *testing.T) {
	ctx := t.Context()
	p := newPool(t, shared.DSN(), func(c *pgxpool.Config) { c.MaxConns = 4 })
	s := newStore(t, p)
	key := storetest.Key(t)
	holder, head, joiner := leasehold.NewToken(), leasehold.NewToken(), leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireQueued(ctx, key, head, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("head: %v", err)
	}
	if err := s.Release(ctx, key, holder); err != nil {
		t.Fatal(err)
	}

	// The joiner's attempt, in a transaction left open: refused (the head
	// is ahead), it queues and writes the lease row.
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var txPID int32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&txPID); err != nil {
		t.Fatal(err)
	}
	sql, args := pgstore.AcquireQueuedStatement(s, key, joiner, time.Minute, time.Minute)
	var fence *int64
	if err := tx.QueryRow(ctx, sql, args...).Scan(&fence, nil, nil); err != nil || fence != nil {
		t.Fatalf("joiner's attempt: fence %v, %v; want refused", fence, err)
	}

	// The head's attempt starts now, with a snapshot without the joiner,
	// and waits for the joiner's transaction.
	var wg sync.WaitGroup
	var headErr error
	wg.Go(func() { _, headErr = s.AcquireQueued(ctx, key, head, time.Minute, time.Minute) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		var blocked int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))", txPID).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the head's attempt never waited for the joiner's transaction")
		}
		time.Sleep(time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if headErr != nil {
		t.Fatalf("the head's attempt: %v", headErr)
	}
	if !queuedFlag(t, key) {
		t.Error("flag off with the joiner queued")
	}
	if err := s.Release(ctx, key, head); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Errorf("a newcomer ahead of the joiner: %v, want ErrNotAcquired", err)
	}
	if _, err := s.AcquireQueued(ctx, key, joiner, time.Minute, time.Minute); err != nil {
		t.Errorf("the joiner's turn: %v", err)
	}
}

// Waiters whose rows expire between polls take the key one after another
// while the others prune their rows: an acquire deleting its own row that a
// pruning poll has locked, while that poll waits for the lease row, would
// deadlock; a poll locks the lease row before it prunes, so none does.
func TestTakersAndPrunersWithoutDeadlock(t *testing.T) {
	ctx := t.Context()
	key := storetest.Key(t)
	s := newStore(t, newPool(t, shared.DSN(), func(c *pgxpool.Config) { c.MaxConns = 10 }))
	const waiters, turns = 6, 5
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		tok := leasehold.NewToken()
		wg.Go(func() {
			taken := 0
			for i := 0; i < 2000 && taken < turns; i++ {
				// A stay of a millisecond: the row has expired by the
				// others' next polls, which prune it.
				_, err := s.AcquireQueued(ctx, key, tok, time.Minute, time.Millisecond)
				switch {
				case err == nil:
					taken++
					if err := s.Release(ctx, key, tok); err != nil {
						errs <- err
						return
					}
				case !errors.Is(err, leasehold.ErrNotAcquired):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a waiter: %v", err)
	}
}
