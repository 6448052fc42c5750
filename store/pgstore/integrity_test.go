package pgstore_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest"
)

// Fences are bigint: exact to MaxInt64, and an acquire that would pass it
// is an error that writes nothing.
func TestFencesAreExactInt64(t *testing.T) {
	s := newStore(t, pool)
	ctx, key := t.Context(), storetest.Key(t)
	if _, err := pool.Exec(ctx, `INSERT INTO leasehold_leases (key, fence) VALUES ($1, $2)`, key, int64(math.MaxInt64-2)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int64{math.MaxInt64 - 1, math.MaxInt64} {
		tok := leasehold.NewToken()
		f, err := s.Acquire(ctx, key, tok, time.Minute)
		if err != nil || f != want {
			t.Fatalf("Acquire = (%d, %v), want fence %d", f, err, want)
		}
		if err := s.Release(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
	}
	f, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
	if err == nil || f != 0 || errors.Is(err, leasehold.ErrNotAcquired) || !strings.Contains(err.Error(), "cannot rise") {
		t.Fatalf("Acquire past MaxInt64 = (%d, %v), want an error", f, err)
	}
	if info, err := s.Inspect(ctx, key); err != nil || info.Held || info.Fence != math.MaxInt64 {
		t.Fatalf("after the refused acquire: (%+v, %v), want free with fence MaxInt64", info, err)
	}
}

// A failover to a replica that missed the last commits, or a restore from
// an older backup, leaves the key's row older than the fences issued, or
// gone. The next fence comes from the database clock then, which is past
// every fence issued before (under the clock condition in the package
// doc), so the fence still rises.
func TestFencesRiseAfterTheRowIsLostOrOlder(t *testing.T) {
	s, table := newTable(t, pool)
	ctx, key := t.Context(), storetest.Key(t)
	var last int64
	acquire := func(what string) {
		t.Helper()
		tok := leasehold.NewToken()
		f, err := s.Acquire(ctx, key, tok, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if f <= last {
			t.Fatalf("%s: fence %d after %d, want strictly larger", what, f, last)
		}
		last = f
		if err := s.Release(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		acquire("acquire")
	}
	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET fence = 1 WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	acquire("acquire after the row went back to fence 1")
	if _, err := pool.Exec(ctx, `DELETE FROM `+table+` WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	acquire("acquire after the row was lost")
	// Held while lost: a lagging replica may still have the row of an
	// earlier owner, expired by now.
	if _, err := pool.Exec(ctx, `UPDATE `+table+` SET fence = 2, token = 'earlier', expires_at = now() - interval '1 second' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	acquire("acquire over an older expired lease")
	// Fences from the clock stay below 2^53, exact in a JSON number or a
	// JavaScript client, until the year 2255.
	if last >= 1<<53 {
		t.Fatalf("fence %d is past 2^53", last)
	}
}
