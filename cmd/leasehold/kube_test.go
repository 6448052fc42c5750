package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/kubestore"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// startKube starts a kube-apiserver, writes its kubeconfig and returns the
// CLI's store flags for it and a kubestore on its namespace default (the
// kubeconfig's, so the flags name no namespace).
func startKube(t *testing.T) ([]string, *kubestore.Store) {
	t.Helper()
	srv := testserver.StartKubeAPIServer(t)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := srv.WriteKubeconfig(path, "default"); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := kubestore.LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kubestore.New(cfg, "default")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return []string{"--kube", path}, st
}

// inspect, ls, release --force, audit, lock and drill on Kubernetes Leases.
func TestKube(t *testing.T) {
	storeArgs, st := startKube(t)
	t.Run("inspect-ls", func(t *testing.T) {
		c := leasehold.New(st)
		leader := acquire(t, c, "leader:main", time.Minute)
		run1 := acquire(t, c, "runs:E1", time.Minute)
		job := acquire(t, c, "jobs:E2", time.Minute)
		if err := job.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		acquire(t, c, "tenant-42", time.Minute)
		checkInventory(t, storeArgs, []*leasehold.Lease{leader, run1}, job)
		if out := ok(t, append(storeArgs, "inspect", "leader:main")...); !strings.Contains(out, "namespace default") {
			t.Errorf("inspect does not name the namespace:\n%s", out)
		}
	})
	t.Run("force-release", func(t *testing.T) {
		forceReleaseCase(t, storeArgs, leasehold.New(st))
	})
	t.Run("lock", func(t *testing.T) {
		// The forced release an operator would do: the library's Release
		// with the token inspect --show-token read.
		checkLockBasics(t, storeArgs, func(t *testing.T, key, token string) {
			if err := st.Release(context.Background(), key, token); err != nil {
				t.Fatalf("release %s with its token: %v", key, err)
			}
		})
	})
	t.Run("drill", func(t *testing.T) {
		r := run(t, append(storeArgs, "drill", "--jobs", "10", "--takeover-slo", "1m", "--quiet", "--json")...)
		var rep struct{ Cleanup string }
		decode(t, r.stdout, &rep)
		if r.code != 0 || !strings.Contains(rep.Cleanup, "kubectl -n default get leases") {
			t.Fatalf("drill --kube: exit %d, cleanup %q; stderr:\n%s", r.code, rep.Cleanup, r.stderr)
		}
	})
}

// A namespace or name prefix kubestore refuses is a usage error naming the
// flag, before anything is sent.
func TestKubeBadNamespaceAndPrefix(t *testing.T) {
	t.Parallel()
	path := writeKubeconfig(t, "https://"+closedAddr(t), "")
	for flag, args := range map[string][]string{
		"--kube-namespace": {"inspect", "--kube", path, "--kube-namespace", "Bad_NS", "k"},
		"--kube-prefix":    {"inspect", "--kube", path, "--kube-prefix", "-x", "k"},
	} {
		r := failsWith(t, 2, []string{flag + ": "}, args...)
		checkNoLeak(t, r, args, nil, "Zq8tokenZq8")
	}
}

// A kubeconfig server with an '@' after the host (a password with a '/'
// unencoded, a scheme separator forgotten) is a usage error naming --kube
// that shows no part of the server's URL: the host may be a user name and
// a password's first part.
func TestKubeServerWithAtAfterTheHost(t *testing.T) {
	t.Parallel()
	path := writeKubeconfig(t, "http://localhost:4321/Zk9w@127.0.0.1:1", "")
	for _, args := range [][]string{
		{"inspect", "--kube", path, "k"},
		{"ls", "--kube", path, "*"},
		{"drill", "--kube", path, "--jobs", "1"},
	} {
		r := failsWith(t, 2, []string{"--kube: ", "'@' after the host"}, args...)
		checkNoLeak(t, r, args, []string{path}, "4321/Zk9w", "Zq8tokenZq8")
		if strings.Contains(r.stderr, "localhost") {
			t.Errorf("leasehold %q shows the server's host: %s", args, r.stderr)
		}
	}
}

// TestKubeRefusedServer: a refused API server fails at once naming the
// store and its flag, as every other store's does.
func TestKubeRefusedServer(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	path := writeKubeconfig(t, "https://"+addr, "ops")
	args := []string{"inspect", "--kube", path, "k"}
	r := failsWith(t, 1, []string{"kube at https://" + addr + " namespace ops (--kube): cannot connect: " + addr + ": connection refused"}, args...)
	checkNoLeak(t, r, args, []string{path}, "Zq8tokenZq8")
}

// A kubeconfig whose server's port is out of range is a usage error naming
// the flag and the file, before any connection.
func TestKubeServerPortOutOfRange(t *testing.T) {
	t.Parallel()
	path := writeKubeconfig(t, "https://127.0.0.1:99999", "")
	failsWith(t, 2, []string{"--kube", "port that is not a number from 0 to 65535", path}, "inspect", "--kube", path, "k")
}

// writeKubeconfig writes a kubeconfig whose one context reaches server
// (TLS unverified) with the token Zq8tokenZq8, in namespace when it is not
// empty, and returns its path.
func writeKubeconfig(t *testing.T, server, namespace string) string {
	t.Helper()
	ns := ""
	if namespace != "" {
		ns = "    namespace: " + namespace + "\n"
	}
	kc := "apiVersion: v1\nkind: Config\ncurrent-context: c\n" +
		"clusters:\n- name: k\n  cluster:\n    server: " + server + "\n    insecure-skip-tls-verify: true\n" +
		"users:\n- name: u\n  user:\n    token: Zq8tokenZq8\n" +
		"contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n" + ns
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
