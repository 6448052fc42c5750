package check

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/jobs"
)

// Results of the linearizability check: Linearization.Result.
const (
	// LinearizableOK: every key's lock operations and every job's storage
	// operations have a linearization the models accept.
	LinearizableOK = "ok"
	// LinearizableIllegal: some key's or job's history has none.
	LinearizableIllegal = "illegal"
	// LinearizableUnknown: the check ran out of time. It is not a pass.
	LinearizableUnknown = "unknown"
)

// DefaultLinearizeTimeout bounds the linearizability check when
// Input.LinearizeTimeout is zero. Measured on a shared 2-core machine, the
// default drill's history (about 1,000 operations) checks in a few
// milliseconds and a 2,000-section one (14,000 operations) in 30 to 60 ms,
// also with a fifth of its operations turned into unknown outcomes; 30 s
// leaves more than two orders of magnitude for a slower machine and
// unluckier histories, and is still short against the drill's own two-minute
// Timeout, so a history the checker cannot decide ends as a reported
// "unknown" instead of a hung run.
const DefaultLinearizeTimeout = 30 * time.Second

// The linearizability check runs porcupine on the history, partitioned by
// key: for each key, its lock operations (acquire, renew, release) against
// the fenced-lock model and, separately, its job's storage operations (claim,
// write) against the fenced-storage model. Fences are per key and jobs are
// independent, so a history is linearizable exactly when every partition is,
// and each partition holds only the few dozen operations of one job.
//
// The fenced-lock model. A key's state is its holder (a lease, or none) and
// a lower bound on the highest fence issued for it.
//
//   - acquire → fence f: legal iff the key is free and f is above every fence
//     issued; the lease f then holds it.
//   - acquire → busy: legal iff some lease holds the key.
//   - release or renew by lease L → ok: legal iff L holds the key; a release
//     frees it.
//   - release or renew by lease L → not owned: legal iff L does not hold it.
//
// A key may be held when the drill starts, by a lease from before it (an
// earlier drill's holder that was killed, whose lease has not run out yet:
// on a store promoted with a clock behind, for as much longer as its clock
// is behind). The model therefore starts every key held by such a lease,
// the "lease from before", which may expire whenever the history needs it
// to, like any other: until the drill's first successful acquire of the
// key, a busy answer is legal.
//
// A lease may expire, and a store restarted without persistence loses every
// lease, at any moment. Rather than branch on that before every step, the
// model folds it into the steps that need it: a step that needs the key free
// (an acquire) or not held by L (a not-owned answer) may find a held key
// expired. This is exact because a held key can do everything a free one can
// (it may expire whenever the history needs it to) and more, so keeping
// "held" never loses a linearization that "free" would have allowed.
//
// Leases are named by their fence, which a store never issues twice for a
// key. An acquire whose outcome is unknown has no fence: if it took effect,
// it issued one above the highest so far but nobody learnt which (so the
// lower bound rises by one). Such an acquire is given a lease of its own (an
// "unknown-fence lease"), and the release the client sends with the same
// token right after (recorded with fence 0, since the recorder maps only
// successful acquires' tokens to fences) is attributed to it: the most
// recent unknown-outcome acquire by the same worker on the same key. A
// fence-0 release or renewal with no such acquire (an acquire that failed
// before it reached the store is not recorded) is given a lease nobody ever
// held, so it can only be refused.
//
// The fenced-storage model. A job's state is its fence and its state, from
// (0, queued) (jobs.Storage.Init's contract). A claim or write with fence f is
// accepted iff f >= the job's fence (fence.SameHolder), and raises the fence
// to f; a claim returns the state, which must match what it read; a write
// sets it. A refusal as stale is legal iff f < the job's fence.
//
// Unknown outcomes. An operation that failed with anything but a definite
// answer (busy, not owned, stale) may or may not have taken effect, and may
// take effect late, after its caller gave up (a reply lost in a partition, a
// request delivered when it heals). It is given a return time at infinity,
// so porcupine may linearize it anywhere after its call, and the model lets
// it take effect or not. For an unknown release or renewal "not" covers
// both, since a held key subsumes a free one (above); an unknown acquire,
// claim or write branches. (With the return at infinity, "not at all" is
// also covered by "after everything else"; the branch keeps each step right
// on its own.) Renewals the drill failed itself ("renew-failures"
// fault) never reached the store and are left out.

