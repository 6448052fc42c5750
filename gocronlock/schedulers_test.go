package gocronlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/gocronlock"
)

// The schedulers of these tests run one job every interval. Scheduler i's
// clock is i × skew behind the first's: each slot fires on it that much
// later, as on hosts whose clocks differ.
const (
	nodes    = 3
	skew     = 50 * time.Millisecond
	interval = 500 * time.Millisecond
	// minHold is the Locker's: the next slot finds the key free, and the
	// schedulers' attempts at one slot may spread over 150 ms (half of it),
	// more than the 100 ms of skew.
	minHold  = 300 * time.Millisecond
	before   = 12 // slots run before the fault
	after    = 12 // slots run by the others after it
	waitRuns = 30 * time.Second
	// lockTTL bounds how long a run's lease outlives a scheduler cut off
	// before its Unlock could shorten it to the minimum hold.
	lockTTL = 2 * time.Second
)

// Three gocron schedulers on one real store, each with its own connections
// through its own proxy, run one job: over 24 slots no slot runs twice, and
// the job's fenced writes are all accepted, with rising fences; when the
// connection of one is frozen (a silent partition) the others run every
// slot after it.
func TestSchedulers(t *testing.T) {
	for name, start := range map[string]func(*testing.T) backend{"redis": redisBackend, "postgres": postgresBackend} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := start(t)
			t.Run("Locker", func(t *testing.T) { lockerScenario(t, b) })
			t.Run("Elector", func(t *testing.T) { electorScenario(t, b) })
		})
	}
}

// schedule makes node n's scheduler with opts, running job every interval
// from first; the scheduler is shut down at the test's end.
func schedule(t *testing.T, n *node, first time.Time, job func(ctx context.Context), opts ...gocron.SchedulerOption) {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(interval), gocron.NewTask(job),
		gocron.WithName("report"),
		gocron.WithStartAt(gocron.WithStartDateTime(first.Add(time.Duration(n.id)*skew))),
		gocron.WithEventListeners(gocron.AfterLockError(func(uuid.UUID, string, error) { n.lockErr() })))
	if err != nil {
		t.Fatal(err)
	}
	n.sched = s
	t.Cleanup(func() { _ = s.Shutdown() })
}

func lockerScenario(t *testing.T, b backend) {
	register := b.register(t, "locker", fence.Strict) // every run has a fence of its own
	first := time.Now().Add(time.Second)              // after every scheduler is made
	h := newHistory(first)
	ns := make([]*node, nodes)
	for i := range ns {
		n := newNode(t, b, i)
		locker, err := gocronlock.NewLocker(n.client, gocronlock.WithMinHold(minHold),
			gocronlock.WithTTL(lockTTL), gocronlock.WithKeyPrefix("gocron-test:"))
		if err != nil {
			t.Fatal(err)
		}
		schedule(t, n, first, func(context.Context) {
			wrote := h.begin(n.id)
			ctx, lease, err := locker.Lease("report")
			if err != nil {
				wrote(0, err)
				return
			}
			wrote(lease.Fence(), register.Write(ctx, "report", lease.Fence(), []byte{byte(n.id)}))
		}, gocron.WithDistributedLocker(locker))
		ns[i] = n
	}
	scenario(t, h, ns, "the last slot's runner", func(runs []run) *node { return ns[runs[len(runs)-1].node] }, true)
}

func electorScenario(t *testing.T, b backend) {
	register := b.register(t, "elector", fence.SameHolder) // a term's runs share its fence
	first := time.Now().Add(time.Second)
	h := newHistory(first)
	ns := make([]*node, nodes)
	electors := make([]*gocronlock.Elector, nodes)
	for i := range ns {
		n := newNode(t, b, i)
		// A 2 s term: its drift margin, 200 ms, is the gap between two terms.
		e, err := gocronlock.NewElector(n.client, "gocron-test:leader", gocronlock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close() }) // before the Client's Close
		schedule(t, n, first, func(ctx context.Context) {
			wrote := h.begin(n.id)
			ctx, lease, err := e.Lease(ctx)
			if err != nil {
				wrote(0, err)
				return
			}
			wrote(lease.Fence(), register.Write(ctx, "report", lease.Fence(), []byte{byte(n.id)}))
		}, gocron.WithDistributedElector(e))
		ns[i], electors[i] = n, e
	}
	scenario(t, h, ns, "the leader", func([]run) *node {
		for i, e := range electors {
			if e.IsLeader(t.Context()) == nil {
				return ns[i]
			}
		}
		t.Fatal("no scheduler leads")
		return nil
	}, false)
}

// scenario starts the schedulers, waits for the slots before the fault,
// freezes the connection of victim's choice, waits for the others to run
// the slots after it, and checks the history. strict: every run has a fence
// larger than the last (Locker), else only a change of runner must raise it
// (Elector).
func scenario(t *testing.T, h *history, ns []*node, victimIs string, victim func([]run) *node, strict bool) {
	for _, n := range ns {
		n.sched.Start()
	}
	runs := h.waitFor(t, "slots before the fault", waitRuns, func(runs []run) bool { return slots(runs, time.Time{}, -1) >= before })
	v := victim(runs)
	v.proxy.Freeze()
	frozen := time.Now()
	runs = h.waitFor(t, "slots after the fault", waitRuns, func(runs []run) bool { return slots(runs, frozen, v.id) >= after })
	for _, n := range ns {
		if err := n.sched.Shutdown(); err != nil {
			t.Errorf("node %d: Shutdown: %v", n.id, err)
		}
	}
	v.proxy.Thaw() // nothing it held may land now: every scheduler has stopped
	runs = h.snapshot()

	checkSlots(t, runs)
	perNode := make([]int, len(ns))
	var takeover, late time.Duration
	for i, r := range runs {
		perNode[r.node]++
		late = max(late, r.offset.Abs())
		if r.err != nil {
			t.Errorf("node %d, slot %s: %v", r.node, r.slot.Format("15:04:05.000"), r.err)
		}
		if r.fence <= 0 {
			t.Errorf("node %d wrote with fence %d", r.node, r.fence)
		}
		if i > 0 && r.node != v.id && r.at.After(frozen) && takeover == 0 {
			takeover = r.at.Sub(frozen)
		}
	}
	fences := fencesInOrder(runs)
	for i := 1; i < len(fences); i++ {
		if fences[i] < fences[i-1] || (strict && fences[i] == fences[i-1]) {
			t.Errorf("fence %d after %d (write %d)", fences[i], fences[i-1], i)
		}
	}
	var lastByVictim time.Time
	for _, r := range runs {
		if r.node == v.id && r.at.After(lastByVictim) {
			lastByVictim = r.at
		}
	}
	t.Logf("%d runs of %d slots (%d after the fault) on %d schedulers, per scheduler %v; fences %d … %d; a job started at most %v from its slot",
		len(runs), slots(runs, time.Time{}, -1), slots(runs, frozen, v.id), len(ns), perNode, fences[0], fences[len(fences)-1], late.Round(time.Millisecond))
	t.Logf("%s (scheduler %d) frozen: another ran a slot %v later; its own last run %v after; lock errors per scheduler %v",
		victimIs, v.id, takeover.Round(time.Millisecond), lastByVictim.Sub(frozen).Round(time.Millisecond), lockErrors(ns))
}

func lockErrors(ns []*node) []int {
	out := make([]int, len(ns))
	for i, n := range ns {
		out[i] = n.lockErrors()
	}
	return out
}
