package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/storetest"
)

// queryCounter is a pgx.QueryTracer that counts the queries sent.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// flushCounter counts writes to the server's socket. pgx sends everything a
// round trip needs in one write, so this counts round trips, including any
// the tracer does not see (statement preparation, pings).
type flushCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c flushCounter) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

func TestOneRoundTripPerOperation(t *testing.T) {
	queries := &queryCounter{}
	var writes atomic.Int64
	p := newPool(t, shared.DSN(), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = queries
		dial := cfg.ConnConfig.DialFunc
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return flushCounter{Conn: c, n: &writes}, nil
		}
		// One connection, so that every statement is prepared on it once,
		// and no liveness ping however slow the machine is: both are the
		// pool's doing, not the store's.
		cfg.MaxConns = 1
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	s := newStore(t, p)
	c := leasehold.New(s)
	ctx := t.Context()
	if err := p.Ping(ctx); err != nil { // dial: the handshake is no operation's
		t.Fatal(err)
	}
	key := storetest.Key(t)

	count := func(what string, wantQueries, wantTrips int64, op func() error) {
		t.Helper()
		q, w := queries.n.Load(), writes.Load()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		q, w = queries.n.Load()-q, writes.Load()-w
		t.Logf("%-13s %d query, %d round trip(s)", what, q, w)
		if q != wantQueries || w != wantTrips {
			t.Errorf("%s: %d queries in %d round trips, want %d in %d", what, q, w, wantQueries, wantTrips)
		}
	}
	var l *leasehold.Lease
	acquire := func() (err error) { l, err = c.TryAcquire(ctx, key, time.Minute); return err }
	busy := func() error {
		if _, err := c.TryAcquire(ctx, key, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
			return fmt.Errorf("got %v, want busy", err)
		}
		return nil
	}
	renew := func() error { return l.Renew(ctx, time.Minute) }
	inspect := func() error { _, err := s.Inspect(ctx, key); return err }
	release := func() error { return l.Release(ctx) }

	// pgx prepares each statement on its first use on a connection: one
	// more round trip, once per statement and connection.
	count("acquire", 1, 2, acquire)
	count("busy acquire", 1, 1, busy) // the same statement, prepared already
	count("renew", 1, 2, renew)
	count("inspect", 1, 2, inspect)
	count("release", 1, 2, release)
	for range 3 {
		count("acquire", 1, 1, acquire)
		count("busy acquire", 1, 1, busy)
		count("renew", 1, 1, renew)
		count("inspect", 1, 1, inspect)
		count("release", 1, 1, release)
	}
	count("lost release", 1, 1, func() error {
		if err := s.Release(ctx, key, "someone"); !errors.Is(err, leasehold.ErrNotOwned) {
			return fmt.Errorf("got %v, want not owned", err)
		}
		return nil
	})
}

// With pgx's QueryExecModeExec there is no preparing round trip at all.
func TestOneRoundTripInExecMode(t *testing.T) {
	var writes atomic.Int64
	p := newPool(t, shared.DSN(), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		dial := cfg.ConnConfig.DialFunc
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return flushCounter{Conn: c, n: &writes}, nil
		}
		cfg.MaxConns = 1
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	})
	s := newStore(t, p)
	ctx := t.Context()
	if err := p.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	key, tok := storetest.Key(t), leasehold.NewToken()
	ops := []struct {
		what string
		op   func() error
	}{
		{"acquire", func() error { _, err := s.Acquire(ctx, key, tok, time.Minute); return err }},
		{"busy acquire", func() error {
			if _, err := s.Acquire(ctx, key, "other", time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
				return fmt.Errorf("got %v, want busy", err)
			}
			return nil
		}},
		{"renew", func() error { return s.Renew(ctx, key, tok, time.Minute) }},
		{"inspect", func() error { _, err := s.Inspect(ctx, key); return err }},
		{"queued acquire, refused", func() error {
			if _, err := s.AcquireQueued(ctx, key, "waiter", time.Minute, time.Minute); !errors.Is(err, leasehold.ErrNotAcquired) {
				return fmt.Errorf("got %v, want busy", err)
			}
			return nil
		}},
		{"release to a waiter", func() error { return s.Release(ctx, key, tok) }},
		{"queued acquire", func() error { _, err := s.AcquireQueued(ctx, key, "waiter", time.Minute, time.Minute); return err }},
		{"leave", func() error { return s.LeaveQueue(ctx, key, "waiter") }},
		{"release", func() error { return s.Release(ctx, key, "waiter") }},
	}
	for _, o := range ops {
		w := writes.Load()
		if err := o.op(); err != nil {
			t.Fatalf("%s: %v", o.what, err)
		}
		if got := writes.Load() - w; got != 1 {
			t.Errorf("%s: %d round trips, want 1", o.what, got)
		}
	}
}

// argsRecorder is a pgx.QueryTracer that keeps the arguments of the last
// query.
type argsRecorder struct {
	mu   sync.Mutex
	args []any
}

func (r *argsRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.args = d.Args
	r.mu.Unlock()
	return ctx
}

