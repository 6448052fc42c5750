// Package history is a drill's record: every lock and storage operation a
// worker made, with its call and return times, the faults as they hit and
// as they were injected, and the outages. A Recorder keeps it while the
// drill runs; the checkers and the report read it afterwards.
package history

import (
	"sync"
	"time"
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

// InjectedRenewFailure is the Err of a renewal the drill failed itself
// (the renew-failures fault): it never reached the store.
const InjectedRenewFailure = "drill: renewal failed (injected)"

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

// Window is a span of time.
type Window struct{ From, To time.Time }

// History is a drill's record.
type History struct {
	Started time.Time
	Ops     []Op     // lock and storage operations, in the order they returned
	Events  []Event  // faults taking effect on a critical section
	Outages []Window // partitions: spans when no worker could reach the store

	// Faults are the faults injected, each from injection to heal.
	Faults []FaultSpan
}

// Sink receives what a Recorder records, as it happens: a worker process
// streams its history to the drill through one.
type Sink interface {
	Call(seq int64, o Op)
	Return(seq int64, o Op)
	Event(e Event)
}

// Recorder keeps a history while a drill runs; it is safe for concurrent
// use. With a Sink it keeps no operations or events, only passes them on.
type Recorder struct {
	mu      sync.Mutex
	ops     []Op
	events  []Event
	fences  map[string]int64 // token → fence
	started time.Time
	sink    Sink
	seq     int64 // the last call's sequence number
}

// NewRecorder starts a history now; sink may be nil.
func NewRecorder(sink Sink) *Recorder {
	return &Recorder{fences: make(map[string]int64), started: time.Now(), sink: sink}
}

// Call notes the call of o and returns its sequence number for Return; a
// sink hears of it at once, so a call cut short by a kill stays in the history.
func (r *Recorder) Call(o Op) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	if r.sink != nil {
		r.sink.Call(r.seq, o)
	}
	return r.seq
}

// Return records o, the return of call seq; a successful acquire's token
// maps the lease's later renewals and releases to its fence.
func (r *Recorder) Return(seq int64, o Op, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o.Kind == OpAcquire && o.OK {
		r.fences[token] = o.Fence
	}
	if r.sink != nil {
		r.sink.Return(seq, o)
		return
	}
	r.ops = append(r.ops, o)
}

// Add records o, reported by a worker process.
func (r *Recorder) Add(o Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, o)
}

// FenceOf returns the fence of the lease token, 0 if its acquire is unknown.
func (r *Recorder) FenceOf(token string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fences[token]
}

// Event records e.
func (r *Recorder) Event(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sink != nil {
		r.sink.Event(e)
		return
	}
	r.events = append(r.events, e)
}

// History returns a copy of the start, operations and events recorded so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return History{Started: r.started, Ops: append([]Op(nil), r.ops...), Events: append([]Event(nil), r.events...)}
}
