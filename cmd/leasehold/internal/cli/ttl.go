package cli

import (
	"fmt"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/driver"
	"github.com/spf13/cobra"
)

// DefaultQuantile is the quantile ttl --from reads as the exec p99: the
// 99th percentile the TTL formula is written for.
const DefaultQuantile = 0.99

// ttlJSON is ttl --json's object. Durations are in seconds.
type ttlJSON struct {
	ExecP99       float64     `json:"exec_p99_seconds"`
	Jitter        float64     `json:"jitter_seconds"`
	Guard         float64     `json:"guard_seconds"`
	Retry         float64     `json:"retry_seconds"`
	SLO           float64     `json:"slo_seconds"` // 0: no SLO given
	TTL           float64     `json:"ttl_seconds"`
	RenewInterval float64     `json:"renew_interval_seconds"`
	DriftMargin   float64     `json:"drift_margin_seconds"`
	LocalDeadline float64     `json:"local_deadline_seconds"`
	Takeover      float64     `json:"takeover_seconds"`
	SLOMet        bool        `json:"slo_met"`
	MaxExecP99    float64     `json:"max_exec_p99_seconds"` // 0 without an SLO
	Advice        string      `json:"advice,omitempty"`
	Source        *sourceJSON `json:"source,omitempty"` // with --from
}

// sourceJSON says where --from found the exec p99.
type sourceJSON struct {
	URL          string  `json:"url"`
	Metric       string  `json:"metric"`
	Namespace    string  `json:"namespace"`
	Quantile     float64 `json:"quantile"`
	Observations float64 `json:"observations"`
	// AboveTopBucket: the quantile is above the histogram's highest finite
	// bound, and exec_p99_seconds is only a lower bound of it.
	AboveTopBucket bool `json:"above_top_bucket"`
}

