package e2e_test

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
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
	unsafe                                                             []string // the text of each run with another safety violation
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
// refused. A history that is not linearizable is counted, not failed on
// here: it is how the checker reports fences issued again.
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
		sum.reissued += reissuedFences(rep.History)
		sum.staleRefused += rep.StaleRefused
		unsafe := false
		for _, v := range rep.Violations {
			switch v.Check {
			case check.NotLinearizable:
				sum.notLinearizable++
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
