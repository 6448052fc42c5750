package drill

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/jobs"
	"github.com/leasehold/leasehold/driver"
)

// A multi-process drill runs each worker as its own OS process, so that a
// pause is a real SIGSTOP and a kill a real SIGKILL: the process's
// connections, timers and renewal goroutine stop or vanish with it, as in
// production. The drill's own process (the parent) injects the faults,
// keeps the history and checks it; the workers talk to it over their
// standard input and output, one JSON object a line:
//
//	worker → parent: {"t":"call","seq":n,"op":…}    an operation begins
//	                 {"t":"ret","seq":n,"op":…}     it returned (the op has its outcome)
//	                 {"t":"event","event":…}        a fault took effect
//	                 {"t":"working","key":k,"fence":f} a critical section is doing its work
//	                 {"t":"idle"}                   it ended
//	                 {"t":"section"}                a critical section began
//	parent → worker: "fail-renew on" | "fail-renew off" | "latency NANOSECONDS" | "stop"
//
// A call without a return (the worker was killed in between) enters the
// history with an unknown outcome: it may or may not have taken effect.

// Protocol line types.
const (
	lineCall    = "call"
	lineReturn  = "ret"
	lineEvent   = "event"
	lineWorking = "working"
	lineIdle    = "idle"
	lineSection = "section"
)

// line is one message from a worker process to the parent.
type line struct {
	T     string         `json:"t"`
	Seq   int64          `json:"seq,omitempty"`
	Op    *history.Op    `json:"op,omitempty"`
	Event *history.Event `json:"event,omitempty"`
	Key   string         `json:"key,omitempty"`
	Fence int64          `json:"fence,omitempty"`
}

// lineWriter sends lines to the parent, one write each, so that a line is
// out of the process before the next operation starts.
type lineWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
	err error
}

func (w *lineWriter) send(l line) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = w.enc.Encode(l)
	}
}

// Call, Return and Event make a lineWriter the history.Sink of a worker
// process's recorder.
func (w *lineWriter) Call(seq int64, o history.Op) { w.send(line{T: lineCall, Seq: seq, Op: &o}) }

func (w *lineWriter) Return(seq int64, o history.Op) { w.send(line{T: lineReturn, Seq: seq, Op: &o}) }

func (w *lineWriter) Event(e history.Event) { w.send(line{T: lineEvent, Event: &e}) }

func (w *lineWriter) error() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// errUnknownOutcome is the error of an operation whose worker process ended
// (was killed) before the operation returned.
const errUnknownOutcome = "worker process ended before the call returned: outcome unknown"

// WorkerEnv is the environment variable that carries a WorkerSpec to a
// worker process.
const WorkerEnv = "LEASEHOLD_DRILL_WORKER"

// WorkerSpec is what the drill tells each worker process it starts.
type WorkerSpec struct {
	ID int `json:"id"`
	// Starter workers start new jobs; the others only take over jobs whose
	// owner is gone (the headroom of Config.Workers).
	Starter       bool    `json:"starter"`
	Jobs          int     `json:"jobs"`
	TimeScale     float64 `json:"time_scale"`
	UnsafeRelease bool    `json:"unsafe_release"`
	NoFencing     bool    `json:"no_fencing"`
}

// WorkerSpecFromEnv returns the WorkerSpec in the environment, and false when
// this process is not a drill worker.
func WorkerSpecFromEnv() (WorkerSpec, bool, error) {
	v, ok := os.LookupEnv(WorkerEnv)
	if !ok {
		return WorkerSpec{}, false, nil
	}
	var s WorkerSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return WorkerSpec{}, true, fmt.Errorf("drill: %s: %w", WorkerEnv, err)
	}
	return s, true, nil
}

// ServeWorker runs one worker of a multi-process drill in this process: it
// takes job locks on store and moves jobs on storage (which the parent has
// initialised) until every job is done, ctx ends, or in says "stop" or
// closes. It reads the parent's commands from in and writes its history to
// out (see the protocol above); nothing else may write to out. A nil
// argument is an *ArgumentError naming it.
func ServeWorker(ctx context.Context, spec WorkerSpec, store driver.Store, storage jobs.Storage, in io.Reader, out io.Writer) error {
	nilArg := ""
	switch {
	case ctx == nil:
		nilArg = "ctx"
	case store == nil:
		nilArg = "store"
	case storage == nil:
		nilArg = "storage"
	case in == nil:
		nilArg = "in"
	case out == nil:
		nilArg = "out"
	}
	if nilArg != "" {
		return &leasehold.ArgumentError{Arg: nilArg, Reason: "nil"}
	}
	ttl, err := scaledTTL(spec.TimeScale)
	if err != nil {
		return err
	}
	if spec.Jobs < 1 || spec.Jobs > MaxJobs {
		return &leasehold.ArgumentError{Arg: "jobs", Reason: fmt.Sprintf("%d is not in [1, %d]", spec.Jobs, MaxJobs)}
	}
	if err := storage.Attach(ctx, spec.NoFencing); err != nil {
		return fmt.Errorf("drill: job storage: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := newRun(Config{Store: store, Storage: storage, Jobs: spec.Jobs, UnsafeRelease: spec.UnsafeRelease}, ttl,
		&lineWriter{enc: json.NewEncoder(out)})
	w := r.newWorker(spec.ID)
	w.starter, w.careless = spec.Starter, true

	go func() { // the parent's commands
		defer cancel()
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			cmd, arg, _ := strings.Cut(sc.Text(), " ")
			switch cmd {
			case "stop":
				return
			case "fail-renew":
				w.store.failRenew.Store(arg == "on")
			case "latency":
				if d, err := strconv.ParseInt(arg, 10, 64); err == nil {
					r.knobs.latency.Store(d)
				}
			}
		}
	}()
	w.loop(ctx)
	return r.out.error()
}

