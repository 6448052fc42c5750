package drill

import (
	"context"
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

func terminal(state string) bool { return state == Done || state == Failed }

// Write is one write the job storage accepted, in the storage's own order.
type Write struct {
	Seq    int64 // acceptance order across all jobs
	Job    string
	Fence  int64
	Worker int
	State  string // "" for a claim
}

// jobStore is the fenced storage of the drill's jobs: a job's state and the
// newest fence that claimed or wrote it. Claim raises the fence atomically
// with the read, so a superseded owner cannot slip a write in between the
// new owner's acquire and its first write (pgfence.Table.InTx does the same
// with SELECT … FOR UPDATE). Writes accept the same fence again: the owner
// writes a job's states one after the other (fence.SameHolder).
type jobStore struct {
	noFencing bool // the negative control: accept any fence

	mu       sync.Mutex
	jobs     map[string]*jobRecord
	accepted []Write
	rejected int
}

type jobRecord struct {
	state string
	fence int64
}

func newJobStore(jobs []string, noFencing bool) *jobStore {
	s := &jobStore{noFencing: noFencing, jobs: make(map[string]*jobRecord, len(jobs))}
	for _, j := range jobs {
		s.jobs[j] = &jobRecord{state: Queued}
	}
	return s
}

// check returns a *fence.StaleError when f may not write rec. s.mu is held.
func (s *jobStore) check(job string, rec *jobRecord, f int64) error {
	if s.noFencing || fence.SameHolder.Accepts(f, rec.fence) {
		return nil
	}
	s.rejected++
	return &fence.StaleError{Resource: job, Presented: f, Current: rec.fence}
}

// Claim raises job's fence to f and returns its state.
func (s *jobStore) Claim(ctx context.Context, worker int, job string, f int64) (string, error) {
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

// Write sets job's state under fence f.
func (s *jobStore) Write(worker int, job string, f int64, state string) error {
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

// pick returns a random job in state, or "" when there is none. It reads
// the storage's view directly: the drill's workers scan for work as a
// scheduler would, outside any lock.
func (s *jobStore) pick(state string) string {
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
	return chosen
}

// inState lists the jobs in state.
func (s *jobStore) inState(state string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for job, rec := range s.jobs {
		if rec.state == state {
			out = append(out, job)
		}
	}
	return out
}

// remaining counts the jobs not yet in a terminal state.
func (s *jobStore) remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rec := range s.jobs {
		if !terminal(rec.state) {
			n++
		}
	}
	return n
}

func (s *jobStore) log() ([]Write, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Write(nil), s.accepted...), s.rejected
}
