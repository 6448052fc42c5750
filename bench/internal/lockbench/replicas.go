package lockbench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// replicaBench is the replicas section: a primary with one replica, both
// started by the run on loopback, and leasehold on it with replica
// acknowledgement (redisstore's default there: WAIT 1 after each write)
// and without (WithoutReplicaAcks), each on a client of its own.
type replicaBench struct {
	from    string
	p       probe // the primary's counters, not the main server's
	cycle   []*contender
	handoff []*contender
	closers []func()
}

func (rb *replicaBench) close() {
	for i := len(rb.closers) - 1; i >= 0; i-- {
		rb.closers[i]()
	}
}

// replicaIDs are the section's contenders, acknowledged first.
var replicaIDs = []string{"acks", "no-acks"}

// newReplicaBench starts the primary and its replica and makes the
// contenders on clients with opts (Addr aside).
func newReplicaBench(opts *redis.Options) (_ *replicaBench, err error) {
	primary, err := testserver.NewRedisServer()
	if err != nil {
		return nil, fmt.Errorf("lockbench: replicas: %w", err)
	}
	rb := &replicaBench{}
	rb.closers = append(rb.closers, func() { _ = primary.Close() })
	defer func() {
		if err != nil {
			rb.close()
		}
	}()
	replica, err := testserver.NewRedisReplica(primary)
	if err != nil {
		return nil, fmt.Errorf("lockbench: replicas: %w", err)
	}
	rb.closers = append(rb.closers, func() { _ = replica.Close() })
	rb.from = fmt.Sprintf("started by the command: primary %s, replica %s (no persistence)", primary.Addr(), replica.Addr())
	o := *opts
	o.Addr = primary.Addr()
	admin := redis.NewClient(&o)
	rb.closers = append(rb.closers, func() { _ = admin.Close() })
	rb.p = probe{admin: admin}
	for _, id := range replicaIDs {
		lib := newLibrary("leasehold-"+id, &o)
		rb.closers = append(rb.closers, func() { _ = lib.client.Close() })
		var sopts []redisstore.Option
		label := "leasehold, default (WAIT 1: the primary reports a replica)"
		if id == "no-acks" {
			sopts, label = []redisstore.Option{redisstore.WithoutReplicaAcks()}, "leasehold, WithoutReplicaAcks"
		}
		store, err := redisstore.New(lib.client, sopts...)
		if err != nil {
			return nil, err
		}
		rb.closers = append(rb.closers, func() { _ = store.Close() })
		c := leasehold.New(store)
		rb.cycle = append(rb.cycle, &contender{id: id, label: label, lib: lib, newHandle: func(key string) handle {
			return &leaseholdHandle{c: c, key: key, try: true}
		}})
		rb.handoff = append(rb.handoff, &contender{id: id, label: label, lib: lib, newHandle: func(key string) handle {
			return &leaseholdHandle{c: c, key: key}
		}})
	}
	return rb, nil
}

// replicaGroups are the replicas section's cells of one round: for each
// concurrency, acquire+release cycles with and without acknowledgement;
// for each worker count, hand-off on one key, the same two.
func (r *runner) replicaGroups(round int, d, hd time.Duration) [][]step {
	var groups [][]step
	for _, conc := range r.cfg.Concurrency {
		var g []step
		for _, ct := range r.rb.cycle {
			g = append(g, step{cellKey{"rcycle", ct.id, conc}, func(ctx context.Context, c *cell) error {
				handles := make([]handle, conc)
				for w := range handles {
					handles[w] = ct.newHandle(fmt.Sprintf("%srcycle:%s:%d:%d:%d", r.prefix, ct.id, conc, round, w))
				}
				return load(ctx, c, r.rb.p, ct.lib, conc, d, func(ctx context.Context, w int) error {
					return cycle(ctx, handles[w], false)
				})
			}})
		}
		groups = append(groups, g)
	}
	for _, workers := range r.cfg.Workers {
		var g []step
		for _, ct := range r.rb.handoff {
			g = append(g, step{cellKey{"rhandoff", ct.id, workers}, func(ctx context.Context, c *cell) error {
				key := fmt.Sprintf("%srhandoff:%s:%d:%d", r.prefix, ct.id, workers, round)
				return handoff(ctx, c, r.rb.p, ct, key, workers, hd, r.cfg.Hold, r.cfg.Wait, true)
			}})
		}
		groups = append(groups, g)
	}
	return groups
}

// ReplicaRow is one concurrency (cycles) or worker count (hand-off) of the
// replicas section: each contender's rate, the per-round ratio of
// acknowledged over not, and, for hand-off, each one's latency.
type ReplicaRow struct {
	Kind     string // "cycles" or "hand-off"
	N        int
	Acks     Rate
	NoAcks   Rate
	Ratio    float64 // median of per-round acks ÷ no-acks
	AcksCPU  CPU
	P50, P99 [2]time.Duration // acks, no-acks
}

// replicaRows summarises the replicas section.
func (r *Result) replicaRows() []ReplicaRow {
	var rows []ReplicaRow
	add := func(kind, cellKind string, ns []int) {
		for _, n := range ns {
			on, off := r.cells[cellKey{cellKind, "acks", n}], r.cells[cellKey{cellKind, "no-acks", n}]
			row := ReplicaRow{Kind: kind, N: n, Acks: rateOf(on), NoAcks: rateOf(off), Ratio: pairedRatio(on, off, 1), AcksCPU: cpuOf(on)}
			for i, cs := range [][]cell{on, off} {
				var all []time.Duration
				for _, c := range cs {
					all = append(all, c.handoffs...)
				}
				l := summarize(all)
				row.P50[i], row.P99[i] = l.p50, l.p99
			}
			rows = append(rows, row)
		}
	}
	add("cycles", "rcycle", r.Config.Concurrency)
	add("hand-off", "rhandoff", r.Config.Workers)
	return rows
}

// replicaSection writes the replicas section.
func replicaSection(b *strings.Builder, r *Result, s Summary) {
	p := func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
	p("## 10. Replica acknowledgement: a primary with one replica")
	p("")
	p("A primary with one replica, %s. By default redisstore returns a lease only once the", r.dbFrom[SectionReplicas])
	p("replica has the acquire (`WAIT 1` in the acquire's own round trip, one per batch of calls;")
	p("renewals too); `WithoutReplicaAcks` returns it as soon as the primary has it, which a")
	p("failover can lose. Uncontended acquire+release cycles (one key per goroutine), then hand-off")
	p("on one key among waiting workers (hold %v); medians of %s, interleaved with every other cell.", r.Config.Hold, plural(r.Config.Rounds, "round"))
	p("")
	p("| | N | default (acks) | WithoutReplicaAcks | acks ÷ no acks | hand-off p50 / p99, acks | hand-off p50 / p99, no acks |")
	p("|---|---:|---:|---:|---:|---:|---:|")
	for _, row := range s.Replicas {
		lat := [2]string{"", ""}
		if row.Kind == "hand-off" {
			for i := range lat {
				lat[i] = fmtDur(row.P50[i]) + " / " + fmtDur(row.P99[i])
			}
		}
		p("| %s | %d | %s | %s | %s | %s | %s |", row.Kind, row.N, rate(row.Acks), rate(row.NoAcks), times(row.Ratio), lat[0], lat[1])
	}
	p("")
	p("N is goroutines (cycles) or workers (hand-off); rates are cycles or transfers per second.")
	p("The replica runs on the same cores as the primary and the benchmark: each acknowledgement")
	p("is a round trip from the primary to the replica and back, on loopback.")
	p("")
}
