package kubestore_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/kubestore"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/storetest/testserver"
)

// writeFile writes a file of the test's own directory and returns its path.
func writeFile(t *testing.T, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeconfigFor is a kubeconfig of one context, with the cluster and user
// given as YAML bodies (indented by 4).
func kubeconfigFor(cluster, user, namespace string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: c
clusters:
- name: k
  cluster:
%s
users:
- name: u
  user:
%s
contexts:
- name: c
  context:
    cluster: k
    user: u
    namespace: %q
`, indent(cluster), indent(user), namespace)
}

func indent(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

// storeFrom is a Store made from the kubeconfig at path, closed at the
// test's end.
func storeFrom(t *testing.T, path, ns string) *kubestore.Store {
	t.Helper()
	cfg, _, err := kubestore.LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kubestore.New(cfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// useStore acquires and releases a key through a Store made from cfg, on
// the real server.
func useStore(t *testing.T, cfg kubestore.Config, ns string) {
	t.Helper()
	s, err := kubestore.New(cfg, ns)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, tok, time.Minute); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := s.Release(ctx, key, tok); err != nil {
		t.Fatalf("release: %v", err)
	}
}

// A kubeconfig with a tokenFile, and one with an exec credential plugin,
// both authenticate to the real API server; the plugin runs once while its
// credential holds, and again after the server refuses it.
func TestKubeconfigCredentials(t *testing.T) {
	srv := server(t)
	c := newClient(t)
	ns := namespace(t, c)
	dir := t.TempDir()
	ca := base64.StdEncoding.EncodeToString(srv.CAData())
	cluster := fmt.Sprintf("server: %s\ncertificate-authority-data: %s", srv.Host(), ca)

	t.Run("tokenFile", func(t *testing.T) {
		writeFile(t, dir, "token", srv.BearerToken()+"\n", 0o600)
		// A relative path is relative to the kubeconfig's directory.
		path := writeFile(t, dir, "tokenfile.yaml", kubeconfigFor(cluster, "tokenFile: token", ns), 0o600)
		cfg, gotNS, err := kubestore.LoadKubeconfig(path)
		if err != nil || gotNS != ns {
			t.Fatalf("LoadKubeconfig: %v, namespace %q; want %q", err, gotNS, ns)
		}
		useStore(t, cfg, ns)
	})

	t.Run("exec", func(t *testing.T) {
		// The plugin answers a wrong token on its first run, the right one
		// after; each run appends a line to runs.
		runs := filepath.Join(dir, "runs")
		writeFile(t, dir, "plugin.sh", fmt.Sprintf(`#!/bin/sh
case "$KUBERNETES_EXEC_INFO" in *'"interactive":false'*) ;; *) echo "bad KUBERNETES_EXEC_INFO" >&2; exit 2;; esac
case "$KUBERNETES_EXEC_INFO" in *'"server":"%s"'*) ;; *) echo "no cluster in KUBERNETES_EXEC_INFO" >&2; exit 2;; esac
[ "$PLUGIN_ENV" = yes ] || { echo "env not passed" >&2; exit 2; }
echo run >> %q
tok=%q
[ "$(wc -l < %q)" -eq 1 ] && tok=wrong
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%%s"}}' "$tok"
`, srv.Host(), runs, srv.BearerToken(), runs), 0o700)
		user := "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: ./plugin.sh\n  interactiveMode: Never\n  provideClusterInfo: true\n  env:\n  - name: PLUGIN_ENV\n    value: \"yes\""
		path := writeFile(t, dir, "exec.yaml", kubeconfigFor(cluster, user, ns), 0o600)
		s := storeFrom(t, path, ns)
		ctx, key := t.Context(), storetest.Key(t)
		if _, err := s.Inspect(ctx, key); err == nil || !strings.Contains(err.Error(), "401") {
			t.Fatalf("Inspect with the plugin's wrong token: %v, want the server's 401", err)
		}
		for range 5 {
			if _, err := s.Inspect(ctx, key); err != nil {
				t.Fatalf("Inspect after the refusal: %v", err)
			}
		}
		b, _ := os.ReadFile(runs)
		if n := strings.Count(string(b), "run"); n != 2 {
			t.Fatalf("the plugin ran %d times for 6 requests, want 2 (once, then once after the 401)", n)
		}
	})
}

// testCert is a self-signed certificate and its key, in PEM.
func testCert(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// seen is what a fake API server on loopback saw of one request.
type seen struct {
	path, auth, user, uid string
	groups                []string
	clientCN              string
}

// fakeAPIServer answers every request with a NotFound Status (an Inspect
// of a missing Lease), recording what it saw; with clientCA it requires a
// client certificate signed by it.
func fakeAPIServer(t *testing.T, clientCA []byte) (*httptest.Server, func() seen) {
	t.Helper()
	var mu sync.Mutex
	var last seen
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		last = seen{path: r.URL.Path, auth: r.Header.Get("Authorization"), user: r.Header.Get("Impersonate-User"),
			uid: r.Header.Get("Impersonate-Uid"), groups: r.Header.Values("Impersonate-Group")}
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			last.clientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"not found"}`)
	}))
	srv.TLS = &tls.Config{}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(clientCA)
		srv.TLS.ClientCAs, srv.TLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, func() seen { mu.Lock(); defer mu.Unlock(); return last }
}

