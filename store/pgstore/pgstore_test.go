package pgstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clienttest"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// shared is one PostgreSQL server for the tests that only use keys or
// tables of their own; pool reaches it, and the default table exists in it.
// Tests that restart or kill a server start their own.
var (
	shared *testserver.PostgresServer
	pool   *pgxpool.Pool
)

func TestMain(m *testing.M) {
	srv, err := testserver.NewPostgresServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = srv
	code := func() int {
		defer srv.Close()
		p, err := pgxpool.New(context.Background(), srv.DSN())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer p.Close()
		pool = p
		s, err := pgstore.New(pool)
		if err == nil {
			err = s.Migrate(context.Background())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// newStore returns a Store on p, closed when the test ends.
func newStore(t testing.TB, p *pgxpool.Pool, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	s, err := pgstore.New(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// newPool connects to dsn; the pool is closed when the test ends.
func newPool(t testing.TB, dsn string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// newTable makes a store on a table of the test's own, already migrated.
func newTable(t testing.TB, p *pgxpool.Pool) (*pgstore.Store, string) {
	t.Helper()
	name := "leases_" + strings.ToLower(rand.Text()[:10])
	s := newStore(t, p, pgstore.WithTable(name))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s, name
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store { return newStore(t, pool) })
}

// The Client's promises on PostgreSQL: every Client of a case has a pool
// and a Store of its own, as separate processes would.
func TestClient(t *testing.T) {
	clienttest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, newPool(t, shared.DSN(), nil))
	})
}

// A store on a schema-qualified table, with a channel of its own.
// A store whose database is down: every call is an error of its own.
func TestUnreachableDatabaseIsAnError(t *testing.T) {
	storetest.RunUnreachable(t, func(t *testing.T) driver.Store {
		return newStore(t, newPool(t, "postgres://postgres@"+testserver.ClosedAddr(t)+"/postgres?sslmode=disable", nil))
	})
}

func TestConformanceQualifiedTable(t *testing.T) {
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA IF NOT EXISTS "Locks"`); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool, pgstore.WithTable(`Locks.Odd "Name"`), pgstore.WithChannel("odd channel"))
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, pool, pgstore.WithTable(`Locks.Odd "Name"`), pgstore.WithChannel("odd channel"))
	})
}

// Migrates of one table at once all succeed and make it once: from Stores
// that name it with and without its schema, and on connections whose
// default isolation is not read committed (whose snapshot, taken before
// Migrate's lock is granted, would not see what the Migrate before it made).
func TestConcurrentMigrate(t *testing.T) {
	for _, iso := range []string{"read committed", "repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(iso, " ", "_"), func(t *testing.T) {
			schema := newSchema(t)
			p := newPool(t, shared.DSN()+"&search_path="+schema, func(c *pgxpool.Config) {
				c.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
			})
			stores := []*pgstore.Store{
				newStore(t, p, pgstore.WithTable("leases")),
				newStore(t, p, pgstore.WithTable(schema+".leases"), pgstore.WithChannel("leases")),
			}
			errs := make(chan error, 8)
			var made atomic.Int64
			for i := range cap(errs) {
				go func() {
					var created []string
					err := stores[i%len(stores)].Migrate(t.Context(), pgstore.WithCreated(&created))
					if slices.Contains(created, "table leases") || slices.Contains(created, "table "+schema+".leases") {
						made.Add(1)
					}
					errs <- err
				}()
			}
			for range cap(errs) {
				if err := <-errs; err != nil {
					t.Errorf("Migrate: %v", err)
				}
			}
			if n := made.Load(); n != 1 {
				t.Errorf("%d Migrates report making the lease table, want 1", n)
			}
		})
	}
}

func TestNewRefusesBadNames(t *testing.T) {
	long := strings.Repeat("t", 64)
	for _, tc := range []struct {
		arg  string
		opts []pgstore.Option
	}{
		{"table", []pgstore.Option{pgstore.WithTable("")}},
		{"table", []pgstore.Option{pgstore.WithTable("a.b.c")}},
		{"table", []pgstore.Option{pgstore.WithTable("a.")}},
		{"table", []pgstore.Option{pgstore.WithTable("x\x00")}},
		{"table", []pgstore.Option{pgstore.WithTable(long)}},
		{"channel", []pgstore.Option{pgstore.WithTable("s." + long[:62])}}, // the default channel is 64 bytes
		{"channel", []pgstore.Option{pgstore.WithChannel(long)}},
		{"table", []pgstore.Option{pgstore.WithTable("bad\xfftable")}},
		{"table", []pgstore.Option{pgstore.WithTable("s\xff.t"), pgstore.WithChannel("c")}},
		{"channel", []pgstore.Option{pgstore.WithChannel("ch\xff")}},
		{"table", []pgstore.Option{pgstore.WithTable("pg_temp.leases"), pgstore.WithChannel("c")}},
		{"table", []pgstore.Option{pgstore.WithTable("pg_temp_3.leases"), pgstore.WithChannel("c")}},
	} {
		_, err := pgstore.New(pool, tc.opts...)
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("New with bad %s: %v, want an *ArgumentError for %q", tc.arg, err, tc.arg)
		}
	}
	if _, err := pgstore.New(nil); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("New(nil): %v, want an invalid-argument error", err)
	}
	if _, err := pgstore.New(pool, pgstore.WithTable("s."+long[:62]), pgstore.WithChannel("c")); err != nil {
		t.Errorf("New with a long qualified table and a short channel: %v", err)
	}
}

// A nil option is skipped, as leasehold.New skips one, not a panic: the
// options around it still count.
func TestNilOptionIsSkipped(t *testing.T) {
	name := "leases_" + strings.ToLower(rand.Text()[:10])
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"MigrationSQL", func() error {
			sql, err := pgstore.MigrationSQL(nil, pgstore.WithTable(name), nil)
			if err == nil && !strings.Contains(sql, name) {
				err = fmt.Errorf("the script does not name the table %s:\n%s", name, sql)
			}
			return err
		}},
		{"New and Migrate", func() error {
			s, err := pgstore.New(pool, nil, pgstore.WithTable(name), nil)
			if err != nil {
				return err
			}
			defer s.Close()
			var created []string
			if err := s.Migrate(t.Context(), nil, pgstore.WithCreated(&created), nil); err != nil {
				return err
			}
			if !slices.Contains(created, "table "+name) {
				return fmt.Errorf("Migrate created %q, want the table %s among them", created, name)
			}
			return nil
		}},
	} {
		if err := tc.call(); err != nil {
			t.Errorf("%s with nil options: %v", tc.name, err)
		}
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	s, table := newTable(t, pool)
	c := leasehold.New(s)
	ctx := t.Context()
	rows := func() string {
		t.Helper()
		out, err := shared.Psql("SELECT count(*), coalesce(string_agg(key || '|' || coalesce(token, '') || '|' || fence || '|' || coalesce(expires_at::text, ''), ','), '') FROM " + table)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	bad := func() {
		t.Helper()
		calls := []error{
			func() error { _, err := s.Acquire(ctx, "", "tok", time.Second); return err }(),
			func() error { _, err := s.Acquire(ctx, "a\nb", "tok", time.Second); return err }(),
			func() error { _, err := s.Acquire(ctx, "k\x00", "tok", time.Second); return err }(),
			func() error { _, err := s.Acquire(ctx, "k\xff", "tok", time.Second); return err }(),
			func() error { _, err := s.Acquire(ctx, strings.Repeat("k", 513), "tok", time.Second); return err }(),
			func() error { _, err := s.Acquire(ctx, "k", "", time.Second); return err }(),
			func() error { _, err := s.Acquire(ctx, "k", strings.Repeat("t", 257), time.Second); return err }(),
			func() error { _, err := s.Acquire(ctx, "k", "tok", 0); return err }(),
			func() error { _, err := s.Acquire(ctx, "k", "tok", 999*time.Microsecond); return err }(),
			func() error { _, err := s.Acquire(ctx, "k", "tok", 25*time.Hour); return err }(),
			func() error { _, err := c.TryAcquire(ctx, "k\x00", time.Second); return err }(),
			func() error { _, err := c.Acquire(ctx, "k", -time.Second); return err }(),
			s.Renew(ctx, "k", "tok", 0),
			s.Renew(ctx, "k", "", time.Second),
			s.Renew(ctx, "k\n", "tok", time.Second),
			s.Release(ctx, "k", ""),
			s.Release(ctx, "", "tok"),
			func() error { _, err := s.Inspect(ctx, "k\r"); return err }(),
			func() error { _, _, err := s.WatchReleases(ctx, "k\x01"); return err }(),
		}
		for i, err := range calls {
			if !errors.Is(err, leasehold.ErrInvalidArgument) {
				t.Errorf("call %d: %v, want an invalid-argument error", i, err)
			}
		}
	}
	bad()
	if got := rows(); got != "0|" {
		t.Fatalf("table after rejected calls: %q, want no rows", got)
	}
	if _, err := s.Acquire(ctx, "k", "tok", time.Hour); err != nil {
		t.Fatal(err)
	}
	before := rows()
	bad()
	if after := rows(); after != before {
		t.Fatalf("rejected calls changed the table: %q, was %q", after, before)
	}
}

// One LISTEN connection serves every watch of a Store, whatever the keys.
func TestOneListeningConnectionPerStore(t *testing.T) {
	channel := "chan_" + strings.ToLower(rand.Text()[:10])
	s := newStore(t, pool, pgstore.WithChannel(channel))
	ctx := t.Context()
	const n = 20
	keys := make([]string, n)
	watches := make([]<-chan struct{}, n)
	for i := range n {
		keys[i] = storetest.Key(t)
		ch, stop, err := s.WatchReleases(ctx, keys[i%5]) // several watches per key
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		watches[i] = ch
	}
	out, err := shared.Psql(fmt.Sprintf(`SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN "%s"'`, channel))
	if err != nil {
		t.Fatal(err)
	}
	if out != "1" {
		t.Fatalf("%s connections LISTEN for %d watches, want 1", out, n)
	}
	// A release of keys[0] wakes its watches, and only them.
	tok := leasehold.NewToken()
	if _, err := s.Acquire(ctx, keys[0], tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.ReleaseWatched(ctx, s, keys[0], tok); err != nil {
		t.Fatal(err)
	}
	for i, ch := range watches {
		if i%5 != 0 {
			continue
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("watch %d of the released key not woken within 5 s", i)
		}
	}
	// The others were not woken. Wake keys[1] and, once its watches have
	// been, check the rest: notifications arrive in commit order.
	if _, err := s.Acquire(ctx, keys[1], tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := pgstore.ReleaseWatched(ctx, s, keys[1], tok); err != nil {
		t.Fatal(err)
	}
	for i, ch := range watches {
		if i%5 == 1 {
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("watch %d not woken within 5 s", i)
			}
		}
	}
	for i, ch := range watches {
		if i%5 > 1 {
			select {
			case <-ch:
				t.Fatalf("watch %d of a key never released was woken", i)
			default:
			}
		}
	}
}

// A store whose database cannot be reached: WatchReleases gives up with
// its context, and Close does not wait for the reconnect loop's backoff.
func TestWatchWithoutDatabaseIsBounded(t *testing.T) {
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := pgstore.New(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := s.WatchReleases(ctx, "k"); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WatchReleases without a database: %v, want a deadline error", err)
	} else {
		t.Logf("as expected: %v", err)
	}
	closed := make(chan struct{})
	go func() {
		_ = s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5 s")
	}
}
