package lockbench

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// TestRunTiny runs the whole benchmark in its smallest configuration against
// a redis-server of its own (about 5 s) and checks that every section of the
// report is there with figures in it.
func TestRunTiny(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.HandoffDuration, cfg.Rounds, cfg.Warmup = 100*time.Millisecond, 400*time.Millisecond, 1, 0
	cfg.Concurrency, cfg.Workers = []int{1}, []int{4}
	cfg.Sections = []string{SectionLocks} // TestRunScaleTiny runs the other
	cfg.Unbatched = true
	cfg.Command = "go test"
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summarize()

	positive := func(what string, v float64) {
		t.Helper()
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want a positive number", what, v)
		}
	}
	if len(s.Raw) != 1 || len(s.Cycles) != 6 || len(s.Handoff) != 5 || len(s.Ops) != 6 {
		t.Fatalf("summary has %d raw, %d cycle, %d hand-off, %d op rows; want 1, 6 (leasehold-unbatched and scripts-on-rueidis too), 5, 6",
			len(s.Raw), len(s.Cycles), len(s.Handoff), len(s.Ops))
	}
	positive("PING/s", s.Raw[0].Ping.Median)
	positive("EVALSHA/s", s.Raw[0].EvalSha.Median)
	for _, c := range s.Cycles {
		positive(c.ID+" cycles/s", c.Rate.Median)
		positive(c.ID+" cycles vs raw", c.VsRaw)
		positive("leasehold vs "+c.ID, c.VsLeasehold)
	}
	for _, h := range s.Handoff {
		positive(h.ID+" transfers/s", h.Transfers.Median)
		positive(h.ID+" hand-offs", float64(h.N))
		positive(h.ID+" hand-off p50", float64(h.P50))
		positive(h.ID+" round trips per transfer", h.TripsPerTransfer)
		if h.P99 < h.P50 || h.Max < h.P99 {
			t.Errorf("%s: p50 %v, p99 %v, max %v out of order", h.ID, h.P50, h.P99, h.Max)
		}
	}
	for _, o := range s.Ops {
		for name, v := range map[string]float64{"acquire": o.Acquire, "release": o.Release, "renew": o.Renew, "failed attempt": o.Busy} {
			if o.ID == "rueidislock" && name == "renew" { // it extends by itself
				continue
			}
			positive(o.ID+" "+name+" round trips", v)
		}
		if (o.ID == "leasehold" || o.ID == "leasehold-unbatched" || o.ID == scriptsID) && (o.Acquire != 1 || o.Release != 1 || o.Renew != 1) {
			t.Errorf("%s round trips acquire/release/renew = %v/%v/%v, want 1/1/1 (docs/design.md §9)", o.ID, o.Acquire, o.Release, o.Renew)
		}
	}

	md := Markdown(res, s, "handoff.svg")
	for _, want := range []string{
		"## Targets (design.md §9)", "## 1. Raw round trips", "## 2. Uncontended acquire+release",
		"## 3. Contended hand-off", "## 4. Round trips per operation", "## Reading the figures",
		"## Method", "## Not measured yet", "leasehold's scripts apart from go-redis", "100 000 leases", "(handoff.svg)",
		"runtime.NumCPU", res.Env.GoVersion, "Redis | " + res.Env.Redis, "go test", "`--only scale`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") {
		t.Errorf("report has NaN:\n%s", md)
	}

	svg := Chart(s, res.Env, cfg)
	dec := xml.NewDecoder(strings.NewReader(svg))
	for range 100_000 {
		_, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
	for _, h := range s.Handoff {
		if !strings.Contains(svg, xmlText.Replace(h.Label)) {
			t.Errorf("chart lacks %q", h.Label)
		}
	}
}

