package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/pgjobs"
	"github.com/leasehold/leasehold/drill/report"
)

// drillCommand is the game day: see package drill.
func (a *app) drillCommand() *cobra.Command {
	var (
		cfg       drill.Config
		timeScale string
		out       *outputFlags
		jobsPG    string
		htmlPath  string
		quiet     bool
	)
	const jobsTable = "drill_jobs"
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Run the game day: workers, faults, and checkers that prove no stale write got through",
		Long: `drill runs workers that take job locks and move jobs through their states on
fenced storage while faults are injected (a worker paused past its TTL, renewal
failures, a killed holder, store latency), records every operation, and checks
safety: no stale write accepted, no release or renewal by a superseded owner,
no job terminal twice, a linearizable history; and liveness: takeover within
--takeover-slo (default TTL + one renewal interval), every job done. The
summary's "safety violations" line counts the first (it must be 0); its
"liveness shortfalls" line the second, which a slow machine may miss.

It runs on an in-process memory store unless a store is given with --redis,
--etcd or --postgres for the locks; the jobs' fenced storage is in-process
unless --jobs-postgres names a PostgreSQL (tables drill_jobs and
drill_jobs_writes are dropped and created there). Lock
timings are the per-item path's (TTL 60 s, renew 20 s), scaled by
--time-scale. etcd holds a lease for whole seconds, at least its minimum
lease TTL (2 s with its defaults): on --etcd the default time scale is
raised to make the TTL that lease, a shorter --time-scale is refused, and
the default takeover SLO allows 500 ms more (etcd's lessor frees expired
leases every 500 ms). --unsafe-release and --no-fencing switch a protection off: the
drill must then report violations, which proves it can fail. --report writes
the report as one self-contained HTML page as well: a timeline of the leases
per worker, the faults and the refused writes.

Progress goes to stderr: redrawn in place on a terminal, a plain line every
5 s otherwise, none with --quiet or --json. On a real store the drill then
releases the leases it still holds and deletes its fence keys where the
store allows it; the summary's cleanup line says what is left and how to
remove it. While it runs it holds the lock drill:run on that store, so a
second drill on the same store is refused (exit 1), naming the first one's
holder: two drills would take each other's job locks.

Exit code 0: every check held; 1: a safety violation (stale write accepted,
wrong-owner release or renewal, a job terminal twice, a history that is not
linearizable, unreadable or not checked in time), or the drill could not run;
3: a liveness shortfall (takeover over the SLO, jobs not done in time) while
every safety check held; 2: a wrong command line. Interrupted (SIGINT,
SIGTERM), it reports what it ran and exits 1, or 1 for a violation found.
The summary's verdict line says which.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			jsonOut, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			scale, err := parseScale(timeScale)
			if err != nil {
				return usageError{err}
			}
			cfg.TimeScale = scale
			if err := checkDrillFlags(cfg); err != nil {
				return err
			}
			if flagSet(cmd.Flags(), "takeover-slo") && cfg.TakeoverSLO <= 0 {
				return usagef("--takeover-slo must be positive, not %v", cfg.TakeoverSLO)
			}
			// Every check that writes nothing comes before anything is
			// created, opened or written.
			if htmlPath != "" {
				if fi, err := os.Stat(htmlPath); err == nil && fi.IsDir() {
					return usagef("--report: %s is a directory", htmlPath)
				}
				if fi, err := os.Stat(filepath.Dir(htmlPath)); err != nil || !fi.IsDir() {
					return usagef("--report: %s: no such directory", filepath.Dir(htmlPath))
				}
			}
			if cfg.Processes > 0 && (!anyStoreFlag(cmd) || jobsPG == "") {
				return usagef("--processes needs a shared lock store (--redis, --etcd or --postgres) and --jobs-postgres: worker processes cannot share in-process ones")
			}
			if jobsPG != "" {
				if _, _, err := parsePostgres("--jobs-postgres", jobsPG, a.global.timeout); err != nil {
					return err
				}
			}
			var html *os.File
			if htmlPath != "" {
				// A temporary file beside the report, made before the drill
				// runs, so that a directory that cannot be written fails at
				// once; it replaces the report only once written, and a
				// report already there is left alone on any failure.
				if html, err = os.CreateTemp(filepath.Dir(htmlPath), "."+filepath.Base(htmlPath)+".*.tmp"); err != nil {
					return usagef("--report: %v", err)
				}
				defer func() {
					if html != nil { // never written
						_ = html.Close()
						_ = os.Remove(html.Name())
					}
				}()
			}
			var store *backend // a real store, to clean up after the drill
			if anyStoreFlag(cmd) {
				b, err := a.openBackend(cmd.Context(), cmd)
				if err != nil {
					return err
				}
				defer b.close()
				if err := fitTimeScale(cmd.Context(), b, &cfg, flagSet(cmd.Flags(), "time-scale"), timeScale); err != nil {
					return err
				}
				if !flagSet(cmd.Flags(), "takeover-slo") && b.expiryLag > 0 {
					// A stopped holder's lease ends up to expiryLag after
					// its TTL: without it the default SLO is missed on
					// etcd by design (takeover p99 1.7 s for 1.33 s).
					ttl := time.Duration(float64(drillBaseTTL) * cfg.TimeScale)
					cfg.TakeoverSLO = check.DefaultTakeoverSLO(ttl) + b.expiryLag
				}
				unlock, err := a.lockDrillRun(cmd.Context(), b)
				if err != nil {
					return err
				}
				defer unlock()
				cfg.Store, cfg.StoreName = b.store, b.String()
				store = b
			}
			if flagSet(cmd.Flags(), "jobs-postgres") {
				pool, err := openJobsPool(cmd, jobsPG, a.global.timeout)
				if err != nil {
					return err
				}
				defer pool.Close()
				if cfg.Storage, err = pgjobs.New(pool, jobsTable); err != nil {
					return err
				}
				cfg.StorageName = "postgres"
			}
			if cfg.Processes > 0 {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--processes: cannot find this program to start workers: %w", err)
				}
				cfg.StartWorker = a.drillWorkers(cmd, exe, store.kind, jobsPG, jobsTable)
			}
			if !jsonOut && !quiet {
				cfg.Progress, cfg.ProgressTerminal = a.stderr, isTerminal(a.stderr)
			}
			cfg.Logger = a.logger()
			rep, err := drill.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if store != nil {
				rep.Cleanup = a.cleanupDrill(cmd.Context(), store, cfg.Jobs)
			}
			if jobsPG != "" {
				// Kept as the evidence behind the report; the next drill drops them.
				rep.Cleanup = strings.TrimPrefix(rep.Cleanup+"; ", "; ") + fmt.Sprintf("the job tables %s and %s_writes stay in --jobs-postgres until the next drill", jobsTable, jobsTable)
			}
			write := rep.WriteText
			if jsonOut {
				write = rep.WriteJSON
			}
			if err := write(a.stdout); err != nil {
				return err
			}
			if html != nil {
				f := html
				html = nil
				if err := writeHTMLReport(f, rep); err != nil {
					_ = os.Remove(f.Name())
					return fmt.Errorf("--report: %w", err)
				}
				mode := os.FileMode(0o644) // CreateTemp makes it 0600; a report replaced keeps its mode
				if fi, err := os.Stat(htmlPath); err == nil {
					mode = fi.Mode().Perm()
				}
				if err := os.Chmod(f.Name(), mode); err != nil {
					_ = os.Remove(f.Name())
					return fmt.Errorf("--report: %w", err)
				}
				if err := os.Rename(f.Name(), htmlPath); err != nil {
					_ = os.Remove(f.Name())
					return fmt.Errorf("--report: %w", err)
				}
			}
			switch rep.ExitCode() {
			case report.ExitUnsafe: // == report.ExitInterrupted
				if rep.Safe() {
					return fmt.Errorf("drill interrupted before its jobs were done: every safety check held over the %d critical sections it ran", rep.CriticalSections)
				}
				return fmt.Errorf("drill found %d safety violations: unsafe", len(rep.Violations))
			case report.ExitSLOMissed:
				var details []string
				for _, s := range rep.Shortfalls {
					details = append(details, s.Detail)
				}
				return exitCodeError{ExitSLOMissed, fmt.Errorf("drill: every safety check held; liveness shortfalls: %s", strings.Join(details, "; "))}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Workers, "workers", 8, fmt.Sprintf("concurrent workers (2 to %d); half start new jobs, half are headroom that takes over orphaned jobs", MaxWorkers))
	f.IntVar(&cfg.Jobs, "jobs", 100, fmt.Sprintf("jobs to move from queued to done (1 to %d); 100 give about 150 critical sections and 120 faults at 1/100", MaxJobs))
	f.StringVar(&timeScale, "time-scale", "1/100", "compresses the production timings, in [1/10000, 1]: 1/100 turns the 60 s TTL into 600 ms")
	f.BoolVar(&cfg.UnsafeRelease, "unsafe-release", false, "negative control: releases delete the key whoever holds it; the drill must report violations")
	f.BoolVar(&cfg.NoFencing, "no-fencing", false, "negative control: the job storage accepts any fence; the drill must report violations")
	f.DurationVar(&cfg.Timeout, "drill-timeout", 2*time.Minute, fmt.Sprintf("bound on the whole drill (at most %v); jobs not done by then are a liveness shortfall, exit 3", MaxDrillTimeout))
	out = addOutputFlags(cmd, "the report, one object; no progress line")
	f.StringVar(&jobsPG, "jobs-postgres", "", "keep the jobs fenced in this PostgreSQL (URL or DSN) instead of in-process")
	f.IntVar(&cfg.Processes, "processes", 0, fmt.Sprintf("run the workers as this many separate OS processes, 2 to %d (real SIGSTOP and SIGKILL); needs a store flag and --jobs-postgres; replaces --workers", MaxProcesses))
	f.DurationVar(&cfg.TakeoverSLO, "takeover-slo", 0, "bound on the takeover p99, missed: a liveness shortfall, exit 3 (default TTL + one renewal interval, 800ms at 1/100: a stopped holder's lease ends, and a waiter takes over within one renewal interval)")
	f.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	f.StringVar(&htmlPath, "report", "", "also write the report as a self-contained HTML page to this file, violations or not")
	return cmd
}

// drillBaseTTL is the drill's TTL before --time-scale: the per-item job
// lock's of package drill.
const drillBaseTTL = time.Minute

// fitTimeScale makes the drill's TTL one that b really gives a lease. etcd
// rounds a lease up to whole seconds and to its minimum TTL (1.5 election
// timeouts, rounded up: 2 s with etcd's defaults), so at 1/100 a 600 ms
// drill TTL is a lease of 2 s: a worker paused for 1.5 TTL still holds its
// lock when it wakes up, so no stale write is ever tried and the fence goes
// untested, and every takeover waits for the longer lease and misses the
// SLO (exit 3). Without --time-scale (given false) the scale is raised to
// make the TTL the store's lease; a --time-scale that is too short is an
// error (exit 1: the store was asked).
func fitTimeScale(ctx context.Context, b *backend, cfg *drill.Config, given bool, timeScale string) error {
	if b.leaseTTL == nil {
		return nil
	}
	ttl := time.Duration(float64(drillBaseTTL) * cfg.TimeScale)
	lease, err := callFor(ctx, b, func(ctx context.Context) (time.Duration, error) { return b.leaseTTL(ctx, ttl) })
	if err != nil {
		return fmt.Errorf("asking for a lease of %v: %w", ttl, err)
	}
	if lease <= ttl {
		return nil
	}
	if given {
		return fmt.Errorf("--time-scale %s gives a TTL of %v, but %s holds a lease for %v (whole seconds, at least its minimum lease TTL): a worker paused past the drill's TTL would keep its lock, the fence would go untested and every takeover would miss the SLO; give --time-scale %d/60 or more, or leave it out for %d/60", timeScale, ttl, b, lease, lease/time.Second, lease/time.Second)
	}
	cfg.TimeScale = float64(lease) / float64(drillBaseTTL)
	return nil
}

// ExitSLOMissed is drill's exit code for a liveness shortfall (the takeover
// SLO missed, jobs unfinished) when every safety check held
// (report.ExitSLOMissed).
const ExitSLOMissed = report.ExitSLOMissed

// exitCodeError ends the command with its own exit code after its message.
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string { return e.err.Error() }
func (e exitCodeError) Unwrap() error { return e.err }

// isTerminal reports whether w is a terminal, where progress is redrawn
// in place; a file or pipe gets plain lines.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// envDrillJobs carries the job storage's DSN (--jobs-postgres) to a drill
// worker process.
const envDrillJobs = "LEASEHOLD_DRILL_JOBS_POSTGRES"

// drillWorkers returns the drill's StartWorker: this program, exe, run as
// drill-worker on the store of kind that cmd opened and on the job storage
// at jobsPG, in table jobsTable. The addresses, which may hold passwords,
// go in the worker's environment (the store's LEASEHOLD_* variable and
// envDrillJobs), which only its user can read; its command line, which
// every local user can (ps, /proc/PID/cmdline), has only the store's
// options given on cmd's.
func (a *app) drillWorkers(cmd *cobra.Command, exe, kind, jobsPG, jobsTable string) func() *exec.Cmd {
	args := []string{"drill-worker", "--jobs-table", jobsTable}
	for _, name := range []string{"etcd-prefix", "pg-table", "kube-namespace", "kube-prefix", "tls-ca", "tls-cert", "tls-key", "timeout"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			args = append(args, "--"+name+"="+f.Value.String())
		}
	}
	// The drill's environment without its address variables: another
	// store's (which a flag overrode) would be a second store to the worker.
	drop := map[string]bool{envDrillJobs: true}
	for _, s := range storeSources {
		drop[s.env] = true
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return drop[name]
	})
	g := &a.global
	addr := map[string]string{"redis": g.redisURL, "etcd": g.etcdEndpoints, "kube": g.kubeconfig, "postgres": g.postgresDSN}
	for _, s := range storeSources {
		if s.flag == kind {
			env = append(env, s.env+"="+addr[kind])
		}
	}
	env = append(env, envDrillJobs+"="+jobsPG)
	return func() *exec.Cmd {
		c := exec.Command(exe, args...)
		c.Env = slices.Clone(env)
		return c
	}
}

// drillWorkerCommand is one worker process of "drill --processes": started
// by the drill, never by hand, it serves the drill on its standard input
// and output (see drill.ServeWorker). Its store and job storage are in its
// environment (see drillWorkers).
func (a *app) drillWorkerCommand() *cobra.Command {
	var jobsTable string
	cmd := &cobra.Command{
		Use:    "drill-worker",
		Short:  "One worker process of drill --processes (started by the drill)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			spec, ok, err := drill.WorkerSpecFromEnv()
			switch {
			case err != nil:
				return err
			}
			jobsPG := os.Getenv(envDrillJobs)
			if !ok || jobsPG == "" {
				return usagef("drill-worker is started by drill --processes, which sets %s and %s", drill.WorkerEnv, envDrillJobs)
			}
			b, err := a.openBackend(cmd.Context(), cmd)
			if err != nil {
				return err
			}
			defer b.close()
			pool, err := openJobsPool(cmd, jobsPG, a.global.timeout)
			if err != nil {
				return err
			}
			defer pool.Close()
			jobs, err := pgjobs.New(pool, jobsTable)
			if err != nil {
				return err
			}
			return drill.ServeWorker(cmd.Context(), spec, b.store, jobs, os.Stdin, a.stdout)
		}),
	}
	cmd.Flags().StringVar(&jobsTable, "jobs-table", "drill_jobs", "the drill's job table")
	return cmd
}

// writeHTMLReport writes rep's HTML page to f and closes it.
func writeHTMLReport(f *os.File, rep *report.Report) error {
	err := rep.WriteHTML(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkDrillFlags checks drill's numbers: package drill would take a zero
// for its default.
func checkDrillFlags(cfg drill.Config) error {
	if cfg.Processes != 0 && (cfg.Processes < 2 || cfg.Processes > MaxProcesses) {
		return usagef("--processes must be 0 (workers in this process) or between 2 and %d, not %d", MaxProcesses, cfg.Processes)
	}
	return firstError(
		checkInt("--workers", cfg.Workers, 2, MaxWorkers),
		checkInt("--jobs", cfg.Jobs, 1, MaxJobs),
		checkDuration("--drill-timeout", cfg.Timeout, 1, MaxDrillTimeout),
	)
}

// openJobsPool opens the PostgreSQL pool of the drill's job storage.
func openJobsPool(cmd *cobra.Command, dsn string, timeout time.Duration) (*pgxpool.Pool, error) {
	cfg, where, err := parsePostgres("--jobs-postgres", dsn, timeout)
	if err != nil {
		return nil, err
	}
	// A refused address fails here at once, named as a store's is.
	if err := dialProbe(cmd.Context(), "--jobs-postgres", &backend{kind: "postgres", where: where, timeout: timeout}, pgAddrs(cfg)); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(cmd.Context(), cfg)
	if err != nil {
		return nil, usagef("--jobs-postgres: %v", err)
	}
	return pool, nil
}

// parseScale reads "1/100" or "0.01": decimal digits and a point only, so
// no sign ("-1/-100" is not a scale anyone means), exponent, hex or Inf.
func parseScale(s string) (float64, error) {
	num, den, isFraction := strings.Cut(s, "/")
	num, den = strings.TrimSpace(num), strings.TrimSpace(den)
	plain := func(p string) bool {
		return p != "" && strings.Trim(p, "0123456789.") == ""
	}
	n, err := strconv.ParseFloat(num, 64)
	if !plain(num) || (isFraction && !plain(den)) {
		err = fmt.Errorf("not a plain fraction")
	}
	if err == nil && isFraction {
		var d float64
		if d, err = strconv.ParseFloat(den, 64); err == nil && d != 0 {
			n /= d
		} else if err == nil {
			err = fmt.Errorf("division by zero")
		}
	}
	if err != nil || !(n >= MinTimeScale && n <= 1) {
		return 0, fmt.Errorf("--time-scale %q: want a fraction in [1/10000, 1] such as 1/100 or 0.01", s)
	}
	return n, nil
}

// anyStoreFlag reports whether a store was named on the command line.
func anyStoreFlag(cmd *cobra.Command) bool {
	for _, name := range []string{"redis", "etcd", "postgres", "kube"} {
		if flagSet(cmd.Flags(), name) {
			return true
		}
	}
	return false
}
