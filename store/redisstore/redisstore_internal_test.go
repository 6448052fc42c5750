package redisstore

import (
	"testing"
	"time"
)

// A lease in its last millisecond (PTTL 0) is still held: the waiter must
// be told to come back at once, not "unknown".
func TestHeldFor(t *testing.T) {
	for pttl, want := range map[int64]time.Duration{-2: 0, -1: 0, 0: time.Millisecond, 1: time.Millisecond, 250: 250 * time.Millisecond} {
		if got := heldFor(pttl); got != want {
			t.Errorf("heldFor(%d) = %v, want %v", pttl, got, want)
		}
	}
}