// eventWorkerCrashed is the event of a worker process that exited on its
// own with an error: not a fault the drill injected.
const eventWorkerCrashed = "worker-crashed"

// workersGone reports whether a multi-process drill has no worker left
// (they failed and were not replaced: see procs.read).
func (r *run) workersGone() bool {
	return r.procs != nil && len(r.procs.live()) == 0
}

// proc is one worker process, seen from the parent.
type proc struct {
	spec    WorkerSpec
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *tailBuffer
	exited  chan struct{}
	mu      sync.Mutex
	key     string // the key of the critical section doing its work, or ""
	fence   int64
	stopped bool // SIGSTOPped
	killed  bool
}

func (p *proc) command(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = io.WriteString(p.stdin, s+"\n") // a dead worker needs no command
}

// procs are the worker processes of a run.
type procs struct {
	run     *run
	mu      sync.Mutex
	all     []*proc      // live and dead; dead ones have exited closed
	crashes atomic.Int64 // workers that exited on their own with an error
	// stopping is set (under mu) when the drill stops its workers: no
	// worker starts after that.
	stopping bool
}

var errStopping = errors.New("drill: the drill is stopping its workers")

// startProcs starts cfg.Processes workers, half of them starters.
func (r *run) startProcs(ctx context.Context) error {
	r.procs = &procs{run: r}
	for i := range r.cfg.Processes {
		if _, err := r.procs.spawn(ctx, i < max(1, r.cfg.Processes/2)); err != nil {
			r.procs.stopAll()
			return err
		}
	}
	return nil
}

// spawn starts a worker process.
func (ps *procs) spawn(ctx context.Context, starter bool) (*proc, error) {
	r := ps.run
	r.mu.Lock()
	id := r.nextID
	r.nextID++
	r.mu.Unlock()
	spec := WorkerSpec{ID: id, Starter: starter, Jobs: r.cfg.Jobs, TimeScale: r.cfg.TimeScale,
		UnsafeRelease: r.cfg.UnsafeRelease, NoFencing: r.cfg.NoFencing}
	env, _ := json.Marshal(spec)
	cmd := r.cfg.StartWorker()
	cmd.Env = append(cmd.Environ(), WorkerEnv+"="+string(env))
	p := &proc{spec: spec, cmd: cmd, stderr: &tailBuffer{max: 4096}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	ps.mu.Lock()
	if ps.stopping {
		ps.mu.Unlock()
		return nil, errStopping
	}
	if err := cmd.Start(); err != nil {
		ps.mu.Unlock()
		return nil, fmt.Errorf("drill: start worker process: %w", err)
	}
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	if d := r.knobs.latency.Load(); d > 0 {
		p.command("latency " + strconv.FormatInt(d, 10))
	}
	r.wg.Go(func() { ps.read(ctx, p, stdout) })
	return p, nil
}

// read records what worker p reports until it exits; the calls it made
// that never returned enter the history with unknown outcomes.
func (ps *procs) read(ctx context.Context, p *proc, stdout io.Reader) {
	r := ps.run
	pending := make(map[int64]history.Op)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			continue // not ours: a worker writes nothing else, but be lenient
		}
		switch l.T {
		case lineCall:
			pending[l.Seq] = *l.Op
		case lineReturn:
			delete(pending, l.Seq)
			r.rec.Add(*l.Op)
			if l.Op.Stale {
				r.refused.Add(1)
			}
		case lineEvent:
			r.rec.Event(*l.Event)
		case lineSection:
			r.sections.Add(1)
		case lineWorking, lineIdle:
			p.mu.Lock()
			p.key, p.fence = l.Key, l.Fence
			p.mu.Unlock()
		}
	}
	err := p.cmd.Wait()
	now := time.Now()
	for _, o := range pending {
		o.Return, o.Err = now, errUnknownOutcome
		r.rec.Add(o)
	}
	p.mu.Lock()
	killed := p.killed
	p.key = ""
	p.mu.Unlock()
	// The replacement starts before this worker counts as exited, so that
	// the drill never sees a moment without workers it is about to have.
	defer close(p.exited)
	if err == nil || killed || ctx.Err() != nil {
		return
	}
	r.rec.Event(history.Event{Fault: eventWorkerCrashed, Worker: p.spec.ID, At: now})
	r.log.Error("drill: worker process failed", "worker", p.spec.ID, "err", err, "stderr", p.stderr.String())
	// A worker that cannot run (a bad store address, say) would crash
	// again at once: replace crashed workers only as many times as there
	// are workers, so that such a drill ends with its jobs unfinished
	// rather than starting processes until its timeout.
	if ps.crashes.Add(1) > int64(r.cfg.Processes) {
		r.log.Error("drill: too many worker processes failed; no more replacements", "failed", ps.crashes.Load())
	} else if _, err := ps.spawn(ctx, p.spec.Starter); err != nil && !errors.Is(err, errStopping) {
		r.log.Error("drill: no replacement worker", "err", err)
	}
}