// ttlCommand is "leasehold ttl".
func (a *app) ttlCommand() *cobra.Command {
	var (
		in       PlanInput
		from, ns string
		quantile float64
		out      *outputFlags
		fromURL  bool
	)
	cmd := &cobra.Command{
		Use:   "ttl (--exec-p99 D | --from URL --namespace NS) --jitter D --guard D [--slo D]",
		Short: "Compute the TTL a lock path needs and check its takeover bound against an SLO",
		Long: `ttl sizes a lock path's lease:

  TTL             = exec p99 + jitter + guard
  renew interval  = TTL/3                  (the Hold's default)
  local deadline  = TTL − TTL/10           after the last successful renewal, the fence
                                           policy cancels the work here, before the
                                           server can give the lock to another owner
  takeover bound  = TTL + retry            a crashed owner keeps the lock from the next
                                           one at most this long: the lease runs out
                                           TTL after its last renewal, and a waiter
                                           tries again within --retry

--retry (default 1s) is the waiter's retry: a waiting Client.Acquire sleeps at
most 1s between tries (it tries 1 ms after the holder's TTL when the store
reports it, as every backend here does, so 1s is the worse case), and so does
a Client.Lead candidate. On etcd add up to 1.5s: leases are
whole seconds and expired ones are revoked on a timer.

With --slo, the takeover bound must be at most the SLO. If it is not, ttl says
what would meet it (a shorter critical section, the work split into shorter
steps each under its own lease, or a looser SLO) and exits 1.

--from reads the exec p99 from a live process instead: it fetches URL (the
/metrics endpoint of a process that registered package prom's Metrics; text
format) and estimates the --quantile of leasehold_lock_held_seconds for
--namespace the way histogram_quantile does: linear interpolation inside the
bucket where the quantile falls, so the error is at most that bucket's width
(prom.HeldBuckets are at most ×1.67 apart above 1s). Series of the namespace
with different other labels are summed. The counts are cumulative since the
process started: the p99 of its whole life, not of a recent window (for that,
ask Prometheus: histogram_quantile(0.99, sum by (le) (rate(..._bucket[1h])))).
A p99 in the +Inf bucket reads as the highest bound (600s), a lower bound: ttl
says so.`,
		Example: `  leasehold ttl --exec-p99 18s --jitter 4s --guard 2s --slo 30s
  leasehold ttl --from http://10.0.0.7:9090/metrics --namespace runs --jitter 4s --guard 2s --slo 45s --json`,
		Args: exactArgs(),
		RunE: a.run(func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			asJSON, err := out.isJSON(cmd)
			if err != nil {
				return err
			}
			fromURL = flagSet(f, "from")
			switch {
			case fromURL && flagSet(f, "exec-p99"):
				return usagef("give --exec-p99 or --from, not both")
			case !fromURL && !flagSet(f, "exec-p99"):
				return usagef("ttl needs --exec-p99, or --from URL --namespace NS to read it from a metrics endpoint")
			case fromURL && ns == "":
				return usagef("--from needs --namespace: the namespace label to read (the keys' first segment, as inspect shows it)")
			case !fromURL && flagSet(f, "namespace"):
				return usagef("--namespace goes with --from")
			case !fromURL && flagSet(f, "quantile"):
				return usagef("--quantile goes with --from: --exec-p99 is the quantile itself")
			case !flagSet(f, "jitter"):
				return usagef("ttl needs --jitter: the pauses and delays the p99 does not show (GC, VM, network); --jitter 0s if none")
			case !flagSet(f, "guard"):
				return usagef("ttl needs --guard: the safety margin on top; --guard 0s if none")
			case !(quantile > 0 && quantile <= 1):
				return usagef("--quantile must be in (0, 1], not %v", quantile)
			}
			if err := checkTTLFlags(in, fromURL); err != nil {
				return err
			}
			var src *sourceJSON
			if fromURL {
				u, err := parseMetricsURL(from)
				if err != nil {
					return err
				}
				buckets, err := fetchHeld(cmd.Context(), u, ns, a.global.timeout)
				if err != nil {
					return err
				}
				est, err := HistogramQuantile(quantile, buckets)
				if err != nil {
					return fmt.Errorf("%s{namespace=%q} at %s: %w", HeldMetric, ns, safeURL(u), err)
				}
				// The endpoint's figures, not the command line, are at fault
				// when the estimate is no hold time: exit 1, naming --from.
				if !(est.Seconds > 0) || est.Seconds > driver.MaxTTL.Seconds() {
					return fmt.Errorf("%s{namespace=%q} at %s (--from): the p%s estimate is %v s, not a hold time in (0, %v]",
						HeldMetric, ns, safeURL(u), quantileName(quantile), est.Seconds, driver.MaxTTL)
				}
				// At least 1 ms: a p99 under half a millisecond rounds to
				// nothing, which the plan would take as not given.
				in.ExecP99 = max(time.Duration(est.Seconds*float64(time.Second)).Round(time.Millisecond), time.Millisecond)
				src = &sourceJSON{URL: safeURL(u), Metric: HeldMetric, Namespace: ns, Quantile: quantile, Observations: est.Count, AboveTopBucket: est.AboveTop}
			}
			p, err := PlanTTL(in)
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(a.stdout, planJSON(p, src)); err != nil {
					return err
				}
			} else if err := printPlan(a, p, src); err != nil {
				return err
			}
			if !p.SLOMet {
				return fmt.Errorf("takeover SLO %v is impossible with TTL %v: takeover after a crash can take %v (TTL + retry %v); %s",
					p.SLO, p.TTL, p.Takeover, p.Retry, p.Advice())
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.DurationVar(&in.ExecP99, "exec-p99", 0, "the critical section's p99 run time (or use --from)")
	f.DurationVar(&in.Jitter, "jitter", 0, "pauses and delays the p99 does not show: GC, VM, scheduling, a slow store (required, no default: only you know them)")
	f.DurationVar(&in.Guard, "guard", 0, "safety margin on top (required, no default: it is a policy choice)")
	f.DurationVar(&in.Retry, "retry", DefaultRetry, "the waiter's retry after the lease runs out, added to the takeover bound; 1s is a waiting Client.Acquire's (and Client.Lead's) longest backoff step")
	f.DurationVar(&in.SLO, "slo", 0, "takeover SLO: the longest a crashed owner may keep the lock; 0 (the default) checks nothing")
	f.StringVar(&from, "from", "", "read the exec p99 from this metrics endpoint (http(s) URL of a /metrics page in the text format)")
	f.StringVar(&ns, "namespace", "", "with --from: the namespace label of "+HeldMetric+" to read")
	f.Float64Var(&quantile, "quantile", DefaultQuantile, "with --from: the quantile taken as the exec p99; 0.99 is the p99 the TTL formula is written for")
	out = addOutputFlags(cmd, "one object")
	return cmd
}

// checkTTLFlags checks ttl's durations against driver.MaxTTL, and their
// sum, the TTL, when --exec-p99 is given.
func checkTTLFlags(in PlanInput, fromURL bool) error {
	err := firstError(
		checkDuration("--jitter", in.Jitter, 0, driver.MaxTTL),
		checkDuration("--guard", in.Guard, 0, driver.MaxTTL),
		checkDuration("--retry", in.Retry, 0, driver.MaxTTL),
		checkDuration("--slo", in.SLO, 0, driver.MaxTTL),
	)
	if err != nil || fromURL {
		return err
	}
	return firstError(
		checkDuration("--exec-p99", in.ExecP99, 1, driver.MaxTTL),
		checkTTLSum(in.ExecP99, in.Jitter, in.Guard),
	)
}

// planJSON is p as ttl --json prints it.
func planJSON(p Plan, src *sourceJSON) ttlJSON {
	s := seconds
	return ttlJSON{
		ExecP99: s(p.ExecP99), Jitter: s(p.Jitter), Guard: s(p.Guard), Retry: s(p.Retry), SLO: s(p.SLO),
		TTL: s(p.TTL), RenewInterval: s(p.RenewInterval), DriftMargin: s(p.DriftMargin),
		LocalDeadline: s(p.LocalDeadline), Takeover: s(p.Takeover),
		SLOMet: p.SLOMet, MaxExecP99: s(p.MaxExecP99), Advice: p.Advice(), Source: src,
	}
}

// printPlan prints p as aligned lines: value, then what it is.
func printPlan(a *app, p Plan, src *sourceJSON) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	row := func(name string, d time.Duration, note string) { fmt.Fprintf(tw, "%s\t%v\t%s\n", name, d, note) }
	execNote := "given"
	if src != nil {
		execNote = fmt.Sprintf("p%s of %s{namespace=%q} at %s, %s holds, interpolated in its bucket",
			quantileName(src.Quantile), src.Metric, src.Namespace, src.URL, strconv.FormatFloat(src.Observations, 'f', -1, 64))
		if src.AboveTopBucket {
			execNote += "; ABOVE the top bucket: a lower bound, the TTL may be too short"
		}
	}
	row("exec p99", p.ExecP99, execNote)
	row("jitter", p.Jitter, "given: pauses and delays the p99 does not show")
	row("guard", p.Guard, "given: safety margin")
	row("TTL", p.TTL, "exec p99 + jitter + guard")
	row("renew interval", p.RenewInterval, "TTL/3: the Hold renews this often")
	row("local deadline", p.LocalDeadline, "TTL − TTL/10 after the last successful renewal: the fence policy stops the work here")
	row("takeover bound", p.Takeover, fmt.Sprintf("TTL + retry %v: the longest a crashed owner keeps the lock", p.Retry))
	switch {
	case p.SLO == 0:
		fmt.Fprintf(tw, "takeover SLO\t-\tnot given (--slo)\n")
	case p.SLOMet:
		row("takeover SLO", p.SLO, fmt.Sprintf("met, %v to spare (exec p99 may grow to %v)", p.SLO-p.Takeover, p.MaxExecP99))
	default:
		row("takeover SLO", p.SLO, fmt.Sprintf("NOT MET: over by %v", p.Takeover-p.SLO))
	}
	return tw.Flush()
}

// quantileName writes 0.99 as "99" and 0.999 as "99.9", for "p99".
func quantileName(q float64) string {
	return strconv.FormatFloat(math.Round(q*100*1e6)/1e6, 'f', -1, 64)
}
