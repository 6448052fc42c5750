package testserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// This file starts a real kube-apiserver for tests, on an etcd of its own
// (NewEtcdServer). Debian has no package for it, so it is built from Go
// modules at a pinned version by scripts/kube-apiserver.sh (make deps runs
// it) into a cache directory outside the repository; KubeAPIServerPath finds
// it there.
//
// The server is set up as a test cluster needs it and no more: one static
// bearer token in the group system:masters, every request allowed
// (--authorization-mode=AlwaysAllow), a self-signed serving certificate for
// 127.0.0.1 that is also the CA the client trusts, a service-account key
// pair made here, and a service IP range that no traffic ever goes to. The
// keys and certificate are made with Go's crypto packages at each start: no
// openssl needed. Everything is in one temporary directory, removed by
// Close.

const (
	// KubeVersion is the kube-apiserver release the tests run against; it
	// must match KUBE_VERSION in scripts/kube-apiserver.sh, which builds it.
	KubeVersion = "v1.36.3"

	// kubeReadyTimeout bounds the wait for /readyz to answer ok. It answers
	// 2.3–2.7 s after the start on an idle 2-core machine; a loaded one
	// (the whole test suite running) can take several times that.
	kubeReadyTimeout = 60 * time.Second
	// kubePollInterval is the pause between two readiness checks.
	kubePollInterval = 50 * time.Millisecond
	// kubeProbeTimeout bounds one HTTP request of a readiness check.
	kubeProbeTimeout = 2 * time.Second
	// kubeStopTimeout is how long the server gets to exit after SIGTERM
	// before SIGKILL; it stops in about 1.2 s.
	kubeStopTimeout = 10 * time.Second
	// kubeCertLifetime is the validity of the serving certificate: far
	// longer than any test, short enough to be obviously a test's.
	kubeCertLifetime = 24 * time.Hour

	// envKubeAPIServer names a kube-apiserver binary to use instead of the
	// cached build.
	envKubeAPIServer = "LEASEHOLD_KUBE_APISERVER"
	// envCache is the cache directory scripts/kube-apiserver.sh and
	// scripts/etcd.sh build into.
	envCache = "LEASEHOLD_CACHE"
)

// ErrKubeAPIServerNotFound is returned (wrapped) when no kube-apiserver
// binary is found; see KubeAPIServerPath.
var ErrKubeAPIServerNotFound = errors.New("testserver: kube-apiserver " + KubeVersion +
	" not found: run scripts/kube-apiserver.sh (make deps does) to build it")

// KubeAPIServerPath returns the kube-apiserver binary the tests use:
// $LEASEHOLD_KUBE_APISERVER if set, else kube-apiserver in the directory
// kube-apiserver-VERSION of the cache (cacheDir: $LEASEHOLD_CACHE, or
// leasehold in $XDG_CACHE_HOME or ~/.cache) where
// scripts/kube-apiserver.sh builds it. The error wraps
// ErrKubeAPIServerNotFound when the file is not there.
func KubeAPIServerPath() (string, error) {
	path := os.Getenv(envKubeAPIServer)
	if path == "" {
		dir, err := cacheDir()
		if err != nil {
			return "", fmt.Errorf("%w (%v)", ErrKubeAPIServerNotFound, err)
		}
		path = filepath.Join(dir, "kube-apiserver-"+KubeVersion, "kube-apiserver")
	}
	if !executable(path) {
		return "", fmt.Errorf("%w (looked for %s)", ErrKubeAPIServerNotFound, path)
	}
	return path, nil
}

// cacheDir is where scripts/kube-apiserver.sh and scripts/etcd.sh build
// (scripts/gobuild.sh), by the same rule on every system: $LEASEHOLD_CACHE,
// else leasehold in $XDG_CACHE_HOME, else in ~/.cache. It must be an
// absolute path: a test runs in its package's directory, the scripts in
// the repository's.
func cacheDir() (string, error) {
	dir, from := os.Getenv(envCache), "$"+envCache
	if dir == "" {
		dir, from = os.Getenv("XDG_CACHE_HOME"), "$XDG_CACHE_HOME"
		if dir == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("no cache directory: %w", err)
			}
			dir, from = filepath.Join(home, ".cache"), "$HOME"
		}
		dir = filepath.Join(dir, "leasehold")
	}
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("the cache directory %s (from %s) is not an absolute path", dir, from)
	}
	return dir, nil
}

