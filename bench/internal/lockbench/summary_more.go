package lockbench

import (
	"math"
	"time"
)

// ProcRow is one contender of the processes section's hand-off table.
type ProcRow struct {
	Workers          int
	ID, Label        string
	Transfers        Rate
	VsLeasehold      float64 // leasehold's (a Client per worker) transfers/s over this one's, paired by round
	N                int
	P50, P99, Max    time.Duration
	TripsPerTransfer float64
	PubSub           float64 // SUBSCRIBE + UNSUBSCRIBE per transfer, counted at the server
	Waited           float64 // share of transfers to a worker already waiting
	Retook           float64 // share of turns won by the worker that held the key before
	GaveUp           int64
}

// FIFORow is one contender's FIFO trials at one arrival gap.
type FIFORow struct {
	GapMS      int
	ID, Label  string
	Trials     int
	Inversions float64 // median per trial
	MeanInv    float64
	MaxInv     int64
	InOrder    int // trials served wholly in arrival order, none lost
	GaveUp     int64
}

// DBRow is one contender's cycles on etcd or PostgreSQL.
type DBRow struct {
	Kind          string
	Concurrency   int
	ID, Label     string
	Rate          Rate
	TripsPerCycle float64
	// VsLeasehold is leasehold's rate over this contender's, paired by
	// round (1 for leasehold).
	VsLeasehold float64
	// CPU per cycle: this process's, and the server processes' of the
	// contender's connections when known (PostgreSQL).
	CPU CPU
}

func (r *Result) procRows() []ProcRow {
	var rows []ProcRow
	for _, workers := range r.Config.Workers {
		ref := r.cells[cellKey{"procs", "leasehold", workers}]
		for _, id := range r.procIDs {
			cs := r.cells[cellKey{"procs", id, workers}]
			row := ProcRow{Workers: workers, ID: id, Label: r.labels["procs/"+id], Transfers: rateOf(cs),
				VsLeasehold: pairedRatio(ref, cs, 1)}
			var all []time.Duration
			var trips, pubsub []float64
			var transfers, waited, turns, retook int64
			for _, c := range cs {
				all = append(all, c.handoffs...)
				row.GaveUp += c.gaveUp
				transfers += c.ops
				waited += c.waited
				turns += c.turns
				retook += c.retook
				if c.ops > 0 {
					trips = append(trips, float64(c.trips)/float64(c.ops))
					pubsub = append(pubsub, float64(c.pubsub)/float64(c.ops))
				}
			}
			l := summarize(all)
			row.N, row.P50, row.P99, row.Max = l.n, l.p50, l.p99, l.max
			row.TripsPerTransfer, row.PubSub = median(trips), median(pubsub)
			row.Waited, row.Retook = share(waited, transfers), share(retook, turns)
			rows = append(rows, row)
		}
	}
	return rows
}

func (r *Result) fifoRows() []FIFORow {
	var rows []FIFORow
	for _, gap := range fifoGaps {
		ms := int(gap / time.Millisecond)
		for _, id := range r.procIDs {
			cs := r.cells[cellKey{"fifo", id, ms}]
			row := FIFORow{GapMS: ms, ID: id, Label: r.labels["procs/"+id], Trials: len(cs)}
			var inv []float64
			for _, c := range cs {
				inv = append(inv, float64(c.inversions))
				row.MeanInv += float64(c.inversions)
				row.MaxInv = max(row.MaxInv, c.inversions)
				row.GaveUp += c.gaveUp
				if c.inOrder {
					row.InOrder++
				}
			}
			row.Inversions = median(inv)
			if len(cs) > 0 {
				row.MeanInv /= float64(len(cs))
			} else {
				row.MeanInv = math.NaN()
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func (r *Result) dbRows(kind string) []DBRow {
	var rows []DBRow
	ids := r.dbIDs[kind]
	if len(ids) == 0 {
		return nil
	}
	for _, conc := range r.Config.DBConcurrency {
		lh := r.cells[cellKey{kind, ids[0], conc}]
		for _, id := range ids {
			cs := r.cells[cellKey{kind, id, conc}]
			var trips []float64
			for _, c := range cs {
				if c.ops > 0 {
					trips = append(trips, float64(c.trips)/float64(c.ops))
				}
			}
			rows = append(rows, DBRow{Kind: kind, Concurrency: conc, ID: id, Label: r.labels[kind+"/"+id],
				Rate: rateOf(cs), TripsPerCycle: median(trips), VsLeasehold: pairedRatio(lh, cs, 1), CPU: cpuOf(cs)})
		}
	}
	return rows
}

func share(part, whole int64) float64 {
	if whole == 0 {
		return math.NaN()
	}
	return float64(part) / float64(whole)
}
