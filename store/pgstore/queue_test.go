package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest"
)

// queueLen is the number of rows in key's queue in the default waiters
// table.
func queueLen(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM leasehold_leases_waiters WHERE key = $1", key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitQueueLen waits until key's queue holds n rows, polling for at most 20 s.
func waitQueueLen(t *testing.T, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for queueLen(t, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("key's queue holds %d waiters, want %d", queueLen(t, key), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// The notification that wakes a queue's head names it by a hash of key and
// token, never by its token (any session of the database may LISTEN on any
// channel), and a release no one is queued for sends none.
func TestWakeUpCarriesNoToken(t *testing.T) {
	channel := "chan_" + strings.ToLower(leasehold.NewToken()[:10])
	s := newStore(t, pool, pgstore.WithChannel(channel))
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, shared.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// A release with no waiter: nothing sent.
	quiet, tok := storetest.Key(t)+":quiet", leasehold.NewToken()
	if _, err := s.Acquire(ctx, quiet, tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, quiet, tok); err != nil {
		t.Fatal(err)
	}
	// A release with a waiter: the head's wake-up.
	key, waiter := storetest.Key(t), leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireQueued(ctx, key, waiter, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("the waiter's attempt on a held key: %v", err)
	}
	turn, stop, err := s.WatchTurn(ctx, key, waiter)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Release(ctx, key, tok); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Notifications arrive in commit order: the first one is the waited-for
	// release's, so the quiet release sent none.
	n, err := conn.WaitForNotification(wctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(key + "\x01" + waiter))
	if want := "\x01" + hex.EncodeToString(sum[:]) + key; n.Payload != want {
		t.Errorf("payload %q, want %q", n.Payload, want)
	}
	if strings.Contains(n.Payload, waiter) || strings.Contains(n.Payload, tok) {
		t.Errorf("payload %q carries a token", n.Payload)
	}
	select {
	case <-turn:
	case <-wctx.Done():
		t.Fatal("the head's turn watch was not woken")
	}
	if _, err := s.AcquireQueued(ctx, key, waiter, time.Minute, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, waiter); err != nil {
		t.Fatal(err)
	}
}

// Migrate upgrades a database made by the version before the waiters table:
// it adds the table and keeps the leases. Until it has run, lock operations
// fail with an error that says to run it.
func TestMigrateUpgradesTheOldSchema(t *testing.T) {
	ctx := t.Context()
	name := "old_" + strings.ToLower(leasehold.NewToken()[:10])
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), fmt.Sprintf("DROP TABLE IF EXISTS %s, %s, %s",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{name + "_audit"}.Sanitize(), pgx.Identifier{name + "_waiters"}.Sanitize()))
	})
	// The previous version's Migrate, as it was.
	for _, stmt := range []string{
		`CREATE TABLE %[1]s (key text PRIMARY KEY, token text, fence bigint NOT NULL, expires_at timestamptz)`,
		`CREATE TABLE %[2]s (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), key text NOT NULL,
			holder text NOT NULL, token text NOT NULL, fence bigint NOT NULL, reason text NOT NULL, forced_by text NOT NULL)`,
		`CREATE INDEX %[3]s ON %[2]s (key, at)`,
		`INSERT INTO %[1]s VALUES ('held', 'old-owner', 42, now() + interval '1 hour')`,
	} {
		if _, err := pool.Exec(ctx, fmt.Sprintf(stmt, pgx.Identifier{name}.Sanitize(),
			pgx.Identifier{name + "_audit"}.Sanitize(), pgx.Identifier{name + "_audit_key_at"}.Sanitize())); err != nil {
			t.Fatal(err)
		}
	}
	s := newStore(t, pool, pgstore.WithTable(name))
	_, err := s.Acquire(ctx, "free", leasehold.NewToken(), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "run Migrate") || !strings.Contains(err.Error(), name+"_waiters") {
		t.Fatalf("Acquire before Migrate: %v, want an error saying to run Migrate", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := s.Inspect(ctx, "held")
	if err != nil || !info.Held || info.Token != "old-owner" || info.Fence != 42 {
		t.Fatalf("the old lease after Migrate: %+v, %v", info, err)
	}
	waiter := leasehold.NewToken()
	if _, err := s.AcquireQueued(ctx, "held", waiter, time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a waiter's attempt on the old lease: %v", err)
	}
	if err := s.Release(ctx, "held", "old-owner"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "held", leasehold.NewToken(), time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("a newcomer ahead of the queued waiter: %v, want ErrNotAcquired", err)
	}
	if f, err := s.AcquireQueued(ctx, "held", waiter, time.Minute, time.Minute); err != nil || f <= 42 {
		t.Fatalf("the waiter after the release: fence %d, %v; want above 42", f, err)
	}
}

// Waiters whose rows have all expired poll at once, each pruning the others'
// rows while refreshing its own: every poll is answered, none fails (a
// deadlock between two of them would fail one).
func TestLateWaitersPruneEachOtherWithoutDeadlock(t *testing.T) {
	key := storetest.Key(t)
	s := newStore(t, newPool(t, shared.DSN(), func(c *pgxpool.Config) { c.MaxConns = 10 }))
	ctx := t.Context()
	holder := leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, holder, time.Minute); err != nil {
		t.Fatal(err)
	}
	const waiters, polls = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		tok := leasehold.NewToken()
		wg.Go(func() {
			for range polls {
				// A stay of a millisecond: the row has expired by every
				// other waiter's next poll.
				_, err := s.AcquireQueued(ctx, key, tok, time.Minute, time.Millisecond)
				if !errors.Is(err, leasehold.ErrNotAcquired) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a late waiter's poll: %v", err)
	}
	if err := s.Release(ctx, key, holder); err != nil {
		t.Fatal(err)
	}
}
