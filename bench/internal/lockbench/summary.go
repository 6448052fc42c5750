package lockbench

import (
	"math"
	"slices"
	"time"
)

// Summary is a Result reduced to the figures of the report: medians of
// rounds, ratios as medians of per-round ratios, latencies pooled over all
// rounds.
type Summary struct {
	Raw      []RawRow
	Cycles   []CycleRow
	Handoff  []HandoffRow
	Ops      []OpRow
	Scale    []ScaleRow // the scale section's cells; nil when it did not run
	Procs    []ProcRow
	FIFO     []FIFORow
	Etcd     []DBRow
	PG       []DBRow
	Replicas []ReplicaRow
}

// Rate is a median of rounds with the rounds' spread (half their range over
// the median).
type Rate struct {
	Median, Spread float64
	Min, Max       float64
}

// CPU is the median CPU time per operation in this process and in
// redis-server, and how many cores the two kept busy together.
type CPU struct {
	Known          bool
	Client, Server time.Duration
	CoresBusy      float64
	// Script is the median time redis-server spent inside one EVALSHA
	// (INFO commandstats), 0 when the cells ran none.
	Script time.Duration
}

// RawRow is the baseline at one concurrency.
type RawRow struct {
	Concurrency   int
	Ping, EvalSha Rate
	EvalShaCPU    CPU
}

// CycleRow is one library's uncontended acquire+release at one concurrency.
type CycleRow struct {
	Concurrency int
	ID, Label   string
	Rate        Rate
	// VsRaw is the cycle rate over half the raw EVALSHA rate of the same
	// round: 1 would be two round trips' worth with nothing else.
	VsRaw float64
	// VsLeasehold is leasehold's rate over this library's (1 for leasehold).
	VsLeasehold float64
	CPU         CPU
}

// HandoffRow is one contender on one key with Workers workers.
type HandoffRow struct {
	Workers           int
	ID, Label         string
	Transfers         Rate
	N                 int
	P50, P99, Max     time.Duration
	RoundP99Min       time.Duration
	RoundP99Max       time.Duration
	TripsPerTransfer  float64
	PubSubPerTransfer float64
	GaveUp            int64
	Hold              time.Duration // median measured critical section
}

// OpRow is one library's round trips per operation.
type OpRow struct {
	ID                                        string
	Acquire, Release, Renew, Busy             float64
	AcquireCmd, ReleaseCmd, RenewCmd, BusyCmd string
}

// Summarize reduces r to its report's figures.
func (r *Result) Summarize() Summary {
	s := Summary{Scale: r.scale}
	if r.Config.Runs(SectionProcesses) {
		s.Procs, s.FIFO = r.procRows(), r.fifoRows()
	}
	s.Etcd, s.PG = r.dbRows(SectionEtcd), r.dbRows(SectionPostgres)
	if r.Config.Runs(SectionReplicas) {
		s.Replicas = r.replicaRows()
	}
	if !r.Config.Runs(SectionLocks) {
		return s
	}
	for _, conc := range r.Config.Concurrency {
		ping, eval := r.cells[cellKey{"raw", "PING", conc}], r.cells[cellKey{"raw", "EVALSHA", conc}]
		s.Raw = append(s.Raw, RawRow{Concurrency: conc, Ping: rateOf(ping), EvalSha: rateOf(eval), EvalShaCPU: cpuOf(eval)})
		lh := r.cells[cellKey{"cycle", "leasehold", conc}]
		for _, id := range r.cycleIDs {
			cs := r.cells[cellKey{"cycle", id, conc}]
			s.Cycles = append(s.Cycles, CycleRow{
				Concurrency: conc, ID: id, Label: r.labels["cycle/"+id],
				Rate:        rateOf(cs),
				VsRaw:       pairedRatio(cs, eval, 0.5),
				VsLeasehold: pairedRatio(lh, cs, 1),
				CPU:         cpuOf(cs),
			})
		}
	}
	for _, workers := range r.Config.Workers {
		for _, id := range r.handoffIDs {
			cs := r.cells[cellKey{"handoff", id, workers}]
			row := HandoffRow{Workers: workers, ID: id, Label: r.labels["handoff/"+id], Transfers: rateOf(cs)}
			var all, holds []time.Duration
			var trips, pubsub []float64
			for i, c := range cs {
				all = append(all, c.handoffs...)
				holds = append(holds, c.holds...)
				row.GaveUp += c.gaveUp
				p99 := summarize(c.handoffs).p99
				if i == 0 || p99 < row.RoundP99Min {
					row.RoundP99Min = p99
				}
				row.RoundP99Max = max(row.RoundP99Max, p99)
				if c.ops > 0 {
					trips = append(trips, float64(c.trips)/float64(c.ops))
					pubsub = append(pubsub, float64(c.pubsub)/float64(c.ops))
				}
			}
			l := summarize(all)
			row.N, row.P50, row.P99, row.Max = l.n, l.p50, l.p99, l.max
			row.Hold = summarize(holds).p50
			row.TripsPerTransfer, row.PubSubPerTransfer = median(trips), median(pubsub)
			s.Handoff = append(s.Handoff, row)
		}
	}
	for _, o := range r.ops {
		s.Ops = append(s.Ops, OpRow{
			ID: o.id, Acquire: o.acquire, Release: o.release, Renew: o.renew, Busy: o.busy,
			AcquireCmd: o.acquireCmd, ReleaseCmd: o.releaseCmd, RenewCmd: o.renewCmd, BusyCmd: o.busyCmd,
		})
	}
	return s
}

