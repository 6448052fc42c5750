package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
)

// ownPrefix starts every key leasehold itself writes on Redis: fence
// counters (redisstore.FenceKey), fenced-write high-water marks
// (redisfence.HighWaterKey), release channels. ls never lists them.
const ownPrefix = "leasehold:"

// quietRedisLog drops go-redis's own log lines (pool and handshake notes),
// which would break the CLI's one-line errors; every failure that matters
// reaches the CLI as an error.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// openRedis makes a backend on the Redis at rawURL. The client is a single
// node client (redis:// or rediss://); ContextTimeoutEnabled is forced on,
// as redisstore requires, so that --timeout holds on the socket.
func openRedis(rawURL string, timeout time.Duration) (*backend, error) {
	if rawURL == "" {
		return nil, usagef("--redis needs a URL, such as redis://127.0.0.1:6379/0")
	}
	u, err := parseURL("--redis", rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix" {
		return nil, addrError("--redis", "URL", "the scheme is not redis://, rediss:// or unix://")
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, addrError("--redis", "URL", redisReason(err))
	}
	opts.ContextTimeoutEnabled = true
	redis.SetLogger(quietRedisLog{})
	client := redis.NewClient(opts)
	st, err := redisstore.New(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	b := &backend{
		kind:    "redis",
		where:   opts.Addr + "/" + strconv.Itoa(opts.DB),
		timeout: timeout,
		store:   st,
		close:   func() { st.Close(); client.Close() },
	}
	b.list = func(ctx context.Context, pattern string, pageSize int, emit func(driver.Info) bool) error {
		return redisList(ctx, b, client, pattern, pageSize, emit)
	}
	return b, nil
}

// redisReason describes go-redis ParseURL's error in fixed words: its own
// text quotes the URL's path or query.
func redisReason(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "database number"), strings.Contains(msg, "URL path"):
		return "the path is not a database number such as /0"
	case strings.Contains(msg, "unexpected option"):
		return "a query parameter that go-redis does not know"
	case strings.Contains(msg, "unix socket path"):
		return "no socket path"
	case strings.Contains(msg, "number"), strings.Contains(msg, "duration"), strings.Contains(msg, "boolean"):
		return "a query parameter whose value does not parse"
	}
	return "go-redis does not take it"
}

// redisList walks the keyspace with SCAN MATCH pattern COUNT pageSize TYPE
// string (never KEYS, which blocks the server for the whole keyspace), and
// reads each page's candidates in one MULTI/EXEC round trip: GET and PTTL of
// the key, GET of its fence key. A candidate is a held leasehold lock when
// it holds a value, has an expiry, and has a fence counter (every acquire
// writes one, so application strings that merely match the pattern are
// left out). Keys under ownPrefix and keys that are not valid lock keys are
// skipped. Memory is one page, whatever the keyspace's size.
func redisList(ctx context.Context, b *backend, client *redis.Client, pattern string, pageSize int, emit func(driver.Info) bool) error {
	var cursor uint64
	for {
		var keys []string
		err := b.call(ctx, func(ctx context.Context) error {
			var err error
			keys, cursor, err = client.ScanType(ctx, cursor, pattern, int64(pageSize), "string").Result()
			return err
		})
		if err != nil {
			return err
		}
		cands := keys[:0]
		for _, k := range keys {
			if !strings.HasPrefix(k, ownPrefix) && driver.ValidateKey(k) == nil {
				cands = append(cands, k)
			}
		}
		if len(cands) > 0 {
			var infos []driver.Info
			err := b.call(ctx, func(ctx context.Context) error {
				var err error
				infos, err = redisReadPage(ctx, client, cands)
				return err
			})
			if err != nil {
				return err
			}
			for _, info := range infos {
				if !emit(info) {
					return nil
				}
			}
		}
		if cursor == 0 {
			return nil
		}
	}
}

// redisReadPage reads keys' owners, TTLs and fences in one transaction, so
// that each key's three values are of the same instant, and returns the held
// locks among them, in keys' order.
func redisReadPage(ctx context.Context, client *redis.Client, keys []string) ([]driver.Info, error) {
	type reads struct {
		token *redis.StringCmd
		pttl  *redis.DurationCmd
		fence *redis.StringCmd
	}
	rs := make([]reads, len(keys))
	// Exec's own error is the first command's error, redis.Nil included; the
	// commands are looked at one by one below instead.
	_, _ = client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			rs[i] = reads{p.Get(ctx, k), p.PTTL(ctx, k), p.Get(ctx, redisstore.FenceKey(k))}
		}
		return nil
	})
	var infos []driver.Info
	for i, k := range keys {
		r := rs[i]
		for _, c := range []redis.Cmder{r.token, r.pttl, r.fence} {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && !isWrongType(err) {
				return nil, fmt.Errorf("reading %q: %w", k, err)
			}
		}
		if r.token.Err() != nil || r.fence.Err() != nil || r.pttl.Err() != nil {
			continue // gone, not a string any more, or no fence counter: not a lock
		}
		ttl := r.pttl.Val() // PTTL: -1 no expiry, -2 no key; go-redis keeps them as is
		if ttl <= 0 {
			continue
		}
		fence, err := strconv.ParseInt(r.fence.Val(), 10, 64)
		if err != nil || fence <= 0 {
			continue
		}
		infos = append(infos, driver.Info{Key: k, Held: true, Token: r.token.Val(), TTL: ttl, Fence: fence})
	}
	return infos, nil
}

// isWrongType reports a WRONGTYPE reply: the key changed type since SCAN.
func isWrongType(err error) bool {
	return strings.HasPrefix(err.Error(), "WRONGTYPE")
}
