package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/redisstore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// runEnv runs the binary with args and the LEASEHOLD_* variables of env
// (the test process's own are removed); a run is given three minutes at
// most: a drill of a few seconds takes ten times longer on a loaded machine.
func runEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("leasehold %q: %v", args, err)
	}
	return r
}

// TestStoreFromEnvironment: LEASEHOLD_REDIS_URL, LEASEHOLD_ETCD_ENDPOINTS
// and LEASEHOLD_POSTGRES_DSN name the store when no store flag does; a flag
// wins; no message shows a variable's password.
func TestStoreFromEnvironment(t *testing.T) {
	url, _, c := startRedis(t)
	l := acquire(t, c, "runs:ENV", time.Minute)
	closed := closedAddr(t)
	// Kubeconfigs with a password and a token the messages must not show:
	// one that does not parse, one whose server is not there.
	dir := t.TempDir()
	badKubeconfig, closedKubeconfig := filepath.Join(dir, "bad"), filepath.Join(dir, "closed")
	for path, data := range map[string]string{
		badKubeconfig: "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: hunter2, password: hunter2\n",
		closedKubeconfig: "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://" + closed + "\", insecure-skip-tls-verify: true}\n" +
			"users:\n- name: u\n  user: {token: hunter2}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	r := runEnv(t, map[string]string{"LEASEHOLD_REDIS_URL": url}, "inspect", "-o", "json", l.Key())
	var got lockJSON
	decode(t, r.stdout, &got)
	if r.code != 0 || !got.Held || got.Token != short(l.Token()) {
		t.Errorf("inspect with LEASEHOLD_REDIS_URL: exit %d, %+v, stderr %q", r.code, got, r.stderr)
	}
	// The flag wins over every variable.
	r = runEnv(t, map[string]string{"LEASEHOLD_REDIS_URL": "redis://" + closed + "/0", "LEASEHOLD_ETCD_ENDPOINTS": closed},
		"inspect", "--redis", url, "-o", "json", l.Key())
	if r.code != 0 {
		t.Errorf("--redis with variables set: exit %d, stderr %q", r.code, r.stderr)
	}

	for _, tc := range []struct {
		env  map[string]string
		code int
		want []string
	}{
		{map[string]string{"LEASEHOLD_REDIS_URL": "redis://" + closed + "/0", "LEASEHOLD_ETCD_ENDPOINTS": closed}, 2,
			[]string{"choose one store: LEASEHOLD_REDIS_URL and LEASEHOLD_ETCD_ENDPOINTS"}},
		{map[string]string{"LEASEHOLD_REDIS_URL": "redis://ops:hunter2@127.0.0.1:bad/0"}, 2,
			[]string{"LEASEHOLD_REDIS_URL (--redis): invalid URL"}},
		{map[string]string{"LEASEHOLD_REDIS_URL": "redis://ops:hunter2@" + closed + "/0"}, 1,
			[]string{"redis at " + closed, "LEASEHOLD_REDIS_URL", "connection refused"}},
		{map[string]string{"LEASEHOLD_ETCD_ENDPOINTS": "ops:hunter2@" + closed}, 2,
			[]string{"LEASEHOLD_ETCD_ENDPOINTS (--etcd): invalid endpoint"}},
		{map[string]string{"LEASEHOLD_ETCD_ENDPOINTS": closed}, 1,
			[]string{"etcd at " + closed, "connection refused"}},
		{map[string]string{"LEASEHOLD_POSTGRES_DSN": "postgres://ops:hunter2@" + closed + "/locks?sslmode=disable"}, 1,
			[]string{"postgres at " + closed, "LEASEHOLD_POSTGRES_DSN", "connection refused"}},
		{map[string]string{"LEASEHOLD_POSTGRES_DSN": "host=127.0.0.1 port=x password=hunter2"}, 2,
			[]string{"LEASEHOLD_POSTGRES_DSN (--postgres): invalid DSN"}},
		{map[string]string{"LEASEHOLD_KUBECONFIG": filepath.Join(dir, "missing")}, 2,
			[]string{"LEASEHOLD_KUBECONFIG (--kube): kubeconfig " + filepath.Join(dir, "missing")}},
		{map[string]string{"LEASEHOLD_KUBECONFIG": badKubeconfig}, 2,
			[]string{"LEASEHOLD_KUBECONFIG (--kube): kubeconfig " + badKubeconfig}},
		{map[string]string{"LEASEHOLD_KUBECONFIG": closedKubeconfig}, 1,
			[]string{"kube at https://" + closed}},
	} {
		for _, cmd := range [][]string{{"inspect", "runs:R1"}, {"ls", "*"}} {
			r := runEnv(t, tc.env, cmd...)
			if r.code != tc.code {
				t.Errorf("%v leasehold %q: exit %d, want %d (stderr %q)", tc.env, cmd, r.code, tc.code, r.stderr)
			}
			checkOneLine(t, r.stderr, cmd)
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%v leasehold %q: stderr %q does not say %q", tc.env, cmd, r.stderr, w)
				}
			}
			if strings.Contains(r.stdout+r.stderr, "hunter2") {
				t.Errorf("leasehold %q printed a variable's password: %q", cmd, r.stderr)
			}
		}
	}
}

