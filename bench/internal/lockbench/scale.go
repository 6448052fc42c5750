package lockbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
)

// Renewal modes of the scale section.
const (
	modeEngine    = "KeepAlive (engine)"                // Lease.KeepAlive on the Client's engine, batched
	modeGoroutine = "goroutine per lease (Lease.Renew)" // the baseline: a goroutine, a ticker and a round trip per lease
)

// The engine's batch settings in the scale cells, passed as Client options
// so that the report states what was used (they are leasehold's defaults).
const (
	batchWindow      = 20 * time.Millisecond
	batchSize        = 1000
	batchConcurrency = 4
)

// scaleAcquirers is how many goroutines take the leases of a scale cell. The
// acquires are set-up, not measured; 32 takes 100 000 leases in a few
// seconds on 2 cores without starving the renewals of those taken first.
const scaleAcquirers = 32

// ScaleRow is one scale cell: Leases held in one process, renewed by Mode.
type ScaleRow struct {
	Mode   string
	Leases int
	TTL    time.Duration
	// Renewals is renew commands sent per second (counted by a go-redis
	// hook), medians of windows of one renewal interval; Expected is the
	// leases over the interval.
	Renewals Rate
	Expected float64
	// Trips is round trips per second: pipelines for the engine, single
	// commands for a goroutine per lease.
	Trips Rate
	// CPU and ServerCPU are the cores kept busy (CPU seconds per second)
	// by this process and by redis-server.
	CPU, ServerCPU Rate
	// HeapPerLease is the growth of the Go heap (after a GC) from before
	// the leases were taken to while they are held, per lease; RSS is the
	// process's resident memory while they are held, and RSSPerLease its
	// growth per lease (0 when unknown).
	HeapPerLease, RSSPerLease float64
	// StackPerLease is the growth of goroutine stacks per lease.
	StackPerLease float64
	RSS           int64
	// Goroutines while the leases are held, and before they were taken.
	Goroutines, GoroutinesBefore int
	// Lost counts leases whose KeepAlive reported them lost or given up, or
	// whose renewal goroutine found them gone or past their TTL.
	Lost int
	// Acquire is how long taking the leases took (set-up, for context).
	Acquire time.Duration
}

// scaleCounter counts renewals and round trips on the scale cells' client.
type scaleCounter struct {
	cmds, trips atomic.Int64
}

func (h *scaleCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h *scaleCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		h.trips.Add(1)
		return next(ctx, cmd)
	}
}

func (h *scaleCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "client" {
			return next(ctx, cmds) // a new connection's handshake
		}
		h.cmds.Add(int64(len(cmds)))
		h.trips.Add(1)
		return next(ctx, cmds)
	}
}

// runScale measures every scale cell of cfg.
func runScale(ctx context.Context, cfg Config, opts *redis.Options, p probe, prefix string, logf func(string, ...any)) ([]ScaleRow, error) {
	var rows []ScaleRow
	// tag names the mode in the keys, equally short for both, so that key
	// length does not weigh on the heap per lease.
	type scaleKey struct {
		mode, tag string
		n         int
	}
	cells := make([]scaleKey, 0, len(cfg.ScaleLeases)+1)
	for _, n := range cfg.ScaleLeases {
		cells = append(cells, scaleKey{modeEngine, "e", n})
	}
	if cfg.ScaleCompare > 0 {
		cells = append(cells, scaleKey{modeGoroutine, "g", cfg.ScaleCompare})
	}
	for _, c := range cells {
		mode, n := c.mode, c.n
		row, err := scaleCell(ctx, cfg, opts, p, fmt.Sprintf("%sscale:%s:%d:", prefix, c.tag, n), mode, n)
		if err != nil {
			return nil, fmt.Errorf("lockbench: scale, %d leases on %s: %w", n, mode, err)
		}
		logf("scale       %-33s %6d leases  %8.0f renewals/s (expected %.0f)  %6.0f round trips/s  %.2f cores + %.2f redis  %5.0f B heap/lease  %d goroutines  %d lost",
			mode, n, row.Renewals.Median, row.Expected, row.Trips.Median, row.CPU.Median, row.ServerCPU.Median, row.HeapPerLease, row.Goroutines, row.Lost)
		rows = append(rows, row)
	}
	return rows, nil
}