// strike picks a random live worker in the work of a critical section,
// marks it (under its lock, so that no other fault picks it too), names it
// as the fault's target and records the fault's event on the key and fence
// it holds.
func (ps *procs) strike(e *env, fault string, mark func(*proc)) (p *proc, key string, f int64, err error) {
	ps.mu.Lock()
	var busy []*proc
	for _, p := range ps.all {
		p.mu.Lock()
		if p.key != "" && !p.stopped && !p.killed {
			busy = append(busy, p)
		}
		p.mu.Unlock()
	}
	ps.mu.Unlock()
	if len(busy) == 0 {
		return nil, "", 0, errNoWorkerWorking
	}
	p = busy[rand.IntN(len(busy))]
	p.mu.Lock()
	key, f = p.key, p.fence
	mark(p)
	p.mu.Unlock()
	e.target = p.spec.ID
	ps.run.rec.Event(history.Event{Fault: fault, Worker: p.spec.ID, Key: key, Fence: f, At: time.Now()})
	return p, key, f, nil
}

// live returns the worker processes that have not exited.
func (ps *procs) live() []*proc {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out []*proc
	for _, p := range ps.all {
		select {
		case <-p.exited:
		default:
			out = append(out, p)
		}
	}
	return out
}

var errNoWorkerWorking = errors.New("drill: no worker process is in a critical section")

// pause SIGSTOPs a worker in its critical section and SIGCONTs it once
// another worker holds its key (or after three TTLs): it wakes to write
// and release on a lease that is gone.
func (ps *procs) pause(ctx context.Context, e *env) error {
	p, key, f, err := ps.strike(e, faults.PauseWorker{}.Name(), func(p *proc) { p.stopped = true })
	if err != nil {
		return err
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	r := ps.run
	r.wg.Go(func() {
		defer func() {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			p.mu.Lock()
			p.stopped = false
			p.mu.Unlock()
		}()
		deadline := time.Now().Add(3 * r.ttl)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			if info, err := r.inspect(ctx, key); err == nil && info.Held && info.Fence > f {
				return
			}
			sleepFor(ctx, r.poll)
		}
	})
	return nil
}

// kill SIGKILLs a worker in its critical section and starts a replacement.
func (ps *procs) kill(ctx context.Context, e *env) error {
	p, _, _, err := ps.strike(e, faults.KillWorker{}.Name(), func(p *proc) { p.killed = true })
	if err != nil {
		return err
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	// The replacement starts before the killed worker counts as exited
	// (see read): the drill never sees a moment without workers.
	_, err = ps.spawn(ctx, p.spec.Starter)
	<-p.exited
	if errors.Is(err, errStopping) {
		return nil
	}
	return err
}

// failRenew turns the renew-failures fault on for one random worker, or
// off for the one it was on for.
func (ps *procs) failRenew(on bool, e *env) {
	if !on {
		if p := ps.run.failingProc.Swap(nil); p != nil {
			p.command("fail-renew off")
		}
		return
	}
	if live := ps.live(); len(live) > 0 {
		p := live[rand.IntN(len(live))]
		e.target = p.spec.ID
		ps.run.failingProc.Store(p)
		p.command("fail-renew on")
	}
}

// latency sets every worker's added store latency.
func (ps *procs) latency(d time.Duration) {
	ps.run.knobs.latency.Store(int64(d))
	for _, p := range ps.live() {
		p.command("latency " + strconv.FormatInt(int64(d), 10))
	}
}

// stopAll asks every worker to stop, waits a bounded time and kills the
// ones still running.
func (ps *procs) stopAll() {
	ps.mu.Lock()
	ps.stopping = true
	ps.mu.Unlock()
	grace, cancel := context.WithTimeout(context.Background(), 2*ps.run.ttl+5*time.Second)
	defer cancel()
	for _, p := range ps.live() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		p.command("stop")
		_ = p.stdin.Close()
	}
	for _, p := range ps.live() {
		select {
		case <-p.exited:
		case <-grace.Done():
			p.mu.Lock()
			p.killed = true
			p.mu.Unlock()
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
