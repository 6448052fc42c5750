package drill

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/jobs"
	"github.com/leasehold/leasehold/drill/report"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/memstore"
)

// Config configures a drill. The zero value runs the default drill on an
// in-process memstore.
type Config struct {
	// Store holds the job locks. Default: a new memstore.
	Store driver.Store
	// StoreName names it in the report. Default: "memory".
	StoreName string
	// Storage holds the jobs' states, fenced. Default: jobs.NewMemory().
	Storage jobs.Storage
	// StorageName names it in the report. Default: "memory".
	StorageName string
	// Workers is the number of concurrent workers, 2 to MaxWorkers.
	// Default: 8. At most half of them start new jobs at once: the rest is
	// the headroom that takes over jobs whose owner was paused, killed or
	// fenced, as soon as their lease is free, so that takeover time
	// measures the lock, not a queue.
	Workers int
	// Jobs is the number of jobs, each moved from queued to done, 1 to
	// MaxJobs. Default: 100: with 4 new jobs at a time and critical
	// sections of TTL/12 to 1.5 × TTL (0.8 TTL on average), about 12
	// seconds at the default time scale, long enough for some eighty
	// faults.
	Jobs int
	// TimeScale compresses the per-item lock timings of docs/design.md §5
	// (Client.Hold: TTL 60 s, renewal every 20 s). Default: 1/100, so the
	// TTL is 600 ms and a drill takes seconds. In [MinTimeScale, 1].
	TimeScale float64
	// Faults are injected in turn, one every TTL/4, each healed a TTL
	// later (so up to four are active at once). Default: faults.Default();
	// an empty, non-nil slice injects none.
	Faults []faults.Fault
	// UnsafeRelease is a negative control: releases delete the key whoever
	// holds it. The checkers must report wrong-owner releases.
	UnsafeRelease bool
	// NoFencing is a negative control: the job storage accepts any fence.
	// The checkers must report stale writes.
	NoFencing bool
	// LinearizeTimeout bounds the linearizability check of the history;
	// not negative. Default: check.DefaultLinearizeTimeout (30 s), which
	// documents its reason.
	LinearizeTimeout time.Duration
	// Timeout bounds the whole drill, at most MaxTimeout. Default: 2
	// minutes.
	Timeout time.Duration
	// TakeoverSLO bounds the takeover p99; not negative. Default:
	// check.DefaultTakeoverSLO(TTL), TTL + one renewal interval.
	TakeoverSLO time.Duration
	// Progress, when set, receives the drill's progress: see
	// ProgressTerminal.
	Progress io.Writer
	// ProgressTerminal redraws one line in place (carriage returns) every
	// 250 ms, for a terminal; otherwise Progress gets a whole line every
	// PlainProgressInterval and a last one at the end.
	ProgressTerminal bool
	// Logger receives what the drill tells an operator beside its report:
	// a worker process that failed (with the end of its standard error)
	// and a replacement that could not be started. Default: nothing is
	// logged.
	Logger *slog.Logger

	// Processes, when not 0, runs the workers as this many separate OS
	// processes, 2 to MaxProcesses (instead of Workers goroutines), so
	// that a pause is a real SIGSTOP and a kill a real SIGKILL. The lock
	// store and the job storage must then be shared servers (not
	// memstore, not the in-process storage), and StartWorker must be set.
	Processes int
	// StartWorker returns the command that runs one worker process: a
	// program that calls ServeWorker with WorkerSpecFromEnv and the same
	// store and storage as this drill (leasehold's CLI runs itself as
	// "leasehold drill-worker"). The drill adds the spec to the command's
	// environment and takes its standard input and output. Give the
	// worker its store's address in its environment too, not in its
	// arguments: every local user can read a process's command line (ps),
	// and an address may hold a password.
	StartWorker func() *exec.Cmd
}

// Bounds of Config's numbers, as leasehold's CLI has them: past them a
// drill is a mistake that would exhaust memory, processes or patience, and
// Run refuses it with an *ArgumentError naming the field.
const (
	// MaxWorkers bounds Workers: each is a goroutine with its own lock
	// traffic; the default is 8, and 1000 is far past what a drill needs.
	MaxWorkers = 1000
	// MaxProcesses bounds Processes: each is an OS process with its own Go
	// runtime and store and PostgreSQL connections.
	MaxProcesses = 16
	// MaxJobs bounds Jobs: 100 take about 12 s at the default time scale,
	// so 10,000 are about 20 minutes of history kept in memory.
	MaxJobs = 10_000
	// MaxTimeout bounds Timeout: a drill is a game day.
	MaxTimeout = 24 * time.Hour
	// MinTimeScale bounds TimeScale from below: it makes the 60 s TTL
	// 6 ms, not much above a store's round trip.
	MinTimeScale = 1.0 / 10_000
)