// scaleCell takes n leases, renews them by mode for cfg.ScaleWindows
// renewal intervals after one to settle, and measures.
func scaleCell(ctx context.Context, cfg Config, base *redis.Options, p probe, prefix, mode string, n int) (ScaleRow, error) {
	row := ScaleRow{Mode: mode, Leases: n, TTL: cfg.ScaleTTL}
	interval := cfg.ScaleTTL / leasehold.DefaultRenewDivisor
	row.Expected = float64(n) / interval.Seconds()

	opts := *base
	opts.PoolSize = scaleAcquirers + batchConcurrency + 4
	if mode == modeGoroutine {
		// One renewal call in flight per lease at most; let the pool, not
		// the benchmark, be the limit, as it would be in an application.
		opts.PoolSize = 64
	}
	client := redis.NewClient(&opts)
	defer client.Close()
	hook := &scaleCounter{}
	client.AddHook(hook)
	store, err := redisstore.New(client)
	if err != nil {
		return row, err
	}
	defer store.Close()
	lc := leasehold.New(store, leasehold.WithLogger(slog.New(slog.DiscardHandler)),
		leasehold.WithBatchWindow(batchWindow), leasehold.WithBatchSize(batchSize),
		leasehold.WithRenewConcurrency(batchConcurrency))

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rss0 := residentBytes()
	row.GoroutinesBefore = runtime.NumGoroutine()

	// Take the leases, each kept alive as soon as it is taken: by a KeepAlive
	// (ks) or by a renewal goroutine (lost, under loops).
	start := time.Now()
	var (
		ks   []*leasehold.KeepAlive
		lost []atomic.Bool
	)
	if mode == modeEngine {
		ks = make([]*leasehold.KeepAlive, n)
	} else {
		lost = make([]atomic.Bool, n)
	}
	loops, stopLoops := context.WithCancel(ctx)
	var loopsDone sync.WaitGroup
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, scaleAcquirers)
	for w := range scaleAcquirers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				taken := time.Now()
				l, err := lc.TryAcquire(ctx, prefix+strconv.Itoa(i), cfg.ScaleTTL)
				switch {
				case err != nil: // reported below
				case ks != nil:
					ks[i], err = l.KeepAlive(ctx)
				default:
					loopsDone.Go(func() { renewLoop(loops, l, taken, interval, &lost[i]) })
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	row.Acquire = time.Since(start)
	defer func() {
		_ = lc.Close() // stops every KeepAlive
		stopLoops()
		loopsDone.Wait()
	}()
	for _, err := range errs {
		if err != nil {
			return row, err
		}
	}
	if err := ctx.Err(); err != nil {
		return row, err
	}

	// One interval to settle, then the measured windows.
	if err := sleepCtx(ctx, interval); err != nil {
		return row, err
	}
	var renewals, trips, cpus, servers []float64
	for range cfg.ScaleWindows {
		c0, t0 := hook.cmds.Load(), hook.trips.Load()
		cpu0, cok0 := processCPU()
		s0 := p.read(ctx)
		w0 := time.Now()
		if err := sleepCtx(ctx, interval); err != nil {
			return row, err
		}
		el := time.Since(w0).Seconds()
		c1, t1 := hook.cmds.Load(), hook.trips.Load()
		cpu1, cok1 := processCPU()
		s1 := p.read(ctx)
		renewals = append(renewals, float64(c1-c0)/el)
		trips = append(trips, float64(t1-t0)/el)
		if cok0 && cok1 {
			cpus = append(cpus, (cpu1-cpu0).Seconds()/el)
		}
		if s0.ok && s1.ok {
			servers = append(servers, (s1.cpu-s0.cpu).Seconds()/el)
		}
	}
	row.Renewals, row.Trips = rateOfValues(renewals), rateOfValues(trips)
	row.CPU, row.ServerCPU = rateOfValues(cpus), rateOfValues(servers)

	row.Goroutines = runtime.NumGoroutine()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	row.HeapPerLease = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(n)
	row.StackPerLease = float64(int64(m1.StackInuse)-int64(m0.StackInuse)) / float64(n)
	if rss := residentBytes(); rss > 0 {
		row.RSS = rss
		if rss0 > 0 {
			row.RSSPerLease = float64(rss-rss0) / float64(n)
		}
	}
	for _, k := range ks {
		if k.Context().Err() != nil {
			row.Lost++
		}
	}
	for i := range lost {
		if lost[i].Load() {
			row.Lost++
		}
	}
	runtime.KeepAlive(ks)
	return row, nil
}

// renewLoop is the baseline a user would write without leasehold's engine:
// it renews l, taken at taken, every interval until ctx ends, each Renew
// bounded by the interval. A failed Renew is retried at the next tick; the
// loop sets lost and returns once the store says the lease is gone or its
// TTL has run out since the last renewal that succeeded.
func renewLoop(ctx context.Context, l *leasehold.Lease, taken time.Time, interval time.Duration, lost *atomic.Bool) {
	ttl, last := l.TTL(), taken
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, interval)
		sent := time.Now()
		err := l.Renew(rctx, ttl)
		cancel()
		switch {
		case err == nil:
			last = sent
		case ctx.Err() != nil:
			return
		case errors.Is(err, leasehold.ErrNotOwned) || time.Since(last) >= ttl:
			lost.Store(true)
			return
		}
	}
}

// rateOfValues is a Rate of per-window values.
func rateOfValues(vs []float64) Rate {
	if len(vs) == 0 {
		return Rate{Median: math.NaN()}
	}
	r := Rate{Median: median(vs), Spread: spread(vs), Min: vs[0], Max: vs[0]}
	for _, v := range vs {
		r.Min, r.Max = min(r.Min, v), max(r.Max, v)
	}
	return r
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// residentBytes is this process's resident memory (VmRSS), 0 where
// /proc/self/status does not exist.
func residentBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; i < 1000 && sc.Scan(); i++ {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fs := strings.Fields(v)
			if len(fs) == 2 && fs[1] == "kB" {
				kb, err := strconv.ParseInt(fs[0], 10, 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}