var errNotOwned = leasehold.ErrNotOwned.Error()

// outcome is what an operation's caller learnt.
type outcome int

const (
	outOK outcome = iota
	outBusy
	outNotOwned
	outStale
	outUnknown
)

// lease names one lease of a key: its fence when known (> 0), else a
// negative number for an unknown-fence lease; 0 is no lease.
type lease int64

// leaseFromBefore is the lease that may hold a key when the drill starts;
// no operation of the drill acts as it.
const leaseFromBefore lease = math.MinInt64

func (l lease) String() string {
	switch {
	case l > 0:
		return fmt.Sprintf("lease %d", l)
	case l == leaseFromBefore:
		return "a lease from before the drill"
	case l < 0:
		return fmt.Sprintf("unknown-fence lease #%d", -l)
	}
	return "none"
}

// linInput is one operation's input, for either model.
type linInput struct {
	key    string // the lock's key, which is also the job's
	kind   string // history.OpAcquire … history.OpWrite
	worker int
	lease  lease  // lock ops: the lease acting (for an acquire, the lease it would create)
	fence  int64  // storage ops: the fence presented
	state  string // a write: the state written
}

// linOutput is what the operation returned.
type linOutput struct {
	outcome outcome
	state   string // a successful claim: the state read
	err     string // an unknown outcome: the error
}

// lockState is a key's state in the fenced-lock model.
type lockState struct {
	holder  lease
	highest int64 // a lower bound on the highest fence issued
}

// jobState is a job's state in the fenced-storage model.
type jobState struct {
	fence int64
	state string
}

// stepLock is the fenced-lock model's step; see the comment above.
func stepLock(s lockState, in linInput, out linOutput) []any {
	switch in.kind {
	case history.OpAcquire:
		switch out.outcome {
		case outOK: // the key was free or had expired
			if int64(in.lease) > s.highest {
				return []any{lockState{holder: in.lease, highest: int64(in.lease)}}
			}
		case outBusy:
			if s.holder != 0 {
				return []any{s}
			}
		case outUnknown: // not applied, or applied with a fence nobody saw
			return []any{s, lockState{holder: in.lease, highest: s.highest + 1}}
		}
	case history.OpRelease, history.OpRenew:
		switch out.outcome {
		case outOK:
			if s.holder == in.lease {
				if in.kind == history.OpRelease {
					s.holder = 0
				}
				return []any{s}
			}
		case outNotOwned: // another holder, none, or ours expired
			if s.holder == in.lease {
				s.holder = 0
			}
			return []any{s}
		case outUnknown:
			return []any{s}
		}
	}
	return nil
}

// stepJob is the fenced-storage model's step; see the comment above.
func stepJob(s jobState, in linInput, out linOutput) []any {
	accepts := in.fence >= s.fence
	next := jobState{fence: max(s.fence, in.fence), state: s.state}
	if in.kind == history.OpWrite {
		next.state = in.state
	}
	switch out.outcome {
	case outOK:
		if accepts && (in.kind == history.OpWrite || out.state == s.state) {
			return []any{next}
		}
	case outStale:
		if !accepts {
			return []any{s}
		}
	case outUnknown:
		if accepts {
			return []any{s, next}
		}
		return []any{s}
	}
	return nil
}

var stateSeed = maphash.MakeSeed()

