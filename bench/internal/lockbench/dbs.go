package lockbench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/etcdstore"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// dbTTL is the lease of the etcd and PostgreSQL cycles. etcd grants whole
// seconds; no cell comes near it.
const dbTTL = 10 * time.Second

// dbCycler is one contender of the etcd or PostgreSQL cycle tables: cycle
// takes and releases worker w's own key for the cell named by tag.
type dbCycler struct {
	id, label string
	lib       *library // its counter; no go-redis client
	prepare   func(ctx context.Context, tag string, conc int) (func(ctx context.Context, w int) error, error)
	// serverCPU, when set, reads the CPU time used so far by the server
	// processes that serve this contender, and a set that identifies them:
	// a cell's figure is known only when the set did not change.
	serverCPU func(ctx context.Context) (cpu time.Duration, who string, ok bool)
}

// dbBench is the etcd or PostgreSQL section's server, clients and
// contenders.
type dbBench struct {
	kind    string // "etcd" or "postgres"
	from    string // the server, for the report
	cyclers []*dbCycler
	closers []func()
}

func (d *dbBench) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// countUnary counts every unary gRPC call (a round trip) on hook; the
// lease keep-alive streams of both contenders are not counted.
func countUnary(hook *counter) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		hook.trips.Add(1)
		hook.note(method)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// newEtcdBench starts an etcd and sets up leasehold on etcdstore against
// concurrency.Mutex, each on its own clientv3 client with a counting
// interceptor. The Mutex side has a Session per worker (maxConc of them),
// made here, outside every timed loop.
func newEtcdBench(ctx context.Context, maxConc int) (_ *dbBench, err error) {
	srv, err := testserver.NewEtcdServer()
	if err != nil {
		return nil, fmt.Errorf("lockbench: etcd: %w", err)
	}
	d := &dbBench{kind: "etcd", from: "started by the command on " + srv.Endpoints()[0]}
	d.closers = append(d.closers, func() { _ = srv.Close() })
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	newClient := func(lib *library) (*clientv3.Client, error) {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   srv.Endpoints(),
			DialTimeout: 10 * time.Second,
			Logger:      zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(countUnary(lib.hook))},
		})
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, func() { _ = cli.Close() })
		return cli, nil
	}
	lhLib := &library{name: "leasehold", hook: &counter{}}
	muLib := &library{name: "concurrency.Mutex", hook: &counter{}}
	lhCli, err := newClient(lhLib)
	if err != nil {
		return nil, err
	}
	muCli, err := newClient(muLib)
	if err != nil {
		return nil, err
	}
	// The server's release: Debian's etcd 3.4 and a current one differ
	// (a transaction costs 3.4 far more server CPU, docs/design.md §9).
	if st, err := muCli.Status(ctx, srv.Endpoints()[0]); err == nil {
		d.from = "etcd " + st.Version + ", " + d.from
	}
	st, err := etcdstore.New(lhCli)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { _ = st.Close() })
	lh := leasehold.New(st)
	sessions := make([]*concurrency.Session, maxConc)
	for w := range sessions {
		if sessions[w], err = concurrency.NewSession(muCli, concurrency.WithTTL(int(dbTTL/time.Second)), concurrency.WithContext(ctx)); err != nil {
			return nil, fmt.Errorf("lockbench: etcd session: %w", err)
		}
		s := sessions[w]
		d.closers = append(d.closers, func() { _ = s.Close() })
	}
	partLib := &library{name: "etcd parts", hook: &counter{}}
	partCli, err := newClient(partLib)
	if err != nil {
		return nil, err
	}
	// One keep-alive stream per worker, as the Store's one stream carries
	// every keep-alive of its acquires.
	streams := make([]pb.Lease_LeaseKeepAliveClient, maxConc)
	for w := range streams {
		if streams[w], err = pb.NewLeaseClient(partCli.ActiveConnection()).LeaseKeepAlive(ctx); err != nil {
			return nil, fmt.Errorf("lockbench: etcd keep-alive stream: %w", err)
		}
	}
	defer func() {
		for _, c := range d.cyclers {
			c.serverCPU = func(context.Context) (time.Duration, string, bool) { return pidCPU(srv.Pid()) }
		}
	}()
	d.cyclers = []*dbCycler{
		{id: "leasehold", label: "leasehold (etcdstore)", lib: lhLib,
			prepare: func(_ context.Context, tag string, conc int) (func(context.Context, int) error, error) {
				return func(ctx context.Context, w int) error {
					l, err := lh.TryAcquire(ctx, fmt.Sprintf("%s:%d", tag, w), dbTTL)
					if err != nil {
						return fmt.Errorf("acquire of a free key: %w", err)
					}
					return l.Release(ctx)
				}, nil
			}},
		{id: "mutex", label: "concurrency.Mutex", lib: muLib,
			prepare: func(_ context.Context, tag string, conc int) (func(context.Context, int) error, error) {
				mus := make([]*concurrency.Mutex, conc)
				for w := range mus {
					mus[w] = concurrency.NewMutex(sessions[w], fmt.Sprintf("/bench/%s:%d", tag, w))
				}
				return func(ctx context.Context, w int) error {
					if err := mus[w].TryLock(ctx); err != nil {
						return fmt.Errorf("TryLock of a free key: %w", err)
					}
					return mus[w].Unlock(ctx)
				}, nil
			}},
	}
	for _, sh := range etcdShapes {
		d.cyclers = append(d.cyclers, &dbCycler{id: sh.id, label: sh.label, lib: partLib,
			prepare: func(ctx context.Context, tag string, conc int) (func(context.Context, int) error, error) {
				ka := streams
				if !sh.keepAlive {
					ka = nil
				}
				return etcdPart(ctx, partCli, tag, conc, sh, ka)
			}})
	}
	return d, nil
}