// KeyPrefix starts every key the drill locks (drill:jobs:42): the drill's
// own namespace, apart from any other locks in the store.
const KeyPrefix = "drill:jobs:"

// JobKey is the lock key of job i, 0 ≤ i < Config.Jobs.
func JobKey(i int) string { return fmt.Sprintf("%s%d", KeyPrefix, i) }

// run is one drill in progress.
type run struct {
	cfg     Config
	ttl     time.Duration
	work    time.Duration // the longest critical section's work; each draws from [work/18, work]
	poll    time.Duration // a worker's pause when no job is free; doubled after each store error in a row, up to the TTL (failPause)
	jobKeys []string
	jobs    jobs.Storage
	refused atomic.Int64 // stale claims and writes refused
	rec     *history.Recorder
	out     *lineWriter  // in a worker process: the pipe to the drill
	log     *slog.Logger // Config.Logger, or one that discards
	knobs   *knobs

	slots chan struct{} // the headroom: sections on new jobs at once

	mu      sync.Mutex
	workers []*worker
	nextID  int
	failing atomic.Pointer[worker]
	wg      sync.WaitGroup

	procs       *procs // the worker processes; nil when the workers are goroutines
	failingProc atomic.Pointer[proc]

	sections atomic.Int64
	injected map[string]int
	outages  []history.Window // store-wide faults that cut every worker off (partitions)
	// faultSpans are the faults injected, each from injection to heal;
	// written by injectFaults only, read by report after it returned.
	faultSpans []history.FaultSpan
}