// TestOutputJSON: -o json on every command is JSON (durations in seconds,
// [] for an empty list), --json is the same, and -o is checked.
func TestOutputJSON(t *testing.T) {
	url, _, c := startRedis(t)
	l := acquire(t, c, "runs:J", time.Minute)

	var one lockJSON
	decode(t, ok(t, "inspect", "--redis", url, "-o", "json", l.Key()), &one)
	if !one.Held || one.TTLSeconds <= 0 || one.TTLSeconds > 60 {
		t.Errorf("inspect -o json = %+v", one)
	}
	if a, b := ok(t, "inspect", "--redis", url, "--output", "json", "free:key"), ok(t, "inspect", "--redis", url, "--json", "free:key"); a != b {
		t.Errorf("--output json and --json differ:\n%s\n%s", a, b)
	}
	var many []lockJSON
	decode(t, ok(t, "ls", "--redis", url, "-o", "json", "runs:*"), &many)
	if len(many) != 1 || many[0].Key != l.Key() {
		t.Errorf("ls -o json = %+v", many)
	}
	if out := ok(t, "ls", "--redis", url, "-o", "json", "none:*"); strings.TrimSpace(out) != "[]" {
		t.Errorf("ls -o json with no match printed %q, want []", out)
	}
	var plan map[string]any
	decode(t, ok(t, "ttl", "-o", "json", "--exec-p99", "18s", "--jitter", "4s", "--guard", "2s", "--slo", "30s"), &plan)
	if plan["ttl_seconds"] != 24.0 || plan["slo_met"] != true {
		t.Errorf("ttl -o json = %v", plan)
	}
	var v struct {
		Version   string `json:"version"`
		GoVersion string `json:"go_version"`
		Modules   []struct {
			Path, Version string
		} `json:"modules"`
	}
	out := ok(t, "version", "-o", "json")
	decode(t, out, &v)
	if v.Version == "" || !strings.HasPrefix(v.GoVersion, "go1.") || len(v.Modules) == 0 || strings.Contains(out, "null") {
		t.Errorf("version -o json = %s", out)
	}
	var rep struct {
		Jobs     int `json:"jobs"`
		Critical int `json:"critical_sections"`
	}
	decode(t, ok(t, "drill", "-o", "json", "--jobs", "3", "--time-scale", "1/400", "--takeover-slo", "1m"), &rep)
	if rep.Critical < 3 {
		t.Errorf("drill -o json = %+v, want at least 3 critical sections", rep)
	}
	if table := ok(t, "inspect", "--redis", url, "-o", "table", l.Key()); !strings.Contains(table, "state") {
		t.Errorf("inspect -o table printed %q", table)
	}

	for _, args := range [][]string{
		{"inspect", "--redis", url, "-o", "yaml", "k"},
		{"ls", "--redis", url, "-o", "", "*"},
		{"ttl", "-o", "wide", "--exec-p99", "1s", "--jitter", "0s", "--guard", "0s"},
		{"version", "-o", "JSON"},
		{"drill", "-o", "xml"},
		{"audit", "--redis", url, "-o", "csv"},
	} {
		failsWith(t, 2, []string{"-o/--output", "want table or json"}, args...)
	}
	failsWith(t, 2, []string{"--json and -o table"}, "version", "--json", "-o", "table")
}

