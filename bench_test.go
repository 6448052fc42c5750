package leasehold_test

import (
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
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	i := 0
	for b.Loop() {
		i++
		l, err := c.TryAcquire(b.Context(), keys[i%64], time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
