package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusesBadFlags checks that bad input fails at once, before any
// measuring and without touching the network.
func TestRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "1"}, "--workers 1"},
		{[]string{"--concurrency", "1,x"}, "--concurrency"},
		{[]string{"--rounds", "0"}, "--rounds 0"},
		{[]string{"--duration", "1ms"}, "--duration 1ms"},
		{[]string{"--redis", "redis://10.1.2.3:6379"}, "not a loopback address"},
		{[]string{"--out", filepath.Join(t.TempDir(), "missing", "b.md")}, "does not exist"},
		{[]string{"stray"}, "unexpected arguments"},
		{[]string{"--only", "scale,bogus"}, `--only "bogus"`},
		{[]string{"--only", ""}, "--only"},
		{[]string{"--scale-leases", "0"}, "--scale-leases 0"},
		{[]string{"--scale-ttl", "10ms"}, "--scale-ttl 10ms"},
		{[]string{"--db-concurrency", "0"}, "--db-concurrency 0"},
		{[]string{"--db-concurrency", "a"}, "--db-concurrency"},
	} {
		err := run(t.Context(), append(tc.args, "--quiet"), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestNewSectionsTiny runs the sections of issue 18 (processes, etcd,
// postgres) at tiny scale through the command's flags, on servers it starts,
// and checks that the report has their tables.
func TestNewSectionsTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, etcd and PostgreSQL")
	}
	md := tinyReport(t, "--only", "processes,etcd,postgres", "--db-concurrency", "1,2")
	for _, want := range []string{
		"## 6. Contended hand-off with a client per worker", "| 3 | leasehold, a Client per worker |",
		"| 3 | rueidislock, a Locker per worker |", "| 3 | redislock, a client per worker",
		"## 7. FIFO", "| 30 ms | leasehold, a Client per worker | 1 |", "| 1 ms | rueidislock, a Locker per worker | 1 |",
		"## 8. etcd", "| 2 | concurrency.Mutex |", "## 9. PostgreSQL", "| 2 | pg_try_advisory_lock + pg_advisory_unlock |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "NaN") {
		t.Errorf("report has NaN:\n%s", md)
	}
}

// TestReplicasSectionTiny runs the replicas section at tiny scale on the
// primary and replica it starts, and checks its table: both contenders at
// each concurrency and worker count.
func TestReplicasSectionTiny(t *testing.T) {
	md := tinyReport(t, "--only", "replicas", "--concurrency", "1,4")
	for _, want := range []string{"## 10. Replica acknowledgement", "| cycles | 1 |", "| cycles | 4 |", "| hand-off | 3 |", "WithoutReplicaAcks"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "NaN") || strings.Contains(md, "| – |") {
		t.Errorf("report has a missing figure:\n%s", md)
	}
}

// tinyReport runs the command at tiny scale (one round, no warm-up, short
// cells, 3 workers) with args, and returns its report.
func tinyReport(t *testing.T, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "b.md")
	args = append([]string{"--quiet", "--rounds", "1", "--warmup", "0", "--duration", "30ms", "--handoff-duration", "60ms",
		"--workers", "3", "--out", out}, args...)
	if err := run(t.Context(), args, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
