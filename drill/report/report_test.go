package report_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/drill/check"
	"github.com/leasehold/leasehold/drill/history"
	"github.com/leasehold/leasehold/drill/report"
)

// A superseded lease's release succeeds: an illegal history on key.
const key = "jobs:1"

func illegalHistory() history.History {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	return history.History{Started: t0, Ops: []history.Op{
		{Kind: history.OpAcquire, Worker: 0, Key: key, Fence: 1, Call: at(0), Return: at(1), OK: true},
		{Kind: history.OpAcquire, Worker: 1, Key: key, Fence: 2, Call: at(10), Return: at(11), OK: true},
		{Kind: history.OpRelease, Worker: 0, Key: key, Fence: 1, Call: at(12), Return: at(13), OK: true},
	}}
}

// The report carries the linearizability result, a line in the summary,
// and the violation.
func TestReportLinearize(t *testing.T) {
	h := illegalHistory()
	lin := check.Linearize(h, check.DefaultLinearizeTimeout)
	rep := &report.Report{}
	rep.Fill(h, check.Result{Violations: lin.Violations, Linearization: lin})
	if rep.Linearizable != check.LinearizableIllegal || rep.LinearizeOps != 3 || rep.Safe() || len(rep.Visualization) == 0 {
		t.Fatalf("result %s on %d ops, safe %v, %d-byte visualization; want illegal on 3, unsafe, a page",
			rep.Linearizable, rep.LinearizeOps, rep.Safe(), len(rep.Visualization))
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"illegal (3 ops, checked in ", check.NotLinearizable + "  1 (first: " + key} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	// Listed under the safety line, above the liveness one.
	_, safety, _ := strings.Cut(out.String(), report.LabelSafety)
	if safety, _, _ = strings.Cut(safety, report.LabelLiveness); !strings.Contains(safety, check.NotLinearizable) {
		t.Errorf("%s is not listed under %q:\n%s", check.NotLinearizable, report.LabelSafety, out.String())
	}
}

// WriteJSON writes the figures and the violations, not the history or
// porcupine's page.
func TestWriteJSON(t *testing.T) {
	h := illegalHistory()
	rep := &report.Report{Store: "memory", TTL: time.Second}
	rep.Fill(h, check.Run(check.Input{History: h, TTL: time.Second}))
	var out strings.Builder
	if err := rep.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if got["store"] != "memory" || got["ttl_seconds"] != 1.0 || got["linearizable"] != check.LinearizableIllegal {
		t.Errorf("JSON %s", out.String())
	}
	if vs, _ := got["safety_violations"].([]any); len(vs) == 0 {
		t.Errorf("no safety violations in %s", out.String())
	}
	for _, k := range []string{"duration_seconds", "takeover_p50_seconds", "takeover_p99_seconds", "takeover_slo_seconds", "linearize_seconds"} {
		if _, ok := got[k].(float64); !ok {
			t.Errorf("no number %s in %s", k, out.String())
		}
	}
	for k := range got {
		if strings.HasSuffix(k, "_ns") || k == "TTL" || k == "Duration" {
			t.Errorf("the JSON carries %s: durations are *_seconds", k)
		}
	}
	for _, k := range []string{"History", "Visualization"} {
		if _, ok := got[k]; ok {
			t.Errorf("the JSON carries %s", k)
		}
	}
}

// A safe run's JSON has "safety_violations": [], "liveness_shortfalls": []
// and its figures as {}, never null: the CLI's -o json promises [] for an
// empty list.
func TestWriteJSONEmptyIsNotNull(t *testing.T) {
	var out strings.Builder
	if err := (&report.Report{Store: "memory"}).WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	for _, k := range []string{"safety_violations", "liveness_shortfalls"} {
		if vs, ok := got[k].([]any); !ok || len(vs) != 0 {
			t.Errorf("%s = %#v, want []", k, got[k])
		}
	}
	for _, k := range []string{"ops", "faults", "effects"} {
		if m, ok := got[k].(map[string]any); !ok || len(m) != 0 {
			t.Errorf("%s = %#v, want {}", k, got[k])
		}
	}
}

