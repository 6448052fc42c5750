package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/pgjobs"
	"github.com/leasehold/leasehold/drill/report"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// The drill on real servers: locks in a Redis that is restarted without
// persistence during the run and reached through a proxy that freezes
// (a silent partition), jobs fenced in PostgreSQL, every fault type. No
// stale write may get through, even with fences issued after Redis lost its
// data.
func TestDrillOnRedisAndPostgres(t *testing.T) {
	cfg, _, _ := drillOnRealServers(t)
	cfg.Jobs = 50 // the default time scale: TTL 600 ms, 200 ms of SLO slack
	rep, err := drill.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	_ = rep.WriteText(&out)
	t.Log("\n" + out.String())
	if !rep.Safe() {
		t.Fatalf("safety violations on real servers:\n%s", out.String())
	}
	checkTakeover(t, rep)
	if rep.Faults["store-restart"] == 0 || rep.Faults["silent-partition"] == 0 || rep.StaleRefused == 0 {
		t.Fatalf("the drill proved little: %d restarts, %d partitions, %d stale writes refused",
			rep.Faults["store-restart"], rep.Faults["silent-partition"], rep.StaleRefused)
	}
}

// drillOnRealServers returns a drill's configuration on real servers: locks
// in a fresh redis-server reached through a proxy that can freeze, jobs in
// a fresh table of the shared PostgreSQL, and every
// fault type: the worker faults three times as often, since a partition
// cuts every worker off and too many would leave no takeover to measure.
// It also returns the address the workers reach Redis on and the table.
func drillOnRealServers(t *testing.T) (cfg drill.Config, redisAddr, table string) {
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	store, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Thaw(); _ = store.Close(); _ = client.Close() })
	table = unique("drill_jobs_")
	jobs, err := pgjobs.New(pool, table)
	if err != nil {
		t.Fatal(err)
	}
	fs := append(append(append(faults.Default(), faults.Default()...), faults.Default()...),
		faults.StoreRestart{Restart: srv.Restart},
		faults.Partition{Freeze: proxy.Freeze, Thaw: proxy.Thaw})
	return drill.Config{
		Store: store, StoreName: "redis via proxy " + proxy.Addr(),
		Storage: jobs, StorageName: "postgres", Faults: fs,
	}, proxy.Addr(), table
}

// The negative control on real servers: without fencing, PostgreSQL accepts
// stale writes, and the drill says so.
func TestDrillOnRealServersCanFail(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})
	store, err := redisstore.New(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close(); _ = client.Close() })
	jobs := newJobs(t)
	rep, err := drill.Run(t.Context(), drill.Config{Store: store, Storage: jobs, TimeScale: 0.005, Jobs: 40, NoFencing: true})
	if err != nil {
		t.Fatal(err)
	}
	checkStaleWritesReported(t, rep)
}

