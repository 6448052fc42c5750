package drill

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/history"
)

// injectFaults injects the faults in turn, one every TTL/4, healing each a
// TTL later, until every job is done or ctx ends; it prints progress.
func (r *run) injectFaults(ctx context.Context) {
	e := &env{run: r}
	var available []faults.Fault
	for _, f := range r.cfg.Faults {
		if f.Available(e) {
			available = append(available, f)
		}
	}
	type active struct {
		f      faults.Fault
		worker int
		since  time.Time
	}
	var live []active
	tick := time.NewTicker(r.ttl / 4)
	defer tick.Stop()
	lastProgress := time.Now()
	every := PlainProgressInterval
	if r.cfg.ProgressTerminal {
		every = 250 * time.Millisecond
	}
	for i := 0; r.remaining(ctx) > 0 && !r.workersGone(); i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for len(live) > 0 && time.Since(live[0].since) >= r.ttl {
			r.heal(ctx, e, live[0].f, live[0].worker, live[0].since)
			live = live[1:]
		}
		if len(available) > 0 {
			f := available[i%len(available)]
			e.target = -1
			if err := f.Inject(ctx, e); err == nil {
				r.injected[f.Name()]++
				live = append(live, active{f, e.target, time.Now()})
			}
		}
		if r.cfg.Progress != nil && time.Since(lastProgress) >= every {
			lastProgress = time.Now()
			r.progress(ctx)
		}
	}
	for _, a := range live {
		r.heal(ctx, e, a.f, a.worker, a.since)
	}
	if r.cfg.Progress != nil {
		r.progress(ctx)
		if r.cfg.ProgressTerminal {
			fmt.Fprintln(r.cfg.Progress)
		}
	}
}

// PlainProgressInterval spaces the progress lines written to a file or a
// pipe: every 5 s shows a log or CI output that the drill is alive in a few
// dozen lines at most, where a terminal's 250 ms redraw would write hundreds.
const PlainProgressInterval = 5 * time.Second

// progress writes one progress report: redrawn over the last one on a
// terminal (the trailing space covers a longer line), a whole line otherwise.
func (r *run) progress(ctx context.Context) {
	line := fmt.Sprintf("drill: %d/%d jobs done, %d critical sections, %d faults, %d stale writes refused",
		r.cfg.Jobs-r.remaining(ctx), r.cfg.Jobs, r.sections.Load(), sum(r.injected), r.refused.Load())
	if r.cfg.ProgressTerminal {
		fmt.Fprintf(r.cfg.Progress, "\r%s ", line)
	} else {
		fmt.Fprintln(r.cfg.Progress, line)
	}
}

// heal ends fault f, injected at since on worker (-1: store-wide), and
// records its span for the report; a partition's span is also kept as an
// outage, since no takeover can happen while every worker is cut off from
// the store.
func (r *run) heal(ctx context.Context, e *env, f faults.Fault, worker int, since time.Time) {
	_ = f.Heal(ctx, e)
	now := time.Now()
	r.faultSpans = append(r.faultSpans, history.FaultSpan{Name: f.Name(), Worker: worker, From: since, To: now})
	if _, ok := f.(faults.Partition); ok {
		r.outages = append(r.outages, history.Window{From: since, To: now})
	}
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

// env is the faults.Env of a run: its workers, goroutines or processes.
type env struct {
	run    *run
	target int // the worker the fault being injected picked; -1 for none
}

// TTL implements faults.Env.
func (e *env) TTL() time.Duration { return e.run.ttl }

// Pause implements faults.Env: a goroutine worker acts the pause out in its
// next critical section; a worker process is SIGSTOPped.
func (e *env) Pause(ctx context.Context) error {
	if e.run.procs != nil {
		return e.run.procs.pause(ctx, e)
	}
	e.pick().request(faultPause)
	return nil
}

// Kill implements faults.Env, as Pause does.
func (e *env) Kill(ctx context.Context) error {
	if e.run.procs != nil {
		return e.run.procs.kill(ctx, e)
	}
	e.pick().request(faultKill)
	return nil
}

// FailRenewals implements faults.Env: on picks a worker, off heals it.
func (e *env) FailRenewals(on bool) {
	r := e.run
	switch {
	case r.procs != nil:
		r.procs.failRenew(on, e)
	case on:
		w := e.pick()
		w.store.failRenew.Store(true)
		r.failing.Store(w)
	default:
		if w := r.failing.Swap(nil); w != nil {
			w.store.failRenew.Store(false)
		}
	}
}

// SetLatency implements faults.Env.
func (e *env) SetLatency(d time.Duration) {
	if e.run.procs != nil {
		e.run.procs.latency(d)
		return
	}
	e.run.knobs.latency.Store(int64(d))
}

// pick picks a live worker at random as the target of the fault being
// injected, and remembers it for the fault's span in the report.
func (e *env) pick() *worker {
	w := e.run.randomWorker()
	e.target = w.id
	return w
}

func (r *run) randomWorker() *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	live := make([]*worker, 0, len(r.workers))
	for _, w := range r.workers {
		if !w.dead.Load() {
			live = append(live, w)
		}
	}
	return live[rand.IntN(len(live))]
}
