package testserver

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// etcdPut writes key = value through the member's v3 JSON gateway.
func etcdPut(t *testing.T, s *EtcdServer, key, value string) {
	t.Helper()
	req := fmt.Sprintf(`{"key":%q,"value":%q}`,
		base64.StdEncoding.EncodeToString([]byte(key)), base64.StdEncoding.EncodeToString([]byte(value)))
	var resp struct {
		Header etcdHeader `json:"header"`
	}
	etcdPost(t, s, "/v3/kv/put", req, &resp)
	if resp.Header.Revision == "" {
		t.Fatalf("put %q on %s: no revision in the answer", key, s.clientURL())
	}
}

// etcdGet reads key through the member's v3 JSON gateway (a linearizable
// read); ok is false when the key does not exist.
func etcdGet(t *testing.T, s *EtcdServer, key string) (value string, ok bool) {
	t.Helper()
	req := fmt.Sprintf(`{"key":%q}`, base64.StdEncoding.EncodeToString([]byte(key)))
	var resp struct {
		Kvs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	etcdPost(t, s, "/v3/kv/range", req, &resp)
	if len(resp.Kvs) == 0 {
		return "", false
	}
	v, err := base64.StdEncoding.DecodeString(resp.Kvs[0].Value)
	if err != nil {
		t.Fatalf("get %q: value %q: %v", key, resp.Kvs[0].Value, err)
	}
	return string(v), true
}

func etcdPost(t *testing.T, s *EtcdServer, path, body string, out any) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post(s.clientURL()+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s%s: %s %s (%v)", s.clientURL(), path, resp.Status, data, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("POST %s: %v in %s", path, err, data)
	}
}

// waitHealthy waits (at most 20 s) until every given member is healthy.
func waitHealthy(t *testing.T, members ...*EtcdServer) {
	t.Helper()
	deadline := time.Now().Add(etcdReadyTimeout)
	for _, m := range members {
		for {
			err := m.Healthy()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %s not healthy within %v: %v", m.Name(), etcdReadyTimeout, err)
			}
			time.Sleep(etcdPollInterval)
		}
	}
}

func TestEtcdStartHealthyAndRestartKeepsData(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := StartEtcd(t)
	t.Logf("single etcd healthy %v after start", time.Since(start).Round(time.Millisecond))

	eps := s.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") || strings.HasSuffix(eps[0], ":2379") {
		t.Fatalf("Endpoints() = %q, want one http://127.0.0.1:PORT on a free port", eps)
	}
	if err := s.Healthy(); err != nil {
		t.Fatal(err)
	}
	etcdPut(t, s, "k", "v")
	pid := s.Pid()

	start = time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart took %v", time.Since(start).Round(time.Millisecond))
	if s.Pid() == pid {
		t.Fatalf("Pid after Restart = %d, the same as before", pid)
	}
	if got := s.Endpoints(); got[0] != eps[0] {
		t.Fatalf("Endpoints after Restart = %q, want %q", got, eps)
	}
	if v, ok := etcdGet(t, s, "k"); !ok || v != "v" {
		t.Fatalf("k after Restart = %q (exists %v), want \"v\": data must survive", v, ok)
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Healthy(); err == nil {
		t.Fatal("a stopped server reports itself healthy")
	}
	if err := s.Stop(); err == nil {
		t.Fatal("Stop of a stopped server succeeded")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start of a running server succeeded")
	}
	if v, ok := etcdGet(t, s, "k"); !ok || v != "v" {
		t.Fatalf("k after Stop+Start = %q (exists %v), want \"v\"", v, ok)
	}
}

func TestEtcdCloseRemovesEverything(t *testing.T) {
	t.Parallel()
	s, err := NewEtcdServer()
	if err != nil {
		t.Fatal(err)
	}
	dir := s.dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("%s still exists after Close", dir)
	}
	if err := s.Healthy(); err == nil {
		t.Fatal("a closed server reports itself healthy")
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start of a closed server succeeded")
	}
	if err := s.Restart(); err == nil {
		t.Fatal("Restart of a closed server succeeded")
	}
}

