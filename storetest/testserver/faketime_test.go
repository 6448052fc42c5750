package testserver

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWithClockOffset starts servers behind, ahead and at the real clock
// under libfaketime, and reads the offset back from TIME, again after a
// Restart. Key expiry follows the same clock, so a TTL is unaffected.
func TestWithClockOffset(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{-2 * time.Second, -200 * time.Millisecond, 0, 1500 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			s := StartRedis(t, WithClockOffset(d))
			for round := range 2 {
				lo, hi, err := s.clockOffset()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("round %d: server clock %v..%v off ours, want %v", round, lo, hi, d)
				if d < lo-clockSlack || d > hi+clockSlack {
					t.Fatalf("round %d: server clock %v..%v off ours, want %v", round, lo, hi, d)
				}
				if _, err := s.Do("SET", "k", "v", "PX", "60000"); err != nil {
					t.Fatal(err)
				}
				pttl, err := s.Do("PTTL", "k")
				if n, _ := strconv.Atoi(pttl); err != nil || n < 50000 || n > 60000 {
					t.Fatalf("round %d: PTTL k = %q, %v; want about 60000", round, pttl, err)
				}
				if round == 0 {
					if err := s.Restart(); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// TestCheckClockCatchesARealClock: the check a start with WithClockOffset
// makes fails on a server whose clock is not offset, even by 200 ms.
func TestCheckClockCatchesARealClock(t *testing.T) {
	t.Parallel()
	s := StartRedis(t)
	if err := s.checkClock(0); err != nil {
		t.Fatalf("checkClock(0) on a real clock: %v", err)
	}
	for _, d := range []time.Duration{-200 * time.Millisecond, 200 * time.Millisecond} {
		if err := s.checkClock(d); err == nil || !strings.Contains(err.Error(), "want "+d.String()) {
			t.Fatalf("checkClock(%v) on a real clock: err = %v, want a mismatch", d, err)
		}
	}
}

func TestFaketimeOffset(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-2 * time.Second:        "-2.000000",
		-200 * time.Millisecond: "-0.200000",
		0:                       "+0.000000",
		1500 * time.Microsecond: "+0.001500",
	} {
		if got := faketimeOffset(d); got != want {
			t.Errorf("faketimeOffset(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestWithClockOffsetNoFaketime: without libfaketime the start fails with a
// message naming the Debian package; it never skips.
func TestWithClockOffsetNoFaketime(t *testing.T) {
	saved := libfaketimeGlobs
	libfaketimeGlobs = []string{t.TempDir() + "/libfaketime.so.1"}
	defer func() { libfaketimeGlobs = saved }()
	_, err := NewRedisServer(WithClockOffset(-time.Second))
	if err == nil || !strings.Contains(err.Error(), "install the Debian package faketime") {
		t.Fatalf("err = %v, want one naming the package faketime", err)
	}
}
