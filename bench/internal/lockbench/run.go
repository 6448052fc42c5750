package lockbench

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// Config is one run. The zero value is not valid; start from DefaultConfig.
type Config struct {
	// RedisURL is the Redis to measure, on a loopback address. Empty: the
	// run starts its own redis-server on a free port of 127.0.0.1.
	RedisURL string
	// Duration of one raw or uncontended cell in one round: short, so that
	// the rounds are many and the contenders' cells close in time. Default
	// 200 ms.
	Duration time.Duration
	// HandoffDuration is the measured part of one contended cell in one
	// round (the workers join over 50 ms before it). Longer than Duration,
	// since the pollers hand off only tens of times a second. Default 500 ms.
	HandoffDuration time.Duration
	// Rounds over all cells; the report gives their medians. Default 16.
	Rounds int
	// Warmup is the duration of each cell in one unrecorded round before the
	// first (scripts loaded, connections dialled, CPU clocks up). 0: none.
	// Default 250 ms.
	Warmup time.Duration
	// Concurrency levels of the raw and uncontended runs. Default 1, 16, 64.
	Concurrency []int
	// Workers on one key in the contended runs, each at least 2. Default 8, 64.
	Workers []int
	// DBConcurrency are the goroutine counts of the etcd and PostgreSQL
	// cycle tables. Default 1, 16.
	DBConcurrency []int
	// Hold is the critical section of the contended runs. Default 200 µs.
	Hold time.Duration
	// Wait bounds one waiting acquire in the contended runs (redsync's own
	// 32 tries end sooner). Default 5 s.
	Wait time.Duration
	// Sections to run: SectionLocks (raw round trips, cycles, hand-off,
	// round trips per operation, interleaved) and SectionScale. Default both.
	Sections []string
	// ScaleLeases are the lease counts of the scale section, each held in
	// this process and kept alive by Lease.KeepAlive on the Client's
	// renewal engine. Default 10 000, 50 000, 100 000.
	ScaleLeases []int
	// ScaleTTL is the scale leases' TTL; they are renewed every third of it.
	// Short, so that renewals are many: default 3 s, a renewal a second.
	ScaleTTL time.Duration
	// ScaleWindows is how many renewal intervals each scale cell is measured
	// over, after one to settle; the report gives medians. Default 5.
	ScaleWindows int
	// ScaleCompare is the lease count at which the scale section also
	// measures a goroutine per lease calling Lease.Renew, to compare. 0: not
	// measured. Default 10 000.
	ScaleCompare int
	// Unbatched adds to the uncontended cycles leasehold on a Store made
	// with redisstore.WithoutBatching (its own client, the same options):
	// each call a command of its own, as before the Store batched them.
	Unbatched bool
	// Command is shown in the report as the way to reproduce it.
	Command string
	// Log receives a line per measured cell; nil: silent.
	Log io.Writer
}

// DefaultConfig is the configuration of the published report: about two
// minutes on 2 cores.
func DefaultConfig() Config {
	return Config{
		Duration:        200 * time.Millisecond,
		HandoffDuration: 500 * time.Millisecond,
		Rounds:          16,
		Warmup:          100 * time.Millisecond,
		Concurrency:     []int{1, 16, 64},
		Workers:         []int{8, 64},
		DBConcurrency:   []int{1, 16},
		Hold:            200 * time.Microsecond,
		Wait:            5 * time.Second,
		Sections:        []string{SectionLocks, SectionProcesses, SectionEtcd, SectionPostgres, SectionReplicas, SectionScale},
		ScaleLeases:     []int{10_000, 50_000, 100_000},
		ScaleTTL:        3 * time.Second,
		ScaleWindows:    5,
		ScaleCompare:    10_000,
	}
}

// Sections of a run, for Config.Sections and --only.
const (
	SectionLocks     = "locks"     // raw round trips, cycles, hand-off, round trips per operation
	SectionScale     = "scale"     // many leases held and renewed by one process
	SectionProcesses = "processes" // hand-off and FIFO with a client per worker
	SectionEtcd      = "etcd"      // cycles against concurrency.Mutex
	SectionPostgres  = "postgres"  // cycles against advisory locks
	SectionReplicas  = "replicas"  // cycles and hand-off on a primary with a replica, acknowledged or not
)

