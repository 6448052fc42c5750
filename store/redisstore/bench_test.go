package redisstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest"
)

// Benchmarks against the package's shared loopback redis-server. Reproduce:
//
//	cd store/redisstore && go test -run '^$' -bench . -benchtime 2s -count 5 | tee bench.txt
//
// and compare with benchstat. The Raw* benchmarks are the floor: one round
// trip of the same client to the same server. An acquire+release cycle is two
// round trips, so its ideal is half the raw rate.

var trivial = redis.NewScript(`return 1`)

func benchClient(b *testing.B) *redis.Client {
	c := singleClient(shared.Addr())
	b.Cleanup(func() { _ = c.Close() })
	if err := trivial.Load(b.Context(), c).Err(); err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkRawPing(b *testing.B) {
	c := benchClient(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Ping(b.Context()).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkRawEvalSha(b *testing.B) {
	c := benchClient(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := trivial.Run(b.Context(), c, nil).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAcquireRelease: uncontended cycles, each goroutine on its own
// keys, at 1, 16 and 64 goroutines per GOMAXPROCS (go test -cpu 1 gives
// those counts), batched (the default) and WithoutBatching, on a client
// with ContextTimeoutEnabled as the bench module's.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, batching := range []string{"batched", "unbatched"} {
		for _, par := range []int{1, 16, 64} {
			b.Run(batching+"/"+strconv.Itoa(par), func(b *testing.B) {
				var opts []redisstore.Option
				if batching == "unbatched" {
					opts = append(opts, redisstore.WithoutBatching())
				}
				c := redis.NewClient(&redis.Options{Addr: shared.Addr(), ContextTimeoutEnabled: true, PoolSize: 70})
				cl := leasehold.New(newStore(b, c, opts...))
				var n atomic.Int64
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					prefix := "bench:" + strconv.FormatInt(n.Add(1), 10) + ":"
					i := 0
					for pb.Next() {
						i++
						l, err := cl.TryAcquire(b.Context(), prefix+strconv.Itoa(i%64), time.Minute)
						if err != nil {
							b.Fatal(err)
						}
						if err := l.Release(b.Context()); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

func BenchmarkRenew(b *testing.B) {
	cl := leasehold.New(newStore(b, benchClient(b)))
	l, err := cl.TryAcquire(b.Context(), storetest.Key(b), time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Release(b.Context()) })
	for b.Loop() {
		if err := l.Renew(b.Context(), time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
