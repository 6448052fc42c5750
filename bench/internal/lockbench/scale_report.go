package lockbench

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold"
)

// scaleTargetLeases is docs/design.md §9's scale: 100 000 leases in one process.
const scaleTargetLeases = 100_000

// scaleGoroutineSlack is how many goroutines an engine cell may add whatever
// its lease count: the engine's own, its calls in flight, the client's.
const scaleGoroutineSlack = batchConcurrency + 12

// scaleTarget writes the targets table's scale row.
func scaleTarget(b *strings.Builder, s Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	const what = "one process holds 100 000 leases, renewals batched, no goroutine per lease"
	var top *ScaleRow
	for i, row := range s.Scale {
		if row.Mode == modeEngine && (top == nil || row.Leases > top.Leases) {
			top = &s.Scale[i]
		}
	}
	if top == nil {
		p("| %s | not measured in this run (`--only scale`) | — |", what)
		return
	}
	added := top.Goroutines - top.GoroutinesBefore
	ok := top.Leases >= scaleTargetLeases && top.Lost == 0 && added <= scaleGoroutineSlack &&
		top.Renewals.Median >= 0.9*top.Expected
	p("| %s | %s leases held, %s renewals/s sent in %s round trips/s, %+d goroutines, %s B of heap per lease, %d lost | %s |",
		what, count(float64(top.Leases)), count(top.Renewals.Median), count(top.Trips.Median), added,
		count(top.HeapPerLease), top.Lost, verdict(ok))
}

// scaleSection writes the scale section.
func scaleSection(b *strings.Builder, r *Result, s Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	cfg := r.Config
	interval := cfg.ScaleTTL / leasehold.DefaultRenewDivisor
	p("## 5. Scale: many leases held in one process")
	p("")
	p("One process takes N leases with a %v TTL and keeps them all alive; each is renewed every", cfg.ScaleTTL)
	p("%v (ttl/3), so N leases need N renewals per %v. **%s** is `Lease.KeepAlive` on the", interval, interval, modeEngine)
	p("Client's renewal engine: one goroutine, renewals due within %v sent together, up to %s per", batchWindow, count(batchSize))
	p("pipeline, at most %d pipelines in flight (`WithBatchWindow`, `WithBatchSize`,", batchConcurrency)
	p("`WithRenewConcurrency`). **%s** is what code without the engine would", modeGoroutine)
	p("write: a goroutine and a ticker per lease calling `Lease.Renew` every %v, a round trip per", interval)
	p("lease and renewal, for comparison. Rates and CPU are medians of %d windows of", cfg.ScaleWindows)
	p("one renewal interval each, after one interval to settle (± half their range). **The machine")
	p("is shared (%d cores, redis-server on the same cores, other jobs running): the figures are", r.Env.Cores)
	p("noisy; read them for their order of magnitude.**")
	p("")
	p("| renewal | leases | renew commands/s sent (needed) | round trips/s | renewals per round trip | this process, cores | redis-server, cores | Go heap per lease | RSS (growth per lease) | goroutines (before) | leases lost |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range s.Scale {
		per := math.NaN()
		if row.Trips.Median > 0 {
			per = row.Renewals.Median / row.Trips.Median
		}
		p("| %s | %s | %s (%s) | %s | %s | %s | %s | %s B | %s | %s (%d) | %d |",
			row.Mode, count(float64(row.Leases)), rate(row.Renewals), count(row.Expected), rate(row.Trips),
			count(per), coresRate(row.CPU), coresRate(row.ServerCPU), count(row.HeapPerLease),
			rss(row), count(float64(row.Goroutines)), row.GoroutinesBefore, row.Lost)
	}
	p("")
	for _, ka := range s.Scale {
		if ka.Mode != modeGoroutine {
			continue
		}
		for _, rn := range s.Scale {
			if rn.Mode != modeEngine || rn.Leases != ka.Leases {
				continue
			}
			p("At %s leases the engine runs %d goroutines where a goroutine per lease runs %s, uses %s the Go heap",
				count(float64(rn.Leases)), rn.Goroutines, count(float64(ka.Goroutines)), ratio(rn.HeapPerLease, ka.HeapPerLease))
			p("per lease, %s B of goroutine stack per lease against %s B, and %s the round",
				count(max(rn.StackPerLease, 0)), count(ka.StackPerLease), ratio(rn.Trips.Median, ka.Trips.Median))
			p("trips. CPU: this process %s cores against %s (%s), redis-server %s against %s (%s).",
				coresRate(rn.CPU), coresRate(ka.CPU), strings.TrimSuffix(ratio(rn.CPU.Median, ka.CPU.Median), " of"),
				coresRate(rn.ServerCPU), coresRate(ka.ServerCPU), strings.TrimSuffix(ratio(rn.ServerCPU.Median, ka.ServerCPU.Median), " of"))
			p("")
		}
	}
	p("Heap per lease counts everything the lease costs in this process: the `Lease`, its key and")
	p("token, and either the `KeepAlive`, its context and its entry in the engine's heap, or the")
	p("renewal goroutine's ticker (its stack is counted apart). RSS is VmRSS while the leases are")
	p("held; Go does not return freed memory to the system at once, so the growth per lease of a")
	p("later row can read low. Leases lost counts KeepAlives that reported the lease lost or given")
	p("up, and renewal goroutines that found it gone (`ErrNotOwned`) or a TTL past its last good")
	p("renewal, during the cell (any would mean renewals did not keep up).")
	p("")
}

func coresRate(r Rate) string {
	if math.IsNaN(r.Median) {
		return "–"
	}
	return strconv.FormatFloat(r.Median, 'f', 2, 64)
}

func rss(row ScaleRow) string {
	if row.RSS <= 0 {
		return "–"
	}
	s := strconv.FormatFloat(float64(row.RSS)/(1<<20), 'f', 0, 64) + " MiB"
	if row.RSSPerLease > 0 {
		s += " (" + count(row.RSSPerLease) + " B)"
	}
	return s
}

// ratio says how a compares with b: "1/40 of", "0.5×", "2.0×".
func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || a <= 0 || b <= 0 {
		return "–"
	}
	if a < b/2 {
		return "1/" + strconv.FormatFloat(math.Round(b/a), 'f', 0, 64) + " of"
	}
	return strconv.FormatFloat(a/b, 'f', 1, 64) + "×"
}