// allSections in report order.
var allSections = []string{SectionLocks, SectionProcesses, SectionEtcd, SectionPostgres, SectionReplicas, SectionScale}

// interleaved reports whether c runs a section measured round by round.
func (c Config) interleaved() bool {
	return c.Runs(SectionLocks) || c.Runs(SectionProcesses) || c.Runs(SectionEtcd) || c.Runs(SectionPostgres) || c.Runs(SectionReplicas)
}

// maxScaleLeases bounds a scale cell: each lease is a key on the server and
// about a kilobyte in this process.
const maxScaleLeases = 1_000_000

// Runs reports whether c runs section.
func (c Config) Runs(section string) bool { return slices.Contains(c.Sections, section) }

// Validate reports the first setting out of bounds, by its flag name.
func (c Config) Validate() error {
	switch {
	case c.Duration < 10*time.Millisecond || c.Duration > time.Minute:
		return fmt.Errorf("--duration %v: want 10ms to 1m", c.Duration)
	case c.HandoffDuration < 10*time.Millisecond || c.HandoffDuration > time.Minute:
		return fmt.Errorf("--handoff-duration %v: want 10ms to 1m", c.HandoffDuration)
	case c.Rounds < 1 || c.Rounds > 100:
		return fmt.Errorf("--rounds %d: want 1 to 100", c.Rounds)
	case c.Warmup < 0 || c.Warmup > time.Minute:
		return fmt.Errorf("--warmup %v: want 0 to 1m", c.Warmup)
	case len(c.Concurrency) == 0:
		return errors.New("--concurrency: want at least one level")
	case len(c.Workers) == 0:
		return errors.New("--workers: want at least one count")
	case c.Hold < 0 || c.Hold > time.Second:
		return fmt.Errorf("--hold %v: want 0 to 1s", c.Hold)
	case c.Wait < 10*time.Millisecond || c.Wait > time.Minute:
		return fmt.Errorf("--wait %v: want 10ms to 1m", c.Wait)
	}
	if len(c.Sections) == 0 {
		return errors.New("--only: want at least one section")
	}
	for _, sec := range c.Sections {
		if !slices.Contains(allSections, sec) {
			return fmt.Errorf("--only %q: want some of %s", sec, strings.Join(allSections, ", "))
		}
	}
	if c.Runs(SectionScale) {
		switch {
		case c.ScaleTTL < 300*time.Millisecond || c.ScaleTTL > time.Minute:
			return fmt.Errorf("--scale-ttl %v: want 300ms to 1m", c.ScaleTTL)
		case c.ScaleWindows < 1 || c.ScaleWindows > 100:
			return fmt.Errorf("--scale-windows %d: want 1 to 100", c.ScaleWindows)
		case c.ScaleCompare < 0 || c.ScaleCompare > maxScaleLeases:
			return fmt.Errorf("--scale-compare %d: want 0 to %d", c.ScaleCompare, maxScaleLeases)
		case len(c.ScaleLeases) == 0:
			return errors.New("--scale-leases: want at least one count")
		}
		for _, n := range c.ScaleLeases {
			if n < 1 || n > maxScaleLeases {
				return fmt.Errorf("--scale-leases %d: want 1 to %d", n, maxScaleLeases)
			}
		}
	}
	for _, n := range c.Concurrency {
		if n < 1 || n > 1024 {
			return fmt.Errorf("--concurrency %d: want 1 to 1024", n)
		}
	}
	for _, n := range c.DBConcurrency {
		if n < 1 || n > 256 {
			return fmt.Errorf("--db-concurrency %d: want 1 to 256", n)
		}
	}
	if (c.Runs(SectionEtcd) || c.Runs(SectionPostgres)) && len(c.DBConcurrency) == 0 {
		return errors.New("--db-concurrency: want at least one level")
	}
	for _, n := range c.Workers {
		if n < 2 || n > 1024 {
			return fmt.Errorf("--workers %d: want 2 to 1024 (a hand-off needs a second worker)", n)
		}
	}
	return nil
}

// cellsPerRound counts the cells of one round.
func (c Config) cellsPerRound() int {
	flat, contended := c.cellCounts()
	return flat + contended + c.fifoCells()
}