// etcdShape is how much of etcdstore's cycle a parts row sends: each row
// adds one thing to the row before it, so that the rows take the cycle
// apart from the Mutex's shape up to etcdstore's.
type etcdShape struct {
	id, label    string
	tokenRelease bool // the release deletes the lock key only if it holds the token (else by key alone)
	fence        bool // the acquire also puts the fence key
	queue        bool // the acquire also requires the key's queue prefix empty
	keepAlive    bool // a keep-alive of the lease alongside each acquire
}

// etcdShapes are the parts rows, in the order they add up.
var etcdShapes = []etcdShape{
	{id: "lock", label: "parts: the lock key alone (put on the lease if absent, delete)"},
	{id: "token", label: "parts: + the release checks the token", tokenRelease: true},
	{id: "fence", label: "parts: + the acquire puts the fence key", tokenRelease: true, fence: true},
	{id: "txns", label: "parts: + the queue check (etcdstore's two transactions alone)", tokenRelease: true, fence: true, queue: true},
	{id: "keepalive", label: "parts: + a keep-alive of the lease alongside each acquire", tokenRelease: true, fence: true, queue: true, keepAlive: true},
}

// etcdPart is a cycle of etcdstore's transactions, as it sends them for a
// free key no one waits for, on a lease per worker granted here, with what
// sh leaves out left out: the acquire (the lock key free and the key's
// queue empty; put the lock key on the lease and the fence key), then the
// release (the lock key still holds the token; delete it). With streams,
// each acquire also keeps its worker's lease alive on the worker's stream
// alongside the transaction, as etcdstore does for the idle lease it
// reuses.
func etcdPart(ctx context.Context, cli *clientv3.Client, tag string, conc int, sh etcdShape, streams []pb.Lease_LeaseKeepAliveClient) (func(context.Context, int) error, error) {
	leases := make([]clientv3.LeaseID, conc)
	for w := range leases {
		g, err := cli.Grant(ctx, int64(dbTTL/time.Second))
		if err != nil {
			return nil, err
		}
		leases[w] = g.ID
	}
	return func(ctx context.Context, w int) error {
		lk, fk, qp := "parts/lock/"+tag+":"+strconv.Itoa(w), "parts/fence/"+tag+":"+strconv.Itoa(w), "parts/queue/"+tag+":"+strconv.Itoa(w)+"/"
		token := leasehold.NewToken()
		var kaErr error
		var ka sync.WaitGroup
		if streams != nil {
			ka.Go(func() {
				if kaErr = streams[w].Send(&pb.LeaseKeepAliveRequest{ID: int64(leases[w])}); kaErr == nil {
					_, kaErr = streams[w].Recv()
				}
			})
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)}
		if sh.queue {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix())
		}
		then := []clientv3.Op{clientv3.OpPut(lk, token, clientv3.WithLease(leases[w]))}
		if sh.fence {
			then = append(then, clientv3.OpPut(fk, ""))
		}
		resp, err := cli.Txn(ctx).If(cmps...).Then(then...).Else(clientv3.OpGet(lk, clientv3.WithKeysOnly())).Commit()
		ka.Wait()
		switch {
		case err != nil:
			return err
		case kaErr != nil:
			return fmt.Errorf("keep-alive: %w", kaErr)
		case !resp.Succeeded:
			return errors.New("acquire of a free key: not acquired")
		}
		if !sh.tokenRelease {
			_, err := cli.Delete(ctx, lk)
			return err
		}
		rel, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(lk), "=", token)).Then(clientv3.OpDelete(lk, clientv3.WithPrevKV())).Commit()
		if err == nil && !rel.Succeeded {
			err = errors.New("release of a held key: not owned")
		}
		return err
	}, nil
}

