package main_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/prom"
)

// ttlJSON is the part of ttl --json the tests read.
type ttlJSON struct {
	ExecP99       float64 `json:"exec_p99_seconds"`
	TTL           float64 `json:"ttl_seconds"`
	RenewInterval float64 `json:"renew_interval_seconds"`
	LocalDeadline float64 `json:"local_deadline_seconds"`
	Takeover      float64 `json:"takeover_seconds"`
	SLO           float64 `json:"slo_seconds"`
	SLOMet        bool    `json:"slo_met"`
	MaxExecP99    float64 `json:"max_exec_p99_seconds"`
	Advice        string  `json:"advice"`
	Source        *struct {
		Namespace      string  `json:"namespace"`
		Quantile       float64 `json:"quantile"`
		Observations   float64 `json:"observations"`
		AboveTopBucket bool    `json:"above_top_bucket"`
	} `json:"source"`
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestTTL(t *testing.T) {
	out := ok(t, "ttl", "--exec-p99", "18s", "--jitter", "4s", "--guard", "2s", "--slo", "30s")
	for _, want := range []string{"TTL             24s", "renew interval  8s", "local deadline  21.6s", "takeover bound  25s", "met, 5s to spare"} {
		if !strings.Contains(out, want) {
			t.Errorf("ttl output lacks %q:\n%s", want, out)
		}
	}

	var got ttlJSON
	decode(t, ok(t, "ttl", "--json", "--exec-p99", "18s", "--jitter", "4s", "--guard", "2s", "--slo", "30s"), &got)
	if !near(got.TTL, 24) || !near(got.RenewInterval, 8) || !near(got.LocalDeadline, 21.6) || !near(got.Takeover, 25) ||
		!got.SLOMet || !near(got.MaxExecP99, 23) || got.Advice != "" || got.Source != nil {
		t.Errorf("ttl --json = %+v", got)
	}

	// A leader lease: candidates retry every 2 s.
	decode(t, ok(t, "ttl", "--json", "--exec-p99", "6s", "--jitter", "2s", "--guard", "2s", "--retry", "2s"), &got)
	if !near(got.TTL, 10) || !near(got.Takeover, 12) || !got.SLOMet {
		t.Errorf("ttl --retry 2s --json = %+v", got)
	}
}

func TestTTLImpossibleSLO(t *testing.T) {
	args := []string{"ttl", "--exec-p99", "18s", "--jitter", "4s", "--guard", "2s", "--slo", "20s"}
	r := failsWith(t, 1, []string{"takeover SLO 20s is impossible with TTL 24s", "can take 25s", "exec p99 ≤ 13s", "split the work"}, args...)
	if !strings.Contains(r.stdout, "NOT MET") {
		t.Errorf("ttl with an impossible SLO printed:\n%s", r.stdout)
	}

	r = run(t, append(args, "--json")...)
	var got ttlJSON
	decode(t, r.stdout, &got)
	if r.code != 1 || got.SLOMet || !near(got.MaxExecP99, 13) || !strings.Contains(got.Advice, "split the work") {
		t.Errorf("ttl --json with an impossible SLO: exit %d, %+v", r.code, got)
	}
	checkOneLine(t, r.stderr, args)

	// Not even an instant critical section meets it.
	failsWith(t, 1, []string{"no critical section can meet it"},
		"ttl", "--exec-p99", "1s", "--jitter", "4s", "--guard", "2s", "--slo", "6s")
}

// TestTTLFromMetrics reads the hold-time histogram that package prom exports,
// served on a loopback HTTP server as a process's /metrics would be.
func TestTTLFromMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, err := prom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	hold := func(key string, d time.Duration, n int) {
		for range n {
			obs.Observer().OnRelease(t.Context(), leasehold.ReleaseEvent{Event: leasehold.Event{Key: key, Namespace: leasehold.DefaultNamespace(key)}, Held: d})
		}
	}
	// runs: 50 holds of 4 s, 40 of 12 s, 10 of 18 s. The 99th of 100 is
	// the 9th of the 10 in the bucket (15 s, 20 s]: 15 + 5 × 9/10 = 19.5 s.
	hold("runs:R1", 4*time.Second, 50)
	hold("runs:R2", 12*time.Second, 40)
	hold("runs:R3", 18*time.Second, 10)
	// jobs: long holds that must not leak into the runs estimate.
	hold("jobs:J", 100*time.Second, 10)
	// leader: terms longer than the top bucket.
	hold("leader:main", time.Hour, 5)

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	metrics := srv.URL + "/metrics"

	var got ttlJSON
	decode(t, ok(t, "ttl", "--json", "--from", metrics, "--namespace", "runs", "--jitter", "4s", "--guard", "2s", "--slo", "30s"), &got)
	if !near(got.ExecP99, 19.5) || !near(got.TTL, 25.5) || !near(got.Takeover, 26.5) || !got.SLOMet ||
		got.Source == nil || got.Source.Namespace != "runs" || got.Source.Observations != 100 || got.Source.AboveTopBucket {
		t.Errorf("ttl --from --json = %+v (source %+v)", got, got.Source)
	}

	out := ok(t, "ttl", "--from", metrics, "--namespace", "runs", "--jitter", "4s", "--guard", "2s")
	for _, want := range []string{"exec p99        19.5s", `p99 of leasehold_lock_held_seconds{namespace="runs"}`, "100 holds", "TTL             25.5s"} {
		if !strings.Contains(out, want) {
			t.Errorf("ttl --from output lacks %q:\n%s", want, out)
		}
	}

	// The median of the same holds: the 50th is the top of (3 s, 5 s].
	decode(t, ok(t, "ttl", "--json", "--from", metrics, "--namespace", "runs", "--quantile", "0.5", "--jitter", "0s", "--guard", "0s"), &got)
	if !near(got.ExecP99, 5) {
		t.Errorf("ttl --quantile 0.5 read %v s, want 5", got.ExecP99)
	}

	out = ok(t, "ttl", "--from", metrics, "--namespace", "leader", "--jitter", "0s", "--guard", "0s")
	if !strings.Contains(out, "ABOVE the top bucket") || !strings.Contains(out, "exec p99        10m0s") {
		t.Errorf("ttl --from for holds above the top bucket:\n%s", out)
	}

	failsWith(t, 1, []string{`no leasehold_lock_held_seconds series for namespace "approvals"`, "jobs, leader, runs"},
		"ttl", "--from", metrics, "--namespace", "approvals", "--jitter", "4s", "--guard", "2s")
	failsWith(t, 1, []string{"takeover SLO 20s is impossible", "exec p99 ≤ 13s (now 19.5s)"},
		"ttl", "--from", metrics, "--namespace", "runs", "--jitter", "4s", "--guard", "2s", "--slo", "20s")
}

