package drill_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/drill"
	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/faults"
	"github.com/leasehold/leasehold/drill/jobs"
	"github.com/leasehold/leasehold/drill/report"
	"github.com/leasehold/leasehold/store/memstore"
)

// The default drill, every in-process fault: no safety violation; the
// takeover time is reported.
func TestDefaultDrillFindsNoViolation(t *testing.T) {
	rep, err := drill.Run(t.Context(), drill.Config{Jobs: 50})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	_ = rep.WriteText(&out)
	t.Log("\n" + out.String())
	if !rep.Safe() {
		t.Fatalf("safety violations in a default drill:\n%s", out.String())
	}
	checkTakeover(t, rep)
	if rep.Linearizable != check.LinearizableOK || rep.LinearizeOps == 0 || rep.Visualization != nil {
		t.Errorf("linearizable %q on %d ops with a %d-byte visualization; want ok on the whole history, no page",
			rep.Linearizable, rep.LinearizeOps, len(rep.Visualization))
	}
	for _, f := range faults.Default() {
		if rep.Faults[f.Name()] == 0 {
			t.Errorf("fault %s was never injected", f.Name())
		}
	}
	if rep.Effects["pause-past-ttl"] == 0 || rep.StaleRefused == 0 {
		t.Errorf("no paused worker's stale write was refused (%d pauses, %d refused): the drill proved nothing",
			rep.Effects["pause-past-ttl"], rep.StaleRefused)
	}
	if rep.Ops["release not owned"] == 0 {
		t.Error("no stale release was refused")
	}
}

// The negative controls: the same drill with the token check or the fence
// switched off must report violations.
func TestNegativeControlsFail(t *testing.T) {
	for name, cfg := range map[string]drill.Config{
		"unsafe release": {UnsafeRelease: true, TimeScale: 0.005},
		"no fencing":     {NoFencing: true, TimeScale: 0.005},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := drill.Run(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			_ = rep.WriteText(&out)
			t.Log("\n" + out.String())
			want := check.WrongOwner
			if cfg.NoFencing {
				want = check.StaleWrite
			}
			for _, c := range []string{want, check.NotLinearizable} {
				found := false
				for _, v := range rep.Violations {
					found = found || v.Check == c
				}
				if !found {
					t.Errorf("%s: no %s violation found; the drill cannot fail", name, c)
				}
			}
			if rep.Linearizable != check.LinearizableIllegal || !strings.Contains(string(rep.Visualization), "<html") {
				t.Errorf("%s: linearizable %q with a %d-byte visualization; want illegal and porcupine's page",
					name, rep.Linearizable, len(rep.Visualization))
			}
		})
	}
}

// checkTakeover requires takeovers to have been measured and reports their
// time against the SLO (TTL + one renewal interval): a figure, not an
// assertion, since a loaded machine's scheduler adds to it (at load average
// 16 on 2 cores, hundreds of milliseconds). The drill reports a p99 over the
// SLO as a liveness shortfall.
func checkTakeover(t *testing.T, rep *report.Report) {
	t.Helper()
	if rep.Takeovers == 0 {
		t.Fatal("no takeover was measured")
	}
	t.Logf("takeover p50 %v, p99 %v, SLO %v (%d takeovers); liveness shortfalls %v",
		rep.TakeoverP50.Round(time.Millisecond), rep.TakeoverP99.Round(time.Millisecond), rep.TakeoverSLO, rep.Takeovers, rep.Shortfalls)
}

// Worker processes need a way to start them and stores they can share;
// the errors name the argument and nothing runs.
func TestProcessesNeedSharedStores(t *testing.T) {
	for name, cfg := range map[string]drill.Config{
		"no StartWorker": {Processes: 2},
		"memstore":       {Processes: 2, StartWorker: func() *exec.Cmd { return exec.Command("false") }},
	} {
		t.Run(name, func(t *testing.T) {
			rep, err := drill.Run(t.Context(), cfg)
			var ae *leasehold.ArgumentError
			if !errors.As(err, &ae) || ae.Arg != "processes" || rep != nil {
				t.Fatalf("Run(%s) = %v, %v; want an ArgumentError naming processes", name, rep, err)
			}
		})
	}
}

