package drill

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"
)

// Report is what a drill found.
type Report struct {
	Store            string         `json:"store"`
	Storage          string         `json:"storage"`
	Workers          int            `json:"workers"`
	Jobs             int            `json:"jobs"`
	TTL              time.Duration  `json:"ttl_ns"`
	Duration         time.Duration  `json:"duration_ns"`
	CriticalSections int64          `json:"critical_sections"`
	Ops              map[string]int `json:"ops"`     // "acquire ok", "release not owned", …
	Faults           map[string]int `json:"faults"`  // injected, by fault
	Effects          map[string]int `json:"effects"` // faults that hit a critical section
	WritesAccepted   int            `json:"writes_accepted"`
	StaleRefused     int            `json:"stale_writes_refused"`
	TakeoverP50      time.Duration  `json:"takeover_p50_ns"`
	TakeoverP99      time.Duration  `json:"takeover_p99_ns"`
	TakeoverSLO      time.Duration  `json:"takeover_slo_ns"`
	Takeovers        int            `json:"takeovers"`
	// TakeoversExcluded are takeovers that overlapped a partition: no
	// worker could reach the store, so they say nothing about the lock.
	TakeoversExcluded int         `json:"takeovers_during_outages"`
	UnsafeRelease     bool        `json:"unsafe_release"`
	NoFencing         bool        `json:"no_fencing"`
	Violations        []Violation `json:"violations"`

	// Linearizable is the linearizability check's result: LinearizableOK,
	// LinearizableIllegal or LinearizableUnknown (a timeout, reported as a
	// violation: never a pass).
	Linearizable string `json:"linearizable"`
	// LinearizeOps is the number of operations checked.
	LinearizeOps int `json:"linearize_ops"`
	// LinearizeTime is how long the check took.
	LinearizeTime time.Duration `json:"linearize_ns"`
	// Visualization is porcupine's HTML page of the history and its
	// (partial) linearizations, when Linearizable is not ok; WriteHTML
	// embeds it.
	Visualization []byte `json:"-"`

	// History is the run's record, for the HTML report and the
	// linearizability check: every lock and storage operation with its
	// call and return times, the faults as they hit, and the partitions.
	History History `json:"-"`
}

// History is a drill's record.
type History struct {
	Started time.Time
	Ops     []Op     // lock and storage operations, in the order they returned
	Events  []Event  // faults taking effect on a critical section
	Outages []Window // partitions: spans when no worker could reach the store

	// Faults are the faults injected, each from injection to heal.
	Faults []FaultSpan
}

// OK reports whether the drill found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Safe reports whether every safety check passed: no violation but, at
// most, the takeover-time check, which depends on the machine's scheduling.
func (r *Report) Safe() bool {
	for _, v := range r.Violations {
		if v.Check != CheckTakeover {
			return false
		}
	}
	return true
}

func (r *run) report(elapsed time.Duration) *Report {
	writes, logErr := r.jobs.Log(context.Background())
	refused := int(r.refused.Load())
	r.rec.mu.Lock()
	ops, events := slices.Clone(r.rec.ops), slices.Clone(r.rec.events)
	r.rec.mu.Unlock()

	rep := &Report{
		Store: r.cfg.StoreName, Storage: r.cfg.StorageName, Workers: r.cfg.Workers, Jobs: r.cfg.Jobs, TTL: r.ttl, Duration: elapsed,
		CriticalSections: r.sections.Load(), Ops: make(map[string]int), Faults: maps.Clone(r.injected),
		Effects: make(map[string]int), WritesAccepted: len(writes), StaleRefused: refused,
		TakeoverSLO: r.ttl + r.ttl/3, UnsafeRelease: r.cfg.UnsafeRelease, NoFencing: r.cfg.NoFencing,
		History: History{Started: r.rec.started, Ops: ops, Events: events, Outages: slices.Clone(r.outages)},
	}
	rep.History.Faults = slices.Clone(r.faultSpans)
	for _, o := range ops {
		result := "ok"
		switch {
		case o.OK:
		case o.Stale:
			result = "stale refused"
		case o.Err == "" && o.Kind == OpAcquire:
			result = "busy"
		case o.Err == "leasehold: not owned":
			result = "not owned"
		default:
			result = "error"
		}
		rep.Ops[o.Kind+" "+result]++
	}
	for _, e := range events {
		rep.Effects[e.Fault]++
	}
	rep.Violations = append(rep.Violations, checkStaleWrites(writes)...)
	rep.Violations = append(rep.Violations, checkWrongOwner(ops)...)
	rep.Violations = append(rep.Violations, checkDoubleTerminal(writes)...)
	rep.linearize(r.cfg.LinearizeTimeout)
	times, excluded := takeovers(events, ops, r.outages)
	rep.Takeovers, rep.TakeoverP50, rep.TakeoverP99 = len(times), percentile(times, 0.5), percentile(times, 0.99)
	rep.TakeoversExcluded = excluded
	if rep.TakeoverP99 > rep.TakeoverSLO {
		rep.Violations = append(rep.Violations, Violation{CheckTakeover, fmt.Sprintf(
			"takeover p99 %v over the SLO of TTL + one renewal interval (%v)", rep.TakeoverP99, rep.TakeoverSLO)})
	}
	if logErr != nil {
		rep.Violations = append(rep.Violations, Violation{"history-unreadable", logErr.Error()})
	}
	if n := r.remaining(context.Background()); n > 0 {
		rep.Violations = append(rep.Violations, Violation{CheckUnfinished, fmt.Sprintf("%d of %d jobs not done when the drill ended", n, r.cfg.Jobs)})
	}
	return rep
}

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
		if storeWide[k] {
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
	fmt.Fprintf(tw, "linearizable\t%s (%d ops, checked in %d ms)\n", r.Linearizable, r.LinearizeOps, r.LinearizeTime.Milliseconds())
	fmt.Fprintf(tw, "violations\t%d\n", len(r.Violations))
	if err := tw.Flush(); err != nil {
		return err
	}
	counts := make(map[string]int)
	for _, v := range r.Violations {
		counts[v.Check]++
	}
	for _, c := range slices.Sorted(maps.Keys(counts)) {
		first := ""
		for _, v := range r.Violations {
			if v.Check == c {
				first = v.Detail
				break
			}
		}
		fmt.Fprintf(w, "  %s: %d (first: %s)\n", c, counts[c], first)
	}
	return nil
}
