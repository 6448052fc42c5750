package lockbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxOpsPerWorker bounds every measuring loop in count; Config.Duration
// bounds it in time.
const maxOpsPerWorker = 50_000_000

// releaseTimeout bounds a release in the contended runs, which is made with a
// context of its own so that the end of a round never leaves a key held.
const releaseTimeout = 5 * time.Second

// cell is the outcome of one contender in one cell of one round.
type cell struct {
	ops       int64         // operations, cycles or transfers
	elapsed   time.Duration // from the start signal to the last worker's end
	trips     int64         // round trips seen by the library's hook
	pubsub    int64         // SUBSCRIBE + UNSUBSCRIBE counted by the server
	clientCPU time.Duration // this process, while the cell ran
	serverCPU time.Duration // redis-server, while the cell ran
	cpuKnown  bool
	// EVALSHA calls and the time redis-server spent inside them
	evalCalls int64
	evalTime  time.Duration

	// contended runs only
	handoffs []time.Duration // release call → next owner's acquire returning
	holds    []time.Duration // measured critical sections
	gaveUp   int64           // waits that ended without the lock before the round did
	// transfers to a worker whose acquire began before the release that
	// freed the key
	waited int64
	// transfers with a known previous owner, and those back to it
	turns, retook int64

	// FIFO cells only
	inversions int64 // pairs of waiters served out of arrival order
	inOrder    bool  // all served, in arrival order
}

func (c *cell) rate() float64 {
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.ops) / c.elapsed.Seconds()
}

// probe reads the server's counters with a client of its own, outside every
// measured library's hook.
type probe struct{ admin *redis.Client }

type serverSample struct {
	cpu       time.Duration
	pubsub    int64
	evalCalls int64
	evalTime  time.Duration
	ok        bool
}

func (p probe) read(ctx context.Context) serverSample {
	var s serverSample
	cpu, err := p.admin.Info(ctx, "cpu").Result()
	if err != nil {
		return s
	}
	stats, err := p.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return s
	}
	user, uok := infoSeconds(cpu, "used_cpu_user")
	sys, sok := infoSeconds(cpu, "used_cpu_sys")
	s.cpu, s.ok = user+sys, uok && sok
	sub, _ := commandStat(stats, "subscribe")
	unsub, _ := commandStat(stats, "unsubscribe")
	s.pubsub = sub + unsub
	s.evalCalls, s.evalTime = commandStat(stats, "evalsha")
	return s
}

// infoField returns the value of "name:value" in an INFO reply.
func infoField(info, name string) (string, bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

func infoSeconds(info, name string) (time.Duration, bool) {
	v, ok := infoField(info, name)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// commandStat reads calls=N and usec=U from a cmdstat_<name> line of INFO
// commandstats: how often the command ran and the time spent inside it.
func commandStat(stats, name string) (calls int64, inside time.Duration) {
	v, ok := infoField(stats, "cmdstat_"+name)
	if !ok {
		return 0, 0
	}
	for part := range strings.SplitSeq(v, ",") {
		if n, ok := strings.CutPrefix(part, "calls="); ok {
			calls, _ = strconv.ParseInt(n, 10, 64)
		}
		if n, ok := strings.CutPrefix(part, "usec="); ok {
			us, _ := strconv.ParseInt(n, 10, 64)
			inside = time.Duration(us) * time.Microsecond
		}
	}
	return calls, inside
}

// meter holds the counters at the start of a measured window: round trips
// of one library, CPU of both processes, pub/sub commands at the server.
type meter struct {
	p      probe
	lib    *library
	trips  int64
	cpu    time.Duration
	cpuOK  bool
	server serverSample
}

func (p probe) start(ctx context.Context, lib *library) meter {
	m := meter{p: p, lib: lib, server: p.read(ctx)}
	m.cpu, m.cpuOK = processCPU()
	m.trips = lib.hook.trips.Load()
	return m
}

// stop fills in c's counters for the window since start.
func (m meter) stop(ctx context.Context, c *cell) {
	c.trips = m.lib.hook.trips.Load() - m.trips
	cpu, ok := processCPU()
	server := m.p.read(ctx)
	c.clientCPU = cpu - m.cpu
	c.serverCPU = server.cpu - m.server.cpu
	c.pubsub = server.pubsub - m.server.pubsub
	c.evalCalls = server.evalCalls - m.server.evalCalls
	c.evalTime = server.evalTime - m.server.evalTime
	c.cpuKnown = ok && m.cpuOK && server.ok && m.server.ok
}

// load runs op on conc goroutines for d and counts the successful calls. op
// gets its worker's number and must not block past ctx.
func load(ctx context.Context, c *cell, p probe, lib *library, conc int, d time.Duration, op func(ctx context.Context, worker int) error) error {
	counts := make([]int64, conc)
	errs := make([]error, conc)
	start := make(chan struct{})
	var deadline time.Time
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			<-start
			for i := 0; i < maxOpsPerWorker && time.Now().Before(deadline); i++ {
				if err := op(ctx, w); err != nil {
					errs[w] = err
					return
				}
				counts[w]++
			}
		})
	}
	m := p.start(ctx, lib)
	t0 := time.Now()
	deadline = t0.Add(d)
	close(start)
	wg.Wait()
	c.elapsed = time.Since(t0)
	m.stop(ctx, c)
	for _, n := range counts {
		c.ops += n
	}
	return errors.Join(errs...)
}

