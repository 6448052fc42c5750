package drill

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// t0 is the start of every hand-made history; at(n) is n milliseconds later.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

const key = "job:1"

// Hand-made operations: w is the worker, f the fence, [call, ret] the span
// in milliseconds.
func acquired(w int, f int64, call, ret int) Op {
	return Op{Kind: OpAcquire, Worker: w, Key: key, Fence: f, Call: at(call), Return: at(ret), OK: true}
}

func busy(w, call, ret int) Op {
	return Op{Kind: OpAcquire, Worker: w, Key: key, Call: at(call), Return: at(ret)}
}

func lockOp(kind string, w int, f int64, call, ret int, err string) Op {
	return Op{Kind: kind, Worker: w, Key: key, Fence: f, Call: at(call), Return: at(ret), OK: err == "", Err: err}
}

func claimed(w int, f int64, read string, call, ret int) Op {
	return Op{Kind: OpClaim, Worker: w, Key: key, Fence: f, State: read, Call: at(call), Return: at(ret), OK: true}
}

func wrote(w int, f int64, state string, call, ret int) Op {
	return Op{Kind: OpWrite, Worker: w, Key: key, Fence: f, State: state, Call: at(call), Return: at(ret), OK: true}
}

func stale(o Op) Op {
	o.OK, o.Stale, o.Err = false, true, "fence: stale"
	return o
}

func unknown(o Op) Op {
	o.OK, o.Err = false, "i/o timeout"
	if o.Kind == OpAcquire {
		o.Fence = 0 // the reply, and the fence in it, never came
	}
	return o
}