func (r *argsRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *argsRecorder) last() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.args
}

// The TTL reaches PostgreSQL in microseconds, rounded up, never down: the
// interval the store sends for Acquire and Renew is read back as text by the
// server itself.
func TestTTLReachesServerRoundedUp(t *testing.T) {
	rec := &argsRecorder{}
	s := newStore(t, newPool(t, shared.DSN(), func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = rec }))
	ctx := t.Context()
	serverSees := func(what string) string {
		t.Helper()
		args := rec.last()
		if len(args) < 3 {
			t.Fatalf("%s sent %d arguments, want the TTL third", what, len(args))
		}
		var text string
		if err := pool.QueryRow(ctx, "SELECT $1::interval::text", args[2]).Scan(&text); err != nil {
			t.Fatal(err)
		}
		return text
	}
	for _, tc := range []struct {
		ttl  time.Duration
		want string
	}{
		{time.Millisecond, "00:00:00.001"},
		{time.Millisecond + time.Nanosecond, "00:00:00.001001"},
		{time.Millisecond + 999*time.Nanosecond, "00:00:00.001001"},
		{1500*time.Millisecond + 1001*time.Nanosecond, "00:00:01.500002"},
		{driver.MaxTTL, "24:00:00"},
	} {
		key, tok := storetest.Key(t), leasehold.NewToken()
		if _, err := s.Acquire(ctx, key, tok, tc.ttl); err != nil {
			t.Fatal(err)
		}
		if got := serverSees("Acquire"); got != tc.want {
			t.Errorf("Acquire with ttl %v: the server got %s, want %s", tc.ttl, got, tc.want)
		}
		if err := s.Renew(ctx, key, tok, tc.ttl); err != nil && !errors.Is(err, leasehold.ErrNotOwned) {
			t.Fatal(err)
		}
		if got := serverSees("Renew"); got != tc.want {
			t.Errorf("Renew with ttl %v: the server got %s, want %s", tc.ttl, got, tc.want)
		}
	}
}

// TTLs read back (a refused Acquire's, Inspect's, List's, queued or not,
// and a row pinned at 'infinity') are right in every query mode under every
// IntervalStyle: the exec and simple-protocol modes, used behind
// transaction-pooling proxies, read results as text, whose form for an
// interval follows IntervalStyle, so the statements return microseconds.
func TestTTLsInEveryModeAndIntervalStyle(t *testing.T) {
	modes := map[string]pgx.QueryExecMode{
		"cache_statement": pgx.QueryExecModeCacheStatement,
		"exec":            pgx.QueryExecModeExec,
		"simple_protocol": pgx.QueryExecModeSimpleProtocol,
	}
	for mode, m := range modes {
		for _, style := range []string{"postgres", "postgres_verbose", "sql_standard", "iso_8601"} {
			t.Run(mode+"/"+style, func(t *testing.T) {
				p := newPool(t, shared.DSN(), func(c *pgxpool.Config) {
					c.ConnConfig.DefaultQueryExecMode = m
					c.ConnConfig.RuntimeParams["intervalstyle"] = style
				})
				s, table := newTable(t, p)
				ctx, ttl := t.Context(), time.Hour
				key := storetest.Key(t)
				if _, err := s.Acquire(ctx, key, leasehold.NewToken(), ttl); err != nil {
					t.Fatal(err)
				}
				within := func(what string, d time.Duration, want time.Duration) {
					t.Helper()
					if d <= want-time.Minute || d > want {
						t.Errorf("%s: %v, want within a minute under %v", what, d, want)
					}
				}
				var held *driver.HeldError
				if _, err := s.Acquire(ctx, key, leasehold.NewToken(), ttl); !errors.As(err, &held) {
					t.Fatalf("refused Acquire: %v, want a HeldError", err)
				}
				within("refused Acquire's Remaining", held.Remaining, ttl)
				if _, err := s.AcquireQueued(ctx, key, leasehold.NewToken(), ttl, time.Minute); !errors.As(err, &held) {
					t.Fatalf("refused AcquireQueued: %v, want a HeldError", err)
				}
				info, err := s.Inspect(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				within("Inspect's TTL", info.TTL, ttl)
				infos, _, err := s.List(ctx, "*", "", 10)
				if err != nil || len(infos) != 1 {
					t.Fatalf("List: %v, %v", infos, err)
				}
				within("List's TTL", infos[0].TTL, ttl)
				if _, err := p.Exec(ctx, "UPDATE "+table+" SET expires_at = 'infinity' WHERE key = $1", key); err != nil {
					t.Fatal(err)
				}
				const century = 36500 * 24 * time.Hour
				if _, err := s.Acquire(ctx, key, leasehold.NewToken(), ttl); !errors.As(err, &held) {
					t.Fatalf("refused Acquire of a pinned row: %v, want a HeldError", err)
				}
				within("a pinned row's Remaining", held.Remaining, century+time.Minute/2)
				if info, err = s.Inspect(ctx, key); err != nil {
					t.Fatal(err)
				}
				within("a pinned row's Inspect TTL", info.TTL, century+time.Minute/2)
			})
		}
	}
}
