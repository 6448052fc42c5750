package lockbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis/rueidislock"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
)

// fifoWaiters is how many Clients queue on a held key in the FIFO cells.
const fifoWaiters = 8

// fifoGaps are the arrival intervals of the FIFO cells: far apart, and close.
var fifoGaps = []time.Duration{30 * time.Millisecond, time.Millisecond}

// processWorkerPool is each worker's own go-redis pool size in the
// processes section: a process's client, far from the shared client's 68.
const processWorkerPool = 4

// setupProcesses makes n workers' own clients for the processes section,
// the equivalent of n processes: for leasehold a go-redis client, a
// redisstore Store and a leasehold.Client each; for redislock a go-redis
// client each; for rueidislock a Locker each. Every client of one library
// counts on that library's counter.
func (c *contenders) setupProcesses(n int) error {
	o := *c.opts
	o.PoolSize = processWorkerPool
	lhClients := make([]*leasehold.Client, n)
	rlClients := make([]*redislock.Client, n)
	lockers := make([]rueidislock.Locker, n)
	for w := range n {
		lc := redis.NewClient(&o)
		lc.AddHook(c.lh.hook)
		c.extra = append(c.extra, lc)
		st, err := redisstore.New(lc)
		if err != nil {
			return err
		}
		c.stores = append(c.stores, st)
		lhClients[w] = leasehold.New(st)

		rc := redis.NewClient(&o)
		rc.AddHook(c.rl.hook)
		c.extra = append(c.extra, rc)
		rlClients[w] = redislock.New(rc)

		l, err := c.newLocker()
		if err != nil {
			return err
		}
		lockers[w] = l
	}
	shared := c.handoff[0] // leasehold, one Client
	c.procs = []*contender{
		{id: "leasehold-1", label: "leasehold, one Client (reference)", lib: c.lh, newHandle: shared.newHandle},
		{id: "leasehold", label: "leasehold, a Client per worker", lib: c.lh, worker: func(key string, w int) handle {
			return &leaseholdHandle{c: lhClients[w], key: key}
		}},
		{id: "redislock", label: "redislock, a client per worker, LinearBackoff(25ms)", lib: c.rl, worker: func(key string, w int) handle {
			return &redislockHandle{c: rlClients[w], key: key, opt: &redislock.Options{
				RetryStrategy: redislock.LinearBackoff(redislockBackoff),
			}}
		}},
		{id: "rueidislock", label: "rueidislock, a Locker per worker", lib: c.rd, worker: func(key string, w int) handle {
			return &rueidisHandle{l: lockers[w], key: key}
		}},
	}
	return nil
}

// handleOf is worker w's handle on key.
func (ct *contender) handleOf(key string, w int) handle {
	if ct.worker != nil {
		return ct.worker(key, w)
	}
	return ct.newHandle(key)
}

// fifoTrial queues fifoWaiters workers, gap apart, on a key held by one
// more, releases it once the last has waited gap, and records the order in
// which they are served against the order in which they called acquire.
// Each waiter holds the key for hold and releases it.
func fifoTrial(ctx context.Context, c *cell, ct *contender, key string, gap, hold, wait time.Duration) error {
	holder := ct.handleOf(key, fifoWaiters)
	if err := holder.acquire(ctx); err != nil {
		return fmt.Errorf("%s: the holder's acquire of a free key: %w", ct.id, err)
	}
	base := time.Now()
	var (
		mu     sync.Mutex
		served []int // waiters in the order served
		asked  = make([]time.Duration, fifoWaiters)
		errs   = make([]error, fifoWaiters)
		gaveUp int64
		wg     sync.WaitGroup
	)
	for w := range fifoWaiters {
		if w > 0 {
			time.Sleep(gap)
		}
		h := ct.handleOf(key, w)
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			asked[w] = time.Since(base)
			if err := h.acquire(wctx); err != nil {
				if errors.Is(err, errNotObtained) && ctx.Err() == nil {
					mu.Lock()
					gaveUp++
					mu.Unlock()
					return
				}
				errs[w] = err
				return
			}
			mu.Lock()
			served = append(served, w)
			mu.Unlock()
			holdFor(time.Now(), hold)
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			errs[w] = h.release(rctx)
			rcancel()
		})
	}
	time.Sleep(gap)
	if err := holder.release(ctx); err != nil {
		return fmt.Errorf("%s: the holder's release: %w", ct.id, err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: %w", ct.id, err)
	}
	// Arrival order is the order of the acquire calls as they happened,
	// not as they were meant to (at 1 ms apart, the scheduler may swap two).
	arrival := make([]int, fifoWaiters)
	for i := range arrival {
		arrival[i] = i
	}
	slices.SortStableFunc(arrival, func(a, b int) int { return int(asked[a] - asked[b]) })
	rank := make([]int, fifoWaiters)
	for i, w := range arrival {
		rank[w] = i
	}
	// Waiters that gave up count as served last, in arrival order.
	order := make([]int, 0, fifoWaiters)
	for _, w := range served {
		order = append(order, rank[w])
	}
	for _, w := range arrival {
		if !slices.Contains(served, w) {
			order = append(order, rank[w])
		}
	}
	for i := range order {
		for j := i + 1; j < len(order); j++ {
			if order[i] > order[j] {
				c.inversions++
			}
		}
	}
	c.ops = 1
	c.gaveUp = gaveUp
	c.inOrder = c.inversions == 0 && gaveUp == 0
	return nil
}
