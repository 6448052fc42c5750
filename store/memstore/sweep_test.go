package memstore

import (
	"fmt"
	"math"
	"strings"
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

// A fence at MaxInt64 cannot rise: Acquire fails and writes nothing, where
// it once wrapped to a negative fence.
func TestFenceAtMaxInt64(t *testing.T) {
	s := New()
	s.fences["k"] = math.MaxInt64 - 1
	f, err := s.Acquire(t.Context(), "k", "t1", time.Second)
	if err != nil || f != math.MaxInt64 {
		t.Fatalf("Acquire at MaxInt64-1: (%d, %v), want MaxInt64", f, err)
	}
	if err := s.Release(t.Context(), "k", "t1"); err != nil {
		t.Fatal(err)
	}
	f, err = s.Acquire(t.Context(), "k", "t2", time.Second)
	if err == nil || f != 0 || !strings.Contains(err.Error(), "cannot rise") {
		t.Fatalf("Acquire past MaxInt64: (%d, %v), want an error", f, err)
	}
	if _, held := s.locks["k"]; held || s.fences["k"] != math.MaxInt64 {
		t.Fatalf("the refused Acquire wrote: held %v, fence %d", held, s.fences["k"])
	}
}