// pidCPU is the CPU time process pid has used so far, all its threads
// (on-CPU time from /proc/PID/task/*/schedstat: the server runs on this
// machine; a thread that exited takes its time with it, which Go's and
// PostgreSQL's servers do not do while they run).
func pidCPU(pid int) (time.Duration, string, bool) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return 0, "", false
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err != nil {
			return 0, "", false
		}
		sum += time.Duration(ns)
	}
	return sum, strconv.Itoa(pid), true
}

// pgTracer counts the statements sent on a pool's connections: one round
// trip each (pgx's statement cache prepares each once per connection; the
// cells run long past that).
type pgTracer struct{ hook *counter }

func (t pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.hook.trips.Add(1)
	return ctx
}

func (pgTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// newPostgresBench starts a PostgreSQL and sets up leasehold on pgstore
// against session-level advisory locks, each on its own pool with a
// counting tracer.
func newPostgresBench(ctx context.Context, maxConc int) (_ *dbBench, err error) {
	srv, err := testserver.NewPostgresServer()
	if err != nil {
		return nil, fmt.Errorf("lockbench: postgres: %w", err)
	}
	d := &dbBench{kind: "postgres", from: "started by the command on " + srv.Addr()}
	d.closers = append(d.closers, func() { _ = srv.Close() })
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	newPool := func(lib *library) (*pgxpool.Pool, error) {
		cfg, err := pgxpool.ParseConfig(srv.DSN())
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = int32(maxConc + 4)
		cfg.ConnConfig.Tracer = pgTracer{lib.hook}
		cfg.ConnConfig.RuntimeParams["application_name"] = appName(lib)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		d.closers = append(d.closers, pool.Close)
		return pool, nil
	}
	lhLib := &library{name: "leasehold", hook: &counter{}}
	advLib := &library{name: "advisory", hook: &counter{}}
	lhPool, err := newPool(lhLib)
	if err == nil {
		// The server's durability settings go into the report: with fsync
		// off (the test servers' setting) a commit does not wait for the
		// disk, so the statements' CPU decides the ratios.
		var version, fsync, syncCommit string
		if lhPool.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit')").Scan(&version, &fsync, &syncCommit) == nil {
			d.from = fmt.Sprintf("PostgreSQL %s with fsync = %s and synchronous_commit = %s, %s", version, fsync, syncCommit, d.from)
		}
	}
	if err != nil {
		return nil, err
	}
	advPool, err := newPool(advLib)
	if err != nil {
		return nil, err
	}
	storeLib := &library{name: "pgstore.Store", hook: &counter{}}
	storePool, err := newPool(storeLib)
	if err != nil {
		return nil, err
	}
	parts := make([]*pgPart, len(pgParts))
	for i, pp := range pgParts {
		part := *pp
		part.lib = &library{name: part.id, hook: &counter{}}
		if part.pool, err = newPool(part.lib); err != nil {
			return nil, err
		}
		parts[i] = &part
	}
	if _, err := advPool.Exec(ctx, pgPartsTableSQL); err != nil {
		return nil, fmt.Errorf("lockbench: postgres parts table: %w", err)
	}
	st, err := pgstore.New(lhPool)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("lockbench: pgstore migrate: %w", err)
	}
	lh := leasehold.New(st)
	// Dial every connection a cell may use, and prepare the statements on
	// them, before any cell: otherwise the first cell of each contender pays
	// for PostgreSQL forking its backends.
	if err := warmPool(ctx, advPool, maxConc, func(ctx context.Context, conn *pgxpool.Conn) error {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(0)).Scan(&ok); err != nil {
			return err
		}
		return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(0)).Scan(&ok)
	}); err != nil {
		return nil, fmt.Errorf("lockbench: postgres warm-up: %w", err)
	}
	for _, p := range append([]*pgxpool.Pool{lhPool, storePool}, partPools(parts)...) {
		if err := warmPool(ctx, p, maxConc, nil); err != nil {
			return nil, fmt.Errorf("lockbench: postgres warm-up: %w", err)
		}
	}
	direct, err := pgstore.New(storePool)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { _ = direct.Close() })
	var warm errgroup
	for w := range maxConc {
		warm.Go(func() error {
			l, err := lh.TryAcquire(ctx, fmt.Sprintf("warm-up:%d", w), dbTTL)
			if err != nil {
				return err
			}
			if err := l.Release(ctx); err != nil {
				return err
			}
			key, tok := fmt.Sprintf("warm-up:%d", w), leasehold.NewToken()
			if _, err := direct.Acquire(ctx, key, tok, dbTTL); err != nil {
				return err
			}
			if err := direct.Release(ctx, key, tok); err != nil {
				return err
			}
			for _, part := range parts {
				if err := part.cycle(ctx, key, tok); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := warm.Wait(); err != nil {
		return nil, fmt.Errorf("lockbench: postgres warm-up: %w", err)
	}
	admin, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		return nil, fmt.Errorf("lockbench: postgres: %w", err)
	}
	d.closers = append(d.closers, func() { _ = admin.Close(context.Background()) })
	var adminMu sync.Mutex
	defer func() {
		for _, c := range d.cyclers {
			c.serverCPU = func(ctx context.Context) (time.Duration, string, bool) {
				adminMu.Lock()
				defer adminMu.Unlock()
				return backendCPU(ctx, admin, appName(c.lib))
			}
		}
	}()
	d.cyclers = []*dbCycler{
		{id: "leasehold", label: "leasehold (pgstore)", lib: lhLib,
			prepare: func(_ context.Context, tag string, conc int) (func(context.Context, int) error, error) {
				return func(ctx context.Context, w int) error {
					l, err := lh.TryAcquire(ctx, fmt.Sprintf("%s:%d", tag, w), dbTTL)
					if err != nil {
						return fmt.Errorf("acquire of a free key: %w", err)
					}
					return l.Release(ctx)
				}, nil
			}},
		{id: "advisory", label: "pg_try_advisory_lock + pg_advisory_unlock", lib: advLib,
			prepare: func(_ context.Context, tag string, conc int) (func(context.Context, int) error, error) {
				keys := make([]int64, conc)
				for w := range keys {
					h := fnv.New64a()
					fmt.Fprintf(h, "%s:%d", tag, w)
					keys[w] = int64(h.Sum64())
				}
				return func(ctx context.Context, w int) error {
					conn, err := advPool.Acquire(ctx)
					if err != nil {
						return err
					}
					defer conn.Release()
					var ok bool
					if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", keys[w]).Scan(&ok); err != nil {
						return err
					}
					if !ok {
						return errors.New("pg_try_advisory_lock of a free key: false")
					}
					if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", keys[w]).Scan(&ok); err != nil {
						return err
					}
					if !ok {
						return errors.New("pg_advisory_unlock: false")
					}
					return nil
				}, nil
			}},
		{id: "store", label: "pgstore.Store Acquire + Release, no Client", lib: storeLib,
			prepare: func(_ context.Context, tag string, conc int) (func(context.Context, int) error, error) {
				return func(ctx context.Context, w int) error {
					key, tok := fmt.Sprintf("%s:%d", tag, w), leasehold.NewToken()
					if _, err := direct.Acquire(ctx, key, tok, dbTTL); err != nil {
						return fmt.Errorf("acquire of a free key: %w", err)
					}
					return direct.Release(ctx, key, tok)
				}, nil
			}},
	}
	for _, part := range parts {
		d.cyclers = append(d.cyclers, &dbCycler{id: part.id, label: part.label, lib: part.lib,
			prepare: func(_ context.Context, tag string, conc int) (func(context.Context, int) error, error) {
				return func(ctx context.Context, w int) error {
					return part.cycle(ctx, fmt.Sprintf("%s:%d", tag, w), leasehold.NewToken())
				}, nil
			}})
	}
	return d, nil
}

