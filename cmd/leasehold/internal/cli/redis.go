package cli

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/store/redisstore"
)

// quietRedisLog drops go-redis's own log lines (pool and handshake notes),
// which would break the CLI's one-line errors; every failure that matters
// reaches the CLI as an error.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// openRedis makes a backend on the Redis at rawURL. The client is a single
// node client (redis:// or rediss://); ContextTimeoutEnabled is forced on, so
// a command cut by --timeout drops its connection at once instead of leaving
// it busy until the ReadTimeout (redisstore bounds the call either way).
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
	return &backend{
		kind:    "redis",
		where:   opts.Addr + "/" + strconv.Itoa(opts.DB),
		timeout: timeout,
		store:   st,
		close:   func() { st.Close(); client.Close() },
		deleteKeys: func(ctx context.Context, keys ...string) error {
			return client.Del(ctx, keys...).Err()
		},
	}, nil
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