// SkipWithoutKubeAPIServer skips the test when no kube-apiserver binary is
// found, unless the environment says CI=true: there it fails the test, since
// in CI no backend test may skip (make test builds the binary first).
func SkipWithoutKubeAPIServer(tb testing.TB) {
	tb.Helper()
	if _, err := KubeAPIServerPath(); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%v", err)
		}
		tb.Skipf("%v", err)
	}
}

// KubeAPIServer is a kube-apiserver on 127.0.0.1 with its own etcd. Its
// methods are safe for concurrent use.
type KubeAPIServer struct {
	etcd  *EtcdServer
	port  int
	dir   string // temporary directory, removed by Close
	token string // the bearer token of system:masters; never in a message
	ca    []byte // PEM of the serving certificate, which is its own CA
	supervisor
}

// NewKubeAPIServer starts an etcd and a kube-apiserver on it, on free ports
// of 127.0.0.1, and waits (at most 60 s) until /readyz answers ok and the
// namespace "default" exists. The caller
// must call Close. It fails with an error wrapping ErrKubeAPIServerNotFound
// when there is no binary (see KubeAPIServerPath).
func NewKubeAPIServer() (*KubeAPIServer, error) {
	bin, err := KubeAPIServerPath()
	if err != nil {
		return nil, err
	}
	etcd, err := NewEtcdServer()
	if err != nil {
		return nil, err
	}
	s, err := onFreePorts(1, func(ports []int) (*KubeAPIServer, error) {
		s, err := newKubeAPIServer(bin, etcd, ports[0])
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		err = s.run(s.program(), time.Now().Add(kubeReadyTimeout))
		s.mu.Unlock()
		if err != nil {
			os.RemoveAll(s.dir)
			return nil, err
		}
		return s, nil
	})
	if err != nil {
		etcd.Close()
		return nil, err
	}
	return s, nil
}

// StartKubeAPIServer starts a kube-apiserver (and its etcd) for a test or
// benchmark and registers tb.Cleanup to close it. Without a binary it skips
// the test, or fails it when CI=true (see SkipWithoutKubeAPIServer); any
// other failure to start fails the test.
func StartKubeAPIServer(tb testing.TB) *KubeAPIServer {
	tb.Helper()
	SkipWithoutKubeAPIServer(tb)
	s, err := NewKubeAPIServer()
	return started(tb, s, err)
}

// newKubeAPIServer makes the directory, keys, certificate and token file of
// a server on port, and its command line. Nothing is started yet.
func newKubeAPIServer(bin string, etcd *EtcdServer, port int) (*KubeAPIServer, error) {
	dir, err := os.MkdirTemp("", "leasehold-kube-")
	if err != nil {
		return nil, fmt.Errorf("testserver: %w", err)
	}
	s := &KubeAPIServer{etcd: etcd, port: port, dir: dir, token: rand.Text()}
	fail := func(err error) (*KubeAPIServer, error) {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testserver: kube-apiserver files: %w", err)
	}
	certPEM, keyPEM, err := selfSignedCert()
	if err != nil {
		return fail(err)
	}
	s.ca = certPEM
	saKey, saPub, err := serviceAccountKeys()
	if err != nil {
		return fail(err)
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	// The token file is CSV: token, user name, user id, "groups".
	for name, data := range map[string][]byte{
		"serving.crt": certPEM,
		"serving.key": keyPEM,
		"sa.key":      saKey,
		"sa.pub":      saPub,
		"tokens.csv":  []byte(s.token + `,leasehold-test,leasehold-test,"system:masters"` + "\n"),
	} {
		if err := os.WriteFile(path(name), data, 0o600); err != nil {
			return fail(err)
		}
	}
	s.prog = program{
		name: "kube-apiserver", addr: s.addr(), bin: bin,
		args: []string{
			"--etcd-servers=" + etcd.Endpoints()[0],
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + path("certs"),
			"--tls-cert-file=" + path("serving.crt"),
			"--tls-private-key-file=" + path("serving.key"),
			"--token-auth-file=" + path("tokens.csv"),
			"--authorization-mode=AlwaysAllow",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-signing-key-file=" + path("sa.key"),
			"--service-account-key-file=" + path("sa.pub"),
			// A setting the server requires; no traffic goes there.
			"--service-cluster-ip-range=10.0.0.0/24",
			"--profiling=false",
		},
		dir: dir, env: kubeEnv(), out: path("kube-apiserver.log"), logs: []string{path("kube-apiserver.log")},
		ready: s.check, readyWhat: "answer /readyz with ok and have the namespace default", poll: kubePollInterval,
		exitCause:  portInUse,
		stopSignal: syscall.SIGTERM, stopGrace: kubeStopTimeout,
	}
	return s, nil
}

// kubeEnv is our environment without KUBECONFIG and proxy settings, which
// must not change what the server does.
func kubeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// program is how the supervisor runs this server.
func (s *KubeAPIServer) program() program { return s.prog }

// check returns nil when the server answers GET /readyz with 200 "ok" and
// the namespace "default" exists (the server creates it just after it is
// ready; tests and programs may use it at once). The TLS handshake checks
// the certificate made for this server, so another process that took the
// port does not pass.
func (s *KubeAPIServer) check(ctx context.Context) error {
	client, err := s.httpClient()
	if err != nil {
		return err
	}
	for _, path := range []string{"/readyz", "/api/v1/namespaces/default"} {
		code, body, err := s.get(ctx, client, path)
		if err != nil {
			return err
		}
		if code != http.StatusOK || path == "/readyz" && strings.TrimSpace(string(body)) != "ok" {
			return fmt.Errorf("%s: %d %s", path, code, lastLine(body))
		}
	}
	return nil
}

// get sends GET path with the token and returns the status and the start of
// the body.
func (s *KubeAPIServer) get(ctx context.Context, client *http.Client, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, kubeProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Host()+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, body, nil
}

// lastLine is the last non-empty line of a /readyz answer: the verdict.
func lastLine(body []byte) string {
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	return lines[len(lines)-1]
}

// httpClient is a client that trusts the server's certificate only, keeps
// no connection alive and uses no proxy.
func (s *KubeAPIServer) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.ca) {
		return nil, errors.New("testserver: kube-apiserver: bad CA certificate")
	}
	return &http.Client{
		Timeout: kubeProbeTimeout,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		},
	}, nil
}