// Run runs a drill and returns its report; the report's Violations say
// whether the lock and the fence held, its Shortfalls whether takeovers and
// jobs kept pace. The error is for a drill that could not run at all.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	if ctx == nil {
		return nil, &leasehold.ArgumentError{Arg: "ctx", Reason: "nil"}
	}
	if cfg.Store == nil {
		cfg.Store, cfg.StoreName = memstore.New(), "memory"
	}
	if cfg.StoreName == "" {
		cfg.StoreName = "custom"
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.Jobs == 0 {
		cfg.Jobs = 100
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 0.01
	}
	if cfg.Faults == nil {
		cfg.Faults = faults.Default()
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Storage == nil {
		cfg.Storage, cfg.StorageName = jobs.NewMemory(), "memory"
	}
	if cfg.StorageName == "" {
		cfg.StorageName = "custom"
	}
	// The bounds come before Processes replaces Workers, so that each
	// message names the field that was given.
	switch {
	case cfg.Processes < 0 || cfg.Processes > MaxProcesses:
		return nil, &leasehold.ArgumentError{Arg: "processes", Reason: fmt.Sprintf("%d is not 0 (workers in this process) or 2 to %d", cfg.Processes, MaxProcesses)}
	case cfg.Processes == 1:
		return nil, &leasehold.ArgumentError{Arg: "processes", Reason: "1: a takeover needs at least 2"}
	case cfg.Processes == 0 && cfg.Workers < 2:
		return nil, &leasehold.ArgumentError{Arg: "workers", Reason: fmt.Sprintf("%d: a takeover needs at least 2", cfg.Workers)}
	case cfg.Processes == 0 && cfg.Workers > MaxWorkers:
		return nil, &leasehold.ArgumentError{Arg: "workers", Reason: fmt.Sprintf("%d is more than %d", cfg.Workers, MaxWorkers)}
	case cfg.Jobs < 1 || cfg.Jobs > MaxJobs:
		return nil, &leasehold.ArgumentError{Arg: "jobs", Reason: fmt.Sprintf("%d is not in [1, %d]", cfg.Jobs, MaxJobs)}
	case cfg.Timeout < 0 || cfg.Timeout > MaxTimeout:
		return nil, &leasehold.ArgumentError{Arg: "timeout", Reason: fmt.Sprintf("%v is not in (0, %v]", cfg.Timeout, MaxTimeout)}
	case cfg.TakeoverSLO < 0:
		return nil, &leasehold.ArgumentError{Arg: "takeover SLO", Reason: fmt.Sprintf("%v is not positive", cfg.TakeoverSLO)}
	case cfg.LinearizeTimeout < 0:
		return nil, &leasehold.ArgumentError{Arg: "linearize timeout", Reason: fmt.Sprintf("%v is negative", cfg.LinearizeTimeout)}
	}
	if cfg.Processes > 0 {
		cfg.Workers = cfg.Processes
	}
	switch {
	case cfg.Processes > 0 && cfg.StartWorker == nil:
		return nil, &leasehold.ArgumentError{Arg: "processes", Reason: "needs StartWorker, the command that runs a worker process"}
	case cfg.Processes > 0 && isMemory(cfg.Store, cfg.Storage):
		return nil, &leasehold.ArgumentError{Arg: "processes", Reason: "worker processes cannot share the in-process memory store or job storage; give a Redis, etcd or PostgreSQL store and a PostgreSQL job storage"}
	}
	ttl, err := scaledTTL(cfg.TimeScale)
	if err != nil {
		return nil, err
	}
	r := newRun(cfg, ttl, nil)
	r.slots = make(chan struct{}, max(1, cfg.Workers/2))
	if err := r.jobs.Init(ctx, r.jobKeys, cfg.NoFencing); err != nil {
		return nil, fmt.Errorf("drill: job storage: %w", err)
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()
	if cfg.Processes > 0 {
		if err := r.startProcs(ctx); err != nil {
			return nil, err
		}
	} else {
		for range cfg.Workers {
			r.spawn(ctx)
		}
	}
	r.injectFaults(ctx)
	if r.procs != nil {
		r.procs.stopAll()
	}
	cancel()
	r.wg.Wait()
	rep := r.report(time.Since(start))
	// Jobs left undone because the caller stopped the drill are no
	// liveness shortfall of the lock.
	rep.Interrupted = parent.Err() != nil &&
		slices.ContainsFunc(rep.Shortfalls, func(v check.Violation) bool { return v.Check == check.Unfinished })
	return rep, nil
}

// scaledTTL is the per-item path's 60 s TTL (docs/design.md §5) at scale.
func scaledTTL(scale float64) (time.Duration, error) {
	if !(scale >= MinTimeScale && scale <= 1) { // NaN too
		return 0, &leasehold.ArgumentError{Arg: "time scale", Reason: fmt.Sprintf("%v is not in [%v, 1]", scale, MinTimeScale)}
	}
	ttl := time.Duration(float64(60*time.Second) * scale)
	if err := driver.ValidateTTL(ttl); err != nil {
		return 0, fmt.Errorf("drill: time scale %v gives %w", scale, err)
	}
	return ttl, nil
}

// newRun returns a run of cfg, defaults applied, before its workers start;
// out is set in a worker process.
func newRun(cfg Config, ttl time.Duration, out *lineWriter) *run {
	r := &run{
		cfg:      cfg,
		ttl:      ttl,
		work:     ttl * 3 / 2,
		poll:     ttl / 20,
		out:      out,
		knobs:    &knobs{unsafeRelease: cfg.UnsafeRelease},
		injected: make(map[string]int),
		jobs:     cfg.Storage,
		log:      cfg.Logger,
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if out != nil {
		r.rec = history.NewRecorder(out)
	} else {
		r.rec = history.NewRecorder(nil)
	}
	for i := range cfg.Jobs {
		r.jobKeys = append(r.jobKeys, JobKey(i))
	}
	return r
}

// isMemory reports whether the store or the storage lives in this process.
func isMemory(s driver.Store, st jobs.Storage) bool {
	_, memStore := s.(*memstore.Store)
	_, memJobs := st.(*jobs.Memory)
	return memStore || memJobs
}

// report checks the run's history and reports.
func (r *run) report(elapsed time.Duration) *report.Report {
	writes, logErr := r.jobs.Log(context.Background())
	h := r.rec.History()
	h.Outages, h.Faults = r.outages, r.faultSpans
	res := check.Run(check.Input{
		History: h, Writes: writes, WritesErr: logErr, TTL: r.ttl, TakeoverSLO: r.cfg.TakeoverSLO,
		Jobs: r.cfg.Jobs, Unfinished: r.remaining(context.Background()), LinearizeTimeout: r.cfg.LinearizeTimeout,
	})
	rep := &report.Report{
		Store: r.cfg.StoreName, Storage: r.cfg.StorageName, Workers: r.cfg.Workers, Jobs: r.cfg.Jobs, TTL: r.ttl, Duration: elapsed,
		CriticalSections: r.sections.Load(), Faults: maps.Clone(r.injected), WritesAccepted: len(writes),
		StaleRefused: int(r.refused.Load()), UnsafeRelease: r.cfg.UnsafeRelease, NoFencing: r.cfg.NoFencing,
	}
	rep.Fill(h, res)
	return rep
}
