// Package report presents what a drill found: the Report, as a text
// summary, JSON, or one self-contained HTML page with a timeline.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/history"
)

// Report is what a drill found.
type Report struct {
	Store            string         `json:"store"`
	Storage          string         `json:"storage"`
	Workers          int            `json:"workers"`
	Jobs             int            `json:"jobs"`
	TTL              time.Duration  `json:"-"` // ttl_seconds in WriteJSON
	Duration         time.Duration  `json:"-"` // duration_seconds in WriteJSON
	CriticalSections int64          `json:"critical_sections"`
	Ops              map[string]int `json:"ops"`     // "acquire ok", "release not owned", …
	Faults           map[string]int `json:"faults"`  // injected, by fault
	Effects          map[string]int `json:"effects"` // faults that hit a critical section
	WritesAccepted   int            `json:"writes_accepted"`
	StaleRefused     int            `json:"stale_writes_refused"`
	TakeoverP50      time.Duration  `json:"-"` // takeover_p50_seconds in WriteJSON
	TakeoverP99      time.Duration  `json:"-"` // takeover_p99_seconds in WriteJSON
	TakeoverSLO      time.Duration  `json:"-"` // takeover_slo_seconds in WriteJSON
	Takeovers        int            `json:"takeovers"`
	// TakeoversExcluded are takeovers that overlapped a partition: no
	// worker could reach the store, so they say nothing about the lock.
	TakeoversExcluded int `json:"takeovers_during_outages"`
	// Interrupted: the caller's context ended (SIGINT, SIGTERM in the
	// CLI) before the jobs were done. The jobs left undone are then no
	// liveness shortfall, and a safe run's exit code is ExitInterrupted.
	Interrupted   bool `json:"interrupted"`
	UnsafeRelease bool `json:"unsafe_release"`
	NoFencing     bool `json:"no_fencing"`
	// Violations are the safety violations (check.Result's): any one makes
	// the drill UNSAFE, exit 1.
	Violations []check.Violation `json:"safety_violations"`
	// Shortfalls are the liveness shortfalls: the takeover SLO missed, jobs
	// not done in time. Never a safety violation; alone they exit 3.
	Shortfalls []check.Violation `json:"liveness_shortfalls"`
	// Cleanup says what became of the keys the drill created in a real
	// store: removed, or what is left and how to remove it. Empty in memory.
	Cleanup string `json:"cleanup,omitempty"`

	// Linearizable is the linearizability check's result:
	// check.LinearizableOK, LinearizableIllegal or LinearizableUnknown (a
	// timeout, reported as a violation: never a pass).
	Linearizable string `json:"linearizable"`
	// LinearizeOps is the number of operations checked.
	LinearizeOps int `json:"linearize_ops"`
	// LinearizeTime is how long the check took.
	LinearizeTime time.Duration `json:"-"` // linearize_seconds in WriteJSON
	// Visualization is porcupine's HTML page of the history and its
	// (partial) linearizations, when Linearizable is not ok; WriteHTML
	// embeds it.
	Visualization []byte `json:"-"`

	// History is the run's record, for the HTML report: every lock and
	// storage operation with its call and return times, the faults as
	// they were injected and as they hit, and the partitions.
	History history.History `json:"-"`
}

// OK reports whether every check held, safety and liveness.
func (r *Report) OK() bool { return r.Safe() && len(r.Shortfalls) == 0 }

// Safe reports whether every safety check held; liveness shortfalls, which
// depend on the machine's speed, do not count.
func (r *Report) Safe() bool { return len(r.Violations) == 0 }

// Exit codes of a drill, by its verdict: see Report.ExitCode.
const (
	ExitSafe   = 0 // every check held
	ExitUnsafe = 1 // a safety violation, or a safety check that could not pass
	// ExitInterrupted: safe as far as it ran, but interrupted before its
	// jobs were done; the command failed, as for any interrupted command.
	ExitInterrupted = 1
	// ExitSLOMissed: safe, but a liveness check missed (the takeover SLO,
	// jobs unfinished).
	ExitSLOMissed = 3
	verdictSafe   = "safe"
	verdictUnsafe = "UNSAFE"
)

