package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bin is the leasehold binary built from this package by TestMain: the tests
// run the real command as an operator would.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "leasehold")
		build := exec.Command(goTool(), "build", "-o", bin, ".")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the leasehold binary: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// goTool is the go command of the toolchain running the tests.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// loadSlack is the room each timing bound of these tests leaves for a
// loaded machine: on 2 cores at load average 16 this 100 MB binary takes
// seconds to start, and its timers fire late. The bounds tell a command that
// stops from one that waits for --timeout or forever; the times are logged.
const loadSlack = 8 * time.Second

// result is what one run of the binary did.
type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// run runs the binary with args, without the test process's LEASEHOLD_*
// variables; a run is given a minute at most.
func run(t *testing.T, args ...string) result {
	t.Helper()
	return runEnv(t, nil, args...)
}

// ok runs the binary and fails the test unless it exits 0 with nothing on
// stderr.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	r := run(t, args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("leasehold %q: exit %d, stderr %q, stdout:\n%s", args, r.code, r.stderr, r.stdout)
	}
	return r.stdout
}

// failsWith runs the binary and checks that it exits with code, prints
// nothing on stdout and exactly one line on stderr, prefixed "leasehold: "
// and containing every one of want.
func failsWith(t *testing.T, code int, want []string, args ...string) result {
	t.Helper()
	r := run(t, args...)
	if r.code != code {
		t.Errorf("leasehold %q: exit %d, want %d (stderr %q)", args, r.code, code, r.stderr)
	}
	checkOneLine(t, r.stderr, args)
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("leasehold %q: stderr %q does not say %q", args, r.stderr, w)
		}
	}
	return r
}

// checkOneLine checks that stderr is one line starting with "leasehold: ".
func checkOneLine(t *testing.T, stderr string, args []string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "leasehold: ") || !strings.HasSuffix(stderr, "\n") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("leasehold %q: stderr is not one line starting with \"leasehold: \": %q", args, stderr)
	}
}

// lockJSON is the JSON object of inspect and of ls's array elements.
type lockJSON struct {
	Key        string  `json:"key"`
	Held       bool    `json:"held"`
	Holder     string  `json:"holder"`
	Token      string  `json:"token"`
	TTLSeconds float64 `json:"ttl_seconds"`
	Fence      int64   `json:"fence"`
	Namespace  string  `json:"namespace"`
	Class      string  `json:"class"`
	Store      string  `json:"store"`
}

// testHolder is the holder identity of the leases this test process takes.
var testHolder = func() string {
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid())
}()

// short is a token as inspect and ls show it without --show-token.
func short(tok string) string { return tok[:10] + "…" }

// decode unmarshals out (which must be JSON) into v.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
}

// fields parses inspect's text: "name  value" lines.
func fields(t *testing.T, out string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		name, value, found := strings.Cut(line, " ")
		if !found {
			t.Fatalf("inspect line %q has no value", line)
		}
		m[name] = strings.TrimSpace(value)
	}
	return m
}

// tableKeys returns the KEY column of ls's table, checking its header.
func tableKeys(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "KEY NAMESPACE CLASS TTL FENCE HOLDER TOKEN" {
		t.Fatalf("ls header is %q\n%s", lines[0], out)
	}
	var keys []string
	for _, l := range lines[1:] {
		keys = append(keys, strings.Fields(l)[0])
	}
	return keys
}

func TestVersion(t *testing.T) {
	if out := ok(t, "version"); !strings.HasPrefix(out, "leasehold ") || !strings.Contains(out, "go1.") {
		t.Errorf("version printed %q", out)
	}
}
