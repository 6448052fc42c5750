package drill

import (
	"testing"
	"time"
)

// A worker's pause after store errors in a row doubles from poll and stops
// at the TTL, however many errors come.
func TestFailPauseDoublesUpToTheTTL(t *testing.T) {
	const poll, ttl = 30 * time.Millisecond, 600 * time.Millisecond
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, 30 * time.Millisecond}, {2, 60 * time.Millisecond}, {3, 120 * time.Millisecond}, {5, 480 * time.Millisecond},
		{6, ttl}, {7, ttl}, {1 << 30, ttl}} {
		if got := failPause(poll, ttl, tc.n); got != tc.want {
			t.Errorf("failPause(%v, %v, %d) = %v, want %v", poll, ttl, tc.n, got, tc.want)
		}
	}
	if got := failPause(time.Second, ttl, 1); got != ttl {
		t.Errorf("a poll above the TTL: %v, want the TTL", got)
	}
}
