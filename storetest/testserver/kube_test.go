package testserver

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubeGet sends GET path with the server's token and returns the status
// code and body.
func kubeGet(t *testing.T, s *KubeAPIServer, token, path string) (int, []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CAData()) {
		t.Fatal("CAData is not a PEM certificate")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.Host()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, body
}

// One server: ready, trusted through CAData, the token a cluster admin's,
// no access without it, a kubeconfig written 0600, and Close removes
// everything and frees the port.
func TestKubeAPIServer(t *testing.T) {
	SkipWithoutKubeAPIServer(t)
	start := time.Now()
	s, err := NewKubeAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s ready on %s in %v", KubeVersion, s.Host(), time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(s.Host(), "https://127.0.0.1:") || s.Pid() <= 0 {
		t.Fatalf("Host() = %q, Pid() = %d", s.Host(), s.Pid())
	}

	code, body := kubeGet(t, s, s.BearerToken(), "/version")
	var version struct {
		Major, Minor string
	}
	if code != http.StatusOK || json.Unmarshal(body, &version) != nil || version.Major != "1" {
		t.Fatalf("GET /version = %d %s", code, body)
	}
	if code, _ := kubeGet(t, s, s.BearerToken(), "/apis/coordination.k8s.io/v1/namespaces/default/leases"); code != http.StatusOK {
		t.Fatalf("list leases with the token: %d, want 200", code)
	}
	if code, _ := kubeGet(t, s, "", "/apis/coordination.k8s.io/v1/namespaces/default/leases"); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("list leases without a token: %d, want 401 or 403", code)
	}

	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(path, "ns-1"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v, mode %v; want 0600", err, fi.Mode())
	}
	cfg, _ := os.ReadFile(path)
	for _, want := range []string{"server: " + s.Host(), "token: " + s.BearerToken(), `namespace: "ns-1"`, "certificate-authority-data: "} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("kubeconfig lacks %q", strings.Replace(want, s.BearerToken(), "<token>", 1))
		}
	}

	dir, etcdDir, addr := s.dir, s.etcd.dir, s.addr()
	stop := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("closed in %v", time.Since(stop).Round(time.Millisecond))
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, d := range []string{dir, etcdDir} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after Close: %v", d, err)
		}
	}
	if err := s.check(t.Context()); err == nil {
		t.Fatalf("%s still answers after Close", addr)
	}
}

func TestKubeAPIServerPath(t *testing.T) {
	t.Setenv(envKubeAPIServer, filepath.Join(t.TempDir(), "nothing"))
	if _, err := KubeAPIServerPath(); !errors.Is(err, ErrKubeAPIServerNotFound) {
		t.Fatalf("missing binary: %v, want ErrKubeAPIServerNotFound", err)
	}
	if _, err := NewKubeAPIServer(); !errors.Is(err, ErrKubeAPIServerNotFound) {
		t.Fatalf("NewKubeAPIServer without a binary: %v, want ErrKubeAPIServerNotFound", err)
	}
	bin := filepath.Join(t.TempDir(), "kube-apiserver")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envKubeAPIServer, bin)
	if got, err := KubeAPIServerPath(); err != nil || got != bin {
		t.Fatalf("KubeAPIServerPath() = %q, %v; want %q", got, err, bin)
	}
	t.Setenv(envKubeAPIServer, "")
	cache := t.TempDir()
	t.Setenv(envCache, cache)
	_, err := KubeAPIServerPath()
	want := filepath.Join(cache, "kube-apiserver-"+KubeVersion, "kube-apiserver")
	if !errors.Is(err, ErrKubeAPIServerNotFound) || !strings.Contains(err.Error(), want) {
		t.Fatalf("empty cache: %v, want not found at %s", err, want)
	}
}

// A server that exits at once (a fake binary) fails the start with its
// output, and the token is in no error.
func TestKubeAPIServerExitIsReported(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kube-apiserver")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"fake apiserver: bad flag\" >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envKubeAPIServer, bin)
	s, err := NewKubeAPIServer()
	if err == nil {
		s.Close()
		t.Fatal("a server that exits at once started")
	}
	if !strings.Contains(err.Error(), "fake apiserver: bad flag") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("error %q, want the server's output and exit status", err)
	}
}
