// Package check validates a drill's history: the safety checkers (no stale
// write accepted, no wrong-owner release or renewal, no job terminal twice,
// the porcupine linearizability check of linearize.go) and the liveness
// checks (takeover within its SLO, every job done), reported apart: a slow
// machine may miss a liveness check, never a safety one. Run applies them all.
package check

import (
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/jobs"
)

// Violation is one broken promise found in a drill's history: a safety
// violation, or a liveness shortfall (Check Takeover or Unfinished).
type Violation struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// Check names: a Violation's Check. Takeover and Unfinished are liveness
// (Result.Shortfalls); the others are safety (Result.Violations).
const (
	StaleWrite        = "stale-write-accepted"
	WrongOwner        = "wrong-owner-release-or-renew"
	DoubleTerminal    = "job-terminal-twice"
	Takeover          = "takeover-over-slo"
	Unfinished        = "jobs-unfinished"
	HistoryUnreadable = "history-unreadable"
	// NotLinearizable: a key's lock operations or a job's storage
	// operations have no linearization in the fenced models.
	NotLinearizable = "history-not-linearizable"
	// LinearizeUnknown: the check did not finish within its timeout.
	// Unknown is never passed.
	LinearizeUnknown = "linearizability-unknown"
)

// Input is what the checks read.
type Input struct {
	History history.History
	// Writes is the job storage's log of accepted claims and writes, in
	// its order; WritesErr, why it could not be read.
	Writes    []jobs.Write
	WritesErr error
	// TTL is the lock TTL.
	TTL time.Duration
	// TakeoverSLO bounds the takeover p99; 0 means DefaultTakeoverSLO(TTL).
	TakeoverSLO time.Duration
	// Jobs is the number of jobs; Unfinished, how many were not done.
	Jobs, Unfinished int
	// LinearizeTimeout bounds the linearizability check; 0 means
	// DefaultLinearizeTimeout.
	LinearizeTimeout time.Duration
}

// Result is what the checks found.
type Result struct {
	// Violations are the safety violations: a stale write accepted, a
	// wrong-owner release or renewal, a job terminal twice, a history that
	// is not linearizable, unreadable or not checked in time.
	Violations []Violation
	// Shortfalls are the liveness shortfalls: the takeover p99 over its SLO,
	// jobs not done when the drill ended. Time, not the lock, decides them.
	Shortfalls    []Violation
	Linearization Linearization
	Takeovers     Takeovers
}

// Run runs every check on in.
func Run(in Input) Result {
	timeout := in.LinearizeTimeout
	if timeout == 0 {
		timeout = DefaultLinearizeTimeout
	}
	var res Result
	res.Violations = append(res.Violations, StaleWrites(in.Writes)...)
	res.Violations = append(res.Violations, WrongOwners(in.History.Ops)...)
	res.Violations = append(res.Violations, DoubleTerminals(in.Writes)...)
	res.Linearization = Linearize(in.History, timeout)
	res.Violations = append(res.Violations, res.Linearization.Violations...)
	slo := in.TakeoverSLO
	if slo == 0 {
		slo = DefaultTakeoverSLO(in.TTL)
	}
	res.Takeovers = MeasureTakeovers(in.History, slo)
	if res.Takeovers.P99 > res.Takeovers.SLO {
		res.Shortfalls = append(res.Shortfalls, Violation{Takeover, fmt.Sprintf(
			"takeover p99 %v over the SLO of %v", res.Takeovers.P99.Round(time.Millisecond), res.Takeovers.SLO)})
	}
	if in.WritesErr != nil {
		res.Violations = append(res.Violations, Violation{HistoryUnreadable, in.WritesErr.Error()})
	}
	if in.Unfinished > 0 {
		res.Shortfalls = append(res.Shortfalls, Violation{Unfinished, fmt.Sprintf("%d of %d jobs not done when the drill ended", in.Unfinished, in.Jobs)})
	}
	return res
}

// DefaultTakeoverSLO is TTL + one renewal interval (TTL/3, Client.Hold's
// cadence): a holder that stops is noticed at its lease's end, and a waiter
// polling at the renewal cadence takes over within one more interval.
func DefaultTakeoverSLO(ttl time.Duration) time.Duration { return ttl + ttl/3 }