// pgPart is a cycle of raw statements on a lease row, each part of pgstore's
// cycle added in turn, to say what each costs: the row alone, the fence, the
// TTL a refusal reports. The statements are the shapes of pgstore's acquire
// and release without its queue, on a table of their own (pgPartsTable), one
// statement per operation on a pooled connection, as pgstore sends them.
type pgPart struct {
	id, label        string
	acquire, release string
	// channel: the release takes a third argument, the notification
	// channel, as pgstore's does.
	channel bool
	lib     *library
	pool    *pgxpool.Pool
}

// cycle takes key with token and releases it: one round trip each.
func (p *pgPart) cycle(ctx context.Context, key, token string) error {
	var fence *int64
	var remaining any
	if err := p.pool.QueryRow(ctx, p.acquire, key, token, dbTTL).Scan(&fence, &remaining); err != nil {
		return err
	}
	if fence == nil {
		return errors.New("acquire of a free key: not acquired")
	}
	args := []any{key, token}
	if p.channel {
		args = append(args, "lockbench")
	}
	tag, err := p.pool.Exec(ctx, p.release, args...)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("release of a held key: not owned")
	}
	return err
}

func partPools(parts []*pgPart) []*pgxpool.Pool {
	pools := make([]*pgxpool.Pool, len(parts))
	for i, p := range parts {
		pools[i] = p.pool
	}
	return pools
}

