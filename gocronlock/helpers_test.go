package gocronlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/store/redisstore/redisfence"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// backend is a real store server: stores reached through an address of the
// caller's (a fault proxy), and fenced storage on connections of its own.
type backend struct {
	addr     string                                                          // the server's
	store    func(t *testing.T, addr string) driver.Store                    // closed at the test's end
	register func(t *testing.T, name string, mode fence.Mode) fence.Register // a fresh one
}

func redisBackend(t *testing.T) backend {
	srv := testserver.StartRedis(t)
	return backend{
		addr: srv.Addr(),
		store: func(t *testing.T, addr string) driver.Store {
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			s, err := redisstore.New(rdb)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(); _ = rdb.Close() })
			return s
		},
		register: func(t *testing.T, name string, mode fence.Mode) fence.Register {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			w, err := redisfence.New(rdb, fence.WithMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			return prefixed{w, name + ":"}
		},
	}
}

func postgresBackend(t *testing.T) backend {
	srv := testserver.StartPostgres(t)
	direct := pgPool(t, srv.DSN())
	ps, err := pgstore.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = ps.Close()
	return backend{
		addr: srv.Addr(),
		store: func(t *testing.T, addr string) driver.Store {
			s, err := pgstore.New(pgPool(t, strings.Replace(srv.DSN(), srv.Addr(), addr, 1)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		register: func(t *testing.T, name string, mode fence.Mode) fence.Register {
			r, err := pgfence.NewRegister(direct, "register_"+name, fence.WithMode(mode))
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			return r
		},
	}
}

func pgPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// prefixed keeps a test's register keys apart on a shared server.
type prefixed struct {
	*redisfence.Writer
	prefix string
}

func (p prefixed) Write(ctx context.Context, key string, f int64, v []byte) error {
	return p.Writer.Write(ctx, p.prefix+key, f, v)
}

// node is one scheduler of a test, with its own store connections through
// its own fault proxy.
type node struct {
	id     int
	proxy  *testserver.Proxy
	client *leasehold.Client
	sched  gocron.Scheduler

	mu       sync.Mutex
	lockErrs int
}

// newNode makes scheduler id's client on b through a proxy of its own. The
// proxy closes before the store at the test's end, so that a frozen
// connection never holds the teardown up.
func newNode(t *testing.T, b backend, id int) *node {
	n := &node{id: id, proxy: testserver.StartProxy(t, b.addr)}
	store := b.store(t, n.proxy.Addr())
	n.client = leasehold.New(store, leasehold.WithIdentity(fmt.Sprintf("scheduler-%d", id)))
	t.Cleanup(func() { _ = n.client.Close() })
	t.Cleanup(func() { _ = n.proxy.Close() })
	// A first lock opens the connections and loads the scripts, which a
	// loaded machine can take longer to do than a test's half minimum hold.
	l, err := n.client.TryAcquire(t.Context(), fmt.Sprintf("warm-up:%d", id), time.Second)
	if err != nil {
		t.Fatalf("scheduler %d: a first lock: %v", id, err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("scheduler %d: a first release: %v", id, err)
	}
	return n
}

func (n *node) lockErr() {
	n.mu.Lock()
	n.lockErrs++
	n.mu.Unlock()
}

func (n *node) lockErrors() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lockErrs
}

// run is one run of a job: who ran which slot, and its fenced write.
type run struct {
	node   int
	slot   time.Time     // the slot nearest the job's start, on the common clock
	offset time.Duration // from the slot on the scheduler's clock to the job's start
	at     time.Time     // when the job wrote
	fence  int64
	err    error // the write's, or the lease's
}

// history collects the runs of every scheduler.
type history struct {
	first time.Time // the first slot; the others follow every interval
	mu    sync.Mutex
	runs  []run
	added chan struct{}
}

func newHistory(first time.Time) *history {
	return &history{first: first, added: make(chan struct{}, 1)}
}

// begin is called by a job as it starts on node; the run is added by the
// returned func, with the job's fenced write. The slot is the one nearest
// the start: gocron's own account of it (JobSchedulingDelay) is stale after
// an Elector has skipped runs.
func (h *history) begin(node int) func(fence int64, err error) {
	now := time.Now()
	first := h.first.Add(time.Duration(node) * skew) // this scheduler's clock
	k := (now.Sub(first) + interval/2) / interval
	slot := h.first.Add(k * interval) // on the common clock, so that nodes compare
	offset := now.Sub(first.Add(k * interval))
	return func(fence int64, err error) {
		h.mu.Lock()
		h.runs = append(h.runs, run{node: node, slot: slot, offset: offset, at: time.Now(), fence: fence, err: err})
		h.mu.Unlock()
		select {
		case h.added <- struct{}{}:
		default:
		}
	}
}

func (h *history) snapshot() []run {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.runs)
}

// waitFor waits until ok holds for the runs, or fails the test after limit.
func (h *history) waitFor(t *testing.T, what string, limit time.Duration, ok func([]run) bool) []run {
	t.Helper()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		runs := h.snapshot()
		if ok(runs) {
			return runs
		}
		select {
		case <-h.added:
		case <-deadline.C:
			t.Fatalf("%s: not within %v; runs: %s", what, limit, describe(runs))
		}
	}
}

func describe(runs []run) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "\n  node %d slot %s%+v fence %d err %v", r.node, r.slot.Format("15:04:05.000"), r.offset.Round(time.Millisecond), r.fence, r.err)
	}
	return b.String()
}

// slots counts the distinct slots run, by nodes other than except, since.
func slots(runs []run, since time.Time, except int) int {
	seen := map[time.Time]bool{}
	for _, r := range runs {
		if r.node != except && !r.at.Before(since) {
			seen[r.slot] = true
		}
	}
	return len(seen)
}

// checkSlots fails the test for a slot run twice.
func checkSlots(t *testing.T, runs []run) {
	t.Helper()
	by := map[time.Time][]run{}
	for _, r := range runs {
		by[r.slot] = append(by[r.slot], r)
	}
	for slot, rs := range by {
		if len(rs) < 2 {
			continue
		}
		// The minimum hold promises one run a slot to attempts at most half
		// of it apart; a run that started later than that (a timer firing
		// late on a loaded machine) is outside the promise: reported, not a
		// failure.
		late := time.Duration(0)
		nodes := make([]int, len(rs))
		for i, r := range rs {
			nodes[i], late = r.node, max(late, r.offset.Abs())
		}
		if late > minHold/2 {
			t.Logf("slot %s run %d times, by nodes %v, one %v late (beyond half the %v hold: outside the promise)",
				slot.Format("15:04:05.000"), len(rs), nodes, late.Round(time.Millisecond), minHold)
			continue
		}
		t.Errorf("slot %s run %d times, by nodes %v, all within %v of it", slot.Format("15:04:05.000"), len(rs), nodes, late.Round(time.Millisecond))
	}
}

// fencesInOrder returns the fences of the runs in write order.
func fencesInOrder(runs []run) []int64 {
	rs := slices.Clone(runs)
	slices.SortStableFunc(rs, func(a, b run) int { return a.at.Compare(b.at) })
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.fence
	}
	return out
}
