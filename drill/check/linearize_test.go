package check

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/jobs"
)

// t0 is the start of every hand-made history; at(n) is n milliseconds later.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

const key = "job:1"

// Hand-made operations: w is the worker, f the fence, [call, ret] the span
// in milliseconds.
func acquired(w int, f int64, call, ret int) history.Op {
	return history.Op{Kind: history.OpAcquire, Worker: w, Key: key, Fence: f, Call: at(call), Return: at(ret), OK: true}
}

func busy(w, call, ret int) history.Op {
	return history.Op{Kind: history.OpAcquire, Worker: w, Key: key, Call: at(call), Return: at(ret)}
}

func lockOp(kind string, w int, f int64, call, ret int, err string) history.Op {
	return history.Op{Kind: kind, Worker: w, Key: key, Fence: f, Call: at(call), Return: at(ret), OK: err == "", Err: err}
}

func claimed(w int, f int64, read string, call, ret int) history.Op {
	return history.Op{Kind: history.OpClaim, Worker: w, Key: key, Fence: f, State: read, Call: at(call), Return: at(ret), OK: true}
}

func wrote(w int, f int64, state string, call, ret int) history.Op {
	return history.Op{Kind: history.OpWrite, Worker: w, Key: key, Fence: f, State: state, Call: at(call), Return: at(ret), OK: true}
}

func stale(o history.Op) history.Op {
	o.OK, o.Stale, o.Err = false, true, "fence: stale"
	return o
}

func unknown(o history.Op) history.Op {
	o.OK, o.Err = false, "i/o timeout"
	if o.Kind == history.OpAcquire {
		o.Fence = 0 // the reply, and the fence in it, never came
	}
	return o
}

func TestLinearizeHandMadeHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want string
	}{
		{"hand-over by release, with a busy waiter", []history.Op{
			acquired(0, 1, 0, 1),
			claimed(0, 1, jobs.Queued, 2, 3),
			wrote(0, 1, jobs.Running, 4, 5),
			busy(1, 4, 6),
			lockOp(history.OpRenew, 0, 1, 6, 7, ""),
			wrote(0, 1, jobs.Done, 8, 9),
			lockOp(history.OpRelease, 0, 1, 10, 11, ""),
			acquired(1, 2, 12, 13),
			claimed(1, 2, jobs.Done, 14, 15),
			lockOp(history.OpRelease, 1, 2, 16, 17, ""),
		}, LinearizableOK},
		{"take-over after expiry: the paused holder's write and release are refused", []history.Op{
			acquired(0, 1, 0, 1),
			claimed(0, 1, jobs.Queued, 2, 3),
			wrote(0, 1, jobs.Running, 4, 5),
			acquired(1, 2, 10, 11), // lease 1 expired meanwhile
			claimed(1, 2, jobs.Running, 12, 13),
			stale(wrote(0, 1, jobs.Done, 14, 15)),
			lockOp(history.OpRelease, 0, 1, 16, 17, errNotOwned),
			lockOp(history.OpRenew, 1, 2, 16, 18, ""),
			wrote(1, 2, jobs.Done, 19, 20),
		}, LinearizableOK},
		{"overlapping acquires may linearize either way", []history.Op{
			acquired(0, 1, 0, 10),
			busy(1, 1, 9),
			lockOp(history.OpRelease, 0, 1, 11, 12, ""),
		}, LinearizableOK},
		{"a superseded lease's release succeeds", []history.Op{
			acquired(0, 1, 0, 1),
			acquired(1, 2, 10, 11),
			lockOp(history.OpRelease, 0, 1, 12, 13, ""),
		}, LinearizableIllegal},
		{"a superseded lease's renewal succeeds", []history.Op{
			acquired(0, 1, 0, 1),
			acquired(1, 2, 10, 11),
			lockOp(history.OpRenew, 0, 1, 12, 13, ""),
		}, LinearizableIllegal},
		{"an acquire's fence is not above a previous one", []history.Op{
			acquired(0, 2, 0, 1),
			lockOp(history.OpRelease, 0, 2, 2, 3, ""),
			acquired(1, 2, 4, 5),
		}, LinearizableIllegal},
		{"two leases at once", []history.Op{
			acquired(0, 1, 0, 1),
			acquired(1, 2, 2, 3),
			lockOp(history.OpRenew, 0, 1, 4, 5, ""),
		}, LinearizableIllegal},
		{"busy while free, after a completed release", []history.Op{
			acquired(0, 1, 0, 1),
			lockOp(history.OpRelease, 0, 1, 2, 3, ""),
			busy(1, 4, 5),
		}, LinearizableIllegal},
		{"busy at the start: a lease from before the drill, which then expires", []history.Op{
			busy(0, 0, 1),
			busy(1, 2, 3),
			acquired(1, 1, 4, 5),
			lockOp(history.OpRelease, 1, 1, 6, 7, ""),
		}, LinearizableOK},
		{"busy again once the lease from before has given way to the drill's", []history.Op{
			busy(0, 0, 1),
			acquired(1, 1, 4, 5),
			lockOp(history.OpRelease, 1, 1, 6, 7, ""),
			busy(0, 8, 9),
		}, LinearizableIllegal},
		{"a stale storage write accepted", []history.Op{
			claimed(1, 2, jobs.Queued, 0, 1),
			wrote(0, 1, jobs.Done, 2, 3),
		}, LinearizableIllegal},
		{"a stale refusal of a current fence", []history.Op{
			claimed(0, 1, jobs.Queued, 0, 1),
			stale(wrote(0, 1, jobs.Running, 2, 3)),
		}, LinearizableIllegal},
		{"a claim reads a state that was never written", []history.Op{
			claimed(0, 1, jobs.Running, 0, 1),
		}, LinearizableIllegal},
		{"a claim reads a state that was overwritten before it began", []history.Op{
			wrote(0, 1, jobs.Running, 0, 1),
			wrote(0, 1, jobs.Done, 2, 3),
			claimed(1, 2, jobs.Running, 4, 5),
		}, LinearizableIllegal},

		// Unknown outcomes: either way is legal.
		{"unknown acquire that took effect: busy until its clean-up release", []history.Op{
			unknown(acquired(0, 1, 0, 1)),
			busy(1, 2, 3),
			lockOp(history.OpRelease, 0, 0, 4, 5, ""), // the clean-up, by token: fence unknown
			acquired(1, 2, 6, 7),                      // fence 1 went to the unknown acquire
		}, LinearizableOK},
		{"unknown acquire that did not take effect", []history.Op{
			unknown(acquired(0, 1, 0, 1)),
			lockOp(history.OpRelease, 0, 0, 2, 3, errNotOwned),
			acquired(1, 1, 4, 5),
			lockOp(history.OpRelease, 1, 1, 6, 7, ""),
		}, LinearizableOK},
		{"unknown acquire applied late, after its clean-up release", []history.Op{
			unknown(acquired(0, 1, 0, 1)),
			lockOp(history.OpRelease, 0, 0, 2, 3, errNotOwned),
			busy(1, 10, 11),
		}, LinearizableOK},
		{"an unknown acquire takes effect at most once", []history.Op{
			unknown(acquired(0, 1, 0, 1)),
			busy(1, 2, 3),
			lockOp(history.OpRelease, 0, 0, 4, 5, ""),
			busy(1, 6, 7),
		}, LinearizableIllegal},
		{"an unknown acquire's fence is above every earlier one", []history.Op{
			acquired(0, 1, 0, 1),
			lockOp(history.OpRelease, 0, 1, 2, 3, ""),
			unknown(acquired(1, 0, 4, 5)),
			busy(2, 6, 7), // so the unknown acquire took fence 2 or more
			acquired(2, 2, 20, 21),
		}, LinearizableIllegal},
		{"a clean-up release with no unknown acquire cannot succeed", []history.Op{
			acquired(0, 1, 0, 1),
			lockOp(history.OpRelease, 1, 0, 2, 3, ""),
		}, LinearizableIllegal},
		{"unknown release that took effect", []history.Op{
			acquired(0, 1, 0, 1),
			unknown(lockOp(history.OpRelease, 0, 1, 2, 3, "")),
			acquired(1, 2, 4, 5),
		}, LinearizableOK},
		{"unknown release that did not take effect", []history.Op{
			acquired(0, 1, 0, 1),
			unknown(lockOp(history.OpRelease, 0, 1, 2, 3, "")),
			busy(1, 4, 5),
			lockOp(history.OpRenew, 0, 1, 6, 7, ""),
		}, LinearizableOK},
		{"unknown write that took effect", []history.Op{
			claimed(0, 1, jobs.Queued, 0, 1),
			unknown(wrote(0, 1, jobs.Running, 2, 3)),
			claimed(1, 2, jobs.Running, 4, 5),
		}, LinearizableOK},
		{"unknown write that did not take effect", []history.Op{
			claimed(0, 1, jobs.Queued, 0, 1),
			unknown(wrote(0, 1, jobs.Running, 2, 3)),
			claimed(1, 2, jobs.Queued, 4, 5),
		}, LinearizableOK},
		{"unknown write applied late", []history.Op{
			claimed(0, 1, jobs.Queued, 0, 1),
			unknown(wrote(0, 1, jobs.Running, 2, 3)),
			claimed(0, 1, jobs.Queued, 4, 5),
			claimed(0, 1, jobs.Running, 6, 7),
		}, LinearizableOK},
		{"unknown claim that raised the fence", []history.Op{
			claimed(0, 1, jobs.Queued, 0, 1),
			unknown(claimed(1, 2, "", 2, 3)),
			stale(wrote(0, 1, jobs.Running, 4, 5)),
		}, LinearizableOK},
		{"unknown claim that did not", []history.Op{
			claimed(0, 1, jobs.Queued, 0, 1),
			unknown(claimed(1, 2, "", 2, 3)),
			wrote(0, 1, jobs.Running, 4, 5),
		}, LinearizableOK},
		{"an unknown stale write cannot have taken effect", []history.Op{
			claimed(1, 2, jobs.Queued, 0, 1),
			unknown(wrote(0, 1, jobs.Done, 2, 3)),
			claimed(1, 2, jobs.Done, 4, 5),
		}, LinearizableIllegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lin := linearize(linearizeModel, history.History{Started: t0, Ops: tc.ops}, 10*time.Second)
			if lin.Result != tc.want {
				t.Fatalf("result %s, want %s", lin.Result, tc.want)
			}
			switch tc.want {
			case LinearizableOK:
				if len(lin.Violations) != 0 || lin.Visualization != nil {
					t.Errorf("ok, yet %d violations and a %d-byte visualization", len(lin.Violations), len(lin.Visualization))
				}
			case LinearizableIllegal:
				if len(lin.Violations) != 1 || lin.Violations[0].Check != NotLinearizable ||
					!strings.HasPrefix(lin.Violations[0].Detail, key+": ") {
					t.Errorf("violations %v, want one %s naming %s", lin.Violations, NotLinearizable, key)
				}
				if !bytes.Contains(lin.Visualization, []byte("<html")) {
					t.Errorf("no HTML visualization (%d bytes)", len(lin.Visualization))
				}
			}
		})
	}
}