func TestLinearizeHandMadeHistories(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []Op
		want string
	}{
		{"hand-over by release, with a busy waiter", []Op{
			acquired(0, 1, 0, 1),
			claimed(0, 1, Queued, 2, 3),
			wrote(0, 1, Running, 4, 5),
			busy(1, 4, 6),
			lockOp(OpRenew, 0, 1, 6, 7, ""),
			wrote(0, 1, Done, 8, 9),
			lockOp(OpRelease, 0, 1, 10, 11, ""),
			acquired(1, 2, 12, 13),
			claimed(1, 2, Done, 14, 15),
			lockOp(OpRelease, 1, 2, 16, 17, ""),
		}, LinearizableOK},
		{"take-over after expiry: the paused holder's write and release are refused", []Op{
			acquired(0, 1, 0, 1),
			claimed(0, 1, Queued, 2, 3),
			wrote(0, 1, Running, 4, 5),
			acquired(1, 2, 10, 11), // lease 1 expired meanwhile
			claimed(1, 2, Running, 12, 13),
			stale(wrote(0, 1, Done, 14, 15)),
			lockOp(OpRelease, 0, 1, 16, 17, errNotOwned),
			lockOp(OpRenew, 1, 2, 16, 18, ""),
			wrote(1, 2, Done, 19, 20),
		}, LinearizableOK},
		{"overlapping acquires may linearize either way", []Op{
			acquired(0, 1, 0, 10),
			busy(1, 1, 9),
			lockOp(OpRelease, 0, 1, 11, 12, ""),
		}, LinearizableOK},
		{"a superseded lease's release succeeds", []Op{
			acquired(0, 1, 0, 1),
			acquired(1, 2, 10, 11),
			lockOp(OpRelease, 0, 1, 12, 13, ""),
		}, LinearizableIllegal},
		{"a superseded lease's renewal succeeds", []Op{
			acquired(0, 1, 0, 1),
			acquired(1, 2, 10, 11),
			lockOp(OpRenew, 0, 1, 12, 13, ""),
		}, LinearizableIllegal},
		{"an acquire's fence is not above a previous one", []Op{
			acquired(0, 2, 0, 1),
			lockOp(OpRelease, 0, 2, 2, 3, ""),
			acquired(1, 2, 4, 5),
		}, LinearizableIllegal},
		{"two leases at once", []Op{
			acquired(0, 1, 0, 1),
			acquired(1, 2, 2, 3),
			lockOp(OpRenew, 0, 1, 4, 5, ""),
		}, LinearizableIllegal},
		{"busy while free, after a completed release", []Op{
			acquired(0, 1, 0, 1),
			lockOp(OpRelease, 0, 1, 2, 3, ""),
			busy(1, 4, 5),
		}, LinearizableIllegal},
		{"a stale storage write accepted", []Op{
			claimed(1, 2, Queued, 0, 1),
			wrote(0, 1, Done, 2, 3),
		}, LinearizableIllegal},
		{"a stale refusal of a current fence", []Op{
			claimed(0, 1, Queued, 0, 1),
			stale(wrote(0, 1, Running, 2, 3)),
		}, LinearizableIllegal},
		{"a claim reads a state that was never written", []Op{
			claimed(0, 1, Running, 0, 1),
		}, LinearizableIllegal},
		{"a claim reads a state that was overwritten before it began", []Op{
			wrote(0, 1, Running, 0, 1),
			wrote(0, 1, Done, 2, 3),
			claimed(1, 2, Running, 4, 5),
		}, LinearizableIllegal},

		// Unknown outcomes: either way is legal.
		{"unknown acquire that took effect: busy until its clean-up release", []Op{
			unknown(acquired(0, 1, 0, 1)),
			busy(1, 2, 3),
			lockOp(OpRelease, 0, 0, 4, 5, ""), // the clean-up, by token: fence unknown
			acquired(1, 2, 6, 7),              // fence 1 went to the unknown acquire
		}, LinearizableOK},
		{"unknown acquire that did not take effect", []Op{
			unknown(acquired(0, 1, 0, 1)),
			lockOp(OpRelease, 0, 0, 2, 3, errNotOwned),
			acquired(1, 1, 4, 5),
			lockOp(OpRelease, 1, 1, 6, 7, ""),
		}, LinearizableOK},
		{"unknown acquire applied late, after its clean-up release", []Op{
			unknown(acquired(0, 1, 0, 1)),
			lockOp(OpRelease, 0, 0, 2, 3, errNotOwned),
			busy(1, 10, 11),
		}, LinearizableOK},
		{"an unknown acquire takes effect at most once", []Op{
			unknown(acquired(0, 1, 0, 1)),
			busy(1, 2, 3),
			lockOp(OpRelease, 0, 0, 4, 5, ""),
			busy(1, 6, 7),
		}, LinearizableIllegal},
		{"an unknown acquire's fence is above every earlier one", []Op{
			acquired(0, 1, 0, 1),
			lockOp(OpRelease, 0, 1, 2, 3, ""),
			unknown(acquired(1, 0, 4, 5)),
			busy(2, 6, 7), // so the unknown acquire took fence 2 or more
			acquired(2, 2, 20, 21),
		}, LinearizableIllegal},
		{"a clean-up release with no unknown acquire cannot succeed", []Op{
			acquired(0, 1, 0, 1),
			lockOp(OpRelease, 1, 0, 2, 3, ""),
		}, LinearizableIllegal},
		{"unknown release that took effect", []Op{
			acquired(0, 1, 0, 1),
			unknown(lockOp(OpRelease, 0, 1, 2, 3, "")),
			acquired(1, 2, 4, 5),
		}, LinearizableOK},
		{"unknown release that did not take effect", []Op{
			acquired(0, 1, 0, 1),
			unknown(lockOp(OpRelease, 0, 1, 2, 3, "")),
			busy(1, 4, 5),
			lockOp(OpRenew, 0, 1, 6, 7, ""),
		}, LinearizableOK},
		{"unknown write that took effect", []Op{
			claimed(0, 1, Queued, 0, 1),
			unknown(wrote(0, 1, Running, 2, 3)),
			claimed(1, 2, Running, 4, 5),
		}, LinearizableOK},
		{"unknown write that did not take effect", []Op{
			claimed(0, 1, Queued, 0, 1),
			unknown(wrote(0, 1, Running, 2, 3)),
			claimed(1, 2, Queued, 4, 5),
		}, LinearizableOK},
		{"unknown write applied late", []Op{
			claimed(0, 1, Queued, 0, 1),
			unknown(wrote(0, 1, Running, 2, 3)),
			claimed(0, 1, Queued, 4, 5),
			claimed(0, 1, Running, 6, 7),
		}, LinearizableOK},
		{"unknown claim that raised the fence", []Op{
			claimed(0, 1, Queued, 0, 1),
			unknown(claimed(1, 2, "", 2, 3)),
			stale(wrote(0, 1, Running, 4, 5)),
		}, LinearizableOK},
		{"unknown claim that did not", []Op{
			claimed(0, 1, Queued, 0, 1),
			unknown(claimed(1, 2, "", 2, 3)),
			wrote(0, 1, Running, 4, 5),
		}, LinearizableOK},
		{"an unknown stale write cannot have taken effect", []Op{
			claimed(1, 2, Queued, 0, 1),
			unknown(wrote(0, 1, Done, 2, 3)),
			claimed(1, 2, Done, 4, 5),
		}, LinearizableIllegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lin := linearize(linearizeModel, History{Started: t0, Ops: tc.ops}, 10*time.Second)
			if lin.result != tc.want {
				t.Fatalf("result %s, want %s", lin.result, tc.want)
			}
			switch tc.want {
			case LinearizableOK:
				if len(lin.violations) != 0 || lin.visual != nil {
					t.Errorf("ok, yet %d violations and a %d-byte visualization", len(lin.violations), len(lin.visual))
				}
			case LinearizableIllegal:
				if len(lin.violations) != 1 || lin.violations[0].Check != CheckLinearizable ||
					!strings.HasPrefix(lin.violations[0].Detail, key+": ") {
					t.Errorf("violations %v, want one %s naming %s", lin.violations, CheckLinearizable, key)
				}
				if !bytes.Contains(lin.visual, []byte("<html")) {
					t.Errorf("no HTML visualization (%d bytes)", len(lin.visual))
				}
			}
		})
	}
}

