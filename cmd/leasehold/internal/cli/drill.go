package cli

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/pgjobs"
	"github.com/leasehold/leasehold/drill/report"
)

// drillCommand is the game day: see package drill.
func (a *app) drillCommand() *cobra.Command {
	var (
		cfg       drill.Config
		timeScale string
		jsonOut   bool
		jobsPG    string
		htmlPath  string
	)
	const jobsTable = "drill_jobs"
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Run the game day: workers, faults, and checkers that prove no stale write got through",
		Long: `drill runs workers that take job locks and move jobs through their states on
fenced storage while faults are injected (a worker paused past its TTL, renewal
failures, a killed holder, store latency), records every operation, and checks:
no stale write accepted, no release or renewal by a superseded owner, no job
terminal twice, takeover within TTL + one renewal interval, every job done.

It runs on an in-process memory store unless a store is given with --redis,
--etcd or --postgres for the locks; the jobs' fenced storage is in-process
unless --jobs-postgres names a PostgreSQL (tables drill_jobs and
drill_jobs_writes are dropped and created there). Lock
timings are the per-item path's (TTL 60 s, renew 20 s), scaled by
--time-scale. --unsafe-release and --no-fencing switch a protection off: the
drill must then report violations, which proves it can fail. --report writes
the report as one self-contained HTML page as well: a timeline of the leases
per worker, the faults and the refused writes.

Exit code 0: no violation; 1: violations (or the drill could not run).`,
		Args: cobra.NoArgs,
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			scale, err := parseScale(timeScale)
			if err != nil {
				return usageError{err}
			}
			cfg.TimeScale = scale
			if err := checkDrillFlags(cfg); err != nil {
				return err
			}
			var html *os.File
			if htmlPath != "" {
				// Created before the drill runs: a path that cannot be
				// written fails at once, not after the drill.
				if html, err = os.Create(htmlPath); err != nil {
					return usagef("--report: %v", err)
				}
				defer func() {
					if html != nil { // never written: leave no empty page
						_ = html.Close()
						_ = os.Remove(htmlPath)
					}
				}()
			}
			if anyStoreFlag(cmd) {
				b, err := a.openBackend(cmd.Context(), cmd)
				if err != nil {
					return err
				}
				defer b.close()
				cfg.Store, cfg.StoreName = b.store, b.String()
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
				if !anyStoreFlag(cmd) || jobsPG == "" {
					return usagef("--processes needs a shared lock store (--redis, --etcd or --postgres) and --jobs-postgres: worker processes cannot share in-process ones")
				}
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("--processes: cannot find this program to start workers: %w", err)
				}
				args := append([]string{"drill-worker", "--jobs-postgres", jobsPG, "--jobs-table", jobsTable}, storeArgs(cmd)...)
				cfg.StartWorker = func() *exec.Cmd { return exec.Command(exe, args...) }
			}
			if !jsonOut {
				cfg.Progress = a.stderr
			}
			rep, err := drill.Run(cmd.Context(), cfg)
			if err != nil {
				return err
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
					_ = os.Remove(htmlPath)
					return fmt.Errorf("--report: %w", err)
				}
			}
			if !rep.OK() {
				return fmt.Errorf("drill found %d violations", len(rep.Violations))
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
	f.DurationVar(&cfg.Timeout, "drill-timeout", 2*time.Minute, fmt.Sprintf("bound on the whole drill (at most %v)", MaxDrillTimeout))
	f.BoolVar(&jsonOut, "json", false, "print the report as JSON (no progress line)")
	f.StringVar(&jobsPG, "jobs-postgres", "", "keep the jobs fenced in this PostgreSQL (URL or DSN) instead of in-process")
	f.IntVar(&cfg.Processes, "processes", 0, fmt.Sprintf("run the workers as this many separate OS processes, 2 to %d (real SIGSTOP and SIGKILL); needs a store flag and --jobs-postgres; replaces --workers", MaxProcesses))
	f.StringVar(&htmlPath, "report", "", "also write the report as a self-contained HTML page to this file, violations or not")
	return cmd
}

// storeArgs are the store flags given on cmd's command line, for a worker
// process to open the same store.
func storeArgs(cmd *cobra.Command) []string {
	var args []string
	for _, name := range []string{"redis", "etcd", "postgres", "etcd-prefix", "pg-table", "timeout"} {
		if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
			args = append(args, "--"+name+"="+f.Value.String())
		}
	}
	return args
}

// drillWorkerCommand is one worker process of "drill --processes": started
// by the drill, never by hand, it serves the drill on its standard input
// and output (see drill.ServeWorker).
func (a *app) drillWorkerCommand() *cobra.Command {
	var jobsPG, jobsTable string
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
			case !ok:
				return usagef("drill-worker is started by drill --processes, which sets %s", drill.WorkerEnv)
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
	cmd.Flags().StringVar(&jobsPG, "jobs-postgres", "", "the drill's job storage")
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
	cfg, _, err := parsePostgres("--jobs-postgres", dsn, timeout)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(cmd.Context(), cfg)
	if err != nil {
		return nil, usagef("--jobs-postgres: %v", err)
	}
	return pool, nil
}

// parseScale reads "1/100" or "0.01".
func parseScale(s string) (float64, error) {
	num, den, isFraction := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err == nil && isFraction {
		var d float64
		if d, err = strconv.ParseFloat(strings.TrimSpace(den), 64); err == nil && d != 0 {
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
	for _, name := range []string{"redis", "etcd", "postgres"} {
		if flagSet(cmd.Flags(), name) {
			return true
		}
	}
	return false
}
