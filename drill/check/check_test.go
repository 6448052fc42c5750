package check

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/drill/history"
)

func TestWrongOwners(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want int
	}{
		{"release after a newer acquire", []history.Op{
			acquired(1, 5, 0, 1), acquired(2, 6, 10, 11), lockOp(history.OpRelease, 1, 5, 12, 13, ""),
		}, 1},
		{"renewal after a newer acquire", []history.Op{
			acquired(1, 5, 0, 1), acquired(2, 6, 10, 11), lockOp(history.OpRenew, 1, 5, 12, 13, ""),
		}, 1},
		{"refused release after a newer acquire", []history.Op{
			acquired(1, 5, 0, 1), acquired(2, 6, 10, 11), lockOp(history.OpRelease, 1, 5, 12, 13, "not owned"),
		}, 0},
		{"release before the newer acquire returned", []history.Op{
			acquired(1, 5, 0, 1), lockOp(history.OpRelease, 1, 5, 9, 10, ""), acquired(2, 6, 10, 11),
		}, 0},
		// Worker 1's acquire lost its reply but was applied after fence 6
		// (queued on a member cut off from the clients): the key holds its
		// token, and the Client's clean-up release of it succeeds.
		{"clean-up release of an acquire whose reply was lost", []history.Op{
			unknown(busy(1, 0, 20)), acquired(2, 6, 5, 6), lockOp(history.OpRelease, 2, 6, 8, 9, ""),
			lockOp(history.OpRelease, 1, 0, 21, 22, ""),
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := WrongOwners(tc.ops); len(got) != tc.want {
				t.Fatalf("WrongOwners = %v, want %d violations", got, tc.want)
			}
		})
	}
}

// Run reports safety and liveness apart: jobs unfinished and a takeover
// over its SLO are shortfalls, never safety violations; an unreadable
// storage log is a safety violation (the history goes unchecked).
func TestRunSeparatesSafetyFromLiveness(t *testing.T) {
	// Worker 1 is killed at 0 ms holding fence 5; worker 2 takes over at 900 ms.
	h := history.History{Started: t0, Ops: []history.Op{acquired(1, 5, 0, 1), acquired(2, 6, 899, 900)},
		Events: []history.Event{{Fault: "kill-holder", Worker: 1, Key: "job:1", Fence: 5, At: t0}}}
	res := Run(Input{History: h, TTL: 300 * time.Millisecond, Jobs: 10000, Unfinished: 1})
	if len(res.Violations) != 0 {
		t.Errorf("safety violations %v, want none", res.Violations)
	}
	got := map[string]bool{}
	for _, v := range res.Shortfalls {
		got[v.Check] = true
	}
	if len(res.Shortfalls) != 2 || !got[Unfinished] || !got[Takeover] {
		t.Errorf("liveness shortfalls %v, want %s and %s", res.Shortfalls, Unfinished, Takeover)
	}

	res = Run(Input{History: h, TTL: time.Second, WritesErr: errors.New("log lost")})
	if len(res.Violations) != 1 || res.Violations[0].Check != HistoryUnreadable || len(res.Shortfalls) != 0 {
		t.Errorf("unreadable log: violations %v, shortfalls %v; want one %s", res.Violations, res.Shortfalls, HistoryUnreadable)
	}
}
