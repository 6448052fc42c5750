package rscript

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// Scripts about as heavy as redisstore's acquire and release (a fence
// read and write, the server's time, a queue check, a publish).
var (
	benchTake = Once(`local last = redis.call('GET', KEYS[2])
redis.call('EXISTS', KEYS[3])
if redis.call('PTTL', KEYS[1]) ~= -2 then return {0, 0} end
local t = redis.call('TIME')
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], t[1] .. t[2])
return {1, t[1] .. t[2]}`)
	benchGive = Once(`if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('EXISTS', KEYS[2])
redis.pcall('PUBLISH', ARGV[2], '')
return 1`)
)

// BenchmarkBatcherFlights compares flight counts in interleaved rounds:
// goroutines each taking and giving back a key of their own, reported as
// the median cycles per second of the rounds for each flight count.
//
//	go test -run '^$' -bench BatcherFlights -benchtime 1x
func BenchmarkBatcherFlights(b *testing.B) {
	srv := testserver.StartRedis(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, PoolSize: 80})
	b.Cleanup(func() { _ = client.Close() })
	c, err := CheckClient(client)
	if err != nil {
		b.Fatal(err)
	}
	const rounds, cell = 7, 300 * time.Millisecond
	for _, conc := range []int{1, 16, 64} {
		rates := map[int][]float64{}
		for r := range rounds {
			for _, f := range []int{1, 2, 3} {
				bt := NewBatcher(client, c, DefaultBatchSize)
				bt.flights = f
				var n atomic.Int64
				ctx, cancel := context.WithTimeout(context.Background(), cell)
				var wg sync.WaitGroup
				for w := range conc {
					wg.Go(func() {
						k := fmt.Sprintf("{b%d:%d:%d:%d}", conc, r, f, w)
						keys := []string{k, k + "f", k + "q"}
						for ctx.Err() == nil {
							cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
							if err := bt.Run(cctx, benchTake, keys, []any{"tok", 60000}, nil).Err(); err != nil {
								b.Error(err)
							}
							if err := bt.Run(cctx, benchGive, keys[:2], []any{"tok", "chan"}, nil).Err(); err != nil {
								b.Error(err)
							}
							ccancel()
							n.Add(1)
						}
					})
				}
				wg.Wait()
				cancel()
				rates[f] = append(rates[f], float64(n.Load())/cell.Seconds())
			}
		}
		for _, f := range []int{1, 2, 3} {
			slices.Sort(rates[f])
			b.ReportMetric(rates[f][rounds/2], fmt.Sprintf("c%d-f%d-cycles/s", conc, f))
		}
	}
}
