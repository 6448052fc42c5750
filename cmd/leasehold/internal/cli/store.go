package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
)

// errNoStore is the answer of a command that needs a store when none was
// named. The CLI has no default store: guessing one (a local Redis) could
// show an empty inventory of the wrong system in the middle of an incident.
var errNoStore = usageError{errors.New("no store selected: pass --redis, --etcd, --postgres or --kube")}

// backend is the store a command runs against, and its names for messages.
// inspect and ls use only the store's Inspect and its driver.Lister.
type backend struct {
	kind    string // "redis", "etcd", "postgres" or "kube"
	where   string // the address, for messages and output; never a password
	timeout time.Duration
	store   driver.Store
	close   func()

	// kubeNamespace is the namespace of a "kube" backend's Leases.
	kubeNamespace string

	// deleteKeys, when set, deletes store keys that no lease operation
	// removes (a Redis fence counter): drill's cleanup uses it.
	deleteKeys func(ctx context.Context, keys ...string) error

	// leaseTTL, when set, is the TTL the store really gives a lease asked
	// for ttl: etcd rounds it up to whole seconds and to its minimum lease
	// TTL. drill fits its time scale to it (fitTimeScale).
	leaseTTL func(ctx context.Context, ttl time.Duration) (time.Duration, error)

	// expiryLag is how long after its TTL the store may take to free an
	// expired lease: etcd's lessor revokes expired leases in a loop every
	// 500 ms. drill adds it to its default takeover SLO.
	expiryLag time.Duration

	// probe, when set, is asked why the store did not answer in time: a
	// client that hides its connection errors behind the deadline (etcd's
	// gRPC waits for a connection until then) says what failed this way.
	probe func() error
}

// String names the store in messages: "redis at 127.0.0.1:6379".
func (b *backend) String() string { return b.kind + " at " + b.where }