// linearizeModel is both models in one: a partition holds one key's lock
// operations or one job's storage operations, and the first step fixes
// which (every partition starts from the nil state).
var linearizeModel = (&porcupine.NondeterministicModel{
	Partition: partitionByKey,
	Init:      func() []any { return []any{nil} },
	Step: func(state, input, output any) []any {
		in, out := input.(linInput), output.(linOutput)
		switch in.kind {
		case history.OpAcquire, history.OpRenew, history.OpRelease:
			s, ok := state.(lockState)
			if !ok { // the first step: no fence issued yet
				s = lockState{holder: leaseFromBefore}
			}
			return stepLock(s, in, out)
		default:
			s, ok := state.(jobState)
			if !ok {
				s = jobState{state: jobs.Queued}
			}
			return stepJob(s, in, out)
		}
	},
	Hash: func(state any) uint64 {
		switch s := state.(type) {
		case lockState:
			return maphash.Comparable(stateSeed, s)
		case jobState:
			return maphash.Comparable(stateSeed, s)
		}
		return 0
	},
	DescribeOperation: describeOperation,
	DescribeState: func(state any) string {
		switch s := state.(type) {
		case lockState:
			return fmt.Sprintf("held by %v, fences ≥ %d issued", s.holder, s.highest)
		case jobState:
			return fmt.Sprintf("%s at fence %d", s.state, s.fence)
		}
		return "initial"
	},
}).ToModel()

func describeOperation(input, output any) string {
	in, out := input.(linInput), output.(linOutput)
	var b strings.Builder
	switch in.kind {
	case history.OpAcquire:
		b.WriteString("acquire")
	case history.OpRenew, history.OpRelease:
		fmt.Fprintf(&b, "%s %v", in.kind, in.lease)
	case history.OpClaim:
		fmt.Fprintf(&b, "claim @%d", in.fence)
	case history.OpWrite:
		fmt.Fprintf(&b, "write %s @%d", in.state, in.fence)
	}
	b.WriteString(" → ")
	switch out.outcome {
	case outOK:
		switch in.kind {
		case history.OpAcquire:
			fmt.Fprintf(&b, "fence %d", in.lease)
		case history.OpClaim:
			b.WriteString(out.state)
		default:
			b.WriteString("ok")
		}
	case outBusy:
		b.WriteString("busy")
	case outNotOwned:
		b.WriteString("not owned")
	case outStale:
		b.WriteString("stale")
	case outUnknown:
		fmt.Fprintf(&b, "? (%s)", out.err)
	}
	return b.String()
}

// partitionByKey splits a history into one partition per key and model, in
// the order of each partition's first operation.
func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	index := make(map[string]int)
	var parts [][]porcupine.Operation
	for _, o := range ops {
		in := o.Input.(linInput)
		p := in.key + " " + family(in.kind)
		i, ok := index[p]
		if !ok {
			i = len(parts)
			index[p] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], o)
	}
	return parts
}

// family names the model an operation kind belongs to.
func family(kind string) string {
	if kind == history.OpClaim || kind == history.OpWrite {
		return "job storage"
	}
	return "lock"
}

// Linearization is the outcome of a linearizability check.
type Linearization struct {
	Result     string        // LinearizableOK, LinearizableIllegal or LinearizableUnknown
	Ops        int           // operations checked
	Took       time.Duration // time the check took
	Violations []Violation
	// Visualization is porcupine's HTML page of the history and its
	// (partial) linearizations; only when Result is not ok.
	Visualization []byte
}

