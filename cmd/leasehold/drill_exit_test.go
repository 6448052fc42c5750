package main_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/pgstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// verdict is the summary's verdict line, without its label.
func verdict(summary string) string {
	for line := range strings.Lines(summary) {
		if rest, ok := strings.CutPrefix(line, "verdict "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// The drill's exit code tells liveness from safety: 3 for a missed takeover
// SLO alone, 0 when every check held, 2 for a bad --takeover-slo.
func TestDrillExitCodes(t *testing.T) {
	t.Parallel()
	r := run(t, "drill", "--time-scale", "1/200", "--jobs", "20", "--takeover-slo", "1ms")
	if r.code != 3 || verdict(r.stdout) != "safe; takeover SLO missed (exit 3)" {
		t.Fatalf("drill --takeover-slo 1ms: exit %d, verdict %q, want 3; stdout:\n%s\nstderr:\n%s", r.code, verdict(r.stdout), r.stdout, r.stderr)
	}
	if last := lastLine(r.stderr); !strings.HasPrefix(last, "leasehold: drill: every safety check held; liveness shortfalls: takeover p99 ") {
		t.Errorf("drill --takeover-slo 1ms: last stderr line %q", last)
	}

	// A generous SLO: nothing but a safety violation could fail the run.
	r = run(t, "drill", "--time-scale", "1/200", "--jobs", "20", "--takeover-slo", "1m")
	if r.code != 0 || verdict(r.stdout) != "safe (exit 0)" {
		t.Fatalf("drill --takeover-slo 1m: exit %d, verdict %q, want 0; stdout:\n%s\nstderr:\n%s", r.code, verdict(r.stdout), r.stdout, r.stderr)
	}
	// Piped progress: whole lines, no carriage returns, the last one at the end.
	if strings.Contains(r.stderr, "\r") || !strings.HasSuffix(r.stderr, "\n") || !strings.HasPrefix(lastLine(r.stderr), "drill: 20/20 jobs done") {
		t.Errorf("piped progress is not plain lines ending with the final count: %q", r.stderr)
	}

	r = run(t, "drill", "--time-scale", "1/200", "--jobs", "5", "--takeover-slo", "1m", "--quiet")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("drill --quiet: exit %d, stderr %q; want 0 and no progress", r.code, r.stderr)
	}

	for _, bad := range []string{"0", "-1s", "soon"} {
		failsWith(t, 2, []string{"--takeover-slo"}, "drill", "--takeover-slo", bad)
	}
}

// lastLine is s's last non-empty line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// A drill on Redis removes the locks and fence keys it created, and says
// so; a lock of someone else's in the same Redis is left alone.
func TestDrillCleansUpRedis(t *testing.T) {
	t.Parallel()
	url, rc, client := startRedis(t)
	other := acquire(t, client, "app:other", 10*time.Minute)
	r := run(t, "drill", "--redis", url, "--time-scale", "1/200", "--jobs", "20", "--takeover-slo", "1m", "--quiet")
	if r.code != 0 {
		t.Fatalf("drill --redis: exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "no drill key left") {
		t.Errorf("the summary does not say the keys were removed:\n%s", r.stdout)
	}
	keys, err := rc.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if strings.Contains(k, "drill:") {
			t.Errorf("the drill left %q (all keys: %q)", k, keys)
		}
	}
	if info, err := client.Store().Inspect(context.Background(), "app:other"); err != nil || !info.Held || other.Fence() != info.Fence {
		t.Errorf("another application's lock: %+v, %v", info, err)
	}
}

// On etcd and PostgreSQL, whose fences outlive their locks and cannot be
// deleted through the lock store, the drill releases its locks and prints
// the command that removes the rest; that command leaves no drill key.
func TestDrillCleanupInstructions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartEtcd(t)
		ec, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ec.Close() })
		r := run(t, "drill", "--etcd", strings.Join(srv.Endpoints(), ","), "--jobs", "10", "--takeover-slo", "1m", "--quiet", "--json")
		var rep struct{ Cleanup string }
		decode(t, r.stdout, &rep)
		m := regexp.MustCompile(`etcdctl del --prefix '([^']+)'`).FindStringSubmatch(rep.Cleanup)
		if r.code != 0 || m == nil {
			t.Fatalf("drill --etcd: exit %d, cleanup %q; stderr:\n%s", r.code, rep.Cleanup, r.stderr)
		}
		if got := drillKeys(t, ec); len(got) != 11 || !strings.HasPrefix(got[0], m[1]) {
			t.Fatalf("after the drill, want its 10 job fence keys and its run lock's under %q, got %q", m[1], got)
		}
		if _, err := ec.Delete(ctx, m[1], clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		if got := drillKeys(t, ec); len(got) != 0 {
			t.Errorf("the printed command leaves %q", got)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		srv := testserver.StartPostgres(t)
		migratedStore(t, srv.DSN()) // the drill, as an application, needs pgstore's table
		r := run(t, "drill", "--postgres", srv.DSN(), "--time-scale", "1/200", "--jobs", "10", "--takeover-slo", "1m", "--quiet", "--json")
		var rep struct{ Cleanup string }
		if r.code != 0 {
			t.Fatalf("drill --postgres: exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		decode(t, r.stdout, &rep)
		m := regexp.MustCompile(`psql "\$DSN" -c ('(?:[^']|'\\'')*')`).FindStringSubmatch(rep.Cleanup)
		if r.code != 0 || m == nil {
			t.Fatalf("drill --postgres: exit %d, cleanup %q; stderr:\n%s", r.code, rep.Cleanup, r.stderr)
		}
		// The statement as the shell passes it to psql.
		unquoted, err := exec.Command("sh", "-c", "printf %s "+m[1]).Output()
		if err != nil {
			t.Fatalf("sh on the printed statement %s: %v", m[1], err)
		}
		m[1] = string(unquoted)
		pool, err := pgxpool.New(ctx, srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		count := func(cond string) (n int) {
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgstore.DefaultTable+" WHERE "+cond).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if held := count("key LIKE 'drill:%' AND token IS NOT NULL AND expires_at > now()"); held != 0 {
			t.Errorf("%d drill locks still held after the drill", held)
		}
		if _, err := pool.Exec(ctx, m[1]); err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		if left := count("key LIKE 'drill:%'"); left != 0 {
			t.Errorf("the printed command leaves %d rows", left)
		}
	})
}

// drillKeys lists every etcd key that names a drill job.
func drillKeys(t *testing.T, ec *clientv3.Client) []string {
	t.Helper()
	resp, err := ec.Get(context.Background(), "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), "drill:") {
			keys = append(keys, string(kv.Key))
		}
	}
	return keys
}

// On a terminal (script(1) gives the drill one) progress is redrawn in
// place with carriage returns.
func TestDrillProgressOnATerminal(t *testing.T) {
	t.Parallel()
	script, err := exec.LookPath("script")
	if err != nil {
		// script(1) is in Debian's essential bsdutils: missing in CI is a broken machine.
		if os.Getenv("CI") != "" {
			t.Fatal("no script(1) to run the drill on a terminal")
		}
		t.Skip("no script(1) to run the drill on a terminal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// stdout to /dev/null: what the terminal shows is the progress on stderr.
	line := "'" + bin + "' drill --time-scale 1/200 --jobs 5 --takeover-slo 1m >/dev/null"
	out, err := exec.CommandContext(ctx, script, "-qec", line, "/dev/null").Output()
	if err != nil {
		t.Fatalf("script -qec %q: %v\n%q", line, err, out)
	}
	if !strings.Contains(string(out), "\rdrill: ") || !strings.Contains(string(out), "drill: 5/5 jobs done") {
		t.Errorf("progress on a terminal is not redrawn in place: %q", out)
	}
}

// A second drill on a store where one runs is refused at once, naming the
// first one's holder, and takes no job lock.
func TestDrillRefusesASecondDrill(t *testing.T) {
	t.Parallel()
	url, rc, client := startRedis(t)
	first := leasehold.New(client.Store(), leasehold.WithIdentity("first-drill:41"))
	defer first.Close()
	l := acquire(t, first, "drill:run", time.Minute)
	failsWith(t, 1, []string{"another drill is running", "first-drill:41"},
		"drill", "--redis", url, "--jobs", "5", "--quiet")
	keys, err := rc.Keys(context.Background(), "drill:jobs:*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("the refused drill took job locks: %q, %v", keys, err)
	}
	if info, _ := client.Store().Inspect(context.Background(), "drill:run"); !info.Held || info.Token != l.Token() {
		t.Fatalf("the refused drill touched the first one's run lock: %+v", info)
	}
}

// A drill on a PostgreSQL without pgstore's table fails at once, saying so,
// instead of retrying every acquire until its timeout.
func TestDrillPostgresWithoutTable(t *testing.T) {
	t.Parallel()
	srv := testserver.StartPostgres(t)
	start := time.Now()
	failsWith(t, 1, []string{"drill:run", `"leasehold_leases" does not exist`, "Migrate"},
		"drill", "--postgres", srv.DSN(), "--jobs", "5", "--quiet")
	t.Logf("refused after %v", time.Since(start).Round(time.Millisecond))
}

// Jobs left undone when --drill-timeout ends the drill are a liveness
// shortfall, like a missed takeover SLO: exit 3, "safe", the safety line 0
// and the shortfall listed under the liveness line; never UNSAFE.
func TestDrillUnfinishedJobsAreLiveness(t *testing.T) {
	t.Parallel()
	r := run(t, "drill", "--jobs", "10000", "--drill-timeout", "2s", "--takeover-slo", "1m", "--quiet")
	t.Logf("drill --jobs 10000 --drill-timeout 2s:\n%s", r.stdout)
	if r.code != 3 || verdict(r.stdout) != "safe; jobs unfinished (exit 3)" {
		t.Fatalf("drill that ran out of time: exit %d, verdict %q; want 3, safe; jobs unfinished\nstderr: %s", r.code, verdict(r.stdout), r.stderr)
	}
	if got := summaryLine(r.stdout, "safety violations"); got != "0" {
		t.Errorf("safety violations line %q, want 0", got)
	}
	if got := summaryLine(r.stdout, "liveness shortfalls"); got != "1" {
		t.Errorf("liveness shortfalls line %q, want 1", got)
	}
	if _, after, _ := strings.Cut(r.stdout, "liveness shortfalls"); !strings.Contains(after, "  jobs-unfinished ") {
		t.Errorf("jobs-unfinished is not listed under the liveness line:\n%s", r.stdout)
	}
	if last := lastLine(r.stderr); !strings.Contains(last, "every safety check held; liveness shortfalls: ") || !strings.Contains(last, "of 10000 jobs not done") {
		t.Errorf("last stderr line %q", last)
	}
}

// summaryLine is the value of the summary's line labelled label.
func summaryLine(summary, label string) string {
	for line := range strings.Lines(summary) {
		if rest, ok := strings.CutPrefix(line, label+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// The summary blocks of the README and docs/drill.md show lines the drill
// prints, with the same labels, and the line they tell readers to check
// ("safety violations", which must be 0) is the safety line; drill --help
// names both lines.
func TestDrillSummaryMatchesDocs(t *testing.T) {
	t.Parallel()
	r := run(t, "drill", "--time-scale", "1/200", "--jobs", "5", "--takeover-slo", "1m", "--quiet")
	if r.code != 0 {
		t.Fatalf("drill: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	printed := map[string]bool{}
	for line := range strings.Lines(r.stdout) {
		if label, _, ok := strings.Cut(strings.TrimSpace(line), "  "); ok {
			printed[label] = true
		}
	}
	for _, doc := range []string{"../../README.md", "../../docs/drill.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, block, found := strings.Cut(string(b), "```\nlocks ")
		block, _, _ = strings.Cut(block, "```")
		if !found {
			t.Fatalf("%s has no drill summary block", doc)
		}
		labels := 0
		for line := range strings.Lines("locks " + block) {
			label, _, ok := strings.Cut(strings.TrimSpace(line), "  ")
			if !ok || strings.HasPrefix(label, "…") {
				continue
			}
			// The sub-rows of ops and faults depend on the run; the others must be printed.
			if !printed[label] && !strings.HasPrefix(line, "  ") {
				t.Errorf("%s's summary shows a line %q the drill does not print:\n%s", doc, label, r.stdout)
			}
			labels++
		}
		if labels < 8 {
			t.Errorf("%s's summary block has %d lines", doc, labels)
		}
		for _, want := range []string{"safety violations      0", "liveness shortfalls    0", "verdict                safe (exit 0)"} {
			if !strings.Contains(block, want) {
				t.Errorf("%s's summary block lacks %q", doc, want)
			}
		}
		if strings.Contains(block, "\nviolations") || !strings.Contains(string(b), "`safety violations` must be 0") {
			t.Errorf("%s does not tell readers that `safety violations` must be 0", doc)
		}
	}
	help := ok(t, "drill", "--help")
	for _, want := range []string{`"safety violations" line`, `"liveness shortfalls" line`, "3: a liveness shortfall"} {
		if !strings.Contains(help, want) {
			t.Errorf("drill --help does not say %q", want)
		}
	}
}
