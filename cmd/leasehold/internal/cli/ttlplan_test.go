package cli_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/cli"
)

const s = time.Second

func TestPlanTTL(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   cli.PlanInput
		want cli.Plan // PlanInput is filled in from in
	}{
		{
			name: "brief example, SLO met",
			in:   cli.PlanInput{ExecP99: 18 * s, Jitter: 4 * s, Guard: 2 * s, Retry: s, SLO: 30 * s},
			want: cli.Plan{TTL: 24 * s, RenewInterval: 8 * s, DriftMargin: 2400 * time.Millisecond, LocalDeadline: 21600 * time.Millisecond,
				Takeover: 25 * s, SLOMet: true, MaxExecP99: 23 * s},
		},
		{
			name: "SLO exactly met",
			in:   cli.PlanInput{ExecP99: 18 * s, Jitter: 4 * s, Guard: 2 * s, Retry: s, SLO: 25 * s},
			want: cli.Plan{TTL: 24 * s, RenewInterval: 8 * s, DriftMargin: 2400 * time.Millisecond, LocalDeadline: 21600 * time.Millisecond,
				Takeover: 25 * s, SLOMet: true, MaxExecP99: 18 * s},
		},
		{
			name: "SLO missed: shorter exec p99 would do",
			in:   cli.PlanInput{ExecP99: 18 * s, Jitter: 4 * s, Guard: 2 * s, Retry: s, SLO: 20 * s},
			want: cli.Plan{TTL: 24 * s, RenewInterval: 8 * s, DriftMargin: 2400 * time.Millisecond, LocalDeadline: 21600 * time.Millisecond,
				Takeover: 25 * s, SLOMet: false, MaxExecP99: 13 * s},
		},
		{
			name: "SLO impossible for any exec time",
			in:   cli.PlanInput{ExecP99: s, Jitter: 4 * s, Guard: 2 * s, Retry: 2 * s, SLO: 5 * s},
			want: cli.Plan{TTL: 7 * s, RenewInterval: 7 * s / 3, DriftMargin: 700 * time.Millisecond, LocalDeadline: 6300 * time.Millisecond,
				Takeover: 9 * s, SLOMet: false, MaxExecP99: -3 * s},
		},
		{
			name: "no SLO: nothing to check",
			in:   cli.PlanInput{ExecP99: 50 * s, Jitter: 5 * s, Guard: 5 * s},
			want: cli.Plan{TTL: 60 * s, RenewInterval: 20 * s, DriftMargin: 6 * s, LocalDeadline: 54 * s, Takeover: 60 * s, SLOMet: true},
		},
		{
			name: "leader lease: retry period 2s",
			in:   cli.PlanInput{ExecP99: 6 * s, Jitter: 2 * s, Guard: 2 * s, Retry: 2 * s, SLO: 15 * s},
			want: cli.Plan{TTL: 10 * s, RenewInterval: 10 * s / 3, DriftMargin: s, LocalDeadline: 9 * s, Takeover: 12 * s, SLOMet: true, MaxExecP99: 9 * s},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cli.PlanTTL(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.PlanInput = tc.in
			if got != tc.want {
				t.Errorf("PlanTTL(%+v)\n got %+v\nwant %+v", tc.in, got, tc.want)
			}
			if advice := got.Advice(); (advice == "") != got.SLOMet {
				t.Errorf("Advice() = %q with SLOMet %v", advice, got.SLOMet)
			}
		})
	}
}

func TestPlanAdvice(t *testing.T) {
	p, err := cli.PlanTTL(cli.PlanInput{ExecP99: 18 * s, Jitter: 4 * s, Guard: 2 * s, Retry: s, SLO: 20 * s})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"exec p99 ≤ 13s", "split the work", "relax the SLO to at least 25s"} {
		if !strings.Contains(p.Advice(), want) {
			t.Errorf("Advice() = %q, want it to say %q", p.Advice(), want)
		}
	}
	p, err = cli.PlanTTL(cli.PlanInput{ExecP99: s, Jitter: 4 * s, Guard: 2 * s, Retry: 2 * s, SLO: 5 * s})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Advice(), "no critical section can meet it") {
		t.Errorf("Advice() = %q, want it to say no critical section can meet the SLO", p.Advice())
	}
}

func TestPlanTTLRejects(t *testing.T) {
	for _, tc := range []struct {
		in  cli.PlanInput
		arg string
	}{
		{cli.PlanInput{}, "exec p99"},
		{cli.PlanInput{ExecP99: -s}, "exec p99"},
		{cli.PlanInput{ExecP99: s, Jitter: -s}, "jitter"},
		{cli.PlanInput{ExecP99: s, Guard: -s}, "guard"},
		{cli.PlanInput{ExecP99: s, Retry: -s}, "retry"},
		{cli.PlanInput{ExecP99: s, SLO: -s}, "slo"},
		{cli.PlanInput{ExecP99: 25 * time.Hour}, "exec p99"},
		{cli.PlanInput{ExecP99: 20 * time.Hour, Jitter: 5 * time.Hour}, "ttl"},
		{cli.PlanInput{ExecP99: time.Microsecond}, "ttl"},
	} {
		_, err := cli.PlanTTL(tc.in)
		var ae *leasehold.ArgumentError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("PlanTTL(%+v) = %v, want an ArgumentError for %q", tc.in, err, tc.arg)
		}
	}
}

func TestClassOf(t *testing.T) {
	for key, want := range map[string]string{
		"runs:R1":            cli.ClassPerItem,
		"jobs:J":             cli.ClassPerItem,
		"approvals:7":        cli.ClassPerItem,
		"loops:sweep":        cli.ClassPerLoop,
		"loops:replay":       cli.ClassPerLoop,
		"leader:main":        cli.ClassLeader,
		"tenant-42:anything": cli.ClassPerItem,
		"Leader/snapshot":    cli.ClassLeader,
	} {
		if got := cli.ClassOf(leasehold.DefaultNamespace(key)); got != want {
			t.Errorf("ClassOf(DefaultNamespace(%q)) = %q, want %q", key, got, want)
		}
	}
}