func rateOf(cs []cell) Rate {
	rates := make([]float64, len(cs))
	for i, c := range cs {
		rates[i] = c.rate()
	}
	r := Rate{Median: median(rates), Spread: spread(rates), Min: math.NaN(), Max: math.NaN()}
	if len(rates) > 0 {
		r.Min, r.Max = slices.Min(rates), slices.Max(rates)
	}
	return r
}

// pairedRatio is the median over rounds of a's rate over (b's rate × scale)
// in the same round.
func pairedRatio(a, b []cell, scale float64) float64 {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if d := b[i].rate() * scale; d > 0 {
			rs = append(rs, a[i].rate()/d)
		}
	}
	return median(rs)
}

func cpuOf(cs []cell) CPU {
	var client, server, busy []float64
	for _, c := range cs {
		if !c.cpuKnown || c.ops == 0 || c.elapsed <= 0 {
			continue
		}
		client = append(client, float64(c.clientCPU)/float64(c.ops))
		server = append(server, float64(c.serverCPU)/float64(c.ops))
		busy = append(busy, float64(c.clientCPU+c.serverCPU)/float64(c.elapsed))
	}
	var script []float64
	for _, c := range cs {
		if c.evalCalls > 0 {
			script = append(script, float64(c.evalTime)/float64(c.evalCalls))
		}
	}
	if len(client) == 0 {
		return CPU{}
	}
	cpu := CPU{
		Known:     true,
		Client:    time.Duration(median(client)),
		Server:    time.Duration(median(server)),
		CoresBusy: median(busy),
	}
	if len(script) > 0 {
		cpu.Script = time.Duration(median(script))
	}
	return cpu
}

// row helpers for the report

func (s Summary) raw(conc int) RawRow {
	i := slices.IndexFunc(s.Raw, func(r RawRow) bool { return r.Concurrency == conc })
	if i < 0 {
		return RawRow{Ping: Rate{Median: math.NaN()}, EvalSha: Rate{Median: math.NaN()}}
	}
	return s.Raw[i]
}

func (s Summary) cycle(id string, conc int) CycleRow {
	i := slices.IndexFunc(s.Cycles, func(r CycleRow) bool { return r.ID == id && r.Concurrency == conc })
	if i < 0 {
		return CycleRow{ID: id, Concurrency: conc, Rate: Rate{Median: math.NaN()}, VsRaw: math.NaN(), VsLeasehold: math.NaN()}
	}
	return s.Cycles[i]
}

func (s Summary) handoff(id string, workers int) (HandoffRow, bool) {
	i := slices.IndexFunc(s.Handoff, func(r HandoffRow) bool { return r.ID == id && r.Workers == workers })
	if i < 0 {
		return HandoffRow{}, false
	}
	return s.Handoff[i], true
}
