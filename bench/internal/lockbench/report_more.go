package lockbench

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// procsSection is the hand-off table with a client per worker.
func procsSection(b *strings.Builder, r *Result, s Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	cfg := r.Config
	p("## 6. Contended hand-off with a client per worker (= processes)")
	p("")
	p("Workers on one key, as in §3, but each worker has clients of its own, as separate processes")
	p("would: leasehold a `leasehold.Client` on its own `redisstore.Store` and go-redis client (pool of")
	p("%d); redislock its own go-redis client (`LinearBackoff(25ms)`); rueidislock its own Locker (its", processWorkerPool)
	p("own rueidis connection, options as in §2). \"leasehold, one Client\" is §3's shared Client, for")
	p("reference. Unlike §3 a worker that released asks again at once (hold %v), as a process in a", cfg.Hold)
	p("loop would, so the releaser may take the key straight back. A **transfer** is any acquire; a")
	p("**hand-off** is a transfer to another worker, and its latency runs from just before the release")
	p("call to that worker's acquire returning. **To a waiter**: the new owner's acquire began before the")
	p("release call. **Releaser again**: the share of consecutive turns won by the worker that held the")
	p("key just before (FIFO would give 0 %%, a fair draw 1 in the number of workers). Round trips count")
	p("every command of every worker (rueidislock: commands, which rueidis may pipeline together), but")
	p("not leasehold's SUBSCRIBE/UNSUBSCRIBE on its pub/sub connections, counted at the server in their")
	p("own column (rueidislock's wake-up is CLIENT TRACKING, set once per connection). Each")
	p("wait is bounded by %v. The ratio is leasehold's transfers/s with a Client per worker over the", cfg.Wait)
	p("row's, paired by round.")
	p("")
	p("| workers | contender | transfers/s | leasehold (Client per worker) ÷ it | hand-off p50 | p99 | max | n | round trips per transfer | pub/sub commands per transfer | to a waiter | releaser again | waits given up |")
	p("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, h := range s.Procs {
		p("| %d | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s | %d |", h.Workers, h.Label,
			rate(h.Transfers), times(h.VsLeasehold), fmtDur(h.P50), fmtDur(h.P99), fmtDur(h.Max), h.N,
			num(math.Round(h.TripsPerTransfer*100)/100), num(math.Round(h.PubSub*100)/100), pct(h.Waited), pct(h.Retook), h.GaveUp)
	}
	p("")
}

// fifoSection is the FIFO measurement.
func fifoSection(b *strings.Builder, r *Result, s Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	p("## 7. FIFO: are waiters served in the order they came?")
	p("")
	p("**Inversions against arrival order.** One worker holds the key; %d others, each with its own", fifoWaiters)
	p("clients as in §6, call a waiting acquire one after another, a fixed gap apart; one gap after the")
	p("last, the holder releases. Each waiter holds the key %v and releases it. Arrival order is the", r.Config.Hold)
	p("order in which the acquire calls began; an **inversion** is a pair of waiters served out of that")
	p("order (0 is FIFO, %d is served in reverse; a waiter that gave up counts as served last). One", fifoWaiters*(fifoWaiters-1)/2)
	p("trial per contender and gap in each round.")
	p("")
	p("| arrivals apart | contender | trials | in order | inversions per trial: median | mean | max | waits given up |")
	p("|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, f := range s.FIFO {
		p("| %d ms | %s | %d | %d of %d | %s | %s | %d | %d |", f.GapMS, f.Label, f.Trials, f.InOrder, f.Trials,
			num(f.Inversions), num(math.Round(f.MeanInv*100)/100), f.MaxInv, f.GaveUp)
	}
	p("")
	if len(s.Procs) > 0 {
		p("**A worker that re-acquires in a tight loop** against the others: the share of consecutive")
		p("turns won by the worker that held the key just before (§6's \"releaser again\"). FIFO gives")
		p("0 %%, a fair draw 1 in the number of workers.")
		p("")
		p("| workers | fair draw | %s |", strings.Join(labelsOf(r.procIDs, r, "procs/"), " | "))
		p("|---:|---:|%s", strings.Repeat("---:|", len(r.procIDs)))
		for _, w := range r.Config.Workers {
			line := fmt.Sprintf("| %d | %s |", w, pct(1/float64(w)))
			for _, h := range s.Procs {
				if h.Workers == w {
					line += " " + pct(h.Retook) + " |"
				}
			}
			p("%s", line)
		}
		p("")
	}
}

func labelsOf(ids []string, r *Result, prefix string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = r.labels[prefix+id]
	}
	return out
}