// newJobs is the drill's fenced job storage in a table of the test's own in
// the shared PostgreSQL.
func newJobs(t *testing.T) *pgjobs.Storage {
	t.Helper()
	jobs, err := pgjobs.New(pool, unique("drill_jobs_"))
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

// checkStaleWritesReported is the negative control's verdict: with fencing
// off, the drill must report stale writes the storage accepted.
func checkStaleWritesReported(t *testing.T, rep *report.Report) {
	t.Helper()
	n := 0
	for _, v := range rep.Violations {
		if v.Check == check.StaleWrite {
			n++
		}
	}
	t.Logf("with fencing off: %d stale writes accepted, %d critical sections, faults %v", n, rep.CriticalSections, rep.Faults)
	if n == 0 {
		t.Fatalf("no stale write reported with fencing off: %+v", rep.Violations)
	}
}

// Environment of a worker process started by TestDrillWorkerProcesses:
// where its store and job storage are.
const (
	envWorkerRedis = "E2E_DRILL_REDIS"
	envWorkerPG    = "E2E_DRILL_POSTGRES"
	envWorkerTable = "E2E_DRILL_TABLE"
)

// serveDrillWorker is this test binary run as a drill's worker process (see
// TestMain): it serves the drill on the Redis and PostgreSQL its
// environment names and returns the exit code.
func serveDrillWorker(spec drill.WorkerSpec, specErr error) int {
	if specErr != nil {
		fmt.Fprintln(os.Stderr, specErr)
		return 2
	}
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv(envWorkerRedis), ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer store.Close()
	pool, err := pgxpool.New(ctx, os.Getenv(envWorkerPG))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	jobs, err := pgjobs.New(pool, os.Getenv(envWorkerTable))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := drill.ServeWorker(ctx, spec, store, jobs, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// The drill at scale with its workers as separate OS processes (this test
// binary, re-run): more than 2,000 critical sections on a real Redis,
// reached through a proxy that freezes (silent partitions) and restarted
// without persistence, with the jobs fenced in PostgreSQL; worker processes
// are SIGSTOPped past their TTL and SIGKILLed in their critical sections. No
// safety violation; takeover p99 reported against TTL + one renewal interval.
func TestDrillWorkerProcesses(t *testing.T) {
	cfg, redisAddr, table := drillOnRealServers(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Processes, cfg.Jobs, cfg.TimeScale, cfg.Timeout = drillProcesses, drillProcessJobs, drillProcessScale, 4*time.Minute
	cfg.StartWorker = func() *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorkerRedis+"="+redisAddr, envWorkerPG+"="+pgSrv.DSN(), envWorkerTable+"="+table)
		return cmd
	}
	rep, err := drill.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	_ = rep.WriteText(&out)
	t.Log("\n" + out.String())
	if !rep.Safe() {
		t.Fatalf("safety violations with worker processes:\n%s", out.String())
	}
	checkTakeover(t, rep)
	switch {
	case rep.CriticalSections >= drillProcessSections:
	case unfinished(rep):
		// Time ran out on a slow machine: reported, as the drill does.
		t.Logf("%d critical sections, fewer than a full run's %d: jobs unfinished", rep.CriticalSections, drillProcessSections)
	default:
		t.Errorf("%d critical sections with every job done, want at least %d", rep.CriticalSections, drillProcessSections)
	}
	for _, f := range cfg.Faults {
		if rep.Faults[f.Name()] == 0 {
			t.Errorf("fault %s was never injected", f.Name())
		}
	}
	if rep.Effects["pause-past-ttl"] == 0 || rep.Effects["kill-holder"] == 0 || rep.StaleRefused == 0 || rep.Ops["release not owned"] == 0 {
		t.Errorf("the drill proved little: %d SIGSTOPs, %d SIGKILLs, %d stale writes refused, %d stale releases refused",
			rep.Effects["pause-past-ttl"], rep.Effects["kill-holder"], rep.StaleRefused, rep.Ops["release not owned"])
	}
}

// The scale of TestDrillWorkerProcesses: 16 processes (8 start jobs, 8
// take over), TTL 300 ms; 1,400 jobs make about 1.6 critical sections each
// (takeovers, renewal failures), a margin over the 2,000 sections the test
// asserts (docs/design.md §9 asks for thousands). About 80 s on 2 cores.
const (
	drillProcesses       = 16
	drillProcessJobs     = 1400
	drillProcessScale    = 1.0 / 200
	drillProcessSections = 2000
)

// Worker processes that cannot run are replaced only as many times as there
// are workers; the drill then ends at once with its jobs unfinished, rather
// than starting processes until its timeout.
func TestDrillWorkerProcessesThatCannotRun(t *testing.T) {
	cfg, _, _ := drillOnRealServers(t)
	cfg.Processes, cfg.Jobs, cfg.Faults = 2, 5, []faults.Fault{}
	var started atomic.Int32 // replacements are started from the drill's goroutines
	cfg.StartWorker = func() *exec.Cmd { started.Add(1); return exec.Command("false") }
	rep, err := drill.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := int(started.Load()); n != 2*cfg.Processes {
		t.Errorf("%d worker processes started, want %d: the workers and one replacement each", n, 2*cfg.Processes)
	}
	if !unfinished(rep) || !rep.Safe() || rep.Effects["worker-crashed"] != 2*cfg.Processes {
		t.Fatalf("safety violations %+v, liveness shortfalls %+v, %d crashes recorded; want jobs unfinished alone and %d crashes",
			rep.Violations, rep.Shortfalls, rep.Effects["worker-crashed"], 2*cfg.Processes)
	}
}

// checkTakeover requires takeovers to have been measured and reports their
// time against the SLO, and the drill's liveness shortfalls: figures, not
// assertions. A loaded 2-core machine delays every process of a drill (at
// load average 10 to 19, a p99 of 542 ms against 400 ms, and a job left
// unfinished); the drill reports that as liveness (exit 3), never as a
// safety failure, and so do the tests.
func checkTakeover(t *testing.T, rep *report.Report) {
	t.Helper()
	t.Logf("takeover p50 %v, p99 %v, SLO %v (%d takeovers); liveness shortfalls %v",
		rep.TakeoverP50.Round(time.Millisecond), rep.TakeoverP99.Round(time.Millisecond), rep.TakeoverSLO, rep.Takeovers, rep.Shortfalls)
	if rep.Takeovers == 0 {
		t.Fatal("no takeover was measured: no holder was paused or killed, or none was taken over")
	}
}

// unfinished reports whether the drill ended with jobs not done, a liveness
// shortfall: then the counts of what it did are smaller than a full run's.
func unfinished(rep *report.Report) bool {
	for _, s := range rep.Shortfalls {
		if s.Check == check.Unfinished {
			return true
		}
	}
	return false
}

// logSlowTakeovers explains each takeover over the SLO: the store-wide
// faults it overlapped and the failed lock calls on its key meanwhile, so
// that a slow takeover on a replicated store can be traced to its cause.
func logSlowTakeovers(t *testing.T, rep *report.Report) {
	t.Helper()
	h := rep.History
	for _, tk := range check.ListTakeovers(h) {
		if tk.DuringOutage || tk.Took() <= rep.TakeoverSLO {
			continue
		}
		from, to := tk.Event.At, tk.Acquire.Return
		var b strings.Builder
		fmt.Fprintf(&b, "takeover of %s took %v (%s of worker %d at +%v; worker %d's acquire called +%v)",
			tk.Event.Key, tk.Took().Round(time.Millisecond), tk.Event.Fault, tk.Event.Worker,
			from.Sub(h.Started).Round(time.Millisecond), tk.Acquire.Worker, tk.Acquire.Call.Sub(from).Round(time.Millisecond))
		for _, f := range h.Faults {
			if f.From.Before(to) && from.Before(f.To) {
				fmt.Fprintf(&b, "\n  fault %s (worker %d) from +%v to +%v", f.Name, f.Worker, f.From.Sub(from).Round(time.Millisecond), f.To.Sub(from).Round(time.Millisecond))
			}
		}
		ops, okOps := 0, 0
		for _, o := range h.Ops {
			if o.Call.After(from) && o.Return.Before(to) {
				ops++
				if o.OK {
					okOps++
				}
			}
		}
		fmt.Fprintf(&b, "\n  %d calls by all workers meanwhile, %d of them succeeded", ops, okOps)
		for _, o := range h.Ops {
			if o.Key == tk.Event.Key && !o.OK && o.Call.Before(to) && from.Before(o.Return) {
				fmt.Fprintf(&b, "\n  %s by worker %d failed: +%v for %v: %s", o.Kind, o.Worker,
					o.Call.Sub(from).Round(time.Millisecond), o.Return.Sub(o.Call).Round(time.Millisecond), o.Err)
			}
		}
		t.Log(b.String())
	}
}

// faultTurns is the part a store fault of the multi-node tests shares:
// its kinds take turns, one per injection, and its Name is the kind of its
// latest injection, which the drill reads right after Inject and Heal, so
// the report counts each kind apart (only one is on at a time).
type faultTurns struct {
	kinds []string
	turn  int    // injections so far
	kind  string // of the latest injection
}

func (f *faultTurns) Name() string {
	if f.kind == "" {
		return f.kinds[0]
	}
	return f.kind
}

func (f *faultTurns) Available(faults.Env) bool { return true }

// next is the kind of the coming injection.
func (f *faultTurns) next() string { return f.kinds[f.turn%len(f.kinds)] }

// injected records an injection of kind.
func (f *faultTurns) injected(kind string) { f.turn, f.kind = f.turn+1, kind }

// runMultiNode runs a drill on a multi-node topology, then settle (which
// waits for the topology's background fault work), and logs the report,
// which it returns with its text.
func runMultiNode(t *testing.T, cfg drill.Config, settle func()) (*report.Report, string) {
	t.Helper()
	start := time.Now()
	rep, err := drill.Run(t.Context(), cfg)
	settle()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	_ = rep.WriteText(&out)
	t.Logf("drill took %v\n%s", time.Since(start).Round(time.Millisecond), out.String())
	return rep, out.String()
}
