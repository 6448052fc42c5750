package leasehold

import (
	"errors"
	"testing"
	"time"
)

func TestHoldConfigDefaults(t *testing.T) {
	cases := []struct {
		ttl                            time.Duration
		interval, margin, renewTimeout time.Duration
	}{
		{60 * time.Second, 20 * time.Second, 6 * time.Second, 2 * time.Second},
		{30 * time.Second, 10 * time.Second, 3 * time.Second, 2 * time.Second},
		{3 * time.Second, time.Second, 300 * time.Millisecond, time.Second}, // timeout clamped to the interval
		{600 * time.Millisecond, 200 * time.Millisecond, 60 * time.Millisecond, 200 * time.Millisecond},
	}
	for _, tc := range cases {
		c, err := newHoldConfig[HoldOption](tc.ttl, nil)
		if err != nil {
			t.Fatalf("ttl %v: %v", tc.ttl, err)
		}
		if c.interval != tc.interval || c.margin != tc.margin || c.renewTimeout != tc.renewTimeout ||
			c.maxFailures != 3 || c.releaseTimeout != 2*time.Second {
			t.Errorf("ttl %v: %+v", tc.ttl, c)
		}
	}
}

func TestHoldConfigRejectsWhatCannotWork(t *testing.T) {
	cases := []struct {
		opts []HoldOption
		arg  string
	}{
		{[]HoldOption{FenceAfter(-1)}, "FenceAfter"},
		{[]HoldOption{WithRenewInterval(0)}, "renew interval"},
		{[]HoldOption{WithRenewInterval(55 * time.Second)}, "renew interval"}, // 55 s + 6 s margin ≥ 60 s
		{[]HoldOption{WithDriftMargin(-time.Second)}, "drift margin"},
		{[]HoldOption{WithDriftMargin(40 * time.Second)}, "renew interval"}, // 20 s + 40 s ≥ 60 s
		{[]HoldOption{WithRenewTimeout(0)}, "renew timeout"},
		{[]HoldOption{WithReleaseTimeout(-1)}, "release timeout"},
	}
	for _, tc := range cases {
		_, err := newHoldConfig(time.Minute, tc.opts)
		var ae *ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("want an error naming %q, got %v", tc.arg, err)
		}
	}
}

func TestDeadlineArithmetic(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := renewState{ttl: time.Minute, margin: 6 * time.Second, maxFailures: 3, lastSent: t0, lastDone: at(100 * time.Millisecond)}

	steps := []struct {
		name          string
		do            func()
		deadline      time.Time
		expiredBy     time.Time
		callTimeoutAt time.Time // callTimeout(at, 2 s) is checked here
		callTimeout   time.Duration
	}{
		{"after the acquire", func() {}, at(54 * time.Second), at(66*time.Second + 100*time.Millisecond), at(20 * time.Second), 2 * time.Second},
		{"a failure moves nothing", func() { s.failed() }, at(54 * time.Second), at(66*time.Second + 100*time.Millisecond), at(53 * time.Second), time.Second},
		{"a renewal sent at 20 s", func() { s.succeeded(at(20*time.Second), at(21*time.Second)) }, at(74 * time.Second), at(87 * time.Second), at(40 * time.Second), 2 * time.Second},
		{"past the deadline", func() {}, at(74 * time.Second), at(87 * time.Second), at(75 * time.Second), -time.Second},
	}
	for _, st := range steps {
		st.do()
		if got := s.deadline(); !got.Equal(st.deadline) {
			t.Errorf("%s: deadline %v, want %v", st.name, got.Sub(t0), st.deadline.Sub(t0))
		}
		if got := s.expiredBy(); !got.Equal(st.expiredBy) {
			t.Errorf("%s: expiredBy %v, want %v", st.name, got.Sub(t0), st.expiredBy.Sub(t0))
		}
		if got := s.callTimeout(st.callTimeoutAt, 2*time.Second); got != st.callTimeout {
			t.Errorf("%s: callTimeout at %v = %v, want %v", st.name, st.callTimeoutAt.Sub(t0), got, st.callTimeout)
		}
	}
	// The continue policy never shortens a call to the deadline.
	c := renewState{ttl: time.Minute, margin: 6 * time.Second, lastSent: t0}
	if got := c.callTimeout(at(59*time.Second), 2*time.Second); got != 2*time.Second {
		t.Errorf("continue policy callTimeout = %v, want 2s", got)
	}
}

func TestFailureBudget(t *testing.T) {
	cases := []struct {
		max     int
		pattern string // f: failure, s: success
		giveUp  int    // index of the step that spends the budget, -1 for never
	}{
		{3, "fff", 2},
		{3, "ffsff", -1},
		{3, "ffsfff", 5},
		{1, "f", 0},
		{3, "fsfsfsfsfs", -1},
		{0, "ffffffffff", -1}, // the continue policy never gives up
	}
	for _, tc := range cases {
		s := renewState{maxFailures: tc.max}
		got := -1
		for i, step := range tc.pattern {
			if step == 's' {
				s.succeeded(time.Time{}, time.Time{})
			} else if s.failed() && got < 0 {
				got = i
			}
		}
		if got != tc.giveUp {
			t.Errorf("max %d, %s: gave up at step %d, want %d", tc.max, tc.pattern, got, tc.giveUp)
		}
	}
}

// Why the counter alone is not enough: renewing every ttl/3, the third
// consecutive failure comes exactly when the server lets the lease expire;
// the local deadline comes a drift margin before.
func TestCounterAloneFencesTooLate(t *testing.T) {
	for _, ttl := range []time.Duration{600 * time.Millisecond, 10 * time.Second, time.Minute} {
		c, err := newHoldConfig[HoldOption](ttl, nil)
		if err != nil {
			t.Fatal(err)
		}
		third := time.Duration(c.maxFailures) * c.interval // the acquire counts as the last success
		s := renewState{ttl: ttl, margin: c.margin}
		if d := ttl - third; d < 0 || d > time.Microsecond { // ttl/3 rounds down by at most 2 ns
			t.Errorf("ttl %v: third failure at %v, want at the expiry", ttl, third)
		}
		if dl := s.deadline().Sub(time.Time{}); dl >= third || dl >= ttl {
			t.Errorf("ttl %v: deadline at %v, want before the third failure (%v) and the expiry", ttl, dl, third)
		}
	}
}
