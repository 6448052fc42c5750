package redisfence_test

import (
	"testing"

	"github.com/leasehold/leasehold/fence/fencetest"
)

// Reproduce: cd store/redisstore && go test -run '^$' -bench . -count 6 ./redisfence
// Plain SET against a fenced SET on the same server, in the same run.

func BenchmarkPlainSet(b *testing.B) {
	client := single(shared.Addr())
	b.Cleanup(func() { _ = client.Close() })
	key := fencetest.Key(b)
	for b.Loop() {
		if err := client.Set(b.Context(), key, "v", 0).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFencedSet(b *testing.B) {
	w := newWriter(b, single(shared.Addr()))
	key := fencetest.Key(b)
	var f int64
	for b.Loop() {
		f++
		if err := w.Set(b.Context(), key, f, "v"); err != nil {
			b.Fatal(err)
		}
	}
}