// TestCompletion: cobra's completion scripts for bash, zsh and fish.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_leasehold",
		"zsh":  "#compdef leasehold",
		"fish": "complete -c leasehold",
	} {
		if out := ok(t, "completion", shell); !strings.Contains(out, want) {
			t.Errorf("completion %s does not contain %q:\n%.300s", shell, want, out)
		}
	}
	// The script asks the binary itself; the store flags are offered.
	if r := run(t, "__complete", "inspect", "--re"); r.code != 0 || !strings.Contains(r.stdout, "--redis\t") {
		t.Errorf("__complete inspect --re: exit %d, %q", r.code, r.stdout)
	}
	failsWith(t, 2, []string{"unknown command"}, "completion", "tcsh")
	failsWith(t, 2, []string{"completion needs a shell"}, "completion")
}

// TestVersionLines: version names the module version, the Go version and
// the leasehold modules, one per line.
func TestVersionLines(t *testing.T) {
	out := ok(t, "version")
	for _, w := range []string{"\n  version   ", "\n  go        go1.", "\n  module    github.com/leasehold/leasehold "} {
		if !strings.Contains(out, w) {
			t.Errorf("version does not say %q:\n%s", w, out)
		}
	}
}

// TestRedisAddressForms: a bare host:port, a Sentinel URL and a Cluster
// URL each reach the lock that an application's client took.
func TestRedisAddressForms(t *testing.T) {
	t.Run("host:port", func(t *testing.T) {
		url, _, c := startRedis(t)
		l := acquire(t, c, "runs:B", time.Minute)
		var got lockJSON
		decode(t, ok(t, "inspect", "--redis", strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0"), "-o", "json", l.Key()), &got)
		if !got.Held || got.Token != short(l.Token()) {
			t.Errorf("inspect --redis host:port = %+v", got)
		}
		failsWith(t, 2, []string{"--redis: invalid URL"}, "inspect", "--redis", "127.0.0.1:port", "k")
	})
	t.Run("sentinel", func(t *testing.T) {
		f := testserver.StartRedisFailover(t, "locks")
		c := appClient(t, redis.NewFailoverClient(&redis.FailoverOptions{MasterName: f.MasterName(), SentinelAddrs: f.SentinelAddrs()}))
		l := acquire(t, c, "runs:S", time.Minute)
		u := "redis+sentinel://" + f.Sentinel.Addr() + "/0?master_name=" + f.MasterName()
		var got lockJSON
		decode(t, ok(t, "inspect", "--redis", u, "-o", "json", l.Key()), &got)
		if !got.Held || got.Token != short(l.Token()) || !strings.Contains(got.Store, "sentinel "+f.Sentinel.Addr()) {
			t.Errorf("inspect --redis %s = %+v", u, got)
		}
		var all []lockJSON
		decode(t, ok(t, "ls", "--redis", u, "-o", "json", "*"), &all)
		if len(all) != 1 || all[0].Key != l.Key() {
			t.Errorf("ls --redis %s = %+v", u, all)
		}
		failsWith(t, 2, []string{"--redis: invalid URL", "master_name"}, "inspect", "--redis", "redis+sentinel://"+f.Sentinel.Addr(), "k")
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testserver.StartRedisCluster(t, 3)
		c := appClient(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()}))
		var keys []string
		for _, k := range []string{"runs:C1", "runs:C2", "runs:C3", "runs:C4"} {
			keys = append(keys, acquire(t, c, k, time.Minute).Key())
		}
		addrs := cl.Addrs()
		u := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1]
		var got lockJSON
		decode(t, ok(t, "inspect", "--redis", u, "-o", "json", keys[2]), &got)
		if !got.Held || !strings.HasPrefix(got.Store, "redis cluster ") {
			t.Errorf("inspect --redis %s = %+v", u, got)
		}
		var all []lockJSON
		decode(t, ok(t, "ls", "--redis", u, "-o", "json", "runs:*"), &all)
		if len(all) != len(keys) {
			t.Errorf("ls --redis %s listed %d locks, want %d: %+v", u, len(all), len(keys), all)
		}
		// The seeds as a comma-separated host list, the first one down: go-redis
		// used to get the list as one host name and fail to resolve it.
		down := closedAddr(t)
		list := "redis+cluster://" + down + "," + strings.Join(addrs, ",")
		decode(t, ok(t, "inspect", "--redis", list, "-o", "json", keys[2]), &got)
		if !got.Held || !strings.HasSuffix(got.Store, "cluster "+down+","+strings.Join(addrs, ",")) {
			t.Errorf("inspect --redis %s = %+v", list, got)
		}
		failsWith(t, 2, []string{"--redis: invalid URL", "host 2 of the comma-separated list is not host:port"},
			"inspect", "--redis", "redis+cluster://"+addrs[0]+",nohost,"+addrs[1], "k")
	})
}