// cellCounts are the cells of one round that last Duration and those that
// last HandoffDuration.
func (c Config) cellCounts() (flat, contended int) {
	if c.Runs(SectionLocks) {
		flat += 6 * len(c.Concurrency)
		contended += 5 * len(c.Workers)
	}
	if c.Runs(SectionProcesses) {
		contended += 4 * len(c.Workers)
	}
	if c.Runs(SectionEtcd) {
		flat += 2 * len(c.DBConcurrency)
	}
	if c.Runs(SectionPostgres) {
		flat += 6 * len(c.DBConcurrency) // newPostgresBench's contenders
	}
	if c.Runs(SectionReplicas) {
		flat += len(replicaIDs) * len(c.Concurrency)
		contended += len(replicaIDs) * len(c.Workers)
	}
	return flat, contended
}

// fifoCells are the FIFO cells of one round: a trial per contender and gap.
func (c Config) fifoCells() int {
	if c.Runs(SectionProcesses) {
		return 4 * len(fifoGaps)
	}
	return 0
}

// Estimate is how long a run of c takes, setup aside.
func (c Config) Estimate() time.Duration {
	f, k := c.cellCounts()
	flat, contended := time.Duration(f), time.Duration(k)
	var fifo time.Duration
	for _, g := range fifoGaps {
		fifo += 4 * (fifoWaiters + 1) * (g + 2*time.Millisecond)
	}
	if !c.Runs(SectionProcesses) {
		fifo = 0
	}
	round := flat*c.Duration + contended*(c.HandoffDuration+joinSpread) + fifo
	warm := time.Duration(0)
	if c.Warmup > 0 {
		warm = (flat+contended)*c.Warmup + contended*joinSpread + fifo
	}
	return time.Duration(c.Rounds)*round + warm
}

// Env describes where the figures were measured.
type Env struct {
	Date       time.Time
	Cores      int // runtime.NumCPU
	GOMAXPROCS int
	GoVersion  string
	OSArch     string
	CPUModel   string // "" when unknown
	Redis      string // redis_version
	RedisFrom  string // how the server was reached
	PoolSize   int
	Modules    map[string]string // module path → version
}

// Result is everything a run measured, before it is summarised.
type Result struct {
	Config  Config
	Env     Env
	Elapsed time.Duration

	// one cell per round, by kind, contender and level
	cells map[cellKey][]cell
	// round trips per operation, by library
	ops []opCount
	// the contenders, in report order
	cycleIDs   []string
	handoffIDs []string
	procIDs    []string
	dbIDs      map[string][]string // "etcd", "postgres" → contender ids
	dbFrom     map[string]string   // where the server came from
	labels     map[string]string
	// the scale section's cells, in order
	scale []ScaleRow
}

type cellKey struct {
	kind string // "raw", "cycle", "handoff", "procs", "fifo", "etcd", "postgres"
	id   string // PING, EVALSHA or a contender's id
	n    int    // concurrency or workers; for "fifo" the gap in ms
}

// trivial is the raw baseline's script: one EVALSHA that does nothing.
var trivial = redis.NewScript("return 1")

