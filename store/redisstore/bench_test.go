package redisstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
)

// BenchmarkAcquireRelease is for profiling the uncontended cycle (go test
// -run '^$' -bench AcquireRelease -cpuprofile cpu.out); the side-by-side
// figures come from the bench module (docs/benchmarks.md). Uncontended
// cycles, each goroutine on its own keys, at 1, 16 and 64 goroutines per
// GOMAXPROCS (go test -cpu 1 gives
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
