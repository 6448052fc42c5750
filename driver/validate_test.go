package driver

import "testing"

// A fence is read only as stores write it: a canonical decimal in
// 1..MaxInt64, no sign, no leading zero, nothing around it.
func TestParseFence(t *testing.T) {
	for s, want := range map[string]int64{"1": 1, "1795672429633911": 1795672429633911, "9007199254740993": 9007199254740993, "9223372036854775807": 9223372036854775807} {
		if got, ok := ParseFence(s); !ok || got != want {
			t.Errorf("ParseFence(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "0", "00", "01", "007", "+1", "+5", "-1", "-0", " 1", "1 ", "1a", "1_000", "1.0", "1e3", "0x10", "١", "9223372036854775808", "99999999999999999999"} {
		if got, ok := ParseFence(s); ok {
			t.Errorf("ParseFence(%q) = %d, true; want refused", s, got)
		}
	}
}
