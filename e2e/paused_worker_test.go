package e2e_test

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/store/redisstore/redisfence"
	"github.com/leasehold/leasehold/storetest/testserver"
)

var (
	redisSrv *testserver.RedisServer
	pgSrv    *testserver.PostgresServer
	pool     *pgxpool.Pool
)

func TestMain(m *testing.M) {
	if spec, ok, err := drill.WorkerSpecFromEnv(); ok { // a drill's worker process
		os.Exit(serveDrillWorker(spec, err))
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if redisSrv, err = testserver.NewRedisServer(); err != nil {
		return 1, err
	}
	defer redisSrv.Close()
	if pgSrv, err = testserver.NewPostgresServer(); err != nil {
		return 1, err
	}
	defer pgSrv.Close()
	if pool, err = pgxpool.New(context.Background(), pgSrv.DSN()); err != nil {
		return 1, err
	}
	defer pool.Close()
	return m.Run(), nil
}

// renewSwitch is a go-redis hook that, once tripped, fails every renewal:
// the worker's network to Redis breaks for renewals only. Renewals are the
// EVALSHA/EVAL of the renew script, recognised by its SHA or source.
type renewSwitch struct {
	sha, src string
	broken   atomic.Bool
}

func newRenewSwitch(t *testing.T) *renewSwitch {
	src, err := os.ReadFile("../store/redisstore/renew.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	return &renewSwitch{sha: hex.EncodeToString(sum[:]), src: string(src)}
}

func (h *renewSwitch) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook fails a pipeline holding a renewal: the Client's
// renewal engine sends its renewals in batches.
func (h *renewSwitch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.blocks(cmd) {
				err := errors.New("renewal blocked by the test")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

func (h *renewSwitch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.blocks(cmd) {
			err := errors.New("renewal blocked by the test")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// blocks says whether cmd is a renewal while the switch is on.
func (h *renewSwitch) blocks(cmd redis.Cmder) bool {
	body, _ := cmd.Args()[min(1, len(cmd.Args())-1)].(string)
	return h.broken.Load() && (body == h.sha || body == h.src)
}

// worker is one replica: its own Redis connection and lock client.
func worker(t *testing.T, hooks ...redis.Hook) *leasehold.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})
	for _, h := range hooks {
		client.AddHook(h)
	}
	s, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); _ = client.Close() })
	return leasehold.New(s, leasehold.WithLogger(slog.New(slog.DiscardHandler)))
}

func unique(prefix string) string { return prefix + strings.ToLower(rand.Text()[:8]) }

// storages are the fenced stores a worker writes a job's state to.
func storages(t *testing.T) map[string]fence.Register {
	t.Helper()
	reg, err := pgfence.NewRegister(pool, unique("jobs_"))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	w, err := redisfence.New(client)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]fence.Register{"postgres": reg, "redis": w}
}

const ttl = 300 * time.Millisecond

// Worker A holds the lock and stalls past its TTL without renewing; B takes
// the lock with a higher fence and writes; A wakes up and writes anyway. The
// storage refuses A's write and keeps B's, and A's release is refused too.
func TestPausedWorkerIsFenced(t *testing.T) {
	for name, store := range storages(t) {
		t.Run(name, func(t *testing.T) {
			a, b := worker(t), worker(t)
			ctx, lock, job := t.Context(), unique("jobs:"), unique("job:")

			la, err := a.TryAcquire(ctx, lock, ttl)
			if err != nil {
				t.Fatal(err)
			}
			// A stalls. B waits for the lock; it comes free when A's lease
			// expires on the server.
			waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			lb, err := b.Acquire(waitCtx, lock, ttl)
			if err != nil {
				t.Fatal(err)
			}
			if lb.Fence() <= la.Fence() {
				t.Fatalf("B's fence %d is not above A's %d", lb.Fence(), la.Fence())
			}
			if err := store.Write(ctx, job, lb.Fence(), []byte("dispatched by B")); err != nil {
				t.Fatal(err)
			}

			// A wakes up, unaware.
			err = store.Write(ctx, job, la.Fence(), []byte("dispatched by A"))
			var stale *fence.StaleError
			if !errors.As(err, &stale) || stale.Presented != la.Fence() || stale.Current != lb.Fence() {
				t.Fatalf("A's late write: %v, want a StaleError naming both fences", err)
			}
			if err := la.Release(ctx); !errors.Is(err, leasehold.ErrNotOwned) {
				t.Fatalf("A's late release: %v, want ErrNotOwned", err)
			}
			if v, f, _ := store.Read(ctx, job); string(v) != "dispatched by B" || f != lb.Fence() {
				t.Fatalf("job = (%q, %d), want B's write", v, f)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatalf("B's release: %v", err)
			}
		})
	}
}

