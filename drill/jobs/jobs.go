// Package jobs is the fenced storage a drill's workers write through: the
// job states, the Storage contract every job storage meets, and Memory, the
// in-process one (package pgjobs keeps them in PostgreSQL).
package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/leasehold/leasehold/fence"
)

// Job states. Done and Failed are terminal.
const (
	Queued  = "queued"
	Running = "running"
	Done    = "done"
	Failed  = "failed"
)

// Terminal reports whether state is Done or Failed.
func Terminal(state string) bool { return state == Done || state == Failed }

// Storage is the fenced storage the drill's jobs live in. Claim raises the
// job's fence to the lease's atomically with reading its state, so a
// superseded owner cannot slip a write in between the new owner's acquire
// and its first write; Write sets the state under the fence, accepting the
// same fence again (fence.SameHolder). Both return a *fence.StaleError when
// the fence is refused. Pick, InState and Remaining are the workers' view
// when they look for work, read outside any lock. Log returns every
// accepted claim and write in the storage's order for each job, for the
// checkers.
type Storage interface {
	Init(ctx context.Context, jobs []string, noFencing bool) error
	// Attach joins a storage another process has initialised: the worker
	// processes of a multi-process drill call it instead of Init.
	Attach(ctx context.Context, noFencing bool) error
	Claim(ctx context.Context, worker int, job string, fence int64) (string, error)
	Write(ctx context.Context, worker int, job string, fence int64, state string) error
	Pick(ctx context.Context, state string) (string, error)
	InState(ctx context.Context, state string) ([]string, error)
	Remaining(ctx context.Context) (int, error)
	Log(ctx context.Context) ([]Write, error)
}

// Write is one write the job storage accepted, in the storage's own order.
type Write struct {
	Seq    int64 // acceptance order across all jobs
	Job    string
	Fence  int64
	Worker int
	State  string // "" for a claim
}

// Memory is the in-process Storage: a job's state and the newest fence
// that claimed or wrote it, under one mutex, so the acceptance order is the
// storage's own.
type Memory struct {
	noFencing bool // the negative control: accept any fence

	mu       sync.Mutex
	jobs     map[string]*record
	accepted []Write
}

// NewMemory returns an in-process job storage, the drill's default.
func NewMemory() *Memory { return &Memory{} }

type record struct {
	state string
	fence int64
}

// Init implements Storage.
func (s *Memory) Init(_ context.Context, jobs []string, noFencing bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noFencing, s.jobs, s.accepted = noFencing, make(map[string]*record, len(jobs)), nil
	for _, j := range jobs {
		s.jobs[j] = &record{state: Queued}
	}
	return nil
}

// Attach implements Storage: in-process storage cannot be shared with
// another process.
func (s *Memory) Attach(context.Context, bool) error {
	return errors.New("drill: the in-process job storage cannot be shared with worker processes; use a PostgreSQL job storage")
}

// check returns a *fence.StaleError when f may not write rec. s.mu is held.
func (s *Memory) check(job string, rec *record, f int64) error {
	if s.noFencing || fence.SameHolder.Accepts(f, rec.fence) {
		return nil
	}
	return &fence.StaleError{Resource: job, Presented: f, Current: rec.fence}
}

// Claim implements Storage.
func (s *Memory) Claim(ctx context.Context, worker int, job string, f int64) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.jobs[job]
	if !ok {
		return "", fmt.Errorf("drill: no job %q", job)
	}
	if err := s.check(job, rec, f); err != nil {
		return "", err
	}
	rec.fence = max(rec.fence, f)
	s.accepted = append(s.accepted, Write{Seq: int64(len(s.accepted)), Job: job, Fence: f, Worker: worker})
	return rec.state, nil
}

// Write implements Storage.
func (s *Memory) Write(_ context.Context, worker int, job string, f int64, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.jobs[job]
	if err := s.check(job, rec, f); err != nil {
		return err
	}
	rec.state, rec.fence = state, max(rec.fence, f)
	s.accepted = append(s.accepted, Write{Seq: int64(len(s.accepted)), Job: job, Fence: f, Worker: worker, State: state})
	return nil
}

// Pick implements Storage: a random job in state, or "" when there is none.
func (s *Memory) Pick(_ context.Context, state string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := 0
	var chosen string
	for job, rec := range s.jobs { // reservoir sampling
		if rec.state != state {
			continue
		}
		seen++
		if rand.IntN(seen) == 0 {
			chosen = job
		}
	}
	return chosen, nil
}

// InState implements Storage.
func (s *Memory) InState(_ context.Context, state string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for job, rec := range s.jobs {
		if rec.state == state {
			out = append(out, job)
		}
	}
	return out, nil
}

// Remaining implements Storage: the jobs not yet in a terminal state.
func (s *Memory) Remaining(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rec := range s.jobs {
		if !Terminal(rec.state) {
			n++
		}
	}
	return n, nil
}

// Log implements Storage.
func (s *Memory) Log(context.Context) ([]Write, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.accepted...), nil
}