// TestTTLFromExposition reads hand-written exposition texts: several series
// of one namespace are summed, and a missing histogram or a failing endpoint
// is one line and exit code 1.
func TestTTLFromExposition(t *testing.T) {
	const twoInstances = `# HELP leasehold_lock_held_seconds Time a lease was held.
# TYPE leasehold_lock_held_seconds histogram
leasehold_lock_held_seconds_bucket{instance="a",namespace="runs",le="10"} 10
leasehold_lock_held_seconds_bucket{instance="a",namespace="runs",le="20"} 10
leasehold_lock_held_seconds_bucket{instance="a",namespace="runs",le="+Inf"} 10
leasehold_lock_held_seconds_sum{instance="a",namespace="runs"} 50
leasehold_lock_held_seconds_count{instance="a",namespace="runs"} 10
leasehold_lock_held_seconds_bucket{instance="b",namespace="runs",le="10"} 0
leasehold_lock_held_seconds_bucket{instance="b",namespace="runs",le="20"} 10
leasehold_lock_held_seconds_bucket{instance="b",namespace="runs",le="+Inf"} 10
leasehold_lock_held_seconds_sum{instance="b",namespace="runs"} 150
leasehold_lock_held_seconds_count{instance="b",namespace="runs"} 10
`
	const noHistogram = "# TYPE up gauge\nup 1\n"
	const empty = `# TYPE leasehold_lock_held_seconds histogram
leasehold_lock_held_seconds_bucket{namespace="runs",le="10"} 0
leasehold_lock_held_seconds_bucket{namespace="runs",le="+Inf"} 0
leasehold_lock_held_seconds_sum{namespace="runs"} 0
leasehold_lock_held_seconds_count{namespace="runs"} 0
`
	mux := http.NewServeMux()
	serve := func(path, body string) {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			fmt.Fprint(w, body)
		})
	}
	serve("/two", twoInstances)
	serve("/none", noHistogram)
	serve("/empty", empty)
	serve("/garbage", "this is { not metrics\n")
	hist := func(le1, c1, cInf string) string {
		return "# TYPE leasehold_lock_held_seconds histogram\n" +
			`leasehold_lock_held_seconds_bucket{namespace="runs",le="` + le1 + `"} ` + c1 + "\n" +
			`leasehold_lock_held_seconds_bucket{namespace="runs",le="+Inf"} ` + cInf + "\n" +
			`leasehold_lock_held_seconds_sum{namespace="runs"} 1` + "\n" +
			`leasehold_lock_held_seconds_count{namespace="runs"} ` + cInf + "\n"
	}
	serve("/nan", hist("10", "NaN", "NaN"))
	serve("/inf", hist("10", "5", "+Inf"))
	serve("/huge", hist("1e12", "0", "10"))
	serve("/negative", hist("-1", "10", "10"))
	serve("/tiny", hist("0.005", "1000", "1000"))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// Summed: 10 ≤ 10 s, 20 ≤ 20 s. The 19.8th of 20 is 9.8 of the 10 in
	// (10 s, 20 s]: 19.8 s.
	var got ttlJSON
	decode(t, ok(t, "ttl", "--json", "--from", srv.URL+"/two", "--namespace", "runs", "--jitter", "1s", "--guard", "1s"), &got)
	if !near(got.ExecP99, 19.8) || got.Source.Observations != 20 {
		t.Errorf("ttl --from two instances = %+v (source %+v), want exec p99 19.8 s over 20 holds", got, got.Source)
	}

	common := []string{"--namespace", "runs", "--jitter", "1s", "--guard", "1s"}
	for _, tc := range []struct {
		path string
		want string
	}{
		{"/none", "has no leasehold_lock_held_seconds histogram"},
		{"/empty", "no observations yet"},
		{"/garbage", "not a Prometheus text exposition"},
		{"/missing", "404 Not Found"},
		// The endpoint's figures at fault: exit 1 naming --from, never a
		// plan from NaN, nor a usage error blaming --exec-p99.
		{"/nan", "counts NaN, not a finite number"},
		{"/inf", "counts +Inf, not a finite number"},
		{"/huge", "not a hold time in (0, 24h0m0s]"},
		{"/negative", "not a hold time in (0, 24h0m0s]"},
	} {
		failsWith(t, 1, []string{tc.want, srv.URL}, append([]string{"ttl", "--from", srv.URL + tc.path}, common...)...)
	}
	// Every hold under 5 ms and a low quantile: the estimate, 0.2 ms, is
	// taken as 1 ms, not as an exec p99 that was not given.
	decode(t, ok(t, "ttl", "--json", "--from", srv.URL+"/tiny", "--quantile", "0.04", "--namespace", "runs", "--jitter", "0s", "--guard", "0s"), &got)
	if !near(got.ExecP99, 0.001) {
		t.Errorf("ttl --from, every hold under 5 ms, --quantile 0.04 = %+v, want exec p99 1 ms", got)
	}
	failsWith(t, 1, []string{"127.0.0.1", "connection refused"}, append([]string{"ttl", "--from", "http://" + closedAddr(t) + "/metrics"}, common...)...)
	r := failsWith(t, 1, []string{"did not answer within 1s"},
		append([]string{"--timeout", "1s", "ttl", "--from", "http://" + silentAddr(t) + "/metrics"}, common...)...)
	if r.elapsed > 4*time.Second {
		t.Errorf("ttl --from a silent endpoint took %v with --timeout 1s", r.elapsed)
	}
}
