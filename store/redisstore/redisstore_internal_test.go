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

// Inspect reads a key in its last millisecond (PTTL 0) as held for 1 ms, not
// for 0, which Info keeps for a key nobody holds; a key without an expiry
// (PTTL -1, not leasehold's) has no TTL to report.
func TestInspectReplyInTheLastMillisecond(t *testing.T) {
	for pttl, want := range map[int64]time.Duration{-1: 0, 0: time.Millisecond, 1: time.Millisecond, 1500: 1500 * time.Millisecond} {
		info, _, err := inspectReply("k", []any{"tok", pttl, "7"})
		if err != nil || !info.Held || info.TTL != want || info.Fence != 7 {
			t.Errorf("PTTL %d: %+v, %v; want held for %v, fence 7", pttl, info, err, want)
		}
	}
}
