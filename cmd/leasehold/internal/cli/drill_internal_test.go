package cli

import (
	"bytes"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// A drill worker gets the store's address and the job storage's in its
// environment, never on its command line, which every local user can read;
// its command line has every store option given to the drill; another
// store's variable in the drill's environment is dropped.
func TestDrillWorkersGetAddressesInTheEnvironment(t *testing.T) {
	const pw = "Qx7vZk9wSecret"
	t.Setenv(EnvRedisURL, "redis://stale:Stale1Pw@127.0.0.1:1")
	t.Setenv(EnvEtcdEndpoints, "http://127.0.0.1:2")
	t.Setenv(envDrillJobs, "stale")
	jobs := "postgres://ops:" + pw + "@127.0.0.1:5432/drill"
	for _, tc := range []struct {
		kind, env, addr string
		flags           []string
		options         []string
	}{
		{"redis", EnvRedisURL, "rediss://ops:" + pw + "@127.0.0.1:6379/0",
			[]string{"--tls-ca", "/etc/ca.pem", "--tls-cert=/etc/c.pem", "--tls-key", "/etc/k.pem", "--timeout", "3s"},
			[]string{"--tls-ca=/etc/ca.pem", "--tls-cert=/etc/c.pem", "--tls-key=/etc/k.pem", "--timeout=3s"}},
		{"etcd", EnvEtcdEndpoints, "http://127.0.0.1:2379,http://127.0.0.1:" + pw,
			[]string{"--etcd-prefix", "ops/locks/"}, []string{"--etcd-prefix=ops/locks/"}},
		{"postgres", EnvPostgresDSN, "host=127.0.0.1 user=ops password=" + pw,
			[]string{"--pg-table", "ops_leases"}, []string{"--pg-table=ops_leases"}},
		{"kube", EnvKubeconfig, "/home/ops/" + pw + "/kubeconfig",
			[]string{"--kube-namespace", "ops", "--kube-prefix", "ops-"}, []string{"--kube-namespace=ops", "--kube-prefix=ops-"}},
	} {
		a := &app{stdout: io.Discard, stderr: io.Discard}
		drillCmd, _, err := a.rootCommand().Find([]string{"drill"})
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--" + tc.kind, tc.addr, "--processes", "2", "--jobs-postgres", jobs}, tc.flags...)
		if err := drillCmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		c := a.drillWorkers(drillCmd, "/usr/bin/leasehold", tc.kind, jobs, "drill_jobs")()
		want := append([]string{"/usr/bin/leasehold", "drill-worker", "--jobs-table", "drill_jobs"}, tc.options...)
		if !slices.Equal(c.Args, want) {
			t.Errorf("%s: worker command line %q, want %q", tc.kind, c.Args, want)
		}
		if strings.Contains(strings.Join(c.Args, " "), pw) {
			t.Errorf("%s: the worker's command line holds the password: %q", tc.kind, c.Args)
		}
		var addrs []string
		for _, kv := range c.Env {
			if name, _, _ := strings.Cut(kv, "="); name == envDrillJobs || strings.HasPrefix(name, "LEASEHOLD_") {
				addrs = append(addrs, kv)
			}
		}
		if want := []string{tc.env + "=" + tc.addr, envDrillJobs + "=" + jobs}; !slices.Equal(addrs, want) {
			t.Errorf("%s: worker address variables %q, want %q", tc.kind, addrs, want)
		}
	}
}

// The command logs on its stderr as slog's default logger did when the
// drill logged there, and hides the command line's secrets.
func TestLoggerWritesAsSlogDefaultDid(t *testing.T) {
	const pw = "Qx7vZk9wSecret"
	var want, got bytes.Buffer
	defer log.SetOutput(log.Writer())
	log.SetOutput(&want)
	a := &app{stderr: &got, args: []string{"drill", "--redis", "redis://ops:" + pw + "@127.0.0.1:1/0"}}
	for _, l := range []*slog.Logger{slog.Default(), a.logger()} {
		l.Error("drill: worker process failed", "worker", 3, "err", io.ErrUnexpectedEOF, "stderr", "leasehold: redis: refused\n")
		l.With("drill", "d1").WithGroup("g").Info("grouped", "n", 1)
		l.Debug("not shown")
	}
	// Each line starts with the time, "2006/01/02 15:04:05 ", which may
	// differ by a second.
	const stamp = "2006/01/02 15:04:05 "
	strip := func(s string) []string {
		var out []string
		for line := range strings.Lines(s) {
			if _, err := time.ParseInLocation(stamp, line[:min(len(stamp), len(line))], time.Local); err != nil {
				t.Errorf("%q does not start with the time: %v", line, err)
				continue
			}
			out = append(out, line[len(stamp):])
		}
		return out
	}
	if w, g := strip(want.String()), strip(got.String()); !slices.Equal(w, g) {
		t.Errorf("the command logged\n%q\nwhere slog's default logger logs\n%q", g, w)
	}

	got.Reset()
	a.logger().Error("drill: worker process failed", "stderr", "dial redis://ops:"+pw+"@127.0.0.1:1/0: refused")
	if strings.Contains(got.String(), pw) || !strings.Contains(got.String(), notShown) {
		t.Errorf("the log line shows the password: %q", got.String())
	}
}