// addr is "127.0.0.1:PORT".
func (s *KubeAPIServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Host returns the server's URL, "https://127.0.0.1:PORT": rest.Config.Host.
func (s *KubeAPIServer) Host() string { return "https://" + s.addr() }

// BearerToken returns the token of a user in system:masters:
// rest.Config.BearerToken. It is a secret of this test server; do not log it.
func (s *KubeAPIServer) BearerToken() string { return s.token }

// CAData returns the PEM of the certificate that signs the server's serving
// certificate (it is that certificate): rest.Config.TLSClientConfig.CAData.
func (s *KubeAPIServer) CAData() []byte { return bytes.Clone(s.ca) }

// Etcd returns the server's etcd.
func (s *KubeAPIServer) Etcd() *EtcdServer { return s.etcd }

// Pid returns the process id of the running kube-apiserver.
func (s *KubeAPIServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Kubeconfig returns a kubeconfig (YAML) for the server with its token and
// CA and the given default namespace ("" for none), for kubectl,
// clientcmd.RESTConfigFromKubeConfig or a CLI's --kube flag. It holds the
// token: write it with mode 0600 (WriteKubeconfig does).
func (s *KubeAPIServer) Kubeconfig(namespace string) []byte {
	ns := ""
	if namespace != "" {
		ns = "\n    namespace: " + strconv.Quote(namespace)
	}
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: leasehold-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: leasehold-test
  user:
    token: %s
contexts:
- name: leasehold-test
  context:
    cluster: leasehold-test
    user: leasehold-test%s
current-context: leasehold-test
`, s.Host(), base64.StdEncoding.EncodeToString(s.ca), s.token, ns)
}

// WriteKubeconfig writes Kubeconfig(namespace) to path with mode 0600.
func (s *KubeAPIServer) WriteKubeconfig(path, namespace string) error {
	if err := os.WriteFile(path, s.Kubeconfig(namespace), 0o600); err != nil {
		return fmt.Errorf("testserver: kubeconfig: %w", err)
	}
	return nil
}

// Close kills the server (SIGKILL), waits for it to exit, closes its etcd
// and removes its directory. Calling Close again does nothing and returns
// nil.
func (s *KubeAPIServer) Close() error {
	err := s.close(s.kill, s.dir)
	return errors.Join(err, s.etcd.Close())
}

// selfSignedCert makes an ECDSA P-256 key and a certificate for 127.0.0.1
// and localhost that is its own CA, both PEM-encoded.
func selfSignedCert() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "leasehold test kube-apiserver"},
		NotBefore:             now.Add(-time.Hour), // a clock a little behind still accepts it
		NotAfter:              now.Add(kubeCertLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// serviceAccountKeys makes the ECDSA P-256 key pair that signs and checks
// service-account tokens (ES256): the private key as PKCS #8 PEM, the public
// key as PKIX PEM (the server reads no public key from a PKCS #8 file).
func serviceAccountKeys() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}