// The same with the lock lost through Hold's fence: A's renewals fail, Hold
// cancels A's context before the lease expires, and A — a buggy worker that
// ignores its context — writes anyway after B took over. The fence at the
// storage still refuses it.
func TestWorkerFencedByHoldIsRefusedAtStorage(t *testing.T) {
	for name, store := range storages(t) {
		t.Run(name, func(t *testing.T) {
			sw := newRenewSwitch(t)
			a, b := worker(t, sw), worker(t)
			ctx, lock, job := t.Context(), unique("runs:"), unique("run:")
			bWrote := make(chan int64, 1)

			err := a.Hold(ctx, lock, ttl, func(hctx context.Context, la *leasehold.Lease) error {
				if err := store.Write(ctx, job, la.Fence(), []byte("started by A")); err != nil {
					return err
				}
				sw.broken.Store(true)
				<-hctx.Done()
				if !errors.Is(context.Cause(hctx), leasehold.ErrAbandoned) {
					t.Errorf("cause %v, want ErrAbandoned", context.Cause(hctx))
				}
				go func() {
					waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					lb, err := b.Acquire(waitCtx, lock, ttl)
					if err != nil {
						t.Error(err)
						bWrote <- 0
						return
					}
					if err := store.Write(ctx, job, lb.Fence(), []byte("finished by B")); err != nil {
						t.Error(err)
					}
					bWrote <- lb.Fence()
				}()
				fb := <-bWrote
				// A ignores its cancelled context and writes anyway.
				err := store.Write(ctx, job, la.Fence(), []byte("finished by A"))
				if !errors.Is(err, fence.ErrStale) {
					t.Errorf("A's write after the fence: %v, want ErrStale", err)
				}
				if v, f, _ := store.Read(ctx, job); string(v) != "finished by B" || f != fb {
					t.Errorf("job = (%q, %d), want B's write with fence %d", v, f, fb)
				}
				return err
			})
			if !errors.Is(err, leasehold.ErrAbandoned) || !errors.Is(err, fence.ErrStale) {
				t.Fatalf("Hold returned %v, want ErrAbandoned and A's ErrStale", err)
			}
		})
	}
}

// Redis loses its data; the next fence is issued from the server's clock and
// still beats the fence PostgreSQL stored before the loss. The old holder's
// fence stays refused.
func TestFenceAfterRedisWipeBeatsStoredFence(t *testing.T) {
	srv := testserver.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	s, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(); _ = client.Close() })
	c := leasehold.New(s)
	ctx := t.Context()

	name := unique("runs_")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+" (run_id text PRIMARY KEY, payload text)"); err != nil {
		t.Fatal(err)
	}
	runs, err := pgfence.NewTable(name, "run_id")
	if err != nil {
		t.Fatal(err)
	}
	if err := runs.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+name+" (run_id) VALUES ('R1')"); err != nil {
		t.Fatal(err)
	}

	var old int64
	for i, wipe := range []func() error{
		func() error { _, err := srv.Do("FLUSHALL"); return err },
		srv.Restart, // without persistence: the data is gone
	} {
		l, err := c.TryAcquire(ctx, "runs:R1", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := runs.Update(ctx, pool, "R1", l.Fence(), "payload = $1", fmt.Sprint("before wipe ", i)); err != nil {
			t.Fatal(err)
		}
		old = l.Fence()
		if err := wipe(); err != nil {
			t.Fatal(err)
		}
		var fresh *leasehold.Lease
		for attempt := range 20 { // the client redials after a restart
			if fresh, err = c.TryAcquire(ctx, "runs:R1", time.Minute); err == nil || attempt == 19 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("acquire after wipe %d: %v", i, err)
		}
		if err := runs.Update(ctx, pool, "R1", fresh.Fence(), "payload = $1", fmt.Sprint("after wipe ", i)); err != nil {
			t.Fatalf("the fence issued after wipe %d (%d) was refused against %d: %v", i, fresh.Fence(), old, err)
		}
		if err := runs.Update(ctx, pool, "R1", old, "payload = $1", "old holder"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("the old holder's fence after wipe %d: %v, want ErrStale", i, err)
		}
		if err := fresh.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
