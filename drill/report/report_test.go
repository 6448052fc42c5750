package report_test

import (
	"encoding/json"
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
	for _, want := range []string{"illegal (3 ops, checked in ", check.NotLinearizable + ": 1 (first: " + key} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
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
	if got["store"] != "memory" || got["ttl_ns"] != float64(time.Second) || got["linearizable"] != check.LinearizableIllegal {
		t.Errorf("JSON %s", out.String())
	}
	if vs, _ := got["violations"].([]any); len(vs) == 0 {
		t.Errorf("no violations in %s", out.String())
	}
	for _, k := range []string{"History", "Visualization"} {
		if _, ok := got[k]; ok {
			t.Errorf("the JSON carries %s", k)
		}
	}
}

// A safe run's JSON has "violations": [] and its figures as {}, never null:
// the CLI's -o json promises [] for an empty list.
func TestWriteJSONEmptyIsNotNull(t *testing.T) {
	var out strings.Builder
	if err := (&report.Report{Store: "memory"}).WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if vs, ok := got["violations"].([]any); !ok || len(vs) != 0 {
		t.Errorf("violations = %#v, want []", got["violations"])
	}
	for _, k := range []string{"ops", "faults", "effects"} {
		if m, ok := got[k].(map[string]any); !ok || len(m) != 0 {
			t.Errorf("%s = %#v, want {}", k, got[k])
		}
	}
}

// The verdict tells safety from the takeover time: any safety violation is
// exit 1 whatever else failed, the takeover SLO alone exit 3, none exit 0.
func TestVerdict(t *testing.T) {
	slo := check.Violation{Check: check.Takeover, Detail: "p99 over"}
	stale := check.Violation{Check: check.StaleWrite, Detail: "stale"}
	unknown := check.Violation{Check: check.LinearizeUnknown, Detail: "timeout"}
	for _, c := range []struct {
		vs      []check.Violation
		code    int
		verdict string
	}{
		{nil, report.ExitSafe, "safe (exit 0)"},
		{[]check.Violation{slo}, report.ExitSLOMissed, "safe; takeover SLO missed (exit 3)"},
		{[]check.Violation{slo, stale}, report.ExitUnsafe, "UNSAFE (exit 1)"},
		{[]check.Violation{unknown}, report.ExitUnsafe, "UNSAFE (exit 1)"},
	} {
		rep := &report.Report{Violations: c.vs}
		var text, js strings.Builder
		if err := rep.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Verdict  string `json:"verdict"`
			ExitCode int    `json:"exit_code"`
		}
		if err := json.Unmarshal([]byte(js.String()), &got); err != nil {
			t.Fatal(err)
		}
		if rep.ExitCode() != c.code || got.ExitCode != c.code || verdictLine(text.String()) != c.verdict || got.Verdict != rep.Verdict() {
			t.Errorf("%v: exit %d (JSON %d, %q), want %d; summary:\n%s", c.vs, rep.ExitCode(), got.ExitCode, got.Verdict, c.code, text.String())
		}
	}
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