// pgPartsTableSQL makes the parts' table, pgstore's lease table, and the
// function that reads its holder's TTL for a refusal, as pgstore's held
// function does.
const pgPartsTableSQL = `CREATE TABLE IF NOT EXISTS lockbench_parts (
	key        text PRIMARY KEY,
	token      text,
	fence      bigint NOT NULL,
	expires_at timestamptz
);
CREATE OR REPLACE FUNCTION lockbench_parts_held(text) RETURNS interval
LANGUAGE plpgsql STABLE AS $f$
BEGIN
	RETURN (SELECT expires_at - now() FROM lockbench_parts WHERE key = $1);
END
$f$`

// The parts' statements: the row alone (a conditional upsert of owner and
// expiry, and a release that clears them); then with the fence raised in the
// same row to max(last + 1, the clock), returned by the upsert alone, so that
// a refusal returns nothing; then as one statement that also reads the
// holder's TTL back for a refusal, as pgstore's acquire does, with a function
// called only then (pgstore without its queue).
const (
	partRowAcquire = `INSERT INTO lockbench_parts AS l (key, token, fence, expires_at)
VALUES ($1, $2, 0, now() + $3::interval)
ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
 WHERE l.expires_at IS NULL OR l.expires_at <= now()
RETURNING l.fence, NULL::interval`
	partFenceOnlyAcquire = `INSERT INTO lockbench_parts AS l (key, token, fence, expires_at)
VALUES ($1, $2, floor(extract(epoch FROM now()) * 1000000)::bigint, now() + $3::interval)
ON CONFLICT (key) DO UPDATE
   SET token = EXCLUDED.token, fence = greatest(l.fence + 1, EXCLUDED.fence), expires_at = EXCLUDED.expires_at
 WHERE l.expires_at IS NULL OR l.expires_at <= now()
RETURNING l.fence, NULL::interval`
	partFenceAcquire = `WITH acquired AS (
	INSERT INTO lockbench_parts AS l (key, token, fence, expires_at)
	VALUES ($1, $2, floor(extract(epoch FROM now()) * 1000000)::bigint, now() + $3::interval)
	ON CONFLICT (key) DO UPDATE
	   SET token = EXCLUDED.token, fence = greatest(l.fence + 1, EXCLUDED.fence), expires_at = EXCLUDED.expires_at
	 WHERE l.expires_at IS NULL OR l.expires_at <= now()
	RETURNING l.fence
)
SELECT a.fence, CASE WHEN a.fence IS NULL THEN lockbench_parts_held($1) END
  FROM (SELECT (SELECT fence FROM acquired) AS fence) a`
	partRelease = `UPDATE lockbench_parts SET token = NULL, expires_at = NULL
 WHERE key = $1 AND token = $2 AND expires_at > now()`
	// partRowRelease is partRelease returning a row, as pgstore's release
	// does for its wake-up call (a NULL when no waiter is queued), with
	// the channel as its third argument.
	partRowRelease = partRelease + `
RETURNING CASE WHEN token IS NOT NULL THEN $3::text END`
)

