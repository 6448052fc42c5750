package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/report"
	"github.com/leasehold/leasehold/store/redisstore"
)

// failoverTopology is a replicated Redis (Sentinel or Cluster) whose
// faults fail over: how many failovers so far, and a wait for its
// background fault work.
type failoverTopology interface {
	failoverCount() int
	settle()
}

// drillSums is what drills on a replicated Redis saw, summed over runs.
type drillSums struct {
	runs, failovers, overlaps, reissued, staleRefused, notLinearizable int
	wrongOwner                                                         int      // releases or renewals after a newer fence's acquire
	unsafe                                                             []string // the text of each run with another safety violation
	explained                                                          []string // each overlap: see overlapsExplained
}

func (r drillSums) String() string {
	return fmt.Sprintf("%d failovers in %d drills: %d overlapping owners seen by the store, %d fences issued again, %d histories not linearizable, %d stale writes refused",
		r.failovers, r.runs, r.overlaps, r.reissued, r.notLinearizable, r.staleRefused)
}

// sawHazard ends the negative control's drills once two owners overlapped
// after at least 2 failovers.
func sawHazard(r drillSums) bool { return r.overlaps > 0 && r.failovers >= 2 }

// coveredFailovers ends drills once they covered n failovers.
func coveredFailovers(n int) func(drillSums) bool {
	return func(r drillSums) bool { return r.failovers >= n }
}

// redisDrills runs drills of jobs jobs on topo, each on the Config mk makes
// with a Store made with opts, until done (at most maxRuns drills), and sums
// what they saw: overlapping owners, fences issued again, stale writes
// refused. A history that is not linearizable and a release or renewal
// after a newer fence's acquire are counted, not failed on here: they are
// how the checker reports fences issued again.
func redisDrills(t *testing.T, topo failoverTopology, mk func(...redisstore.Option) drill.Config, jobs, maxRuns int,
	done func(drillSums) bool, opts ...redisstore.Option) drillSums {
	t.Helper()
	var sum drillSums
	for !done(sum) && sum.runs < maxRuns {
		before := topo.failoverCount()
		cfg := mk(opts...)
		cfg.Jobs = jobs
		rep, text := runMultiNode(t, cfg, topo.settle)
		sum.failovers += topo.failoverCount() - before
		sum.runs++
		sum.overlaps += overlappingOwners(rep.History, rep.TTL)
		for _, e := range overlapsExplained(rep) {
			sum.explained = append(sum.explained, fmt.Sprintf("drill %d: %s", sum.runs, e))
			t.Logf("overlap in drill %d: %s", sum.runs, e)
		}
		sum.reissued += reissuedFences(rep.History)
		sum.staleRefused += rep.StaleRefused
		unsafe := false
		for _, v := range rep.Violations {
			switch v.Check {
			case check.NotLinearizable:
				sum.notLinearizable++
			case check.WrongOwner:
				sum.wrongOwner++
			case check.Takeover, check.Unfinished:
				// liveness: in the text
			default:
				unsafe = true
			}
		}
		if unsafe {
			sum.unsafe = append(sum.unsafe, text)
		}
		t.Logf("after drill %d: %v", sum.runs, sum)
	}
	return sum
}

// overlapsExplained describes each acquire that overlappingOwners counts:
// its key and time, the other owner's last acquire or renewal the store
// answered, and the store faults in force around it, all in time from the
// drill's first operation.
func overlapsExplained(rep *report.Report) []string {
	ops := rep.History.Ops
	if len(ops) == 0 {
		return nil
	}
	start := ops[0].Call
	at := func(t time.Time) string { return t.Sub(start).Round(time.Millisecond).String() }
	var out []string
	for _, i := range overlapping(rep.History, rep.TTL) {
		o := ops[i]
		var other history.Op
		for _, p := range ops[:i] {
			if p.Key == o.Key && p.Worker != o.Worker && p.OK && (p.Kind == history.OpAcquire || p.Kind == history.OpRenew) {
				other = p
			}
		}
		var faults []string
		for _, f := range rep.History.Faults {
			if f.Worker < 0 && f.From.Before(o.Return) && f.To.After(other.Call.Add(-rep.TTL)) {
				faults = append(faults, fmt.Sprintf("%s %s..%s", f.Name, at(f.From), at(f.To)))
			}
		}
		out = append(out, fmt.Sprintf("%s: worker %d acquired (fence %d) %s..%s while worker %d's %s (fence %d) at %s..%s held it for a TTL; store faults: %v",
			o.Key, o.Worker, o.Fence, at(o.Call), at(o.Return), other.Worker, other.Kind, other.Fence, at(other.Call), at(other.Return), faults))
	}
	return out
}

// checkAcks is the verdict of drills on a replicated Redis with real clocks
// without replica acknowledgement (off, the negative control) and with it
// (on, the default): no safety violation in either; off saw two owners at
// once, on none, over at least 8 failovers, and no fence issued again.
func checkAcks(t *testing.T, off, on drillSums) {
	t.Helper()
	t.Logf("without replica acknowledgement: %v", off)
	t.Logf("with replica acknowledgement (the default): %v", on)
	for _, text := range append(off.unsafe, on.unsafe...) {
		t.Errorf("safety violations with failovers:\n%s", text)
	}
	if off.wrongOwner+on.wrongOwner > 0 {
		t.Errorf("releases or renewals after a newer fence's acquire with real clocks: %d without acknowledgement, %d with", off.wrongOwner, on.wrongOwner)
	}
	if off.notLinearizable+on.notLinearizable > 0 {
		t.Errorf("histories not linearizable with real clocks: %d without acknowledgement, %d with", off.notLinearizable, on.notLinearizable)
	}
	if off.overlaps == 0 || off.staleRefused == 0 {
		t.Errorf("the negative control saw no hazard in %d failovers: %d overlapping owners, %d stale writes refused", off.failovers, off.overlaps, off.staleRefused)
	}
	if on.failovers < 8 {
		t.Errorf("with acknowledgement the drills covered %d failovers, want at least 8", on.failovers)
	}
	if on.overlaps != 0 || on.reissued != 0 {
		t.Errorf("with replica acknowledgement: %d overlapping owners and %d fences issued again in %d failovers, want none", on.overlaps, on.reissued, on.failovers)
	}
}
