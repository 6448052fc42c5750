package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// A silent partition (every byte held, nothing closed) is noticed by the
// health ping, the connection is replaced once the network is back, and
// wake-ups resume. The timings are shortened so that the test runs in
// well under a second of waiting.
func TestSilentListeningConnectionIsReplaced(t *testing.T) {
	srv := testserver.StartPostgres(t)
	proxy := testserver.StartProxy(t, srv.Addr())
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + proxy.Addr() + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := New(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.listener.healthInterval = 20 * time.Millisecond
	s.listener.pingTimeout = 100 * time.Millisecond
	s.listener.connectTimeout = 200 * time.Millisecond
	ctx := t.Context()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := "job:1"
	released, stop, err := s.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	// Health pings go on while the connection is silent; it stays up.
	waitPings(t, srv)
	wantWoken(t, s, key, released, "after health pings")

	// Partition: once the ping has timed out the store is no longer
	// listening, and a new watch cannot be confirmed.
	proxy.Freeze()
	noticed := false
	for range 100 {
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, stop2, err := s.WatchReleases(wctx, key)
		if err != nil {
			cancel()
			t.Logf("while partitioned: %v", err)
			noticed = true
			break
		}
		stop2()
		<-wctx.Done() // pace the attempts: 50 ms each, 5 s in all
		cancel()
	}
	if !noticed {
		t.Fatal("a silent connection was not noticed within 5 s")
	}
	proxy.Thaw()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, stop3, err := s.WatchReleases(wctx, key)
	if err != nil {
		t.Fatalf("no listening connection within 10 s of the partition's end: %v", err)
	}
	stop3()
	wantWoken(t, s, key, released, "after the partition")
}

// waitPings waits until the server has seen the listening connection's
// health ping (its last query is pgx's "-- ping"), polling at most 5 s.
func waitPings(t *testing.T, srv *testserver.PostgresServer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		out, err := srv.Psql("SELECT count(*) FROM pg_stat_activity WHERE query = '-- ping'")
		if err != nil {
			t.Fatal(err)
		}
		if out == "1" {
			return
		}
	}
	t.Fatalf("no health ping seen within 5 s")
}

func wantWoken(t *testing.T, s *Store, key string, released <-chan struct{}, when string) {
	t.Helper()
	select {
	case <-released: // drain a wake-up of an earlier release
	default:
	}
	tok := leasehold.NewToken()
	var err error
	for range 10 { // the pooled connections may have been cut: dial again
		if _, err = s.Acquire(t.Context(), key, tok, time.Minute); err == nil {
			err = releaseWatched(t.Context(), s, key, tok)
			break
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no wake-up within 5 s of a release", when)
	}
}