func TestEtcdClusterSurvivesMemberLoss(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartEtcdCluster(t, 3)
	t.Logf("3-member etcd cluster healthy %v after start", time.Since(start).Round(time.Millisecond))

	eps := c.Endpoints()
	seen := map[string]bool{}
	for i, ep := range eps {
		if ep != c.Member(i).Endpoints()[0] || seen[ep] {
			t.Fatalf("Endpoints() = %q: not the members' distinct URLs", eps)
		}
		seen[ep] = true
	}
	waitHealthy(t, c.Member(0), c.Member(1), c.Member(2))
	etcdPut(t, c.Member(0), "before", "1")

	// Stop the leader: the harder loss, since the others must elect a new one.
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	var rest []*EtcdServer
	for i := range 3 {
		if i != leader {
			rest = append(rest, c.Member(i))
		}
	}
	start = time.Now()
	if err := c.Member(leader).Stop(); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, rest...)
	t.Logf("stopped the leader (member %d); the other two healthy again %v later", leader, time.Since(start).Round(time.Millisecond))
	if err := c.Member(leader).Healthy(); err == nil {
		t.Fatal("the stopped member reports itself healthy")
	}
	if v, ok := etcdGet(t, rest[0], "before"); !ok || v != "1" {
		t.Fatalf("before = %q (exists %v) on a remaining member", v, ok)
	}
	etcdPut(t, rest[1], "during", "2")
	if newLeader, err := c.Leader(); err != nil || newLeader == leader {
		t.Fatalf("leader after the stop: %d (%v), want one of the remaining members", newLeader, err)
	}

	start = time.Now()
	if err := c.Member(leader).Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("member %d healthy again %v after its start", leader, time.Since(start).Round(time.Millisecond))
	waitHealthy(t, c.Member(0), c.Member(1), c.Member(2))
	// The member that was down caught up on the write it missed.
	if v, ok := etcdGet(t, c.Member(leader), "during"); !ok || v != "2" {
		t.Fatalf("during = %q (exists %v) on the restarted member", v, ok)
	}

	// A crash of the leader: no hand-over, the others must notice and elect.
	leader, err = c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	rest = rest[:0]
	for i := range 3 {
		if i != leader {
			rest = append(rest, c.Member(i))
		}
	}
	start = time.Now()
	if err := c.Member(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Member(leader).Kill(); err == nil {
		t.Fatal("Kill of a killed member succeeded")
	}
	waitHealthy(t, rest...)
	t.Logf("killed the leader (member %d); the other two healthy again %v later", leader, time.Since(start).Round(time.Millisecond))
	etcdPut(t, rest[0], "after-kill", "3")
	start = time.Now()
	if err := c.Member(leader).Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("member %d healthy again %v after its start", leader, time.Since(start).Round(time.Millisecond))
	if v, ok := etcdGet(t, c.Member(leader), "during"); !ok || v != "2" {
		t.Fatalf("during = %q (exists %v) on the member started after its crash", v, ok)
	}
	if v, ok := etcdGet(t, c.Member(leader), "after-kill"); !ok || v != "3" {
		t.Fatalf("after-kill = %q (exists %v) on the member started after its crash", v, ok)
	}
}

func TestEtcdClusterSize(t *testing.T) {
	if _, err := NewEtcdCluster(0); err == nil {
		t.Fatal("NewEtcdCluster(0) succeeded")
	}
}

// EtcdPath takes $LEASEHOLD_ETCD, then the cache's build of EtcdVersion,
// then etcd on PATH; a $LEASEHOLD_ETCD that is not a binary is an error,
// never a silent fall back to another etcd.
func TestEtcdPath(t *testing.T) {
	fake := func(dir string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "etcd")
		if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return bin
	}
	t.Setenv(envEtcd, filepath.Join(t.TempDir(), "nothing"))
	if _, err := EtcdPath(); !errors.Is(err, errEtcdNotFound) || !strings.Contains(err.Error(), envEtcd) {
		t.Fatalf("$%s naming nothing: %v, want not found, naming the variable", envEtcd, err)
	}
	named := fake(t.TempDir())
	t.Setenv(envEtcd, named)
	if got, err := EtcdPath(); err != nil || got != named {
		t.Fatalf("EtcdPath() = %q, %v; want %q", got, err, named)
	}
	t.Setenv(envEtcd, "")
	cache := t.TempDir()
	t.Setenv(envCache, cache)
	onPath := fake(t.TempDir())
	t.Setenv("PATH", filepath.Dir(onPath))
	if got, err := EtcdPath(); err != nil || got != onPath {
		t.Fatalf("empty cache: EtcdPath() = %q, %v; want %q from PATH", got, err, onPath)
	}
	cached := fake(filepath.Join(cache, "etcd-"+EtcdVersion))
	if got, err := EtcdPath(); err != nil || got != cached {
		t.Fatalf("EtcdPath() = %q, %v; want the cached build %q", got, err, cached)
	}
	t.Setenv(envCache, t.TempDir())
	t.Setenv("PATH", t.TempDir())
	if _, err := EtcdPath(); !errors.Is(err, errEtcdNotFound) {
		t.Fatalf("no etcd anywhere: %v, want not found", err)
	}
	// A relative cache is refused, not read from the test's directory: the
	// scripts resolve it from another one.
	t.Setenv("PATH", filepath.Dir(onPath))
	t.Setenv(envCache, "relative/cache")
	if _, err := EtcdPath(); !errors.Is(err, errEtcdNotFound) || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("relative $%s: %v, want an error saying so", envCache, err)
	}
	t.Setenv(envCache, "")
	t.Setenv("XDG_CACHE_HOME", "relative")
	if _, err := EtcdPath(); err == nil || !strings.Contains(err.Error(), "$XDG_CACHE_HOME") {
		t.Fatalf("relative $XDG_CACHE_HOME: %v, want an error naming it", err)
	}
	xdg := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", xdg)
	cached = fake(filepath.Join(xdg, "leasehold", "etcd-"+EtcdVersion))
	if got, err := EtcdPath(); err != nil || got != cached {
		t.Fatalf("EtcdPath() = %q, %v; want the build under $XDG_CACHE_HOME %q", got, err, cached)
	}
}