// dbSection is the etcd or PostgreSQL cycle table.
func dbSection(b *strings.Builder, r *Result, rows []DBRow, kind string) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	if kind == SectionEtcd {
		p("## 8. etcd: acquire+release against concurrency.Mutex")
		p("")
		p("One etcd (%s). Each goroutine takes and releases its own key, again and again.", r.dbFrom[kind])
		p("leasehold: `TryAcquire` + `Release` through `leasehold.New(etcdstore)`, one Client for all")
		p("goroutines, %v TTL. `concurrency.Mutex`: `TryLock` + `Unlock`, one `concurrency.Session`", dbTTL)
		p("(%v TTL) per goroutine, made before any timed loop. Each side has its own clientv3 client;", dbTTL)
		p("round trips are its unary gRPC calls, counted by an interceptor (the sessions' lease keep-alive")
		p("stream is not counted).")
		p("")
		p("The parts rows take etcdstore's cycle for a free key no one waits for apart, on their own")
		p("client, each worker's lock on a lease of its own granted before the cell, each row adding one")
		p("thing to the row above it: the lock key alone (put on the lease if it does not exist, then")
		p("deleted by key, the Mutex's own writes); the release deleting it only if it still holds the")
		p("token; the acquire also putting the fence key; the acquire also requiring the key's queue")
		p("prefix empty (etcdstore's two transactions); and a keep-alive of the lease sent alongside")
		p("each acquire, on a stream per worker, as etcdstore's `Acquire` keeps the idle lease it reuses")
		p("alive so that the lock lasts its whole TTL from the acquire. The Client acquires through")
		p("`AcquireDated`, which counts the lock from the lease's last keep-alive when that was less than")
		p("a twentieth of the TTL ago and then sends none, so leasehold's row lies between the last two.")
		p("Server CPU is etcd's on-CPU time (`/proc/PID/schedstat`)")
		p("over the cell, client CPU this process's, both per cycle, medians of the rounds.")
	} else {
		p("## 9. PostgreSQL: acquire+release against advisory locks")
		p("")
		p("One PostgreSQL (%s). Each goroutine takes and releases its own key, again and again.", r.dbFrom[kind])
		p("leasehold: `TryAcquire` + `Release` through `leasehold.New(pgstore)`, one Client. Advisory:")
		p("on a connection taken from the pool for the cycle, `SELECT pg_try_advisory_lock($1)`, then")
		p("`SELECT pg_advisory_unlock($1)`, and the connection back (session-level locks). Each side has its")
		p("own pgxpool; round trips are its statements, counted by a pgx tracer. pgstore's release")
		p("sends `pg_notify` only when a waiter is queued for the key, so no NOTIFY here. The server is")
		p("set up as the tests' is: with `fsync` off a commit does not wait for the disk, so each row's")
		p("statements, not the flush, decide the ratios; on a server that flushes its WAL the flush is")
		p("most of a cycle and the ratios move toward 1 (design.md §9 has one such measurement).")
		p("")
		p("The other rows take pgstore apart, each on its own pool: `pgstore.Store` Acquire + Release")
		p("called directly (no Client); and raw statements on a table of pgstore's shape, one per")
		p("operation: the lease row alone (conditional upsert of owner and expiry, then an UPDATE clearing")
		p("them); + the fence (max(last + 1, clock) in the same row), returned by the upsert alone, so that a")
		p("refusal returns nothing; + the holder's TTL read back for a refusal in the same statement, which")
		p("takes a statement with a CTE and, as in pgstore, a function called only for a refusal: pgstore's")
		p("acquire and release without its queue; + the release")
		p("returning a row (NULL) and taking the channel as a third argument, as pgstore's release does to")
		p("call its wake-up only when a waiter is queued, so that a release no one waits for sends no NOTIFY. Server")
		p("CPU is the on-CPU time of the PostgreSQL backends of the contender's")
		p("connections (`/proc/PID/schedstat`, found by `application_name`), client CPU this process's,")
		p("both per cycle, medians of the rounds.")
	}
	p("")
	other := ""
	if ids := r.dbIDs[kind]; len(ids) > 1 {
		other = r.labels[kind+"/"+ids[1]]
	}
	// CPU per cycle, medians of the rounds: a machine shared with other
	// work moves the rates far more than the CPU a cycle takes.
	p("| goroutines | contender | cycles/s | round trips per cycle | leasehold ÷ it | server CPU per cycle | client CPU per cycle |")
	p("|---:|---|---:|---:|---:|---:|---:|")
	for _, row := range rows {
		server, client := "—", "—"
		if row.CPU.Known {
			server, client = us(row.CPU.Server), us(row.CPU.Client)
		}
		p("| %d | %s | %s | %s | %s | %s | %s |", row.Concurrency, row.Label, rate(row.Rate), num(math.Round(row.TripsPerCycle*100)/100), times(row.VsLeasehold), server, client)
	}
	p("")
	var vs []string
	for _, row := range rows {
		if ids := r.dbIDs[kind]; len(ids) > 1 && row.ID == ids[1] {
			vs = append(vs, fmt.Sprintf("%s at %d", times(row.VsLeasehold), row.Concurrency))
		}
	}
	if len(vs) > 0 {
		p("leasehold ÷ %s, paired by round: %s.", other, strings.Join(vs, ", "))
		p("")
	}
}