// Client certificates (files, data, and from an exec plugin), basic
// credentials, impersonation and a server URL with a path prefix reach the
// server as kubectl would send them.
func TestKubeconfigAuthOnTheWire(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM := testCert(t, "lock-client")
	srv, last := fakeAPIServer(t, certPEM)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	writeFile(t, dir, "ca.crt", string(caPEM), 0o600)
	writeFile(t, dir, "client.crt", string(certPEM), 0o600)
	writeFile(t, dir, "client.key", string(keyPEM), 0o600)
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	cluster := "server: " + srv.URL + "/prefix\ncertificate-authority: ca.crt"
	writeFile(t, dir, "certplugin.sh", fmt.Sprintf(`#!/bin/sh
printf '%%s' '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"clientCertificateData":%q,"clientKeyData":%q}}'
`, certPEM, keyPEM), 0o700)
	for _, tc := range []struct {
		name, user string
		want       seen
	}{
		{"cert files", "client-certificate: client.crt\nclient-key: client.key", seen{clientCN: "lock-client"}},
		{"cert data and token", fmt.Sprintf("client-certificate-data: %s\nclient-key-data: %s\ntoken: t0k", b64(certPEM), b64(keyPEM)),
			seen{clientCN: "lock-client", auth: "Bearer t0k"}},
		{"exec certificate", "exec:\n  apiVersion: client.authentication.k8s.io/v1beta1\n  command: " + filepath.Join(dir, "certplugin.sh"),
			seen{clientCN: "lock-client"}},
		{"basic and impersonation", "client-certificate: client.crt\nclient-key: client.key\nusername: ann\npassword: pw\nas: bob\nas-uid: u-1\nas-groups: [g1, g2]",
			seen{clientCN: "lock-client", auth: "Basic " + b64([]byte("ann:pw")), user: "bob", uid: "u-1", groups: []string{"g1", "g2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, "kc.yaml", kubeconfigFor(cluster, tc.user, ""), 0o600)
			cfg, ns, err := kubestore.LoadKubeconfig(path)
			if err != nil || ns != "" {
				t.Fatalf("LoadKubeconfig: %v, namespace %q", err, ns)
			}
			s, err := kubestore.New(cfg, "team-a")
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if info, err := s.Inspect(t.Context(), "k"); err != nil || info.Held {
				t.Fatalf("Inspect: %+v, %v; want a free key", info, err)
			}
			got := last()
			tc.want.path = "/prefix/apis/coordination.k8s.io/v1/namespaces/team-a/leases/" + s.Name("k")
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("the server saw %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A redirect is an answer, never followed: the client adds the token to
// every request, so following one to another host would send it there.
func TestRedirectIsNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		t.Errorf("the redirect was followed, Authorization %q", r.Header.Get("Authorization"))
	}))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	}))
	defer srv.Close()
	path := writeFile(t, t.TempDir(), "kc.yaml", kubeconfigFor("server: "+srv.URL, "token: s3cr3t", ""), 0o600)
	s := storeFrom(t, path, "default")
	if _, err := s.Inspect(t.Context(), "k"); err == nil || !strings.Contains(err.Error(), "302") {
		t.Fatalf("Inspect answered by a redirect: %v; want an error naming the 302", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the other host got %d requests", n)
	}
}