// Run measures everything cfg asks for and returns the figures.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	started := time.Now()
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}

	opts, from, stop, err := redisOptions(cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	defer stop()
	opts.ContextTimeoutEnabled = true // the same options for every library
	opts.PoolSize = max(slices.Max(cfg.Concurrency), slices.Max(cfg.Workers)) + 4
	admin := redis.NewClient(opts)
	defer admin.Close()
	info, err := admin.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("lockbench: redis at %s: %w", opts.Addr, err)
	}
	version, _ := infoField(info, "redis_version")
	if v, ok := redisVersionAtLeast(version, 7, 0, 5); !ok {
		// rueidislock is configured with NoLoopTracking, which needs it.
		return nil, fmt.Errorf("lockbench: redis %s: want 7.0.5 or later (rueidislock's NOLOOP tracking)", v)
	}

	cs, err := newContenders(opts)
	if err != nil {
		return nil, err
	}
	defer cs.close()
	if cfg.Unbatched {
		if err := cs.addUnbatched(); err != nil {
			return nil, err
		}
	}
	if err := trivial.Load(ctx, cs.raw.client).Err(); err != nil {
		return nil, fmt.Errorf("lockbench: load the baseline script: %w", err)
	}

	res := &Result{
		Config: cfg,
		Env: Env{
			Date:       started.UTC(),
			Cores:      runtime.NumCPU(),
			GOMAXPROCS: runtime.GOMAXPROCS(0),
			GoVersion:  runtime.Version(),
			OSArch:     runtime.GOOS + "/" + runtime.GOARCH,
			CPUModel:   cpuModel(),
			Redis:      version,
			RedisFrom:  from,
			PoolSize:   opts.PoolSize,
			Modules:    moduleVersions(),
		},
		cells:  make(map[cellKey][]cell),
		labels: make(map[string]string),
		dbIDs:  make(map[string][]string),
		dbFrom: make(map[string]string),
	}
	if cfg.Runs(SectionProcesses) {
		if err := cs.setupProcesses(max(slices.Max(cfg.Workers), fifoWaiters+1)); err != nil {
			return nil, err
		}
		for _, ct := range cs.procs {
			res.procIDs = append(res.procIDs, ct.id)
			res.labels["procs/"+ct.id] = ct.label
		}
	}
	var dbs []*dbBench
	defer func() {
		for _, d := range dbs {
			d.close()
		}
	}()
	for _, sec := range []string{SectionEtcd, SectionPostgres} {
		if !cfg.Runs(sec) {
			continue
		}
		logf("lockbench: starting %s", sec)
		newBench := newEtcdBench
		if sec == SectionPostgres {
			newBench = newPostgresBench
		}
		d, err := newBench(ctx, slices.Max(cfg.DBConcurrency))
		if err != nil {
			return nil, err
		}
		dbs = append(dbs, d)
		res.dbFrom[sec] = d.from
		for _, ct := range d.cyclers {
			res.dbIDs[sec] = append(res.dbIDs[sec], ct.id)
			res.labels[sec+"/"+ct.id] = ct.label
		}
	}
	var rb *replicaBench
	if cfg.Runs(SectionReplicas) {
		logf("lockbench: starting a primary with a replica")
		if rb, err = newReplicaBench(opts); err != nil {
			return nil, err
		}
		defer rb.close()
		res.dbFrom[SectionReplicas] = rb.from
	}
	for _, ct := range cs.cycle {
		res.cycleIDs = append(res.cycleIDs, ct.id)
		res.labels["cycle/"+ct.id] = ct.label
	}
	for _, ct := range cs.handoff {
		res.handoffIDs = append(res.handoffIDs, ct.id)
		res.labels["handoff/"+ct.id] = ct.label
	}

	prefix := "leasehold-bench:" + crand.Text()[:8] + ":"
	if cfg.RedisURL != "" {
		defer cleanup(context.WithoutCancel(ctx), admin, prefix)
	}
	if cfg.Runs(SectionLocks) {
		if err := cs.checkScripts(ctx, admin, prefix+"scripts-check"); err != nil {
			return nil, err
		}
	}
	r := runner{cfg: cfg, cs: cs, dbs: dbs, rb: rb, p: probe{admin: admin}, prefix: prefix, logf: logf}
	if cfg.interleaved() {
		logf("lockbench: %d cells × %d rounds of %v (contended: %v), warm-up %v a cell: about %v",
			cfg.cellsPerRound(), cfg.Rounds, cfg.Duration, cfg.HandoffDuration, cfg.Warmup, cfg.Estimate().Round(time.Second))
		if cfg.Warmup > 0 {
			if err := r.round(ctx, -1, cfg.Warmup, cfg.Warmup, nil); err != nil {
				return nil, err
			}
		}
		for round := range cfg.Rounds {
			if err := r.round(ctx, round, cfg.Duration, cfg.HandoffDuration, res.cells); err != nil {
				return nil, err
			}
		}
		if cfg.Runs(SectionLocks) {
			if res.ops, err = countOps(ctx, cs, prefix+"ops:"); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Runs(SectionScale) {
		if res.scale, err = runScale(ctx, cfg, opts, r.p, prefix, logf); err != nil {
			return nil, err
		}
	}
	res.Elapsed = time.Since(started)
	return res, nil
}

type runner struct {
	cfg    Config
	cs     *contenders
	dbs    []*dbBench
	rb     *replicaBench // the replicas section; nil when it does not run
	p      probe
	prefix string
	logf   func(string, ...any)
}

// step is one cell of a round.
type step struct {
	key cellKey
	run func(ctx context.Context, c *cell) error
}

// round runs every cell once, for d (contended: hd), in an order rotated by
// the round's number, and appends the cells to into (nil: a warm-up, not
// recorded).
func (r *runner) round(ctx context.Context, round int, d, hd time.Duration, into map[cellKey][]cell) error {
	tag := "warm-up"
	if round >= 0 {
		tag = fmt.Sprintf("round %d/%d", round+1, r.cfg.Rounds)
	}
	var groups [][]step
	if r.cfg.Runs(SectionLocks) {
		groups = r.lockGroups(round, d, hd)
	}
	if r.cfg.Runs(SectionProcesses) {
		for _, workers := range r.cfg.Workers {
			var g []step
			for _, ct := range r.cs.procs {
				g = append(g, step{cellKey{"procs", ct.id, workers}, func(ctx context.Context, c *cell) error {
					key := fmt.Sprintf("%sprocs:%s:%d:%d", r.prefix, ct.id, workers, round)
					return handoff(ctx, c, r.p, ct, key, workers, hd, r.cfg.Hold, r.cfg.Wait, false)
				}})
			}
			groups = append(groups, g)
		}
		for _, gap := range fifoGaps {
			var g []step
			ms := int(gap / time.Millisecond)
			for _, ct := range r.cs.procs {
				g = append(g, step{cellKey{"fifo", ct.id, ms}, func(ctx context.Context, c *cell) error {
					key := fmt.Sprintf("%sfifo:%s:%d:%d", r.prefix, ct.id, ms, round)
					return fifoTrial(ctx, c, ct, key, gap, r.cfg.Hold, r.cfg.Wait)
				}})
			}
			groups = append(groups, g)
		}
	}
	if r.rb != nil {
		groups = append(groups, r.replicaGroups(round, d, hd)...)
	}
	for _, db := range r.dbs {
		for _, conc := range r.cfg.DBConcurrency {
			var g []step
			for _, ct := range db.cyclers {
				g = append(g, step{cellKey{db.kind, ct.id, conc}, func(ctx context.Context, c *cell) error {
					op, err := ct.prepare(ctx, fmt.Sprintf("%s%s:%d:%d", r.prefix, ct.id, conc, round), conc)
					if err != nil {
						return err
					}
					if ct.serverCPU == nil {
						return load(ctx, c, r.p, ct.lib, conc, d, op)
					}
					before, who, ok := ct.serverCPU(ctx)
					if err := load(ctx, c, r.p, ct.lib, conc, d, op); err != nil {
						return err
					}
					after, whoAfter, okAfter := ct.serverCPU(ctx)
					c.serverCPU = after - before
					c.cpuKnown = ok && okAfter && who == whoAfter && c.clientCPU > 0
					return nil
				}})
			}
			groups = append(groups, g)
		}
	}

	for _, g := range groups {
		shift := max(round, 0) % len(g)
		for _, s := range slices.Concat(g[shift:], g[:shift]) {
			if err := ctx.Err(); err != nil {
				return err
			}
			var c cell
			if err := s.run(ctx, &c); err != nil {
				return fmt.Errorf("lockbench: %s, %s %s at %d: %w", tag, s.key.kind, s.key.id, s.key.n, err)
			}
			line := fmt.Sprintf("%-11s %-8s %-16s %3d  %9.0f/s", tag, s.key.kind, s.key.id, s.key.n, c.rate())
			switch s.key.kind {
			case "handoff", "procs", "rhandoff":
				l := summarize(c.handoffs)
				line += fmt.Sprintf("  hand-off p50 %v p99 %v (n=%d)", fmtDur(l.p50), fmtDur(l.p99), l.n)
			case "fifo":
				line = fmt.Sprintf("%-11s %-8s %-16s %3dms  %d inversions, %d gave up", tag, s.key.kind, s.key.id, s.key.n, c.inversions, c.gaveUp)
			}
			r.logf("%s", line)
			if into != nil {
				into[s.key] = append(into[s.key], c)
			}
		}
	}
	return nil
}

// lockGroups are the cells of the locks section, grouped by level.
func (r *runner) lockGroups(round int, d, hd time.Duration) [][]step {
	var groups [][]step
	for _, conc := range r.cfg.Concurrency {
		g := []step{
			{cellKey{"raw", "PING", conc}, func(ctx context.Context, c *cell) error {
				return load(ctx, c, r.p, r.cs.raw, conc, d, func(ctx context.Context, _ int) error {
					return r.cs.raw.client.Ping(ctx).Err()
				})
			}},
			{cellKey{"raw", "EVALSHA", conc}, func(ctx context.Context, c *cell) error {
				return load(ctx, c, r.p, r.cs.raw, conc, d, func(ctx context.Context, _ int) error {
					return trivial.EvalSha(ctx, r.cs.raw.client, nil).Err()
				})
			}},
		}
		for _, ct := range r.cs.cycle {
			g = append(g, step{cellKey{"cycle", ct.id, conc}, func(ctx context.Context, c *cell) error {
				handles := make([]handle, conc)
				for w := range handles {
					handles[w] = ct.newHandle(fmt.Sprintf("%scycle:%s:%d:%d:%d", r.prefix, ct.id, conc, round, w))
				}
				return load(ctx, c, r.p, ct.lib, conc, d, func(ctx context.Context, w int) error {
					h := handles[w]
					if err := h.acquire(ctx); err != nil {
						return fmt.Errorf("%s acquire of a free key: %w", ct.id, err)
					}
					if err := h.release(ctx); err != nil {
						return fmt.Errorf("%s release: %w", ct.id, err)
					}
					return nil
				})
			}})
		}
		groups = append(groups, g)
	}
	for _, workers := range r.cfg.Workers {
		var g []step
		for _, ct := range r.cs.handoff {
			g = append(g, step{cellKey{"handoff", ct.id, workers}, func(ctx context.Context, c *cell) error {
				key := fmt.Sprintf("%shandoff:%s:%d:%d", r.prefix, ct.id, workers, round)
				return handoff(ctx, c, r.p, ct, key, workers, hd, r.cfg.Hold, r.cfg.Wait, true)
			}})
		}
		groups = append(groups, g)
	}
	return groups
}

// redisOptions returns the client options of the Redis to measure, starting
// one when url is empty, and the function that stops it.
func redisOptions(url string) (*redis.Options, string, func(), error) {
	if url == "" {
		srv, err := testserver.NewRedisServer()
		if err != nil {
			return nil, "", nil, err
		}
		return &redis.Options{Addr: srv.Addr()},
			"started by the command on " + srv.Addr() + " (no persistence)",
			func() { _ = srv.Close() }, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--redis: %w", err)
	}
	if opts.Network != "unix" { // a unix socket is on this machine
		if err := checkLoopback(opts.Addr); err != nil {
			return nil, "", nil, err
		}
	}
	return opts, "given with --redis on " + opts.Addr, func() {}, nil
}

// checkLoopback refuses an address off this machine: the figures and the
// targets they are held to are for loopback, and a benchmark must not be
// pointed at a shared server by mistake.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--redis: address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--redis: %s is not a loopback address; the benchmark only runs against a Redis on this machine (127.0.0.0/8, ::1, localhost)", host)
}