// peerTargets are the rows of the Targets table that hold leasehold to its
// peers and to the parts it is built on (docs/design.md §9), each from this
// run. Advisory locks on PostgreSQL are a reference, not a target: they live
// in shared memory and give neither expiry nor fences.
func peerTargets(b *strings.Builder, r *Result, s Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	cfg := r.Config
	if cfg.Runs(SectionLocks) && slices.Contains(r.cycleIDs, "rueidislock") {
		var vs []string
		ok := true
		for _, conc := range cfg.Concurrency {
			rl, rd := s.cycle("redislock", conc).VsLeasehold, s.cycle("rueidislock", conc).VsLeasehold
			if conc == 1 {
				ok = ok && rl >= 1
			} else {
				ok = ok && rl >= 1.5 && rd >= 1
			}
			vs = append(vs, fmt.Sprintf("%d: %s / %s", conc, times(rl), times(rd)))
		}
		p("| uncontended cycles: at 1 goroutine ≥ 1.0× redislock; above, ≥ 1.5× redislock and ≥ 1.0× rueidislock (leasehold ÷ redislock / ÷ rueidislock) | %s | %s |", strings.Join(vs, ", "), verdict(ok))
	}
	if cfg.Runs(SectionProcesses) {
		for _, h := range s.Procs {
			if h.ID != "leasehold" || h.Workers != slices.Max(cfg.Workers) {
				continue
			}
			ok := h.Transfers.Median >= 4000 && h.N > 0 && h.P99 <= handoffTarget && h.TripsPerTransfer <= 3 && h.Waited >= 0.95 && h.GaveUp == 0
			p("| hand-off, %d Clients on one key: ≥ 4,000 transfers/s, p99 ≤ 1 ms, ≤ 3 round trips per transfer, ≥ 95 %% to a waiter, no wait lost | %s/s, %s, %s, %s, %d lost | %s |",
				h.Workers, count(h.Transfers.Median), fmtDur(h.P99), num(math.Round(h.TripsPerTransfer*100)/100), pct(h.Waited), h.GaveUp, verdict(ok))
		}
		var vs []string
		ok := true
		for _, f := range s.FIFO {
			if f.ID != "leasehold" {
				continue
			}
			vs = append(vs, fmt.Sprintf("%d ms apart: %d of %d trials in order", f.GapMS, f.InOrder, f.Trials))
			ok = ok && f.Trials > 0 && f.InOrder == f.Trials
		}
		p("| 0 inversions for waiters (a Client each) arriving ≥ 1 ms apart | %s | %s |", strings.Join(vs, ", "), verdict(ok))
	}
	for _, d := range []struct {
		kind, what, id string
		bound          float64
		ref            string // a contender reported beside the target, not judged
		rows           []DBRow
	}{
		{SectionEtcd, "etcd: ≥ 0.9× concurrency.Mutex TryLock+Unlock at 1 and 16 goroutines (leasehold ÷ it)", "mutex", 0.9, "", s.Etcd},
		{SectionPostgres, "PostgreSQL: ≥ 0.95× the lease row it is built on (a conditional upsert, then a clear) at 1 and 16 goroutines (leasehold ÷ it)", "row", 0.95, "advisory", s.PG},
	} {
		if !cfg.Runs(d.kind) {
			continue
		}
		var vs, refs []string
		ok, seen := true, map[int]bool{}
		for _, row := range d.rows {
			switch row.ID {
			case d.id:
				vs = append(vs, fmt.Sprintf("%d: %s", row.Concurrency, times(row.VsLeasehold)))
				seen[row.Concurrency] = true
				ok = ok && row.VsLeasehold >= d.bound
			case d.ref:
				refs = append(refs, fmt.Sprintf("%d: %s", row.Concurrency, times(row.VsLeasehold)))
			}
		}
		measured := strings.Join(vs, ", ")
		if len(refs) > 0 {
			measured += fmt.Sprintf(" (a reference, not a target: ÷ %s %s)", r.labels[d.kind+"/"+d.ref], strings.Join(refs, ", "))
		}
		// The target is at 1 and at 16 goroutines: a run without either
		// (--db-concurrency) does not meet it.
		p("| %s | %s | %s |", d.what, measured, verdict(ok && seen[1] && seen[16]))
	}
}