// Every kubeconfig it cannot honour is an error naming the field (or the
// file), never a connection without the credential, and never a message
// that quotes a secret.
func TestLoadKubeconfigRefusals(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cr3t-token"
	good := "server: https://127.0.0.1:6443\ninsecure-skip-tls-verify: true"
	for _, tc := range []struct {
		name, content, want string
	}{
		{"not YAML", "{{{", "not a kubeconfig"},
		{"wrong type", kubeconfigFor("server: https://h:1\ninsecure-skip-tls-verify: "+secret, "token: x", ""), "wrong type at line 8"},
		{"no current context", "apiVersion: v1\nkind: Config\n", "current-context"},
		{"missing context", "current-context: nope\n", `"nope"`},
		{"missing cluster", strings.Replace(kubeconfigFor(good, "token: "+secret, ""), "cluster: k\n", "cluster: gone\n", 1), `cluster "gone"`},
		{"missing user", strings.Replace(kubeconfigFor(good, "token: "+secret, ""), "user: u\n", "user: gone\n", 1), `user "gone"`},
		{"no server", kubeconfigFor("insecure-skip-tls-verify: true", "token: "+secret, ""), "no server"},
		{"bad server", kubeconfigFor("server: 127.0.0.1:6443", "token: "+secret, ""), "server"},
		{"password in server", kubeconfigFor("server: https://me:"+secret+"@h:1", "token: x", ""), "server"},
		{"password in server, no scheme", kubeconfigFor("server: me:"+secret+"@h:1", "token: x", ""), "server"},
		{"password in server, one slash", kubeconfigFor("server: https:/me:"+secret+"@h:1", "token: x", ""), "server"},
		{"password in server path", kubeconfigFor("server: http://localhost:4321/"+secret+"@127.0.0.1:1", "token: x", ""), "'@' after the host"},
		{"password in server host and path", kubeconfigFor("server: https://me:4321/"+secret+"@h:1", "token: x", ""), "'@' after the host"},
		{"token in server query", kubeconfigFor("server: https://h:1/?token="+secret, "token: x", ""), "server"},
		{"token in server fragment", kubeconfigFor("server: https://h:1/#"+secret, "token: x", ""), "server"},
		{"token in proxy query", kubeconfigFor(good+"\nproxy-url: socks5://127.0.0.1:1080/?t="+secret, "token: x", ""), "proxy-url"},
		{"CA and insecure", kubeconfigFor(good+"\ncertificate-authority-data: eA==", "token: "+secret, ""), "insecure-skip-tls-verify"},
		{"CA not base64", kubeconfigFor("server: https://h:1\ncertificate-authority-data: '%%%'", "token: "+secret, ""), "certificate-authority-data"},
		{"CA not PEM", kubeconfigFor("server: https://h:1\ncertificate-authority-data: eA==", "token: "+secret, ""), "certificate-authority"},
		{"CA file missing", kubeconfigFor("server: https://h:1\ncertificate-authority: nope.crt", "token: "+secret, ""), "certificate-authority"},
		{"auth provider", kubeconfigFor(good, "auth-provider:\n  name: gcp\n  config:\n    access-token: "+secret, ""), "auth-provider"},
		{"user extra", kubeconfigFor(good, "token: "+secret+"\nas: x\nas-user-extra:\n  k: [v]", ""), "as-user-extra"},
		{"cert without key", kubeconfigFor(good, "client-certificate-data: eA==", ""), "client certificate"},
		{"bad key pair", kubeconfigFor(good, "client-certificate-data: eA==\nclient-key-data: "+base64.StdEncoding.EncodeToString([]byte(secret)), ""), "client-key"},
		{"token and basic", kubeconfigFor(good, "token: "+secret+"\nusername: u\npassword: p", ""), "token"},
		{"exec and token", kubeconfigFor(good, "token: "+secret+"\nexec:\n  command: x\n  apiVersion: client.authentication.k8s.io/v1", ""), "exec"},
		{"exec without command", kubeconfigFor(good, "exec:\n  apiVersion: client.authentication.k8s.io/v1", ""), "command"},
		{"exec old version", kubeconfigFor(good, "exec:\n  command: x\n  apiVersion: client.authentication.k8s.io/v1alpha1", ""), "apiVersion"},
		{"exec interactive", kubeconfigFor(good, "exec:\n  command: x\n  apiVersion: client.authentication.k8s.io/v1\n  interactiveMode: Always", ""), "interactiveMode"},
		{"token file missing", kubeconfigFor(good, "tokenFile: nope", ""), "tokenFile"},
		{"socks proxy", kubeconfigFor(good+"\nproxy-url: socks5://127.0.0.1:1080", "token: "+secret, ""), "proxy-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, dir, "kc.yaml", tc.content, 0o600)
			_, _, err := kubestore.LoadKubeconfig(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("LoadKubeconfig: %v; want an error naming the file and %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error quotes the secret: %v", err)
			}
		})
	}
	if _, _, err := kubestore.LoadKubeconfig(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("LoadKubeconfig of a missing file: %v", err)
	}
}

