package main_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestNumericFlagBounds: just past a bound, exit 2 naming the flag; at it,
// accepted, so the run fails later (closed port: exit 1; drill: its bad --report).
func TestNumericFlagBounds(t *testing.T) {
	t.Parallel()
	closedPG := "postgres://postgres@" + closedAddr(t) + "/postgres?sslmode=disable"
	badReport := filepath.Join(t.TempDir(), "missing", "drill.html")
	metrics := "http://" + closedAddr(t) + "/metrics"

	type bound struct {
		value string
		ok    bool // at the bound: accepted
	}
	for _, tc := range []struct {
		flag   string
		base   []string // the command line before flag and its value
		bounds []bound
	}{
		{"--timeout", []string{"inspect", "--postgres", closedPG, "k"},
			[]bound{{"-1s", false}, {"0s", false}, {"1ns", true}, {"10m", true}, {"10m0.000000001s", false}}},
		{"--limit", []string{"ls", "--postgres", closedPG, "*"},
			[]bound{{"-1", false}, {"0", false}, {"1", true}, {"100000", true}, {"100001", false}}},
		{"--page-size", []string{"ls", "--postgres", closedPG, "*"},
			[]bound{{"0", false}, {"1", true}, {"10000", true}, {"10001", false}}},
		{"--workers", []string{"drill", "--report", badReport},
			[]bound{{"-1", false}, {"0", false}, {"1", false}, {"2", true}, {"1000", true}, {"1001", false}}},
		{"--jobs", []string{"drill", "--report", badReport},
			[]bound{{"-1", false}, {"0", false}, {"1", true}, {"10000", true}, {"10001", false}}},
		{"--processes", []string{"drill", "--report", badReport},
			[]bound{{"-1", false}, {"0", true}, {"1", false}, {"2", true}, {"16", true}, {"17", false}}},
		{"--drill-timeout", []string{"drill", "--report", badReport},
			[]bound{{"-1s", false}, {"0s", false}, {"1ns", true}, {"24h", true}, {"24h0m0.000000001s", false}}},
		{"--time-scale", []string{"drill", "--report", badReport},
			[]bound{{"0", false}, {"-1/100", false}, {"1/10001", false}, {"1/10000", true}, {"0.0001", true}, {"1", true}, {"1.0001", false}, {"NaN", false}, {"1/NaN", false}, {"Inf", false}, {"-1/-100", false}, {"+1/100", false}, {"1/+100", false}, {"1/-100", false}, {"0x1p-7", false}, {" 1 / 100 ", true}}},
		{"--exec-p99", []string{"ttl", "--jitter", "0s", "--guard", "0s"},
			[]bound{{"-1s", false}, {"0s", false}, {"999us", false}, {"1ms", true}, {"24h", true}, {"24h0m0.000000001s", false}}},
		{"--jitter", []string{"ttl", "--exec-p99", "1ms", "--guard", "0s"},
			[]bound{{"-1ns", false}, {"0s", true}, {"23h59m59.999s", true}, {"24h", false}, {"24h0m0.000000001s", false}}},
		{"--guard", []string{"ttl", "--exec-p99", "1ms", "--jitter", "0s"},
			[]bound{{"-1ns", false}, {"0s", true}, {"23h59m59.999s", true}, {"24h", false}, {"24h0m0.000000001s", false}}},
		{"--retry", []string{"ttl", "--exec-p99", "1s", "--jitter", "0s", "--guard", "0s"},
			[]bound{{"-1ns", false}, {"0s", true}, {"24h", true}, {"24h0m0.000000001s", false}}},
		{"--slo", []string{"ttl", "--exec-p99", "1s", "--jitter", "0s", "--guard", "0s"},
			[]bound{{"-1ns", false}, {"0s", true}, {"24h", true}, {"24h0m0.000000001s", false}}},
		{"--quantile", []string{"ttl", "--from", metrics, "--namespace", "runs", "--jitter", "0s", "--guard", "0s"},
			[]bound{{"0", false}, {"-0.5", false}, {"0.000001", true}, {"1", true}, {"1.000001", false}, {"NaN", false}}},
	} {
		for _, b := range tc.bounds {
			args := append(slices.Clone(tc.base), tc.flag, b.value)
			t.Run(tc.flag+"="+b.value, func(t *testing.T) {
				t.Parallel()
				r := run(t, args...)
				if r.code != 0 {
					checkOneLine(t, r.stderr, args)
				}
				isDrill := args[0] == "drill"
				switch {
				case !b.ok && (r.code != 2 || !strings.Contains(r.stderr, tc.flag)):
					t.Errorf("leasehold %q: exit %d, stderr %q; want exit 2 naming %s", args, r.code, r.stderr, tc.flag)
				case b.ok && isDrill && (r.code != 2 || !strings.Contains(r.stderr, "--report") || strings.Contains(r.stderr, tc.flag)):
					t.Errorf("leasehold %q: exit %d, stderr %q; want %s accepted and the --report error", args, r.code, r.stderr, tc.flag)
				case b.ok && !isDrill && r.code == 2:
					t.Errorf("leasehold %q: exit 2, stderr %q; want %s accepted", args, r.stderr, tc.flag)
				}
				if r.stdout != "" && (!b.ok || isDrill) {
					t.Errorf("leasehold %q printed on stdout: %q", args, r.stdout)
				}
			})
		}
	}
}