// cleanup deletes the run's keys from a Redis the run did not start: the
// locks are released already, the fence counters of leasehold stay.
func cleanup(ctx context.Context, admin *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, pattern := range []string{prefix + "*", "leasehold:fence:*" + prefix + "*"} {
		var cursor uint64
		for range 10_000 {
			keys, next, err := admin.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return
			}
			if len(keys) > 0 {
				_ = admin.Unlink(ctx, keys...).Err()
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
}

// cpuModel reads the processor's name on Linux; "" elsewhere.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; i < 10_000 && sc.Scan(); i++ {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// moduleVersions are the versions of the libraries built into this binary.
func moduleVersions() map[string]string {
	m := make(map[string]string)
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return m
	}
	for _, d := range bi.Deps {
		v := d.Version
		if d.Replace != nil {
			v = "this tree (" + d.Replace.Path + ")"
		}
		m[d.Path] = v
	}
	return m
}

// fmtDur prints a latency in ms with three significant digits.
func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case d == 0:
		return "–"
	case ms < 1:
		return strconv.FormatFloat(ms, 'f', 3, 64) + " ms"
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
	case ms < 100:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	default:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	}
}

// redisVersionAtLeast reports whether version ("7.0.15") is at least
// major.minor.patch; it returns the version back for messages.
func redisVersionAtLeast(version string, major, minor, patch int) (string, bool) {
	parts := strings.SplitN(version, ".", 3)
	want := []int{major, minor, patch}
	for i, w := range want {
		if i >= len(parts) {
			return version, false
		}
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return version, false
		}
		if n != w {
			return version, n > w
		}
	}
	return version, true
}
