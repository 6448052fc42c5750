package drill

import (
	"fmt"
	"slices"
	"time"
)

// Violation is one broken promise found in a drill's history.
type Violation struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// Check names.
const (
	CheckStaleWrite     = "stale-write-accepted"
	CheckWrongOwner     = "wrong-owner-release-or-renew"
	CheckDoubleTerminal = "job-terminal-twice"
	CheckTakeover       = "takeover-over-slo"
	CheckUnfinished     = "jobs-unfinished"
)

// checkStaleWrites: in the storage's own acceptance order, no job accepted a
// write whose fence was older than one it had already accepted.
func checkStaleWrites(writes []Write) []Violation {
	var out []Violation
	newest := make(map[string]int64)
	for _, w := range writes {
		if w.Fence < newest[w.Job] {
			out = append(out, Violation{CheckStaleWrite, fmt.Sprintf(
				"%s: worker %d's write %q with fence %d accepted after fence %d", w.Job, w.Worker, w.State, w.Fence, newest[w.Job])})
		}
		newest[w.Job] = max(newest[w.Job], w.Fence)
	}
	return out
}

// checkDoubleTerminal: no job was written into a terminal state once it was
// in one.
func checkDoubleTerminal(writes []Write) []Violation {
	var out []Violation
	state := make(map[string]string)
	for _, w := range writes {
		if w.State == "" { // a claim
			continue
		}
		if terminal(state[w.Job]) && terminal(w.State) {
			out = append(out, Violation{CheckDoubleTerminal, fmt.Sprintf(
				"%s: %s again (worker %d, fence %d) after %s", w.Job, w.State, w.Worker, w.Fence, state[w.Job])})
		}
		state[w.Job] = w.State
	}
	return out
}

// checkWrongOwner: no release or renewal succeeded for a lease after a newer
// lease on the same key had been acquired.
func checkWrongOwner(ops []Op) []Violation {
	acquired := make(map[string][]Op) // key → successful acquires
	for _, o := range ops {
		if o.Kind == OpAcquire && o.OK {
			acquired[o.Key] = append(acquired[o.Key], o)
		}
	}
	var out []Violation
	for _, o := range ops {
		if (o.Kind != OpRelease && o.Kind != OpRenew) || !o.OK {
			continue
		}
		for _, a := range acquired[o.Key] {
			if a.Fence > o.Fence && a.Return.Before(o.Call) {
				out = append(out, Violation{CheckWrongOwner, fmt.Sprintf(
					"%s: worker %d's %s with fence %d succeeded after fence %d was acquired", o.Key, o.Worker, o.Kind, o.Fence, a.Fence)})
				break
			}
		}
	}
	return out
}

// takeovers measures, for each paused or killed holder, the time from the
// fault to the next owner's acquire of the same key. (A holder fenced by
// renewal failures is left out: its event is stamped when it notices, which
// can be after the takeover.) A takeover
// whose span overlaps an outage of the store for every worker (a partition)
// is counted in excluded instead: nobody can take over then, and the SLO is
// about a working network.
func takeovers(events []Event, ops []Op, outages []Window) (times []time.Duration, excluded int) {
	for _, e := range events {
		if e.Fault != (PauseWorker{}).Name() && e.Fault != (KillWorker{}).Name() {
			continue
		}
		for _, o := range ops {
			if o.Kind == OpAcquire && o.OK && o.Key == e.Key && o.Fence > e.Fence {
				if overlaps(e.At, o.Return, outages) {
					excluded++
				} else {
					times = append(times, o.Return.Sub(e.At))
				}
				break
			}
		}
	}
	slices.Sort(times)
	return times, excluded
}

func overlaps(from, to time.Time, ws []Window) bool {
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
