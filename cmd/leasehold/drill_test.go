package main_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/storetest/testserver"
)

// The default drill exits 0 with no violation; with a protection switched
// off it exits 1 and names the violations; --json parses.
func TestDrillCommand(t *testing.T) {
	t.Parallel()
	// The command's contract: the JSON parses, no safety check fails, and
	// the exit code is 0 with no liveness shortfall, 3 with one (timing,
	// which a loaded machine may miss: reported, not asserted).
	r := run(t, "drill", "--time-scale", "1/200", "--jobs", "30", "--json")
	var rep drillJSON
	decode(t, r.stdout, &rep)
	if rep.CriticalSections == 0 {
		t.Fatal("default drill ran no critical section")
	}
	for _, v := range rep.Violations {
		t.Errorf("default drill: safety violation %s: %s", v.Check, v.Detail)
	}
	t.Logf("liveness shortfalls: %+v", rep.Shortfalls)
	if want := min(3*len(rep.Shortfalls), 3); r.code != want || rep.ExitCode != r.code {
		t.Errorf("exit %d (the report says %d) with %d safety violations and %d liveness shortfalls, want %d", r.code, rep.ExitCode, len(rep.Violations), len(rep.Shortfalls), want)
	}

	r = run(t, "drill", "--time-scale", "1/200", "--jobs", "30", "--unsafe-release")
	if r.code != 1 || !strings.Contains(r.stdout, "wrong-owner-release-or-renew") {
		t.Fatalf("drill --unsafe-release: exit %d, want 1 with wrong-owner violations:\n%s", r.code, r.stdout)
	}
	if !strings.Contains(r.stderr, "leasehold: drill found") || !strings.Contains(r.stderr, "safety violations") {
		t.Errorf("drill --unsafe-release: stderr %q does not say it found violations", r.stderr)
	}
	var bad map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &bad); err == nil {
		t.Error("the text report parsed as JSON")
	}
}

func TestDrillBadFlags(t *testing.T) {
	t.Parallel()
	failsWith(t, 2, []string{"--time-scale"}, "drill", "--time-scale", "2")
	failsWith(t, 2, []string{"--time-scale"}, "drill", "--time-scale", "1/0")
	failsWith(t, 2, []string{"workers"}, "drill", "--workers", "1")
	failsWith(t, 2, []string{"--processes", "--jobs-postgres"}, "drill", "--processes", "2")
	failsWith(t, 2, []string{"drill-worker", "drill --processes"}, "drill-worker")
}

// The drill against real servers from the command line: locks in Redis,
// jobs fenced in PostgreSQL.
func TestDrillOnRealServers(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	pg := testserver.StartPostgres(t)
	res := run(t, "drill", "--redis", "redis://"+r.Addr()+"/0", "--jobs-postgres", pg.DSN(), "--time-scale", "1/200", "--jobs", "20", "--json")
	var rep drillJSON
	decode(t, res.stdout, &rep)
	if !strings.HasPrefix(rep.Store, "redis") || rep.Storage != "postgres" || rep.CriticalSections == 0 || !strings.Contains(rep.Cleanup, "no drill key left") {
		t.Fatalf("drill on real servers: %+v", rep)
	}
	for _, v := range rep.Violations {
		t.Errorf("safety violation %s: %s", v.Check, v.Detail)
	}
	t.Logf("liveness shortfalls (timing, not asserted): %+v", rep.Shortfalls)
}

// drill --processes: the workers are separate processes of this binary
// (drill-worker), on a real Redis and PostgreSQL.
func TestDrillWorkerProcesses(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	pg := testserver.StartPostgres(t)
	res := run(t, "drill", "--processes", "4", "--redis", "redis://"+r.Addr()+"/0", "--jobs-postgres", pg.DSN(),
		"--time-scale", "1/200", "--jobs", "20", "--json")
	var rep drillJSON
	decode(t, res.stdout, &rep)
	if rep.Workers != 4 || rep.CriticalSections == 0 {
		t.Fatalf("drill --processes 4: %+v\nstderr: %s", rep, res.stderr)
	}
	if rep.Effects["pause-past-ttl"]+rep.Effects["kill-holder"] == 0 {
		t.Errorf("no worker process was stopped or killed: %+v", rep.Effects)
	}
	for _, v := range rep.Violations {
		t.Errorf("safety violation %s: %s", v.Check, v.Detail)
	}
	t.Logf("liveness shortfalls (timing, not asserted): %+v", rep.Shortfalls)

	// The negative control with worker processes: stale writes get through
	// and the drill says so.
	res = run(t, "drill", "--processes", "4", "--redis", "redis://"+r.Addr()+"/0", "--jobs-postgres", pg.DSN(),
		"--time-scale", "1/200", "--jobs", "20", "--no-fencing")
	if res.code != 1 || !strings.Contains(res.stdout, "stale-write-accepted") || !strings.Contains(res.stdout, "history-not-linearizable") {
		t.Fatalf("drill --processes 4 --no-fencing: exit %d, want 1 with stale writes and a non-linearizable history:\n%s", res.code, res.stdout)
	}
}

// --report writes the HTML page after the drill, also when it found
// violations; a path that cannot be created is a usage error before
// anything runs.
func TestDrillHTMLReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "drill.html")
	r := run(t, "drill", "--time-scale", "1/200", "--jobs", "60", "--no-fencing", "--report", path)
	if r.code != 1 {
		t.Fatalf("drill --no-fencing --report: exit %d, want 1 (violations); stderr:\n%s", r.code, r.stderr)
	}
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<svg id="timeline"`, `class="lane"`, `class="hold"`, `id="violations"`, "stale-write-accepted</strong>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the %d-byte page lacks %q", len(page), want)
		}
	}

	for _, bad := range []string{filepath.Join(dir, "missing", "drill.html"), dir} {
		res := failsWith(t, 2, []string{"--report"}, "drill", "--jobs", "1000", "--report", bad)
		if res.stdout != "" {
			t.Errorf("drill --report %s: the drill ran, stdout:\n%s", bad, res.stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a bad --report path left something behind: %v", err)
	}

	// A drill that fails leaves a report already there as it was, and no
	// temporary file beside it.
	for _, args := range [][]string{
		{"--processes", "3"},                           // usage: no shared store
		{"--jobs-postgres", "postgres://%zz@h/db"},     // usage: a DSN that does not parse
		{"--redis", "redis://" + closedAddr(t) + "/0"}, // the store cannot be reached
	} {
		if err := os.WriteFile(path, []byte("the last report"), 0o644); err != nil {
			t.Fatal(err)
		}
		res := run(t, append([]string{"drill", "--report", path}, args...)...)
		if res.code == 0 {
			t.Fatalf("drill %q: exit 0", args)
		}
		if page, err := os.ReadFile(path); err != nil || string(page) != "the last report" {
			t.Errorf("drill %q (exit %d) changed the report already there: %q, %v", args, res.code, page, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("drill %q left %d files in the report's directory, want 1", args, len(entries))
		}
	}
}
