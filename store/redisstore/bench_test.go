package redisstore_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
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

// BenchmarkAcquireRelease: uncontended cycles, each goroutine on its own keys.
func BenchmarkAcquireRelease(b *testing.B) {
	cl := leasehold.New(newStore(b, benchClient(b)))
	var n atomic.Int64
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