// StaleWrites: in the storage's own acceptance order, no job accepted a
// write whose fence was older than one it had already accepted.
func StaleWrites(writes []jobs.Write) []Violation {
	var out []Violation
	newest := make(map[string]int64)
	for _, w := range writes {
		if w.Fence < newest[w.Job] {
			out = append(out, Violation{StaleWrite, fmt.Sprintf(
				"%s: worker %d's write %q with fence %d accepted after fence %d", w.Job, w.Worker, w.State, w.Fence, newest[w.Job])})
		}
		newest[w.Job] = max(newest[w.Job], w.Fence)
	}
	return out
}

// DoubleTerminals: no job was written into a terminal state once it was in
// one.
func DoubleTerminals(writes []jobs.Write) []Violation {
	var out []Violation
	state := make(map[string]string)
	for _, w := range writes {
		if w.State == "" { // a claim
			continue
		}
		if jobs.Terminal(state[w.Job]) && jobs.Terminal(w.State) {
			out = append(out, Violation{DoubleTerminal, fmt.Sprintf(
				"%s: %s again (worker %d, fence %d) after %s", w.Job, w.State, w.Worker, w.Fence, state[w.Job])})
		}
		state[w.Job] = w.State
	}
	return out
}

// WrongOwners: no release or renewal succeeded for a lease after a newer
// lease on the same key had been acquired. A call whose lease's fence is
// unknown (0: its acquire's reply was lost, and the Client released the
// token in case the acquire was applied) is not judged here: that acquire
// may have been applied after any newer one, and the linearizability check
// places it.
func WrongOwners(ops []history.Op) []Violation {
	acquired := make(map[string][]history.Op) // key → successful acquires
	for _, o := range ops {
		if o.Kind == history.OpAcquire && o.OK {
			acquired[o.Key] = append(acquired[o.Key], o)
		}
	}
	var out []Violation
	for _, o := range ops {
		if (o.Kind != history.OpRelease && o.Kind != history.OpRenew) || !o.OK || o.Fence == 0 {
			continue
		}
		for _, a := range acquired[o.Key] {
			if a.Fence > o.Fence && a.Return.Before(o.Call) {
				out = append(out, Violation{WrongOwner, fmt.Sprintf(
					"%s: worker %d's %s with fence %d succeeded after fence %d was acquired", o.Key, o.Worker, o.Kind, o.Fence, a.Fence)})
				break
			}
		}
	}
	return out
}

// Takeovers is how fast paused or killed holders' keys were taken over.
type Takeovers struct {
	Times []time.Duration // sorted
	// Excluded counts takeovers that overlapped a partition: nobody can
	// take over then, and the SLO is about a working network.
	Excluded int
	P50, P99 time.Duration
	SLO      time.Duration
}

// MeasureTakeovers times each paused or killed holder's fault to the next
// owner's acquire of its key: see ListTakeovers.
func MeasureTakeovers(h history.History, slo time.Duration) Takeovers {
	t := Takeovers{SLO: slo}
	for _, tk := range ListTakeovers(h) {
		if tk.DuringOutage {
			t.Excluded++
		} else {
			t.Times = append(t.Times, tk.Took())
		}
	}
	slices.Sort(t.Times)
	t.P50, t.P99 = percentile(t.Times, 0.5), percentile(t.Times, 0.99)
	return t
}

// TakeoverSpan is one key taken over: a holder's fault, and the next owner's
// acquire of the key.
type TakeoverSpan struct {
	Event        history.Event // the pause or kill that hit the old owner
	Acquire      history.Op    // the new owner's acquire
	DuringOutage bool          // it overlapped a partition: not counted
}

// Took is the takeover time: from the fault's hit to the acquire's return.
func (t TakeoverSpan) Took() time.Duration { return t.Acquire.Return.Sub(t.Event.At) }

// ListTakeovers finds, for each paused or killed holder, the next owner's
// acquire of its key; a holder fenced by renewal failures is left out (its
// event is stamped when it notices, which can be after the takeover).
func ListTakeovers(h history.History) []TakeoverSpan {
	var out []TakeoverSpan
	for _, e := range h.Events {
		if e.Fault != (faults.PauseWorker{}).Name() && e.Fault != (faults.KillWorker{}).Name() {
			continue
		}
		for _, o := range h.Ops {
			if o.Kind == history.OpAcquire && o.OK && o.Key == e.Key && o.Fence > e.Fence {
				out = append(out, TakeoverSpan{Event: e, Acquire: o, DuringOutage: overlaps(e.At, o.Return, h.Outages)})
				break
			}
		}
	}
	return out
}

func overlaps(from, to time.Time, ws []history.Window) bool {
	for _, w := range ws {
		if from.Before(w.To) && w.From.Before(to) {
			return true
		}
	}
	return false
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1)+0.5)]
}
