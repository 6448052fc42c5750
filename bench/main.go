// Command bench measures leasehold against redsync and bsm/redislock on one
// Redis and writes the report of docs/benchmarks.md and its chart.
//
// From the repository root:
//
//	cd bench && go run . --out ../docs/benchmarks.md
//
// It starts its own redis-server on a free loopback port (or uses --redis,
// which must be on loopback), measures raw round trips, uncontended
// acquire+release cycles, contended hand-off and round trips per operation
// (rueidislock among the contenders), hand-off and FIFO order with a client
// per worker, and acquire+release on etcd (against concurrency.Mutex) and
// PostgreSQL (against advisory locks), each on a server it starts,
// interleaving the contenders round by round, then how one process holds
// 10 000 to 100 000 leases kept alive by the Client's renewal engine (--only
// picks sections: --only scale runs that alone), and writes the markdown report
// to --out (standard output when empty) with the chart handoff.svg beside
// it. The defaults take about two minutes on 2 cores; progress goes to
// standard error. --help lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/leasehold/leasehold/bench/internal/lockbench"
)

// chartName is the chart's file name, written beside the report.
const chartName = "handoff.svg"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run parses args, measures, and writes the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := lockbench.DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.RedisURL, "redis", "", "Redis URL on a loopback address (default: start a redis-server on a free port of 127.0.0.1)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "duration of each raw and uncontended cell in each round")
	fs.DurationVar(&cfg.HandoffDuration, "handoff-duration", cfg.HandoffDuration, "measured duration of each contended cell in each round")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds over all cells; the report gives medians of rounds")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "duration of each cell in the unrecorded warm-up round (0: none)")
	fs.DurationVar(&cfg.Hold, "hold", cfg.Hold, "critical section of the contended runs")
	fs.DurationVar(&cfg.Wait, "wait", cfg.Wait, "bound of one waiting acquire in the contended runs")
	conc := fs.String("concurrency", joinInts(cfg.Concurrency), "comma-separated concurrency levels of the raw and uncontended runs")
	workers := fs.String("workers", joinInts(cfg.Workers), "comma-separated worker counts of the contended runs (each ≥ 2)")
	dbConc := fs.String("db-concurrency", joinInts(cfg.DBConcurrency), "comma-separated goroutine counts of the etcd and postgres cycle sections")
	only := fs.String("only", strings.Join(cfg.Sections, ","), "comma-separated sections to run: "+lockbench.SectionLocks+" (round trips, cycles, hand-off), "+
		lockbench.SectionProcesses+" (hand-off and FIFO order with a client per worker), "+lockbench.SectionEtcd+" (cycles against concurrency.Mutex), "+
		lockbench.SectionPostgres+" (cycles against advisory locks), "+lockbench.SectionReplicas+" (cycles and hand-off on a primary with one replica, replica acknowledgement on and off), "+lockbench.SectionScale+" (many leases held by one process); "+
		"--only "+lockbench.SectionProcesses+","+lockbench.SectionEtcd+","+lockbench.SectionPostgres+" runs the sections of issue 18 alone")
	scaleLeases := fs.String("scale-leases", joinInts(cfg.ScaleLeases), "comma-separated lease counts of the scale section, each kept alive by Lease.KeepAlive on the Client's batched renewal engine")
	fs.DurationVar(&cfg.ScaleTTL, "scale-ttl", cfg.ScaleTTL, "TTL of the scale section's leases (renewed every third of it)")
	fs.IntVar(&cfg.ScaleWindows, "scale-windows", cfg.ScaleWindows, "renewal intervals each scale cell is measured over; the report gives medians")
	fs.IntVar(&cfg.ScaleCompare, "scale-compare", cfg.ScaleCompare, "lease count at which a goroutine per lease calling Lease.Renew is measured too, to compare (0: not)")
	out := fs.String("out", "", "file for the markdown report, with "+chartName+" written beside it (default: standard output, no chart)")
	fs.BoolVar(&cfg.Unbatched, "unbatched", false, "also measure uncontended cycles of leasehold on a Store made with redisstore.WithoutBatching")
	quiet := fs.Bool("quiet", false, "no progress lines on standard error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Concurrency, err = parseInts("--concurrency", *conc); err != nil {
		return err
	}
	if cfg.Workers, err = parseInts("--workers", *workers); err != nil {
		return err
	}
	if cfg.DBConcurrency, err = parseInts("--db-concurrency", *dbConc); err != nil {
		return err
	}
	if cfg.ScaleLeases, err = parseInts("--scale-leases", *scaleLeases); err != nil {
		return err
	}
	cfg.Sections = nil
	for sec := range strings.SplitSeq(*only, ",") {
		if sec = strings.TrimSpace(sec); sec != "" {
			cfg.Sections = append(cfg.Sections, sec)
		}
	}
	if err := cfg.Validate(); err != nil { // before the output check and any measuring
		return err
	}
	if !*quiet {
		cfg.Log = stderr
	}
	if *out != "" {
		// Fail now rather than after minutes of measuring.
		if fi, err := os.Stat(filepath.Dir(*out)); err != nil || !fi.IsDir() {
			return fmt.Errorf("--out %s: its directory does not exist", *out)
		}
	}
	cfg.Command = "cd bench && go run ."
	if len(args) > 0 {
		cfg.Command += " " + strings.Join(args, " ")
	}

	res, err := lockbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	sum := res.Summarize()
	if *out == "" {
		_, err := io.WriteString(stdout, lockbench.Markdown(res, sum, ""))
		return err
	}
	if !cfg.Runs(lockbench.SectionLocks) { // no hand-off, no chart
		if err := os.WriteFile(*out, []byte(lockbench.Markdown(res, sum, "")), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "bench: wrote %s in %v\n", *out, res.Elapsed.Round(1e9))
		return nil
	}
	chartPath := filepath.Join(filepath.Dir(*out), chartName)
	if err := os.WriteFile(chartPath, []byte(lockbench.Chart(sum, res.Env, cfg)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(*out, []byte(lockbench.Markdown(res, sum, chartName)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bench: wrote %s and %s in %v\n", *out, chartPath, res.Elapsed.Round(1e9))
	return nil
}

func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, errors.New(flagName + ": want comma-separated integers, got " + strconv.Quote(s))
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
