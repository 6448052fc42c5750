package leasehold

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store/memstore"
)

func TestHoldConfigDefaults(t *testing.T) {
	cases := []struct {
		ttl                       time.Duration
		interval, margin, timeout time.Duration
	}{
		{60 * time.Second, 20 * time.Second, 6 * time.Second, 2 * time.Second},
		{30 * time.Second, 10 * time.Second, 3 * time.Second, 2 * time.Second},
		{3 * time.Second, time.Second, 300 * time.Millisecond, time.Second}, // timeout clamped to the interval
		{600 * time.Millisecond, 200 * time.Millisecond, 60 * time.Millisecond, 200 * time.Millisecond},
	}
	for _, tc := range cases {
		c, err := newHoldConfig(tc.ttl, nil, "Hold", optHold)
		if err != nil {
			t.Fatalf("ttl %v: %v", tc.ttl, err)
		}
		if c.interval != tc.interval || c.margin != tc.margin || c.timeout != tc.timeout ||
			c.maxFailures != 3 || c.releaseTimeout != 2*time.Second || c.ttl != tc.ttl {
			t.Errorf("ttl %v: %+v", tc.ttl, c)
		}
	}
	// RunLoop and Lead: the call's default TTL, or WithTTL.
	if c, err := newHoldConfig(2*time.Second, nil, "RunLoop", optLoop); err != nil || c.ttl != 2*time.Second || c.margin != 200*time.Millisecond {
		t.Errorf("RunLoop default: %+v, %v", c, err)
	}
	if c, err := newHoldConfig(defaultLeaderTTL, []HoldOption{WithTTL(time.Minute)}, "Lead", optLead); err != nil || c.ttl != time.Minute || c.interval != 20*time.Second {
		t.Errorf("Lead WithTTL: %+v, %v", c, err)
	}
}

func TestHoldConfigRejectsWhatCannotWork(t *testing.T) {
	cases := []struct {
		opts []HoldOption
		call optCalls
		arg  string
	}{
		{[]HoldOption{FenceAfter(-1)}, optHold, "FenceAfter"},
		{[]HoldOption{WithRenewInterval(-time.Second)}, optHold, "WithRenewInterval"},
		{[]HoldOption{WithRenewInterval(55 * time.Second)}, optHold, "WithRenewInterval"}, // 55 s + 6 s margin ≥ 60 s
		{[]HoldOption{WithDriftMargin(-time.Second)}, optHold, "WithDriftMargin"},
		{[]HoldOption{WithDriftMargin(40 * time.Second)}, optHold, "WithRenewInterval"}, // 20 s + 40 s ≥ 60 s
		{[]HoldOption{WithDriftMargin(time.Minute)}, optLoop, "WithDriftMargin"},
		{[]HoldOption{WithRenewTimeout(-1)}, optHold, "WithRenewTimeout"},
		{[]HoldOption{WithReleaseTimeout(-1)}, optHold, "WithReleaseTimeout"},
		{[]HoldOption{WithWaitBudget(-1)}, optHold, "WithWaitBudget"},
		{[]HoldOption{WithTTL(-1)}, optLoop, "WithTTL"},
		// An option the call does not take is named, not ignored.
		{[]HoldOption{WithWaitBudget(time.Second)}, optRenewal, "WithWaitBudget"},
		{[]HoldOption{WithTTL(time.Second)}, optHold, "WithTTL"},
		{[]HoldOption{WithReleaseTimeout(time.Second)}, optRenewal, "WithReleaseTimeout"},
		{[]HoldOption{FenceAfter(2)}, optLoop, "FenceAfter"},
		{[]HoldOption{WithWaitBudget(time.Second)}, optLead, "WithWaitBudget"},
	}
	for _, tc := range cases {
		_, err := newHoldConfig(time.Minute, tc.opts, "the call", tc.call)
		var ae *ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("want an error naming %q, got %v", tc.arg, err)
		}
	}
}

