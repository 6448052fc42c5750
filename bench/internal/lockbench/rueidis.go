package lockbench

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislock's options, the same for every Locker of the run, configured
// for one Redis:
//   - KeyMajority 1: one key per lock. Its default, 2, takes 2 of 3 keys
//     (a Redlock-like majority on one server), three times the writes for
//     no safety on a single Redis.
//   - NoLoopTracking: CLIENT TRACKING with NOLOOP, so that a Locker is not
//     sent invalidations of its own writes; its documentation recommends it
//     for Redis ≥ 7.0.5, which the run checks.
//   - Client-side caching stays on: its invalidation messages are how a
//     waiting WithContext learns of a release (its wake-up, like leasehold's
//     pub/sub). With DisableCache it would poll every TryNextAfter (20 ms).
//   - KeyValidity lockTTL, the TTL of every other library (it extends the
//     key every half of it; no cell lasts that long).
//   - TryNextAfter 1 s: with one key it only bounds each acquire command
//     (and the poll interval without client-side caching, not used here).
//     Its 20 ms default failed acquires of free keys with "context deadline
//     exceeded" at 64 goroutines on the loaded 2-core machine, where no
//     other library has a per-command bound.
//
// Auto-pipelining is rueidis's default and stays on.
func rueidisLockerOption(addr string, lib *library) rueidislock.LockerOption {
	return rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
		KeyValidity:    lockTTL,
		TryNextAfter:   time.Second,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return &countingRueidis{Client: c, hook: lib.hook}, nil
		},
	}
}

// countingRueidis counts the commands rueidislock sends, on lib's counter:
// one per Do, one per DoMulti. rueidis pipelines concurrent commands on its
// connection by itself, so these are commands, not round trips; at
// concurrency 1 the two are the same.
type countingRueidis struct {
	rueidis.Client
	hook *counter
}

func (c *countingRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.hook.trips.Add(1)
	c.hook.note(firstWord(cmd.Commands()))
	return c.Client.Do(ctx, cmd)
}

func (c *countingRueidis) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.hook.trips.Add(1)
	c.hook.note("pipeline")
	return c.Client.DoMulti(ctx, cmds...)
}

func (c *countingRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.hook.trips.Add(1)
	c.hook.note(firstWord(cmd.Commands()))
	return c.Client.DoCache(ctx, cmd, ttl)
}

func firstWord(cmd []string) string {
	if len(cmd) == 0 {
		return ""
	}
	return cmd[0]
}

// rueidisHandle is one worker's lock through a rueidislock Locker.
type rueidisHandle struct {
	l    rueidislock.Locker
	key  string
	try  bool // TryWithContext instead of WithContext
	mu   sync.Mutex
	free context.CancelFunc // releases the held lock
}

func (h *rueidisHandle) acquire(ctx context.Context) error {
	// The lock's own context derives from the one given to rueidislock,
	// and ends the lock when it ends: give it one that outlives ctx, and
	// let ctx end only the wait.
	src, stop := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(ctx, stop)
	var (
		cancel context.CancelFunc
		err    error
	)
	if h.try {
		_, cancel, err = h.l.TryWithContext(src, h.key)
	} else {
		_, cancel, err = h.l.WithContext(src, h.key)
	}
	if !unhook() { // ctx ended during the wait: the lock, if taken, is ending
		if err == nil {
			cancel()
		}
		stop()
		return notObtained(ctx, context.Cause(ctx), true)
	}
	if err != nil {
		stop()
		return notObtained(ctx, err, errors.Is(err, rueidislock.ErrNotLocked))
	}
	h.mu.Lock()
	h.free = func() { cancel(); stop() }
	h.mu.Unlock()
	return nil
}

// release cancels the lock's context, which deletes the key (rueidislock
// waits for the DEL before it returns).
func (h *rueidisHandle) release(context.Context) error {
	h.mu.Lock()
	free := h.free
	h.free = nil
	h.mu.Unlock()
	if free == nil {
		return errors.New("rueidislock: release of a lock not held")
	}
	free()
	return nil
}

// renew: rueidislock extends its keys by itself every half KeyValidity and
// has no call for it; the report's renew column says so.
func (h *rueidisHandle) renew(context.Context) error { return nil }