// An exec plugin that fails, or answers no credential, is an error of the
// request, naming the plugin, not quoting its output.
func TestExecPluginFailures(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cr3t-output"
	srv, _ := fakeAPIServer(t, nil)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cluster := "server: " + srv.URL + "\ncertificate-authority-data: " + base64.StdEncoding.EncodeToString(caPEM)
	for _, tc := range []struct{ name, script, want string }{
		{"exits 1", "exit 1", "exit status 1"},
		{"not JSON", "echo " + secret, "not an ExecCredential"},
		{"no credential", `echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"expirationTimestamp":"2000-01-01T00:00:00Z"}}'`, "neither a token"},
		{"other version", `echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"` + secret + `"}}'`, "apiVersion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plugin := writeFile(t, dir, "p.sh", "#!/bin/sh\n"+tc.script+"\n", 0o700)
			path := writeFile(t, dir, "kc.yaml", kubeconfigFor(cluster, "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: "+plugin, ""), 0o600)
			s := storeFrom(t, path, "default")
			_, err := s.Inspect(t.Context(), "k")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "p.sh") || strings.Contains(err.Error(), secret) {
				t.Fatalf("Inspect: %v; want an error naming the plugin and %q, without its output", err, tc.want)
			}
		})
	}
	t.Run("hangs", func(t *testing.T) {
		plugin := writeFile(t, dir, "p.sh", "#!/bin/sh\nexec sleep 30\n", 0o700)
		path := writeFile(t, dir, "kc.yaml", kubeconfigFor(cluster, "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: "+plugin, ""), 0o600)
		s := storeFrom(t, path, "default")
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := s.Inspect(ctx, "k"); err == nil {
			t.Fatal("Inspect with a hung plugin succeeded")
		}
		// Bounded by the caller's deadline and the wait for the plugin's
		// output (1 s), not by the plugin's 30 s; generous for a loaded machine.
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("Inspect with a hung plugin took %v", took)
		}
	})
	t.Run("not installed", func(t *testing.T) {
		path := writeFile(t, dir, "kc.yaml", kubeconfigFor(cluster, "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: no-such-plugin-xyz\n  installHint: install it with apt", ""), 0o600)
		s := storeFrom(t, path, "default")
		if _, err := s.Inspect(t.Context(), "k"); err == nil || !strings.Contains(err.Error(), "install it with apt") {
			t.Fatalf("Inspect: %v; want the install hint", err)
		}
	})
}