// toOperations turns a drill's operations into porcupine's, leaving out the
// renewals the drill failed itself; times count from started.
func toOperations(ops []history.Op, started time.Time) []porcupine.Operation {
	byCall := slices.Clone(ops)
	slices.SortStableFunc(byCall, func(a, b history.Op) int { return a.Call.Compare(b.Call) })
	type workerKey struct {
		worker int
		key    string
	}
	unknownLease := make(map[workerKey]lease) // the latest unknown-outcome acquire's lease
	var nextUnknown lease
	newUnknown := func() lease { nextUnknown--; return nextUnknown }

	out := make([]porcupine.Operation, 0, len(byCall))
	for _, o := range byCall {
		if o.Kind == history.OpRenew && o.Err == history.InjectedRenewFailure {
			continue
		}
		in := linInput{key: o.Key, kind: o.Kind, worker: o.Worker, lease: lease(o.Fence)}
		res := linOutput{outcome: outUnknown, err: o.Err}
		switch {
		case o.OK:
			res = linOutput{outcome: outOK}
		case o.Stale:
			res = linOutput{outcome: outStale}
		case o.Kind == history.OpAcquire && o.Err == "":
			res = linOutput{outcome: outBusy}
		case o.Err == errNotOwned && (o.Kind == history.OpRelease || o.Kind == history.OpRenew):
			res = linOutput{outcome: outNotOwned}
		}
		wk := workerKey{o.Worker, o.Key}
		switch o.Kind {
		case history.OpAcquire:
			if res.outcome == outUnknown {
				in.lease = newUnknown()
				unknownLease[wk] = in.lease
			}
		case history.OpRenew, history.OpRelease:
			if in.lease == 0 {
				if l, ok := unknownLease[wk]; ok {
					in.lease = l
				} else {
					in.lease = newUnknown() // a lease no acquire ever issued
				}
			}
		case history.OpClaim, history.OpWrite:
			in.lease, in.fence = 0, o.Fence
			if o.Kind == history.OpClaim {
				res.state = o.State
			} else {
				in.state = o.State
			}
		default:
			continue
		}
		ret := int64(math.MaxInt64) // an unknown outcome may take effect any time after the call
		if res.outcome != outUnknown {
			ret = int64(o.Return.Sub(started))
		}
		out = append(out, porcupine.Operation{
			ClientId: o.Worker,
			Input:    in,
			Call:     int64(o.Call.Sub(started)),
			Output:   res,
			Return:   ret,
			Metadata: fmt.Sprintf("%s, worker %d", o.Key, o.Worker),
		})
	}
	return out
}

// Linearize checks h's operations for linearizability in the fenced-lock
// and fenced-storage models within timeout.
func Linearize(h history.History, timeout time.Duration) Linearization {
	return linearize(linearizeModel, h, timeout)
}

// linearize checks h's operations against model within timeout and, unless
// they are linearizable, renders porcupine's visualization with h's faults
// and partitions as annotations.
func linearize(model porcupine.Model, h history.History, timeout time.Duration) Linearization {
	ops := toOperations(h.Ops, h.Started)
	begin := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	lin := Linearization{Ops: len(ops), Took: time.Since(begin)}
	switch res {
	case porcupine.Ok:
		lin.Result = LinearizableOK
		return lin
	case porcupine.Illegal:
		lin.Result = LinearizableIllegal
		// A partition is linearizable when one of its partial
		// linearizations covers all of it. (Partitions the check had not
		// finished when another was found illegal are named too: the
		// verbose check finishes them all unless it times out.)
		partials := info.PartialLinearizations()
		for i, part := range model.Partition(ops) {
			longest := 0
			for _, p := range partials[i] {
				longest = max(longest, len(p))
			}
			if longest == len(part) {
				continue
			}
			in := part[0].Input.(linInput)
			lin.Violations = append(lin.Violations, Violation{NotLinearizable, fmt.Sprintf(
				"%s: its %d %s operations have no linearization in the fenced %s model (the longest legal prefix has %d)",
				in.key, len(part), family(in.kind), family(in.kind), longest)})
		}
	default:
		lin.Result = LinearizableUnknown
		lin.Violations = append(lin.Violations, Violation{LinearizeUnknown, fmt.Sprintf(
			"the check of %d operations did not finish within %v; unknown is not a pass", len(ops), timeout)})
	}
	info.AddAnnotations(annotations(h))
	var b bytes.Buffer
	if err := porcupine.Visualize(model, info, &b); err == nil {
		lin.Visualization = b.Bytes()
	}
	return lin
}

// annotations show h's faults, as they hit a worker, and its partitions in
// the visualization, on a line of their own.
func annotations(h history.History) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, e := range h.Events {
		at := int64(e.At.Sub(h.Started))
		out = append(out, porcupine.Annotation{
			Tag: "faults", Start: at, End: at, Description: e.Fault,
			Details: fmt.Sprintf("worker %d, %s, lease %d", e.Worker, e.Key, e.Fence),
		})
	}
	for _, w := range h.Outages {
		out = append(out, porcupine.Annotation{
			Tag: "faults", Start: int64(w.From.Sub(h.Started)), End: int64(w.To.Sub(h.Started)),
			Description: "partition", Details: "no worker could reach the lock store",
		})
	}
	return out
}