// appClient is an application's Client on a go-redis client.
func appClient(t *testing.T, rc redis.UniversalClient) *leasehold.Client {
	t.Helper()
	st, err := redisstore.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		_ = rc.Close()
	})
	return leasehold.New(st)
}

// TestRefusedConnectionFailsAtOnce: with a long --timeout, a store whose
// port refuses connections fails within refusedBound on every backend,
// process start included (well under 1 s on a quiet machine, as logged).
func TestRefusedConnectionFailsAtOnce(t *testing.T) {
	const refusedBound = loadSlack // against --timeout 30s
	a, b := closedAddr(t), closedAddr(t)
	for _, store := range [][]string{
		{"--redis", "redis://" + a + "/0"},
		{"--redis", a},
		{"--redis", "redis+sentinel://" + a + "?master_name=m"},
		{"--redis", "redis+cluster://" + a + "?addr=" + b},
		{"--etcd", a + "," + b},
		{"--etcd", "http://" + a},
		{"--postgres", "postgres://ops:hunter2@" + a + "/locks?sslmode=disable"},
	} {
		for _, cmd := range [][]string{{"inspect", "runs:R1"}, {"ls", "*"}} {
			args := append([]string{"--timeout", "30s"}, append(store, cmd...)...)
			r := failsWith(t, 1, []string{"connection refused", "(" + store[0] + ")"}, args...)
			t.Logf("leasehold %q: refused in %v", args, r.elapsed.Round(time.Millisecond))
			if r.elapsed > refusedBound {
				t.Errorf("leasehold %q took %v on a refused connection, want at most %v", args, r.elapsed, refusedBound)
			}
			if strings.Contains(r.stderr, "hunter2") {
				t.Errorf("leasehold %q printed the password: %q", args, r.stderr)
			}
		}
	}
}

// TestReadOnlyACLUser: a Redis user with read permissions only (no writes,
// no scripts) runs inspect and ls.
func TestReadOnlyACLUser(t *testing.T) {
	url, rc, c := startRedis(t)
	if err := rc.Do(t.Context(), "ACL", "SETUSER", "ro", "on", ">ro-secret", "~*", "+@read", "-@write", "-@scripting").Err(); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, c, "runs:RO", time.Minute)
	ro := strings.Replace(url, "redis://", "redis://ro:ro-secret@", 1)

	var got lockJSON
	decode(t, ok(t, "inspect", "--redis", ro, "-o", "json", l.Key()), &got)
	if !got.Held || got.Token != short(l.Token()) || got.Fence != l.Fence() {
		t.Errorf("inspect as a read-only user = %+v, want held by %s, fence %d", got, l.Token(), l.Fence())
	}
	var all []lockJSON
	decode(t, ok(t, "ls", "--redis", ro, "-o", "json", "runs:*"), &all)
	if len(all) != 1 || all[0].Key != l.Key() {
		t.Errorf("ls as a read-only user = %+v", all)
	}
	if out := ok(t, "inspect", "--redis", ro, l.Key()); strings.Contains(out, "ro-secret") {
		t.Errorf("inspect printed the password: %s", out)
	}
}

// TestTLSFlags: --tls-ca/--tls-cert/--tls-key go with rediss:// only, and a
// missing or unusable file is a usage error naming its flag.
func TestTLSFlags(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := closedAddr(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis", "redis://" + addr, "--tls-ca", notPEM}, "need a rediss:// URL"},
		{[]string{"--redis", "rediss://" + addr, "--tls-ca", filepath.Join(dir, "missing.pem")}, "--tls-ca: no such file"},
		{[]string{"--redis", "rediss://" + addr, "--tls-ca", notPEM}, "--tls-ca: " + notPEM + " holds no PEM certificate"},
		{[]string{"--redis", "rediss://" + addr, "--tls-cert", notPEM}, "--tls-cert and --tls-key go together"},
		{[]string{"--redis", "rediss://" + addr, "--tls-cert", notPEM, "--tls-key", notPEM}, "--tls-cert/--tls-key: not a certificate"},
		{[]string{"--redis", "rediss://" + addr, "--tls-key", dir}, "--tls-key: " + dir + " is a directory"},
	} {
		failsWith(t, 2, []string{tc.want}, append(tc.args, "inspect", "k")...)
	}
}