// Operations are checked per key and model: a violation names its key and
// its model, and leaves the other keys alone.
func TestLinearizeNamesTheKeys(t *testing.T) {
	other := func(o history.Op) history.Op { o.Key = "job:2"; return o }
	ops := []history.Op{
		acquired(0, 1, 0, 1),
		lockOp(history.OpRelease, 0, 1, 2, 3, ""),
		busy(1, 4, 5), // illegal on job:1's lock
		other(acquired(2, 1, 0, 1)),
		other(claimed(2, 1, jobs.Queued, 2, 3)),
		other(wrote(3, 0, jobs.Done, 4, 5)), // illegal on job:2's storage
		other(busy(3, 6, 7)),                // legal: job:2 is still held
		claimed(1, 7, jobs.Queued, 10, 11),  // legal on job:1's storage
		lockOp(history.OpRenew, 0, 1, 10, 12, history.InjectedRenewFailure),
	}
	lin := linearize(linearizeModel, history.History{Started: t0, Ops: ops}, 10*time.Second)
	if lin.Result != LinearizableIllegal {
		t.Fatalf("result %s, want %s", lin.Result, LinearizableIllegal)
	}
	if lin.Ops != len(ops)-1 {
		t.Errorf("%d ops checked, want %d (all but the injected renewal failure)", lin.Ops, len(ops)-1)
	}
	var got []string
	for _, v := range lin.Violations {
		got = append(got, v.Detail)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "job:1: its 3 lock operations") ||
		!strings.HasPrefix(got[1], "job:2: its 2 job storage operations") {
		t.Errorf("violations:\n%s\nwant job:1's lock and job:2's storage", strings.Join(got, "\n"))
	}
}

// A check that runs out of time is reported as a violation, and the report
// is not safe: unknown is never a pass.
func TestLinearizeTimeoutIsAViolation(t *testing.T) {
	model := linearizeModel
	model.StepContext = func(ctx context.Context, _, _, _ any) (bool, any) {
		<-ctx.Done() // a step that outlasts any timeout
		return false, nil
	}
	ops := []history.Op{acquired(0, 1, 0, 1), lockOp(history.OpRelease, 0, 1, 2, 3, "")}
	lin := linearize(model, history.History{Started: t0, Ops: ops}, 10*time.Millisecond)
	if lin.Result != LinearizableUnknown {
		t.Fatalf("result %s, want %s", lin.Result, LinearizableUnknown)
	}
	// Linearization's violations are safety ones (Result.Violations).
	if len(lin.Violations) != 1 || lin.Violations[0].Check != LinearizeUnknown {
		t.Errorf("violations %v, want one %s", lin.Violations, LinearizeUnknown)
	}
	if len(lin.Visualization) == 0 {
		t.Error("no visualization for an unknown result")
	}
}