func TestDeadlineArithmetic(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	r := renewal{ttl: time.Minute, sent: t0, done: at(100 * time.Millisecond),
		policy: policy{maxFailures: 3, interval: 20 * time.Second, margin: 6 * time.Second}}
	steps := []struct {
		name                string
		do                  func()
		deadline, expiredBy time.Time
	}{
		{"after the acquire", func() {}, at(54 * time.Second), at(66*time.Second + 100*time.Millisecond)},
		{"a failure moves nothing", func() { r.settle(errors.New("down"), at(20*time.Second), at(21*time.Second)) },
			at(54 * time.Second), at(66*time.Second + 100*time.Millisecond)},
		{"a renewal sent at 40 s", func() { r.settle(nil, at(40*time.Second), at(41*time.Second)) }, at(94 * time.Second), at(107 * time.Second)},
	}
	for _, st := range steps {
		st.do()
		if got := r.deadline(); !got.Equal(st.deadline) {
			t.Errorf("%s: deadline %v, want %v", st.name, got.Sub(t0), st.deadline.Sub(t0))
		}
		if got := r.expiredBy(); !got.Equal(st.expiredBy) {
			t.Errorf("%s: expiredBy %v, want %v", st.name, got.Sub(t0), st.expiredBy.Sub(t0))
		}
		if got := r.limit(); !got.Equal(st.deadline) {
			t.Errorf("%s: the fence policy's limit %v, want the deadline", st.name, got.Sub(t0))
		}
	}
	if r.next != at(60*time.Second) || r.wake() != at(60*time.Second) {
		t.Errorf("next renewal at %v (wake %v), want 60s", r.next.Sub(t0), r.wake().Sub(t0))
	}
	r.maxFailures = 0
	if !r.limit().Equal(r.expiredBy()) {
		t.Errorf("the continue policy's limit is not the certain expiry")
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
		r := renewal{ttl: time.Minute, policy: policy{maxFailures: tc.max, interval: time.Second}}
		got := -1
		for i, step := range tc.pattern {
			var err error
			if step == 'f' {
				err = errors.New("down")
			}
			if o := r.settle(err, time.Time{}, time.Time{}); o.lost != nil && got < 0 {
				got = i
				if !errors.Is(o.lost, ErrAbandoned) || !o.fenced {
					t.Errorf("max %d: gave up with %v (fenced %v)", tc.max, o.lost, o.fenced)
				}
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
		c, err := newHoldConfig(ttl, nil, "Hold", optHold)
		if err != nil {
			t.Fatal(err)
		}
		third := time.Duration(c.maxFailures) * c.interval // the acquire counts as the last success
		r := renewal{ttl: ttl, policy: c.policy}
		if d := ttl - third; d < 0 || d > time.Microsecond { // ttl/3 rounds down by at most 2 ns
			t.Errorf("ttl %v: third failure at %v, want at the expiry", ttl, third)
		}
		if dl := r.deadline().Sub(time.Time{}); dl >= third || dl >= ttl {
			t.Errorf("ttl %v: deadline at %v, want before the third failure (%v) and the expiry", ttl, dl, third)
		}
	}
}

func TestQueueStayIsBoundedWhateverTheBackoff(t *testing.T) {
	for _, tc := range []struct{ backoff, stay, refresh time.Duration }{
		{time.Second, 2500 * time.Millisecond, time.Second},
		{10 * time.Millisecond, 520 * time.Millisecond, 10 * time.Millisecond},
		{12 * time.Hour, 5 * time.Second, 2250 * time.Millisecond},
	} {
		stay := queueStay(tc.backoff)
		if stay != tc.stay || refreshEvery(tc.backoff, stay) != tc.refresh {
			t.Errorf("backoff %v: stay %v refresh %v, want %v %v", tc.backoff, stay, refreshEvery(tc.backoff, stay), tc.stay, tc.refresh)
		}
	}
}

// chunk puts the leases near their limit in calls of their own and the
// others in theirs, however the two kinds alternate in the queue: it once
// stopped at the first lease of the other kind, and a queue that alternated
// went out one lease a call.
func TestChunkSplitsByKindNotByRun(t *testing.T) {
	c := New(memstore.New())
	defer c.Close()
	now := time.Now()
	pol := policy{maxFailures: 3, interval: time.Second, timeout: time.Second, margin: time.Second}
	var queue []*KeepAlive
	for i := range 8 {
		l := &Lease{client: c, key: fmt.Sprint("k", i), token: "t", op: make(chan struct{}, 1)}
		k := &KeepAlive{lease: l, index: -1}
		sent := now // limit now + ttl − margin: far
		if i%2 == 0 {
			sent = now.Add(-58*time.Second - 500*time.Millisecond) // limit within the timeout: near
		}
		l.r = renewal{ttl: time.Minute, sent: sent, done: sent, keeper: k, policy: pol, phase: phaseQueued}
		queue = append(queue, k)
	}
	c.renew.size = 100
	var sizes []int
	for len(queue) > 0 && len(sizes) < 10 {
		var call *renewCall
		call, queue = c.renew.chunk(queue, now)
		if call == nil {
			break
		}
		sizes = append(sizes, len(call.leases))
		for _, k := range call.leases {
			near := k.lease.r.limit().Before(now.Add(pol.timeout))
			if near != call.limit.Before(now.Add(pol.timeout)) {
				t.Errorf("call %d mixes leases near and far from their limit", len(sizes))
			}
		}
	}
	if !slices.Equal(sizes, []int{4, 4}) {
		t.Fatalf("calls of %v leases, want [4 4]", sizes)
	}
}