// The verdict tells safety from liveness: any safety violation is exit 1
// whatever else failed; a liveness shortfall alone (the takeover SLO, jobs
// unfinished) exit 3 and "safe"; none exit 0. The summary's safety line
// counts safety violations only, and the liveness line the shortfalls.
func TestVerdict(t *testing.T) {
	slo := check.Violation{Check: check.Takeover, Detail: "p99 over"}
	unfinished := check.Violation{Check: check.Unfinished, Detail: "1 of 10000 jobs not done"}
	stale := check.Violation{Check: check.StaleWrite, Detail: "stale"}
	unknown := check.Violation{Check: check.LinearizeUnknown, Detail: "timeout"}
	unreadable := check.Violation{Check: check.HistoryUnreadable, Detail: "log lost"}
	for _, c := range []struct {
		safety, liveness []check.Violation
		code             int
		verdict          string
		interrupted      bool
	}{
		{nil, nil, report.ExitSafe, "safe (exit 0)", false},
		{nil, []check.Violation{slo}, report.ExitSLOMissed, "safe; takeover SLO missed (exit 3)", false},
		{nil, []check.Violation{unfinished}, report.ExitSLOMissed, "safe; jobs unfinished (exit 3)", false},
		{nil, []check.Violation{unfinished, slo}, report.ExitSLOMissed, "safe; jobs unfinished, takeover SLO missed (exit 3)", false},
		{[]check.Violation{stale}, []check.Violation{slo}, report.ExitUnsafe, "UNSAFE (exit 1)", false},
		{[]check.Violation{unknown}, nil, report.ExitUnsafe, "UNSAFE (exit 1)", false},
		{[]check.Violation{unreadable}, []check.Violation{unfinished}, report.ExitUnsafe, "UNSAFE (exit 1)", false},
		// Stopped by its caller: the jobs left undone are no shortfall,
		// and a violation found still makes it unsafe.
		{nil, []check.Violation{unfinished}, report.ExitInterrupted, "safe as far as it ran; interrupted (exit 1)", true},
		{[]check.Violation{stale}, []check.Violation{unfinished}, report.ExitUnsafe, "UNSAFE (exit 1)", true},
	} {
		rep := &report.Report{Violations: c.safety, Shortfalls: c.liveness, Interrupted: c.interrupted}
		var text, js strings.Builder
		if err := rep.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Verdict  string            `json:"verdict"`
			ExitCode int               `json:"exit_code"`
			Safety   []check.Violation `json:"safety_violations"`
			Liveness []check.Violation `json:"liveness_shortfalls"`
		}
		if err := json.Unmarshal([]byte(js.String()), &got); err != nil {
			t.Fatal(err)
		}
		if rep.ExitCode() != c.code || got.ExitCode != c.code || verdictLine(text.String()) != c.verdict || got.Verdict+" (exit "+strconv.Itoa(c.code)+")" != c.verdict {
			t.Errorf("%v, %v: exit %d (JSON %d, %q), want %d, %q; summary:\n%s", c.safety, c.liveness, rep.ExitCode(), got.ExitCode, got.Verdict, c.code, c.verdict, text.String())
		}
		if len(got.Safety) != len(c.safety) || len(got.Liveness) != len(c.liveness) {
			t.Errorf("%v, %v: JSON has %d safety violations and %d liveness shortfalls", c.safety, c.liveness, len(got.Safety), len(got.Liveness))
		}
		if n := summaryCount(text.String(), report.LabelSafety); n != len(c.safety) {
			t.Errorf("%v, %v: the summary's %q line says %d:\n%s", c.safety, c.liveness, report.LabelSafety, n, text.String())
		}
		if n := summaryCount(text.String(), report.LabelLiveness); n != len(c.liveness) {
			t.Errorf("%v, %v: the summary's %q line says %d:\n%s", c.safety, c.liveness, report.LabelLiveness, n, text.String())
		}
		// Each shortfall is listed under the liveness line, not the safety one.
		_, liveness, _ := strings.Cut(text.String(), report.LabelLiveness)
		for _, v := range c.liveness {
			if !strings.Contains(liveness, "  "+v.Check+" ") {
				t.Errorf("%s is not listed under %q:\n%s", v.Check, report.LabelLiveness, text.String())
			}
		}
	}
}

// summaryCount is the number on the summary's line labelled label; -1 when
// there is none.
func summaryCount(summary, label string) int {
	for line := range strings.Lines(summary) {
		if rest, ok := strings.CutPrefix(line, label+" "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(rest))
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// The takeover SLO is TTL + one renewal interval unless given.
func TestTakeoverSLO(t *testing.T) {
	h := illegalHistory()
	if got := check.Run(check.Input{History: h, TTL: 3 * time.Second}).Takeovers.SLO; got != 4*time.Second {
		t.Errorf("default SLO %v, want 4s", got)
	}
	if got := check.Run(check.Input{History: h, TTL: 3 * time.Second, TakeoverSLO: time.Millisecond}).Takeovers.SLO; got != time.Millisecond {
		t.Errorf("SLO %v, want 1ms", got)
	}
}

// verdictLine is the summary's verdict, without its label.
func verdictLine(summary string) string {
	for line := range strings.Lines(summary) {
		if rest, ok := strings.CutPrefix(line, "verdict "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}