// Progress is redrawn in place for a terminal and whole lines otherwise,
// each ending with the final count; a negative takeover SLO is refused.
func TestProgressAndTakeoverSLO(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		var out strings.Builder
		rep, err := drill.Run(t.Context(), drill.Config{Jobs: 5, TimeScale: 0.005, Progress: &out, ProgressTerminal: terminal, TakeoverSLO: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		got := out.String()
		if strings.Contains(got, "\r") != terminal || !strings.HasSuffix(got, "\n") || !strings.Contains(got, "drill: 5/5 jobs done") {
			t.Errorf("terminal %v: progress %q", terminal, got)
		}
		if rep.TakeoverSLO != time.Hour {
			t.Errorf("takeover SLO %v, want the 1h given", rep.TakeoverSLO)
		}
	}
	if _, err := drill.Run(t.Context(), drill.Config{TakeoverSLO: -time.Second}); !errors.Is(err, leasehold.ErrInvalidArgument) {
		t.Errorf("a negative takeover SLO: %v", err)
	}
}

// initSpy is a job storage that records whether the drill initialised it.
type initSpy struct {
	jobs.Storage
	inited bool
}

func (s *initSpy) Init(ctx context.Context, keys []string, noFencing bool) error {
	s.inited = true
	return s.Storage.Init(ctx, keys, noFencing)
}

// A number out of its bound (negative, or past what the CLI allows) is an
// ArgumentError naming the field, before anything is written.
func TestConfigOutOfBoundsIsRefused(t *testing.T) {
	for _, tc := range []struct {
		arg string
		cfg drill.Config
	}{
		{"timeout", drill.Config{Timeout: -time.Second}},
		{"timeout", drill.Config{Timeout: drill.MaxTimeout + 1}},
		{"processes", drill.Config{Processes: -3}},
		{"processes", drill.Config{Processes: 1}},
		{"processes", drill.Config{Processes: drill.MaxProcesses + 1}},
		{"workers", drill.Config{Workers: -1}},
		{"workers", drill.Config{Workers: drill.MaxWorkers + 1}},
		{"jobs", drill.Config{Jobs: -1}},
		{"jobs", drill.Config{Jobs: drill.MaxJobs + 1}},
		{"takeover SLO", drill.Config{TakeoverSLO: -time.Second}},
		{"linearize timeout", drill.Config{LinearizeTimeout: -time.Second}},
		{"time scale", drill.Config{TimeScale: -0.01}},
		{"time scale", drill.Config{TimeScale: drill.MinTimeScale / 2}},
		{"time scale", drill.Config{TimeScale: 1.5}},
		{"time scale", drill.Config{TimeScale: math.NaN()}},
	} {
		spy := &initSpy{Storage: jobs.NewMemory()}
		tc.cfg.Storage = spy
		rep, err := drill.Run(t.Context(), tc.cfg)
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg || rep != nil {
			t.Errorf("Run(%+v) = %v, %v; want an ArgumentError naming %s", tc.cfg, rep, err, tc.arg)
		}
		if spy.inited {
			t.Errorf("Run(%+v) initialised the job storage before refusing it", tc.cfg)
		}
	}
	var ae *leasehold.ArgumentError
	if _, err := drill.Run(nil, drill.Config{}); !errors.As(err, &ae) || ae.Arg != "ctx" { //nolint:staticcheck // the nil context is the point
		t.Errorf("Run with a nil context: %v, want an ArgumentError naming ctx", err)
	}
}

// sharedStore and sharedStorage hide the in-process store and storage from
// Run's check that worker processes share real servers: the workers below
// fail before they would use them.
type (
	sharedStore   struct{ *memstore.Store }
	sharedStorage struct{ *jobs.Memory }
)

// A worker process that fails is logged to Config.Logger, its standard
// error included; without a Logger nothing is logged, not even to
// slog.Default.
func TestWorkerFailuresGoToTheLoggerOnly(t *testing.T) {
	var std bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&std, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	failing := func() *exec.Cmd { return exec.Command("sh", "-c", "echo 'worker cannot reach its store' >&2; exit 1") }
	for _, withLogger := range []bool{false, true} {
		var logged bytes.Buffer
		cfg := drill.Config{Store: sharedStore{memstore.New()}, Storage: sharedStorage{jobs.NewMemory()},
			Processes: 2, Jobs: 1, Timeout: time.Minute, StartWorker: failing}
		if withLogger {
			cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
		}
		rep, err := drill.Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Effects["worker-crashed"] == 0 {
			t.Fatalf("logger %v: no worker crash was recorded: %+v", withLogger, rep.Effects)
		}
		switch got := logged.String(); {
		case withLogger && (!strings.Contains(got, "drill: worker process failed") || !strings.Contains(got, "worker cannot reach its store")):
			t.Errorf("the Logger got %q, want the failure with the worker's stderr", got)
		case !withLogger && got != "":
			t.Errorf("no Logger given, yet %q was logged", got)
		}
	}
	if std.Len() > 0 {
		t.Errorf("the drill logged to slog.Default:\n%s", std.String())
	}
}

// ServeWorker with a nil argument is an ArgumentError naming it, not a panic.
func TestServeWorkerNilArguments(t *testing.T) {
	spec := drill.WorkerSpec{Jobs: 1, TimeScale: 0.01}
	store, storage := memstore.New(), jobs.NewMemory()
	in, out := strings.NewReader(""), &bytes.Buffer{}
	for arg, call := range map[string]func() error{
		"ctx":     func() error { return drill.ServeWorker(nil, spec, store, storage, in, out) }, //nolint:staticcheck // the nil context is the point
		"store":   func() error { return drill.ServeWorker(t.Context(), spec, nil, storage, in, out) },
		"storage": func() error { return drill.ServeWorker(t.Context(), spec, store, nil, in, out) },
		"in":      func() error { return drill.ServeWorker(t.Context(), spec, store, storage, nil, out) },
		"out":     func() error { return drill.ServeWorker(t.Context(), spec, store, storage, in, nil) },
	} {
		var ae *leasehold.ArgumentError
		if err := call(); !errors.As(err, &ae) || ae.Arg != arg {
			t.Errorf("ServeWorker with a nil %s: %v, want an ArgumentError naming it", arg, err)
		}
	}
	var ae *leasehold.ArgumentError
	if err := drill.ServeWorker(t.Context(), drill.WorkerSpec{Jobs: drill.MaxJobs + 1, TimeScale: 0.01}, store, storage, in, out); !errors.As(err, &ae) || ae.Arg != "jobs" {
		t.Errorf("ServeWorker with %d jobs: %v, want an ArgumentError naming jobs", drill.MaxJobs+1, err)
	}
}

// A drill its caller stops before its jobs are done reports what it ran:
// safe as far as it ran, interrupted (exit 1), not a liveness shortfall.
func TestInterruptedDrill(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(500*time.Millisecond, cancel)
	rep, err := drill.Run(ctx, drill.Config{Jobs: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || !rep.Safe() || rep.ExitCode() != report.ExitInterrupted {
		t.Errorf("interrupted drill: interrupted %v, safe %v, exit %d (%s); want interrupted, safe, exit %d",
			rep.Interrupted, rep.Safe(), rep.ExitCode(), rep.Verdict(), report.ExitInterrupted)
	}
}