// A held Lease whose duration is not an integer (no API server writes one;
// a proxy or a broken server might) is an error, never an expired lock.
func TestMalformedDurationIsAnError(t *testing.T) {
	s0, _ := kubestore.New(kubestore.Config{Server: "http://127.0.0.1:1", Client: http.DefaultClient}, "default")
	name := s0.Name("k")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			t.Errorf("the Store sent %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusForbidden)
			return
		}
		fmt.Fprintf(w, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":%q,"namespace":"default","resourceVersion":"1",
"annotations":{"leasehold.dev/key":"k","leasehold.dev/fence":"9"}},"spec":{"holderIdentity":"someone","leaseDurationSeconds":2.5}}`, name)
	}))
	defer srv.Close()
	s, err := kubestore.New(kubestore.Config{Server: srv.URL, Client: srv.Client()}, "default")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(t.Context(), "k", "me", time.Second); err == nil || !strings.Contains(err.Error(), "leaseDurationSeconds") {
		t.Fatalf("Acquire of a Lease with a duration of 2.5: %v, want an error naming leaseDurationSeconds", err)
	}
	if _, err := s.Inspect(t.Context(), "k"); err == nil {
		t.Fatal("Inspect of a Lease with a duration of 2.5 succeeded")
	}
}

// Outside a pod InCluster says so, naming the variables it looked for.
func TestInClusterOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, _, err := kubestore.InCluster(); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Fatalf("InCluster outside a pod: %v", err)
	}
}

// An Update writes back every field of the Lease, known to the Store or
// not: an operator's labels, annotations and finalizers survive acquire,
// renew, release and a forced release.
func TestUpdatesKeepWhatTheStoreDoesNotKnow(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	s := newStore(t, c, ns)
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	if _, err := s.Acquire(ctx, key, tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	leases := c.CoordinationV1().Leases(ns)
	l, err := leases.Get(ctx, s.Name(key), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Labels["team"] = "payments"
	l.Annotations["example.com/note"] = "keep me"
	l.Finalizers = []string{"example.com/keep"}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // let the namespace go
		if l, err := leases.Get(ctx, s.Name(key), metav1.GetOptions{}); err == nil {
			l.Finalizers = nil
			_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
	})
	other := newStore(t, c, ns) // reads before it writes
	steps := []struct {
		name string
		op   func() error
	}{
		{"renew", func() error { return s.Renew(ctx, key, tok, time.Minute) }},
		{"release", func() error { return s.Release(ctx, key, tok) }},
		{"acquire", func() error { _, err := other.Acquire(ctx, key, tok, time.Minute); return err }},
		{"force release", func() error { _, err := other.ForceRelease(ctx, key, "test", "me"); return err }},
	}
	for _, st := range steps {
		if err := st.op(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		l, err := leases.Get(ctx, s.Name(key), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Labels["team"] != "payments" || l.Annotations["example.com/note"] != "keep me" || len(l.Finalizers) != 1 {
			t.Fatalf("after %s: labels %v, annotations %v, finalizers %v; the operator's fields are gone", st.name, l.Labels, l.Annotations, l.Finalizers)
		}
	}
}

// A watch whose connection breaks (the reply of another request on it is
// lost, and the connection with it) is made again by the Store, which then
// wakes its waiters once, since a release may have gone unseen; a release
// after that wakes them as before.
func TestBrokenWatchIsMadeAgain(t *testing.T) {
	c := newClient(t)
	ns := namespace(t, c)
	srv := server(t)
	proxy := testserver.StartProxy(t, strings.TrimPrefix(srv.Host(), "https://"))
	dir := t.TempDir()
	cluster := fmt.Sprintf("server: https://%s\ncertificate-authority-data: %s", proxy.Addr(), base64.StdEncoding.EncodeToString(srv.CAData()))
	path := writeFile(t, dir, "kc.yaml", kubeconfigFor(cluster, "token: "+srv.BearerToken(), ns), 0o600)
	waiter := storeFrom(t, path, ns)
	holder := newStore(t, c, ns) // not through the proxy
	ctx, key, tok := t.Context(), storetest.Key(t), leasehold.NewToken()
	if _, err := holder.Acquire(ctx, key, tok, time.Minute); err != nil {
		t.Fatal(err)
	}
	wake, stop, err := waiter.WatchReleases(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	drain := func() { // the watch's first event shows the Lease as it is: held, no wake-up; drain any
		for {
			select {
			case <-wake:
			default:
				return
			}
		}
	}
	drain()
	// Inspect and the watch share one HTTP/2 connection. The cut swallows
	// whichever reply comes next on it: Inspect's, or the watch's first
	// event when that arrives after the drain. Either way the connection,
	// and with it the watch, breaks; only a cut that swallowed nothing
	// means the test proved nothing.
	proxy.CutNextReply()
	if _, err := waiter.Inspect(ctx, key); err == nil && proxy.PendingCuts() != 0 {
		t.Fatal("Inspect through the cut connection succeeded and the cut swallowed no reply")
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after the watch's connection broke")
	}
	if info, err := waiter.Inspect(ctx, key); err != nil || !info.Held {
		t.Fatalf("Inspect after the break: %+v, %v; want the key still held", info, err)
	}
	// The watch is back: a release wakes the waiter.
	deadline := time.After(10 * time.Second)
	if err := holder.Release(ctx, key, tok); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-deadline:
		t.Fatal("no wake-up for the release after the watch was made again")
	}
}
