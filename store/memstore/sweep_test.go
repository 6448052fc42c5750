package memstore

import (
	"fmt"
	"testing"
	"time"
)

func TestExpiredLeasesAreSwept(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New(WithClock(func() time.Time { return now }))
	for i := range sweepEvery - 1 {
		if _, err := s.Acquire(t.Context(), fmt.Sprint("old:", i), "t", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Second)
	if _, err := s.Acquire(t.Context(), "new", "t", time.Second); err != nil {
		t.Fatal(err)
	}
	if len(s.locks) != 1 {
		t.Fatalf("%d entries after the sweep, want 1", len(s.locks))
	}
	if len(s.fences) != sweepEvery {
		t.Fatalf("%d fences, want %d: fences are kept after expiry", len(s.fences), sweepEvery)
	}
}