// Operations are checked per key and model: a violation names its key and
// its model, and leaves the other keys alone.
func TestLinearizeNamesTheKeys(t *testing.T) {
	other := func(o Op) Op { o.Key = "job:2"; return o }
	ops := []Op{
		acquired(0, 1, 0, 1),
		lockOp(OpRelease, 0, 1, 2, 3, ""),
		busy(1, 4, 5), // illegal on job:1's lock
		other(acquired(2, 1, 0, 1)),
		other(claimed(2, 1, Queued, 2, 3)),
		other(wrote(3, 0, Done, 4, 5)), // illegal on job:2's storage
		other(busy(3, 6, 7)),           // legal: job:2 is still held
		claimed(1, 7, Queued, 10, 11),  // legal on job:1's storage
		lockOp(OpRenew, 0, 1, 10, 12, injectedRenewFailure),
	}
	lin := linearize(linearizeModel, History{Started: t0, Ops: ops}, 10*time.Second)
	if lin.result != LinearizableIllegal {
		t.Fatalf("result %s, want %s", lin.result, LinearizableIllegal)
	}
	if lin.ops != len(ops)-1 {
		t.Errorf("%d ops checked, want %d (all but the injected renewal failure)", lin.ops, len(ops)-1)
	}
	var got []string
	for _, v := range lin.violations {
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
	ops := []Op{acquired(0, 1, 0, 1), lockOp(OpRelease, 0, 1, 2, 3, "")}
	lin := linearize(model, History{Started: t0, Ops: ops}, 10*time.Millisecond)
	if lin.result != LinearizableUnknown {
		t.Fatalf("result %s, want %s", lin.result, LinearizableUnknown)
	}
	rep := &Report{Violations: lin.violations}
	if rep.Safe() || len(lin.violations) != 1 || lin.violations[0].Check != CheckLinearizeUnknown {
		t.Errorf("violations %v (safe: %v), want one %s and not safe", lin.violations, rep.Safe(), CheckLinearizeUnknown)
	}
	if len(lin.visual) == 0 {
		t.Error("no visualization for an unknown result")
	}
}

// The report carries the result, a line in the summary, and the violation.
func TestReportLinearize(t *testing.T) {
	rep := &Report{History: History{Started: t0, Ops: []Op{
		acquired(0, 1, 0, 1),
		acquired(1, 2, 10, 11),
		lockOp(OpRelease, 0, 1, 12, 13, ""),
	}}}
	rep.linearize(DefaultLinearizeTimeout)
	if rep.Linearizable != LinearizableIllegal || rep.LinearizeOps != 3 || rep.Safe() || len(rep.Visualization) == 0 {
		t.Fatalf("result %s on %d ops, safe %v, %d-byte visualization; want illegal on 3, unsafe, a page",
			rep.Linearizable, rep.LinearizeOps, rep.Safe(), len(rep.Visualization))
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"illegal (3 ops, checked in ", CheckLinearizable + ": 1 (first: " + key} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
