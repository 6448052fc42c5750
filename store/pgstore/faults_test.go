package pgstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// These tests restart or kill a server, so each starts its own. They do not
// run in parallel with each other: a port freed by Kill could be taken by a
// server that another test is starting, and then Start would fail (or a
// client would reach the wrong server).

// retries bounds the attempts of an operation right after a restart: each
// failure discards one dead pooled connection (the pool has at most 4), and
// then a fresh one reaches the server, which is up again.
const retries = 10

// retry runs op until it succeeds, at most retries times. An error that is
// an answer from the store (busy, not owned) ends it at once.
func retry(t *testing.T, what string, op func() error) {
	t.Helper()
	var err error
	for range retries {
		if err = op(); err == nil {
			return
		}
		if errors.Is(err, leasehold.ErrNotAcquired) || errors.Is(err, leasehold.ErrNotOwned) {
			break
		}
		t.Logf("%s: %v (retrying)", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}

// startServer starts a server and returns a store on a table of the
// test's own, so that a server that took the port of ours while it was down
// could never answer as if it were ours.
func startServer(t *testing.T) (*testserver.PostgresServer, *pgstore.Store) {
	t.Helper()
	srv := testserver.StartPostgres(t)
	s, _ := newTable(t, newPool(t, srv.DSN(), nil))
	return srv, s
}

func crash(srv *testserver.PostgresServer) error {
	if err := srv.Kill(); err != nil {
		return err
	}
	return srv.Start()
}

func TestFencesRiseAcrossRestartAndCrash(t *testing.T) {
	srv, s := startServer(t)
	ctx, key := t.Context(), "runs:R1"
	var last int64
	acquire := func(what string) string {
		t.Helper()
		tok := leasehold.NewToken()
		var f int64
		retry(t, what, func() (err error) { f, err = s.Acquire(ctx, key, tok, time.Hour); return err })
		if f <= last {
			t.Fatalf("%s: fence %d after %d, want strictly larger", what, f, last)
		}
		last = f
		return tok
	}
	release := func(what, tok string) {
		t.Helper()
		retry(t, what, func() error { return s.Release(ctx, key, tok) })
	}

	release("release before the restart", acquire("first acquire"))
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	release("release before the crash", acquire("acquire after the restart"))
	if err := crash(srv); err != nil {
		t.Fatal(err)
	}
	// A lease held through a crash is still held, with its fence.
	tok := acquire("acquire after the crash")
	if err := crash(srv); err != nil {
		t.Fatal(err)
	}
	var info driver.Info
	retry(t, "inspect after the second crash", func() (err error) { info, err = s.Inspect(ctx, key); return err })
	if !info.Held || info.Token != tok || info.Fence != last {
		t.Fatalf("after a crash Inspect = %+v, want held by %q with fence %d", info, tok, last)
	}
	if _, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Hour); !errors.Is(err, leasehold.ErrNotAcquired) {
		t.Fatalf("acquire of a lease held through a crash: %v, want busy", err)
	}
	release("release after the second crash", tok)
	acquire("acquire after the release")
}

// Waiters are woken again once the listening connection is back after a
// restart and after a crash.
func TestWakeupsResumeAfterRestartAndCrash(t *testing.T) {
	srv, s := startServer(t)
	ctx, key := t.Context(), "job:1"
	released, stop, err := s.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for _, fault := range []struct {
		name string
		do   func() error
	}{{"restart", srv.Restart}, {"crash", func() error { return crash(srv) }}} {
		if err := fault.do(); err != nil {
			t.Fatal(err)
		}
		up := time.Now()
		// Until the connection is back a release goes unheard, so release
		// again until one is heard; the attempts are bounded.
		heard := false
		for attempt := 0; attempt < 100 && !heard; attempt++ {
			tok := leasehold.NewToken()
			if _, err := s.Acquire(ctx, key, tok, time.Minute); err != nil {
				continue // a dead pooled connection; the next attempt dials
			}
			if err := pgstore.ReleaseWatched(ctx, s, key, tok); err != nil {
				continue
			}
			select {
			case <-released:
				heard = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !heard {
			t.Fatalf("after the %s: no wake-up within 100 releases", fault.name)
		}
		t.Logf("after the %s: wake-ups back %v after the server was", fault.name, time.Since(up).Round(time.Millisecond))
	}
}

// A stopped server is an error, never a false "acquired" and never "busy",
// and leaves no lease behind.
func TestStoppedServerIsAnError(t *testing.T) {
	srv := testserver.StartPostgres(t)
	p := newPool(t, srv.DSN(), nil)
	s, _ := newTable(t, p)
	key := "job:1"
	// Kill SIGKILLs the postmaster's process group, but PostgreSQL puts
	// each backend in a session of its own: a backend of a pooled
	// connection outlives the postmaster until it notices, and may still
	// run a statement sent to it in the meantime (and commit it). So drop
	// the pooled connections first: every attempt below then dials a
	// server that is gone. (A pooled connection to a crashed server is
	// covered by TestFencesRiseAcrossRestartAndCrash.)
	p.Reset()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		f, err := s.Acquire(ctx, key, leasehold.NewToken(), time.Minute)
		if err == nil || f != 0 || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("attempt %d on a stopped server: (%d, %v), want a backend error", i, f, err)
		}
		if !strings.Contains(err.Error(), `pgstore: acquire "job:1"`) {
			t.Errorf("error %q does not say where it failed", err)
		}
	}
	quiet := slog.New(slog.DiscardHandler) // the clean-up after each failure warns, as it should
	c := leasehold.New(s, leasehold.WithLogger(quiet))
	for name, acquire := range map[string]func(context.Context, string, time.Duration) (*leasehold.Lease, error){
		"TryAcquire": c.TryAcquire, "Acquire": c.Acquire,
	} {
		lease, err := acquire(ctx, key, time.Minute)
		if lease != nil || err == nil || errors.Is(err, leasehold.ErrNotAcquired) {
			t.Fatalf("%s on a stopped server: (%v, %v), want a backend error", name, lease, err)
		}
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var info driver.Info
	retry(t, "inspect after the start", func() (err error) { info, err = s.Inspect(t.Context(), key); return err })
	if info != (driver.Info{Key: key}) {
		t.Fatalf("after failed acquires Inspect = %+v, want no lease and no fence", info)
	}
}