// pgParts are the parts' cycles, in the order they add up.
var pgParts = []*pgPart{
	{id: "row", label: "parts: the lease row alone (upsert, clear)", acquire: partRowAcquire, release: partRelease},
	{id: "fence", label: "parts: row + fence, a refusal returning nothing", acquire: partFenceOnlyAcquire, release: partRelease},
	{id: "ttl", label: "parts: row + fence + the holder's TTL on a refusal (pgstore without its queue)", acquire: partFenceAcquire, release: partRelease},
	{id: "returning", label: "parts: + the release returning a row, as pgstore's does", acquire: partFenceAcquire, release: partRowRelease, channel: true},
}

// appName is the application_name of the connections of lib's pool, by
// which backendCPU finds their server processes.
func appName(lib *library) string { return "lockbench " + lib.name }

// backendCPU sums the CPU time the server processes of the connections named
// app have used (on-CPU time from /proc/PID/schedstat, in nanoseconds: the
// server runs on this machine), and returns their sorted PIDs as who.
func backendCPU(ctx context.Context, admin *pgx.Conn, app string) (time.Duration, string, bool) {
	rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid", app)
	if err != nil {
		return 0, "", false
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(pids) == 0 {
		return 0, "", false
	}
	var sum time.Duration
	for _, pid := range pids {
		cpu, _, ok := pidCPU(int(pid))
		if !ok {
			return 0, "", false
		}
		sum += cpu
	}
	return sum, fmt.Sprint(pids), true
}

// warmPool holds n connections of pool at once (dialling them), runs use on
// each when given, and gives them back.
func warmPool(ctx context.Context, pool *pgxpool.Pool, n int, use func(context.Context, *pgxpool.Conn) error) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if use != nil {
			if err := use(ctx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// errgroup runs functions and keeps the first error: the little of
// golang.org/x/sync/errgroup this file needs.
type errgroup struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

func (g *errgroup) Go(f func() error) {
	g.wg.Go(func() {
		if err := f(); err != nil {
			g.mu.Lock()
			g.errs = append(g.errs, err)
			g.mu.Unlock()
		}
	})
}

func (g *errgroup) Wait() error {
	g.wg.Wait()
	return errors.Join(g.errs...)
}