// ExitCode is the drill's exit code: ExitUnsafe for any safety violation,
// else ExitInterrupted when interrupted, else ExitSLOMissed for a liveness
// shortfall, else ExitSafe.
func (r *Report) ExitCode() int {
	switch {
	case !r.Safe():
		return ExitUnsafe
	case r.Interrupted:
		return ExitInterrupted
	case !r.OK():
		return ExitSLOMissed
	}
	return ExitSafe
}

// Verdict says in words what ExitCode says in a number: "safe", "UNSAFE",
// or "safe; " and the liveness shortfalls ("takeover SLO missed", "jobs
// unfinished").
func (r *Report) Verdict() string {
	switch {
	case !r.Safe():
		return verdictUnsafe
	case r.Interrupted:
		return "safe as far as it ran; interrupted"
	}
	switch r.ExitCode() {
	case ExitSLOMissed:
		return "safe; " + r.shortfallWords()
	}
	return verdictSafe
}

// shortfallWords names the liveness shortfalls: "takeover SLO missed, jobs
// unfinished".
func (r *Report) shortfallWords() string {
	var words []string
	for _, c := range checks(r.Shortfalls) {
		switch c {
		case check.Takeover:
			words = append(words, "takeover SLO missed")
		case check.Unfinished:
			words = append(words, "jobs unfinished")
		default:
			words = append(words, c)
		}
	}
	return strings.Join(words, ", ")
}

