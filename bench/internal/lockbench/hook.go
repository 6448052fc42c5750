package lockbench

import (
	"context"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// counter is a go-redis hook that counts round trips: one per command sent
// on its own, one per pipeline. Every client of the run has one, the raw
// baseline's included, so that its cost is the same for all. Commands on a
// pub/sub connection do not pass through hooks; the run counts those on the
// server (see pubsubCalls).
type counter struct {
	trips atomic.Int64

	mu    sync.Mutex
	names map[string]int // command names while recording; nil otherwise
}

var _ redis.Hook = (*counter)(nil)

func (c *counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.note(cmd.Name())
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		names := make([]string, len(cmds))
		for i, cmd := range cmds {
			names[i] = cmd.Name()
		}
		c.note("pipeline(" + strings.Join(names, ",") + ")")
		return next(ctx, cmds)
	}
}

func (c *counter) note(name string) {
	c.mu.Lock()
	if c.names != nil {
		c.names[strings.ToUpper(name)]++
	}
	c.mu.Unlock()
}

// record counts the round trips of fn and names their commands, e.g.
// "EVALSHA" or "SET + EVALSHA".
func (c *counter) record(fn func() error) (trips int64, names string, err error) {
	c.mu.Lock()
	c.names = make(map[string]int)
	c.mu.Unlock()
	before := c.trips.Load()
	err = fn()
	trips = c.trips.Load() - before
	c.mu.Lock()
	seen := c.names
	c.names = nil
	c.mu.Unlock()
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return trips, strings.Join(keys, " + "), err
}