// joinSpread is the window over which the workers of a contended run join,
// each at a random instant, before anything is measured. Joining together
// would start every waiter's polling at the same instant, and a poller
// without jitter (redislock's LinearBackoff) would then poll in lockstep for
// the whole run: every hand-off would wait a full interval. Real waiters
// arrive at unrelated times.
const joinSpread = 50 * time.Millisecond

// handoff runs workers on one key. They join at random instants over
// joinSpread, and the next d is measured. Each worker takes the key (waiting
// as its library waits, for at most wait), holds it for hold, releases it,
// and then sits out until another worker has taken the key, so that every
// transfer is a hand-off to a waiter and none is a releaser taking the key
// straight back.
//
// Without sitOut a worker that released asks again at once, as a process
// would: then the releaser may take the key straight back, which counts as
// a transfer (to it) but not as a hand-off, and its latency is not recorded.
func handoff(ctx context.Context, c *cell, p probe, ct *contender, key string, workers int, d, hold, wait time.Duration, sitOut bool) error {
	roundCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var base time.Time // the start signal; measuring starts joinSpread later
	now := func() int64 { return int64(time.Since(base)) }
	var (
		inside    atomic.Int32 // workers inside the critical section: must stay ≤ 1
		overlaps  atomic.Int64
		releaseAt atomic.Int64 // when the last holder called release; 0 once taken
		lastOwner atomic.Int64 // the last holder's worker number + 1

		mu   sync.Mutex
		next = make(chan struct{}) // closed by the next acquire
	)
	from, deadline := int64(joinSpread), int64(joinSpread+d)
	inWindow := func(t int64) bool { return t >= from && t <= deadline }
	type result struct {
		transfers, gaveUp     int64
		waited, turns, retook int64
		handoffs, holds       []time.Duration
		err                   error
	}
	results := make([]result, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		h := ct.handleOf(key, w)
		r := &results[w]
		join := rand.N(joinSpread)
		wg.Go(func() {
			<-start
			select {
			case <-time.After(join):
			case <-roundCtx.Done():
				return
			}
			for i := 0; i < maxOpsPerWorker && roundCtx.Err() == nil; i++ {
				wctx, wcancel := context.WithTimeout(roundCtx, wait)
				asked := now()
				err := h.acquire(wctx)
				got := now()
				wcancel()
				if err != nil {
					if roundCtx.Err() != nil {
						return
					}
					if errors.Is(err, errNotObtained) {
						r.gaveUp++
						continue
					}
					r.err = fmt.Errorf("%s acquire: %w", ct.id, err)
					cancel()
					return
				}
				entered := time.Now()
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				prev, prevOwner := releaseAt.Swap(0), lastOwner.Swap(int64(w+1))
				again := prevOwner == int64(w+1)
				if prev != 0 && prev >= from && inWindow(got) && !again {
					r.handoffs = append(r.handoffs, time.Duration(got-prev))
				}
				if inWindow(got) {
					r.transfers++
					if prev != 0 && asked < prev {
						r.waited++
					}
					if prevOwner != 0 {
						r.turns++
						if again {
							r.retook++
						}
					}
				}
				mu.Lock()
				close(next)
				next = make(chan struct{})
				mine := next
				mu.Unlock()

				holdFor(entered, hold)
				r.holds = append(r.holds, time.Since(entered))
				inside.Add(-1)
				releaseAt.Store(now())
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
				err = h.release(rctx)
				rcancel()
				if err != nil {
					r.err = fmt.Errorf("%s release: %w", ct.id, err)
					cancel()
					return
				}
				if !sitOut {
					continue
				}
				select {
				case <-mine:
				case <-roundCtx.Done():
					return
				}
			}
		})
	}
	// The window: counters from the end of the joining to the end of the
	// run, which ends the workers.
	var window cell
	windowDone := make(chan struct{})
	base = time.Now()
	go func() {
		defer close(windowDone)
		defer cancel()
		select {
		case <-time.After(joinSpread):
		case <-roundCtx.Done():
			return
		}
		m := p.start(ctx, ct.lib)
		t0 := time.Now()
		select {
		case <-time.After(d):
		case <-roundCtx.Done():
		}
		window.elapsed = time.Since(t0)
		m.stop(ctx, &window)
	}()
	close(start)
	wg.Wait()
	<-windowDone
	*c = window
	var errs []error
	for _, r := range results {
		c.ops += r.transfers
		c.gaveUp += r.gaveUp
		c.waited += r.waited
		c.turns += r.turns
		c.retook += r.retook
		c.handoffs = append(c.handoffs, r.handoffs...)
		c.holds = append(c.holds, r.holds...)
		errs = append(errs, r.err)
	}
	if n := overlaps.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%s: %d times two workers were inside the critical section at once", ct.id, n))
	}
	return errors.Join(errs...)
}