func TestPercentileAndMedian(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Millisecond},
	} {
		if got := percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", tc.sorted, tc.p, got, tc.want)
		}
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3,1,2) = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4,1,3,2) = %v", got)
	}
	if got := spread([]float64{90, 100, 110}); math.Abs(got-0.1) > 1e-9 {
		t.Errorf("spread(90,100,110) = %v, want 0.1", got)
	}
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6379": true, "127.8.9.1:1": true, "[::1]:6379": true, "localhost:6379": true,
		"10.0.0.1:6379": false, "192.168.1.2:6379": false, "example.com:6379": false, "8.8.8.8:6379": false,
	} {
		if err := checkLoopback(addr); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

// TestRunScaleTiny runs the scale section alone, small and fast (about 5 s),
// and checks that the Client's engine batched, kept every lease, and did
// not grow a goroutine per lease, while the per-lease baseline did.
func TestRunScaleTiny(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sections = []string{SectionScale}
	cfg.ScaleLeases, cfg.ScaleCompare = []int{400}, 400
	cfg.ScaleTTL, cfg.ScaleWindows = 900*time.Millisecond, 2
	cfg.Command = "go test"
	res, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summarize()
	if len(s.Scale) != 2 || s.Scale[0].Mode != modeEngine || s.Scale[1].Mode != modeGoroutine {
		t.Fatalf("scale rows %+v, want %s then %s", s.Scale, modeEngine, modeGoroutine)
	}
	rn, ka := s.Scale[0], s.Scale[1]
	for _, row := range s.Scale {
		if !(row.Renewals.Median > 0) || !(row.Trips.Median > 0) || row.HeapPerLease <= 0 {
			t.Errorf("%s: %+v, want renewals, round trips and heap", row.Mode, row)
		}
	}
	// The engine must keep every lease. The baseline, a goroutine and a
	// round trip per lease, is what it is measured against: on a loaded
	// 2-core machine under -race its 400 goroutines miss renewals (109 of
	// 400 leases lost once in CI), which the report shows, not a failure.
	if rn.Lost != 0 {
		t.Errorf("engine lost %d of %d leases", rn.Lost, rn.Leases)
	}
	t.Logf("goroutine per lease lost %d of %d leases", ka.Lost, ka.Leases)
	if rn.Renewals.Median < 2*rn.Trips.Median {
		t.Errorf("engine sent %.0f renewals in %.0f round trips a second: not batched", rn.Renewals.Median, rn.Trips.Median)
	}
	if added := rn.Goroutines - rn.GoroutinesBefore; added > scaleGoroutineSlack {
		t.Errorf("engine added %d goroutines for %d leases", added, rn.Leases)
	}
	// One goroutine per lease still held: a lost lease's goroutine ends
	// (258 of 400 lost once under load), and others may come and go.
	if held, added := ka.Leases-ka.Lost, ka.Goroutines-ka.GoroutinesBefore; added < held*9/10 {
		t.Errorf("goroutine per lease added %d goroutines for %d leases held, want one each", added, held)
	}
	md := Markdown(res, s, "")
	for _, want := range []string{"## 5. Scale", "100 000 leases", "| KeepAlive (engine) | 400 |", "| goroutine per lease (Lease.Renew) | 400 |", "within 20ms", "up to 1,000 per", "at most 4 pipelines", "`--only locks`"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, absent := range []string{"## 1. Raw", "NaN"} {
		if strings.Contains(md, absent) {
			t.Errorf("report has %q though only the scale section ran", absent)
		}
	}
}

// TestOneClientVerdict checks that a run whose critical section alone caps
// the one-Client hand-off below its target does not call the target missed
// on the rate, and still fails it on p99 or a lost wait.
func TestOneClientVerdict(t *testing.T) {
	row := func(rate float64, hold, p99 time.Duration, gaveUp int64) HandoffRow {
		return HandoffRow{Transfers: Rate{Median: rate}, Hold: hold, P99: p99, GaveUp: gaveUp}
	}
	us := time.Microsecond
	for _, tc := range []struct {
		name string
		h    HandoffRow
		want string
	}{
		{"met", row(6000, 20*us, 700*us, 0), "**met**"},
		{"slow with a short critical section", row(4000, 20*us, 700*us, 0), "**not met**"},
		{"capped by the critical section", row(4800, 204*us, 700*us, 0), "not judged here"},
		{"critical section exactly at the target", row(4800, 200*us, 700*us, 0), "**not met**"},
		{"capped, but p99 over", row(4800, 204*us, 1100*us, 0), "**not met**"},
		{"capped, but a wait lost", row(4800, 204*us, 700*us, 1), "**not met**"},
		{"no critical section measured", row(4800, 0, 700*us, 0), "**not met**"},
	} {
		if got := oneClientVerdict(tc.h); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: oneClientVerdict = %q, want it to start with %q", tc.name, got, tc.want)
		}
	}
}

// TestDBTargets checks that the Targets table judges etcd against the Mutex
// and PostgreSQL against the bare lease row at 1 and 16 goroutines, with
// the advisory-lock pair beside it unjudged, and that a ratio just under a
// bound misses it.
func TestDBTargets(t *testing.T) {
	rows := func(kind string, vs map[string][2]float64) []DBRow {
		var out []DBRow
		for _, conc := range []int{1, 16} {
			for _, id := range []string{"leasehold", "mutex", "advisory", "row"} {
				if v, ok := vs[id]; ok && !math.IsNaN(v[conc/16]) {
					out = append(out, DBRow{Kind: kind, Concurrency: conc, ID: id, VsLeasehold: v[conc/16]})
				}
			}
		}
		return out
	}
	r := &Result{
		Config: Config{Sections: []string{SectionEtcd, SectionPostgres}},
		labels: map[string]string{SectionPostgres + "/advisory": "pg_try_advisory_lock + pg_advisory_unlock"},
	}
	for _, tc := range []struct {
		name         string
		etcd, pg     [2]float64
		wantE, wantP string
	}{
		{"both met", [2]float64{0.9, 0.95}, [2]float64{0.95, 1.2}, "**met**", "**met**"},
		{"just under at 16", [2]float64{0.92, 0.8999}, [2]float64{0.96, 0.9499}, "**not met**", "**not met**"},
		{"just under at 1", [2]float64{0.8999, 1}, [2]float64{0.9499, 1}, "**not met**", "**not met**"},
		{"measured at 1 only", [2]float64{1, math.NaN()}, [2]float64{1, math.NaN()}, "**not met**", "**not met**"},
	} {
		s := Summary{
			Etcd: rows(SectionEtcd, map[string][2]float64{"leasehold": {1, 1}, "mutex": tc.etcd}),
			// advisory locks at 2× would fail any judged target: they are not judged
			PG: rows(SectionPostgres, map[string][2]float64{"leasehold": {1, 1}, "advisory": {0.5, 0.4}, "row": tc.pg}),
		}
		var b strings.Builder
		peerTargets(&b, r, s)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: %d target rows, want 2:\n%s", tc.name, len(lines), b.String())
		}
		for i, want := range []string{tc.wantE, tc.wantP} {
			if !strings.HasSuffix(lines[i], "| "+want+" |") {
				t.Errorf("%s: row %q, want the verdict %s", tc.name, lines[i], want)
			}
		}
		if !strings.Contains(lines[1], "a reference, not a target: ÷ pg_try_advisory_lock + pg_advisory_unlock 1: 0.50×, 16: 0.40×") {
			t.Errorf("%s: PostgreSQL row lacks the advisory-lock reference: %q", tc.name, lines[1])
		}
	}
}
