package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/driver"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// pipeCounter is a go-redis hook that counts the script calls sent in
// pipelines.
type pipeCounter struct{ calls atomic.Int64 }

func (p *pipeCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (p *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if n := c.Name(); n == "evalsha" || n == "eval" {
				p.calls.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// Concurrent Acquire, Renew and Release calls, batched together, each get
// their own answer: owners of their own keys get rising fences, contenders
// on one key exclude each other, and the calls the server refuses (a
// corrupt fence counter, a renew of a key not owned) fail alone. On a
// single server, a cluster (split by node) and a failover client.
func TestBatchedCallsUnderConcurrency(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	for name, client := range map[string]redis.UniversalClient{
		"single":                redis.NewClient(&redis.Options{Addr: shared.Addr()}),
		"single, ctx timeouts":  redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true}),
		"cluster":               clusterClient(cluster.Addrs()),
		"cluster, ctx timeouts": redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true}),
		"failover (Sentinel)":   redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "mymaster", SentinelAddrs: sentinelAddrs}),
	} {
		t.Run(name, func(t *testing.T) {
			pipes := &pipeCounter{}
			client.AddHook(pipes)
			s := newStore(t, client)
			batchedCalls(t, s, client)
			t.Logf("%d script calls went in pipelines", pipes.calls.Load())
		})
	}
}

func batchedCalls(t *testing.T, s *redisstore.Store, client redis.UniversalClient) {
	ctx := t.Context()
	base := storetest.Key(t)
	bad := base + ":bad"
	if err := client.Set(ctx, redisstore.FenceKey(bad), "nan", 0).Err(); err != nil {
		t.Fatal(err)
	}
	shared := base + ":shared"
	var holders atomic.Int32
	const owners, contenders, rounds = 24, 8, 30
	var wg sync.WaitGroup
	for w := range owners {
		wg.Go(func() {
			key, tok := fmt.Sprintf("%s:own:%d", base, w), leasehold.NewToken()
			var last int64
			for range rounds {
				f, err := s.Acquire(ctx, key, tok, time.Minute)
				if err != nil || f <= last {
					t.Errorf("Acquire(%s) = %d, %v; want a fence above %d", key, f, err, last)
					return
				}
				last = f
				if err := s.Renew(ctx, key, tok, time.Minute); err != nil {
					t.Errorf("Renew(%s): %v", key, err)
				}
				if err := s.Renew(ctx, key, "other", time.Minute); !errors.Is(err, leasehold.ErrNotOwned) {
					t.Errorf("Renew(%s) by another token: %v, want ErrNotOwned", key, err)
				}
				if _, err := s.Acquire(ctx, bad, tok, time.Minute); err == nil || !strings.Contains(err.Error(), "fence counter") {
					t.Errorf("Acquire of a key with a corrupt counter: %v, want its error", err)
				}
				if err := s.Release(ctx, key, tok); err != nil {
					t.Errorf("Release(%s): %v", key, err)
				}
			}
		})
	}
	for range contenders {
		wg.Go(func() {
			tok := leasehold.NewToken()
			for range rounds {
				_, err := s.Acquire(ctx, shared, tok, time.Minute)
				var held *leasehold.HeldError
				switch {
				case errors.As(err, &held):
					continue
				case err != nil:
					t.Errorf("Acquire(shared): %v", err)
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d holders of one key", n)
				}
				holders.Add(-1)
				if err := s.Release(ctx, shared, tok); err != nil {
					t.Errorf("Release(shared): %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// An Acquire whose caller leaves while it is in flight in a batch: the
// others in the batch are served, and the key it took, if any, is released
// by the Store. Every call is made with a context that ends early for
// some; whatever happens, no key stays held.
func TestBatchedAcquireLeftAtDeadlineIsReleased(t *testing.T) {
	client := singleClient(shared.Addr())
	s := newStore(t, client)
	ctx := t.Context()
	base := storetest.Key(t)
	const workers, rounds = 32, 20
	var wg sync.WaitGroup
	var left atomic.Int64
	for w := range workers {
		wg.Go(func() {
			key := fmt.Sprintf("%s:%d", base, w)
			for i := range rounds {
				tok := leasehold.NewToken()
				actx, cancel := context.WithCancel(ctx)
				if (w+i)%3 == 0 {
					go cancel()
				}
				_, err := s.Acquire(actx, key, tok, time.Minute)
				cancel()
				switch {
				case err == nil:
					if err := s.Release(ctx, key, tok); err != nil {
						t.Errorf("Release(%s): %v", key, err)
					}
				case errors.Is(err, context.Canceled):
					left.Add(1)
				case errors.As(err, new(*leasehold.HeldError)):
					// Taken by an acquire left before, not yet released.
				default:
					t.Errorf("Acquire(%s): %v", key, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d acquires left by their callers", left.Load())
	// The releases of left acquires run when their replies arrive: wait
	// for every key to be free, within a bound.
	deadline := time.Now().Add(30 * time.Second)
	for w := range workers {
		key := fmt.Sprintf("%s:%d", base, w)
		for {
			info, err := s.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !info.Held {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is still held by %s: an acquire left by its caller was not released", key, info.Token)
			}
			waitABit(t)
		}
	}
}

// waitABit yields to the Store's late releases between two polls of a
// bounded wait.
func waitABit(t *testing.T) {
	select {
	case <-t.Context().Done():
	case <-time.After(10 * time.Millisecond):
	}
}

// With WithoutBatching every call is a command of its own: no pipeline
// under concurrency.
func TestWithoutBatchingSendsNoPipeline(t *testing.T) {
	client := singleClient(shared.Addr())
	pipes := &pipeCounter{}
	client.AddHook(pipes)
	// Without replica acknowledgement: its INFO read rides in a script
	// call's pipeline once a second, which a loaded machine's run reaches.
	s := newStore(t, client, redisstore.WithoutBatching(), redisstore.WithoutReplicaAcks())
	batchedCalls(t, s, client)
	if n := pipes.calls.Load(); n != 0 {
		t.Fatalf("%d script calls went in pipelines, want none", n)
	}
}

func TestConformanceWithoutBatching(t *testing.T) {
	storetest.Run(t, func(t *testing.T) driver.Store {
		return newStore(t, singleClient(shared.Addr()), redisstore.WithoutBatching())
	})
}
