package leasehold_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/memstore"
)

// Reproduce: go test -run '^$' -bench . -benchmem

func BenchmarkNewToken(b *testing.B) {
	for b.Loop() {
		_ = leasehold.NewToken()
	}
}

func BenchmarkMemstoreAcquireRelease(b *testing.B) {
	c := leasehold.New(memstore.New())
	benchCycles(b, c.TryAcquire)
}

// BenchmarkAcquireUncontended is a waiting Acquire that finds its key free:
// the cost of the waiting machinery when nobody waits.
func BenchmarkAcquireUncontended(b *testing.B) {
	c := leasehold.New(memstore.New())
	benchCycles(b, c.Acquire)
}

// benchCycles runs acquire and release cycles over 64 keys, one goroutine.
func benchCycles(b *testing.B, acquire func(context.Context, string, time.Duration) (*leasehold.Lease, error)) {
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	i := 0
	for b.Loop() {
		i++
		l, err := acquire(b.Context(), keys[i%64], time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandOff is 64 goroutines of one Client taking one key in turn
// with holds of about 0: one op is one transfer through the wait queue.
func BenchmarkHandOff(b *testing.B) {
	c := leasehold.New(memstore.New())
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := c.Acquire(b.Context(), "bench:handoff", time.Minute)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(b.Context()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
