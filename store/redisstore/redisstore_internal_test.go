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

// A fence is read only as the scripts write it: a canonical decimal in
// 1..MaxInt64, no sign, no leading zero, nothing around it.
func TestParseFence(t *testing.T) {
	for s, want := range map[string]int64{"1": 1, "1795672429633911": 1795672429633911, "9223372036854775807": 9223372036854775807} {
		if got, ok := parseFence(s); !ok || got != want {
			t.Errorf("parseFence(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "0", "01", "+1", "-1", " 1", "1 ", "1a", "1_000", "9223372036854775808", "99999999999999999999"} {
		if got, ok := parseFence(s); ok {
			t.Errorf("parseFence(%q) = %d, true; want refused", s, got)
		}
	}
}
