package drill

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
)

// Op is one operation a worker made, with its call and return times: on the
// lock store ("acquire", "renew", "release") or on the job storage
// ("claim", "write").
type Op struct {
	Kind   string    `json:"kind"`
	Worker int       `json:"worker"`
	Key    string    `json:"key"`
	Fence  int64     `json:"fence"`           // the lease's fence (for renew and release, looked up by token)
	State  string    `json:"state,omitempty"` // for a write: the state written; for a claim: the state read
	Call   time.Time `json:"call"`
	Return time.Time `json:"return"`
	OK     bool      `json:"ok"`
	Stale  bool      `json:"stale,omitempty"` // the storage refused the fence
	Err    string    `json:"err,omitempty"`
}

// Lock and storage operation kinds.
const (
	OpAcquire = "acquire"
	OpRenew   = "renew"
	OpRelease = "release"
	OpClaim   = "claim"
	OpWrite   = "write"
)

// Event is a fault taking effect on a worker's critical section.
type Event struct {
	Fault  string    `json:"fault"`
	Worker int       `json:"worker"`
	Key    string    `json:"key"`
	Fence  int64     `json:"fence"` // the fence of the lease the worker held
	At     time.Time `json:"at"`
}

// FaultSpan is one fault injection: from its injection to its heal (for a
// fault that ends by itself, such as a pause or a kill, the heal is when
// the drill stopped counting it as active).
type FaultSpan struct {
	Name   string    `json:"name"`
	Worker int       `json:"worker"` // the worker it targeted; -1 for a store-wide fault
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
}

// recorder keeps the history of a run. In a worker process it keeps
// nothing but streams every call, return and event to the drill's parent
// (out), which records them.
type recorder struct {
	mu      sync.Mutex
	ops     []Op
	events  []Event
	fences  map[string]int64 // token → fence
	started time.Time
	out     *lineWriter // set in a worker process
	seq     int64       // the last call's sequence number, for out
}

// begin notes the call of o and returns its sequence number for op. In a
// worker process the parent learns of the call at once, so that the call
// is in the history even if the process is killed before it returns.
func (r *recorder) begin(o Op) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	if r.out != nil {
		r.out.send(line{T: lineCall, Seq: r.seq, Op: &o})
	}
	return r.seq
}

// op records o, the return of call seq; token, for a successful acquire,
// maps the lease's later renewals and releases to its fence.
func (r *recorder) op(seq int64, o Op, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o.Kind == OpAcquire && o.OK {
		r.fences[token] = o.Fence
	}
	if r.out != nil {
		r.out.send(line{T: lineReturn, Seq: seq, Op: &o})
		return
	}
	r.ops = append(r.ops, o)
}

// add records o, reported by a worker process.
func (r *recorder) add(o Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, o)
}

func (r *recorder) fenceOf(token string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fences[token]
}

func (r *recorder) event(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out != nil {
		r.out.send(line{T: lineEvent, Event: &e})
		return
	}
	r.events = append(r.events, e)
}

// workerStore is the store as one worker sees it: every call is recorded,
// and the faults' knobs act on it.
type workerStore struct {
	leasehold.Store
	worker    int
	rec       *recorder
	knobs     *knobs
	failRenew atomic.Bool
}

// errInjectedRenewFailure is the renew-failures fault: the renewal never
// reaches the store.
var errInjectedRenewFailure = errors.New("drill: renewal failed (injected)")

// knobs are the faults that act on every worker's store at once.
type knobs struct {
	latency       atomic.Int64 // nanoseconds added to every store call
	unsafeRelease bool         // negative control: delete the key whoever holds it
}

func (s *workerStore) delay(ctx context.Context) error {
	d := time.Duration(s.knobs.latency.Load())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (s *workerStore) Acquire(ctx context.Context, key, token string, ttl time.Duration) (int64, error) {
	o := Op{Kind: OpAcquire, Worker: s.worker, Key: key, Call: time.Now()}
	seq := s.rec.begin(o)
	err := s.delay(ctx)
	if err == nil {
		o.Fence, err = s.Store.Acquire(ctx, key, token, ttl)
	}
	o.Return, o.OK = time.Now(), err == nil
	if err != nil && !errors.Is(err, leasehold.ErrNotAcquired) {
		o.Err = err.Error()
	}
	s.rec.op(seq, o, token)
	return o.Fence, err
}

func (s *workerStore) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	o := Op{Kind: OpRenew, Worker: s.worker, Key: key, Fence: s.rec.fenceOf(token), Call: time.Now()}
	seq := s.rec.begin(o)
	err := s.delay(ctx)
	if err == nil && s.failRenew.Load() {
		err = errInjectedRenewFailure
	}
	if err == nil {
		err = s.Store.Renew(ctx, key, token, ttl)
	}
	o.Return, o.OK, o.Err = time.Now(), err == nil, errString(err)
	s.rec.op(seq, o, "")
	return err
}

func (s *workerStore) Release(ctx context.Context, key, token string) error {
	o := Op{Kind: OpRelease, Worker: s.worker, Key: key, Fence: s.rec.fenceOf(token), Call: time.Now()}
	seq := s.rec.begin(o)
	err := s.delay(ctx)
	if err == nil {
		if s.knobs.unsafeRelease {
			err = s.releaseByKey(ctx, key)
		} else {
			err = s.Store.Release(ctx, key, token)
		}
	}
	o.Return, o.OK, o.Err = time.Now(), err == nil, errString(err)
	s.rec.op(seq, o, "")
	return err
}

// releaseByKey is the bug the negative control plants: DEL key, whoever
// holds it.
func (s *workerStore) releaseByKey(ctx context.Context, key string) error {
	info, err := s.Store.Inspect(ctx, key)
	if err != nil {
		return err
	}
	if !info.Held {
		return leasehold.ErrNotOwned
	}
	return s.Store.Release(ctx, key, info.Token)
}
