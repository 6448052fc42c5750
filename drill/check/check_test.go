package check

import (
	"testing"

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