// call runs f with a context bounded by the timeout, and names the store in
// the error it returns.
func (b *backend) call(ctx context.Context, f func(ctx context.Context) error) error {
	_, err := callFor(ctx, b, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

// errInterrupted is in the error of a store call the command's interrupt
// (Ctrl-C, SIGTERM) cut short, errNoAnswer in that of one --timeout ended:
// either may have been applied.
var (
	errInterrupted = errors.New("interrupted")
	errNoAnswer    = errors.New("did not answer")
)

// callFor is call for an f with a result. An interrupt (ctx's end) returns
// at once, with an error matching errInterrupted and ctx's error: a Redis
// client reading its reply stops only at the socket's deadline, so waiting
// for f would hold Ctrl-C up to --timeout. f then runs on, unread, until its
// own bound or the process's exit; whether a write it sent was applied is
// unknown.
func callFor[T any](ctx context.Context, b *backend, f func(ctx context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	v, err := untilInterrupt(ctx, func() (T, error) {
		defer cancel()
		return f(cctx)
	})
	switch {
	case errors.Is(err, errInterrupted):
		return v, fmt.Errorf("%s: %w", b, err)
	case err == nil, errors.Is(err, leasehold.ErrInvalidArgument):
		return v, err
	case ctx.Err() != nil:
		return v, fmt.Errorf("%s: %w: %w", b, errInterrupted, err)
	case cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		if b.probe != nil {
			if perr := b.probe(); perr != nil {
				return v, fmt.Errorf("%s %w within %v (--timeout): %w (%v)", b, errNoAnswer, b.timeout, err, perr)
			}
		}
		return v, fmt.Errorf("%s %w within %v (--timeout): %w", b, errNoAnswer, b.timeout, err)
	}
	return v, fmt.Errorf("%s: %w", b, err)
}

// untilInterrupt runs f on a goroutine of its own and returns what it
// returns, or, when ctx ends first, at once the zero value and an error
// matching errInterrupted and ctx's: f then runs on, unread.
func untilInterrupt[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		select {
		case r := <-done: // answered as it was interrupted
			return r.v, r.err
		default:
			var zero T
			return zero, fmt.Errorf("%w before it answered: %w", errInterrupted, ctx.Err())
		}
	}
}

// inspect is the store's Inspect, bounded by the timeout.
func (b *backend) inspect(ctx context.Context, key string) (driver.Info, error) {
	return callFor(ctx, b, func(ctx context.Context) (driver.Info, error) { return b.store.Inspect(ctx, key) })
}

// list is one call of the store's List, bounded by the timeout.
func (b *backend) list(ctx context.Context, pattern, after string, limit int) ([]driver.Info, string, error) {
	l, ok := b.store.(driver.Lister)
	if !ok {
		return nil, "", fmt.Errorf("%s cannot list its locks (its store has no driver.Lister)", b)
	}
	type page struct {
		infos []driver.Info
		next  string
	}
	p, err := callFor(ctx, b, func(ctx context.Context) (page, error) {
		infos, next, err := l.List(ctx, pattern, after, limit)
		return page{infos, next}, err
	})
	return p.infos, p.next, err
}

// Environment variables that name a store when no store flag is given.
const (
	EnvRedisURL      = "LEASEHOLD_REDIS_URL"
	EnvEtcdEndpoints = "LEASEHOLD_ETCD_ENDPOINTS"
	EnvPostgresDSN   = "LEASEHOLD_POSTGRES_DSN"
	EnvKubeconfig    = "LEASEHOLD_KUBECONFIG"
)

// storeSources pairs each store flag with its environment variable.
var storeSources = []struct{ flag, env string }{
	{"redis", EnvRedisURL},
	{"etcd", EnvEtcdEndpoints},
	{"kube", EnvKubeconfig},
	{"postgres", EnvPostgresDSN},
}

// storeOnlyFlags are the flags that mean something to one store only.
var storeOnlyFlags = []struct{ flag, store string }{
	{"tls-ca", "redis"}, {"tls-cert", "redis"}, {"tls-key", "redis"},
	{"etcd-prefix", "etcd"},
	{"pg-table", "postgres"},
	{"kube-namespace", "kube"}, {"kube-prefix", "kube"},
}

// storeEnvValues are the values of the store variables and of a drill
// worker's job storage variable (envDrillJobs), hidden in every message.
func storeEnvValues() []string {
	var vs []string
	for _, s := range storeSources {
		if v := os.Getenv(s.env); v != "" {
			vs = append(vs, v)
		}
	}
	if v := os.Getenv(envDrillJobs); v != "" {
		vs = append(vs, v)
	}
	return vs
}

// openBackend connects to the one store named on cmd's command line, or,
// when no store flag is given, by one LEASEHOLD_* variable (a flag wins).
// It returns errNoStore when none was named and a usage error when more than
// one was, or when the store's address does not parse. A refused connection
// fails here at once (dialProbe); otherwise connecting is lazy in all three
// clients, and an unreachable store shows in the first call.
func (a *app) openBackend(ctx context.Context, cmd *cobra.Command) (*backend, error) {
	g := &a.global
	var given []string
	kind := ""
	for _, s := range storeSources {
		if flagSet(cmd.Flags(), s.flag) {
			given, kind = append(given, "--"+s.flag), s.flag
		}
	}
	// name is how messages name the source of the address.
	name := "--" + kind
	if len(given) == 0 {
		for _, s := range storeSources {
			if v := os.Getenv(s.env); v != "" {
				given, kind, name = append(given, s.env), s.flag, s.env+" (--"+s.flag+")"
				switch s.flag {
				case "redis":
					g.redisURL = v
				case "etcd":
					g.etcdEndpoints = v
				case "kube":
					g.kubeconfig = v
				default:
					g.postgresDSN = v
				}
			}
		}
	}
	switch {
	case len(given) == 0:
		return nil, errNoStore
	case len(given) > 1:
		return nil, usagef("choose one store: %s were given", strings.Join(given, " and "))
	}
	// A flag of another store would be silently ignored: the operator
	// meant something this store cannot do (as --tls-* without rediss://).
	for _, f := range storeOnlyFlags {
		if f.store != kind && flagSet(cmd.Flags(), f.flag) {
			return nil, usagef("--%s goes with --%s, not with %s", f.flag, f.store, name)
		}
	}
	switch kind {
	case "redis":
		return openRedis(ctx, name, g.redisURL, g.tls, g.timeout)
	case "etcd":
		return openEtcd(ctx, name, g.etcdEndpoints, g.etcdPrefix, g.timeout)
	case "kube":
		return openKube(ctx, name, g.kubeconfig, g.kubeNamespace, g.kubePrefix, g.timeout)
	default:
		return openPostgres(ctx, name, g.postgresDSN, g.pgTable, g.timeout)
	}
}