// checks are the distinct checks of vs, sorted.
func checks(vs []check.Violation) []string {
	seen := make(map[string]bool)
	for _, v := range vs {
		seen[v.Check] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// Fill completes r from the history h and the checks' result res: operations
// by outcome, faults' hits, takeovers, linearizability and violations.
func (r *Report) Fill(h history.History, res check.Result) {
	r.History = h
	r.Ops, r.Effects = make(map[string]int), make(map[string]int)
	for _, o := range h.Ops {
		result := "ok"
		switch {
		case o.OK:
		case o.Stale:
			result = "stale refused"
		case o.Err == "" && o.Kind == history.OpAcquire:
			result = "busy"
		case o.Err == errNotOwned:
			result = "not owned"
		default:
			result = "error"
		}
		r.Ops[o.Kind+" "+result]++
	}
	for _, e := range h.Events {
		r.Effects[e.Fault]++
	}
	t := res.Takeovers
	r.Takeovers, r.TakeoverP50, r.TakeoverP99, r.TakeoverSLO, r.TakeoversExcluded = len(t.Times), t.P50, t.P99, t.SLO, t.Excluded
	lin := res.Linearization
	r.Linearizable, r.LinearizeOps, r.LinearizeTime, r.Visualization = lin.Result, lin.Ops, lin.Took, lin.Visualization
	r.Violations = append(r.Violations, res.Violations...)
	r.Shortfalls = append(r.Shortfalls, res.Shortfalls...)
}

var errNotOwned = leasehold.ErrNotOwned.Error()

// WriteText writes the summary table.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "locks\t%s (TTL %v, %d workers, %d jobs)\n", r.Store, r.TTL, r.Workers, r.Jobs)
	fmt.Fprintf(tw, "job storage\t%s\n", r.Storage)
	if r.UnsafeRelease || r.NoFencing {
		fmt.Fprintf(tw, "negative control\tunsafe release %v, no fencing %v\n", r.UnsafeRelease, r.NoFencing)
	}
	fmt.Fprintf(tw, "duration\t%v\n", r.Duration.Round(time.Millisecond))
	fmt.Fprintf(tw, "critical sections\t%d\n", r.CriticalSections)
	for _, k := range slices.Sorted(maps.Keys(r.Ops)) {
		fmt.Fprintf(tw, "  %s\t%d\n", k, r.Ops[k])
	}
	fmt.Fprintf(tw, "faults injected\t%d\n", sum(r.Faults))
	for _, k := range slices.Sorted(maps.Keys(r.Faults)) {
		if faults.StoreWide(k) {
			fmt.Fprintf(tw, "  %s\t%d (store-wide)\n", k, r.Faults[k])
		} else {
			fmt.Fprintf(tw, "  %s\t%d (hit a critical section: %d)\n", k, r.Faults[k], r.Effects[k])
		}
	}
	fmt.Fprintf(tw, "writes accepted\t%d\n", r.WritesAccepted)
	fmt.Fprintf(tw, "stale writes refused\t%d\n", r.StaleRefused)
	fmt.Fprintf(tw, "takeover p50 / p99\t%v / %v (SLO %v, %d takeovers",
		r.TakeoverP50.Round(time.Millisecond), r.TakeoverP99.Round(time.Millisecond), r.TakeoverSLO.Round(time.Millisecond), r.Takeovers)
	if r.TakeoversExcluded > 0 {
		fmt.Fprintf(tw, "; %d more during partitions, not counted", r.TakeoversExcluded)
	}
	fmt.Fprintln(tw, ")")
	if r.TakeoverSLO > 0 {
		fmt.Fprintf(tw, "  over the SLO\t%d of %d\n", len(r.missedTakeovers()), r.Takeovers)
	}
	fmt.Fprintf(tw, "linearizable\t%s (%d ops, checked in %d ms)\n", r.Linearizable, r.LinearizeOps, r.LinearizeTime.Milliseconds())
	fmt.Fprintf(tw, "%s\t%d\n", LabelSafety, len(r.Violations))
	writeGroups(tw, r.Violations)
	fmt.Fprintf(tw, "%s\t%d\n", LabelLiveness, len(r.Shortfalls))
	writeGroups(tw, r.Shortfalls)
	if r.Cleanup != "" {
		fmt.Fprintf(tw, "cleanup\t%s\n", r.Cleanup)
	}
	fmt.Fprintf(tw, "verdict\t%s (exit %d)\n", r.Verdict(), r.ExitCode())
	return tw.Flush()
}

// Labels of the summary's safety and liveness lines: the first must be 0
// for a safe lock; the second may not be 0 on a slow machine.
const (
	LabelSafety   = "safety violations"
	LabelLiveness = "liveness shortfalls"
)

// writeGroups writes one indented row per check of vs: how many, and the
// first one's detail.
func writeGroups(w io.Writer, vs []check.Violation) {
	for _, c := range checks(vs) {
		n, first := 0, ""
		for _, v := range vs {
			if v.Check == c {
				if n == 0 {
					first = v.Detail
				}
				n++
			}
		}
		fmt.Fprintf(w, "  %s\t%d (first: %s)\n", c, n, first)
	}
}

// WriteJSON writes the report as indented JSON, without its history, with
// its verdict and exit code.
// Empty lists and maps are [] and {}, never null, and durations are
// seconds in fields named *_seconds (the CLI's -o json conventions).
func (r *Report) WriteJSON(w io.Writer) error {
	c := *r
	if c.Violations == nil {
		c.Violations = []check.Violation{}
	}
	if c.Shortfalls == nil {
		c.Shortfalls = []check.Violation{}
	}
	for _, m := range []*map[string]int{&c.Ops, &c.Faults, &c.Effects} {
		if *m == nil {
			*m = map[string]int{}
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Durations are seconds in *_seconds fields, the CLI's convention.
	return enc.Encode(struct {
		*Report
		TTL           float64 `json:"ttl_seconds"`
		Duration      float64 `json:"duration_seconds"`
		TakeoverP50   float64 `json:"takeover_p50_seconds"`
		TakeoverP99   float64 `json:"takeover_p99_seconds"`
		TakeoverSLO   float64 `json:"takeover_slo_seconds"`
		LinearizeTime float64 `json:"linearize_seconds"`
		Verdict       string  `json:"verdict"`
		ExitCode      int     `json:"exit_code"`
	}{&c, c.TTL.Seconds(), c.Duration.Seconds(), c.TakeoverP50.Seconds(), c.TakeoverP99.Seconds(),
		c.TakeoverSLO.Seconds(), c.LinearizeTime.Seconds(), r.Verdict(), r.ExitCode()})
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}
