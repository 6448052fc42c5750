package kubestore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
)

// kubeconfig is the part of a kubeconfig file (clientcmd's v1 Config) that
// says how to reach and authenticate to a cluster.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string    `yaml:"name"`
		Cluster kcCluster `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		Name string `yaml:"name"`
		User kcUser `yaml:"user"`
	} `yaml:"users"`
	Contexts []struct {
		Name    string    `yaml:"name"`
		Context kcContext `yaml:"context"`
	} `yaml:"contexts"`
}

type kcCluster struct {
	Server                   string `yaml:"server"`
	TLSServerName            string `yaml:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
	CertificateAuthority     string `yaml:"certificate-authority"`
	CertificateAuthorityData string `yaml:"certificate-authority-data"`
	ProxyURL                 string `yaml:"proxy-url"`
}

type kcUser struct {
	ClientCertificate     string              `yaml:"client-certificate"`
	ClientCertificateData string              `yaml:"client-certificate-data"`
	ClientKey             string              `yaml:"client-key"`
	ClientKeyData         string              `yaml:"client-key-data"`
	Token                 string              `yaml:"token"`
	TokenFile             string              `yaml:"tokenFile"`
	Username              string              `yaml:"username"`
	Password              string              `yaml:"password"`
	Impersonate           string              `yaml:"as"`
	ImpersonateUID        string              `yaml:"as-uid"`
	ImpersonateGroups     []string            `yaml:"as-groups"`
	ImpersonateExtra      map[string][]string `yaml:"as-user-extra"`
	AuthProvider          *struct {
		Name string `yaml:"name"`
	} `yaml:"auth-provider"`
	Exec *execConfig `yaml:"exec"`
}

type kcContext struct {
	Cluster   string `yaml:"cluster"`
	User      string `yaml:"user"`
	Namespace string `yaml:"namespace"`
}

// LoadKubeconfig reads the kubeconfig file at path and returns the Config of
// its current context, and that context's namespace ("" when it names
// none). It understands what kubectl's kubeconfigs say about a cluster
// (server, certificate-authority[-data], insecure-skip-tls-verify,
// tls-server-name, proxy-url) and a user: client certificates (files or
// data), token or tokenFile (read again every minute, as client-go does),
// username and password, impersonation (as, as-uid, as-groups) and exec
// credential plugins (client.authentication.k8s.io v1 and v1beta1, run
// without a terminal). Paths are relative to the file's directory. It
// refuses what it does not support (auth-provider, as-user-extra) with an
// error naming the field, rather than connect without it. Errors name the
// file and the field at fault, never a credential.
func LoadKubeconfig(path string) (Config, string, error) {
	fail := func(format string, args ...any) (Config, string, error) {
		return Config{}, "", fmt.Errorf("kubestore: kubeconfig %s: "+format, append([]any{path}, args...)...)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fail("%w", pe.Err) // the path is said once, first
		}
		return fail("%w", err)
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// Its messages quote the values (a token, say): name the lines.
			lines := make([]string, len(te.Errors))
			for i, e := range te.Errors {
				lines[i], _, _ = strings.Cut(e, ":")
			}
			return fail("not a kubeconfig: a value of the wrong type at %s", strings.Join(lines, ", "))
		}
		return fail("not a kubeconfig: %v", err)
	}
	if kc.CurrentContext == "" {
		return fail("no current-context")
	}
	var ctx *kcContext
	for i := range kc.Contexts {
		if kc.Contexts[i].Name == kc.CurrentContext {
			ctx = &kc.Contexts[i].Context
		}
	}
	if ctx == nil {
		return fail("current-context %q is not among its contexts", kc.CurrentContext)
	}
	var cluster *kcCluster
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == ctx.Cluster {
			cluster = &kc.Clusters[i].Cluster
		}
	}
	if cluster == nil {
		return fail("context %q: cluster %q is not among its clusters", kc.CurrentContext, ctx.Cluster)
	}
	user := &kcUser{}
	if ctx.User != "" {
		user = nil
		for i := range kc.Users {
			if kc.Users[i].Name == ctx.User {
				user = &kc.Users[i].User
			}
		}
		if user == nil {
			return fail("context %q: user %q is not among its users", kc.CurrentContext, ctx.User)
		}
	}
	cfg, err := clientConfig(filepath.Dir(path), cluster, user)
	if err != nil {
		return fail("context %q: %v", kc.CurrentContext, err)
	}
	return cfg, ctx.Namespace, nil
}

// In a pod: the service account's files, and the API server's address in
// the environment (what client-go's rest.InClusterConfig reads).
const (
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	envServiceHost    = "KUBERNETES_SERVICE_HOST"
	envServicePort    = "KUBERNETES_SERVICE_PORT"
)

// InCluster returns the Config of a pod's service account, and the pod's
// namespace: the API server named by the KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT environment variables, the service account's CA
// and token (read again every minute: kubelet rotates it). It fails outside
// a pod.
func InCluster() (Config, string, error) {
	host, port := os.Getenv(envServiceHost), os.Getenv(envServicePort)
	if host == "" || port == "" {
		return Config{}, "", fmt.Errorf("kubestore: not in a pod: %s or %s is not set", envServiceHost, envServicePort)
	}
	cluster := &kcCluster{
		Server:               "https://" + net.JoinHostPort(host, port),
		CertificateAuthority: filepath.Join(serviceAccountDir, "ca.crt"),
	}
	user := &kcUser{TokenFile: filepath.Join(serviceAccountDir, "token")}
	if _, err := os.Stat(user.TokenFile); err != nil {
		return Config{}, "", fmt.Errorf("kubestore: in a pod: %w", err)
	}
	cfg, err := clientConfig("/", cluster, user)
	if err != nil {
		return Config{}, "", fmt.Errorf("kubestore: in a pod: %v", err)
	}
	ns, err := os.ReadFile(filepath.Join(serviceAccountDir, "namespace"))
	if err != nil {
		return Config{}, "", fmt.Errorf("kubestore: in a pod: %w", err)
	}
	return cfg, strings.TrimSpace(string(ns)), nil
}

// Transport sizing of the clients LoadKubeconfig and InCluster make: HTTP/2
// carries every request and watch of a Store on one connection; with
// HTTP/1.1 (a proxy that does not speak HTTP/2) each watch holds a
// connection, and the idle pool keeps enough for a burst of waiters without
// a TLS handshake each, as client-go's 25 does.
const (
	maxIdleConnsPerHost = 25
	idleConnTimeout     = 90 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	dialTimeout         = 30 * time.Second
	keepAlive           = 30 * time.Second
)

// execInfo is the cluster as an exec plugin is told of it
// (KUBERNETES_EXEC_INFO's spec.cluster).
func (c *kcCluster) execInfo() map[string]any {
	info := map[string]any{
		"server":                   c.Server,
		"tls-server-name":          c.TLSServerName,
		"insecure-skip-tls-verify": c.InsecureSkipTLSVerify,
		"proxy-url":                c.ProxyURL,
	}
	if c.CertificateAuthorityData != "" {
		info["certificate-authority-data"] = c.CertificateAuthorityData
	}
	return info
}

// clientConfig makes the Config of a cluster and a user; relative paths
// are relative to dir.
func clientConfig(dir string, c *kcCluster, u *kcUser) (Config, error) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if c.Server == "" {
		return Config{}, errors.New("the cluster has no server")
	}
	if _, err := parseServer(c.Server); err != nil {
		return Config{}, fmt.Errorf("cluster server %w", err)
	}
	tc := &tls.Config{ServerName: c.TLSServerName, MinVersion: tls.VersionTLS12}
	switch {
	case c.InsecureSkipTLSVerify && (c.CertificateAuthority != "" || c.CertificateAuthorityData != ""):
		return Config{}, errors.New("insecure-skip-tls-verify together with a certificate-authority: choose one")
	case c.InsecureSkipTLSVerify:
		tc.InsecureSkipVerify = true
	case c.CertificateAuthority != "" || c.CertificateAuthorityData != "":
		pem, err := material(c.CertificateAuthorityData, "certificate-authority-data", abs(c.CertificateAuthority), "certificate-authority")
		if err != nil {
			return Config{}, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return Config{}, errors.New("certificate-authority: no PEM certificate in it")
		}
		tc.RootCAs = pool
	}
	switch {
	case u.AuthProvider != nil:
		return Config{}, fmt.Errorf("user auth-provider %q is not supported: use an exec credential plugin (kubectl's, or the provider's)", u.AuthProvider.Name)
	case len(u.ImpersonateExtra) > 0:
		return Config{}, errors.New("user as-user-extra is not supported")
	case u.Exec != nil && (u.Token != "" || u.TokenFile != "" || u.Username != ""):
		return Config{}, errors.New("user has exec together with token, tokenFile or username: choose one")
	case (u.Token != "" || u.TokenFile != "") && (u.Username != "" || u.Password != ""):
		return Config{}, errors.New("user has a token together with username and password: choose one")
	case (u.ClientCertificate != "" || u.ClientCertificateData != "") != (u.ClientKey != "" || u.ClientKeyData != ""):
		return Config{}, errors.New("user has a client certificate without its key, or a key without its certificate")
	}
	if u.ClientCertificate != "" || u.ClientCertificateData != "" {
		certPEM, err := material(u.ClientCertificateData, "client-certificate-data", abs(u.ClientCertificate), "client-certificate")
		if err != nil {
			return Config{}, err
		}
		keyPEM, err := material(u.ClientKeyData, "client-key-data", abs(u.ClientKey), "client-key")
		if err != nil {
			return Config{}, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// crypto/tls's messages say what is wrong with the PEM, never its bytes.
			return Config{}, fmt.Errorf("client-certificate and client-key: %v", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	proxy := http.ProxyFromEnvironment
	if c.ProxyURL != "" {
		pu, err := url.Parse(c.ProxyURL)
		if err != nil || pu.Host == "" || (pu.Scheme != "http" && pu.Scheme != "https") {
			return Config{}, fmt.Errorf("cluster proxy-url %q: an http(s)://host[:port] URL is supported", redactURL(c.ProxyURL))
		}
		proxy = http.ProxyURL(pu)
	}
	base := &http.Transport{
		Proxy:               proxy,
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive}).DialContext,
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     idleConnTimeout,
	}
	auth := &authTransport{next: base, impersonate: u.Impersonate, impersonateUID: u.ImpersonateUID, impersonateGroups: u.ImpersonateGroups}
	switch {
	case u.Token != "":
		auth.token = func(context.Context, bool) (string, error) { return u.Token, nil }
	case u.TokenFile != "":
		f := &tokenFile{path: abs(u.TokenFile)}
		if _, err := f.get(context.Background(), true); err != nil {
			return Config{}, err
		}
		auth.token = f.get
	case u.Username != "" || u.Password != "":
		auth.username, auth.password = u.Username, u.Password
	case u.Exec != nil:
		p, err := newExecPlugin(u.Exec, dir, c.execInfo())
		if err != nil {
			return Config{}, err
		}
		auth.token = p.token
		tc.GetClientCertificate = p.certificate
	}
	// Always through auth, even with nothing to add: a request clone is
	// nothing beside the round trip, and no credential can be left out by
	// a condition that forgets one.
	return Config{Server: c.Server, Client: &http.Client{Transport: auth, CheckRedirect: noRedirects}}, nil
}

// noRedirects makes a client return a redirect as the answer instead of
// following it. The Lease API never redirects, and the client adds its
// credentials to every request it sends, so following one to another host
// would hand that host the token.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// material returns inline base64 data, or the file's contents.
func material(data, dataField, file, fileField string) ([]byte, error) {
	if data != "" {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(data))
		if err != nil {
			return nil, fmt.Errorf("%s is not base64", dataField)
		}
		return b, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", fileField, err)
	}
	return b, nil
}

// authTransport adds a user's credentials and impersonation to each request.
type authTransport struct {
	next http.RoundTripper
	// token returns the bearer token, read again when stale (a 401 said
	// the last one was refused); nil for none.
	token              func(ctx context.Context, stale bool) (string, error)
	username, password string
	impersonate        string
	impersonateUID     string
	impersonateGroups  []string
	stale              sync.Mutex // guards refused
	refused            bool
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if t.token != nil {
		t.stale.Lock()
		stale := t.refused
		t.refused = false
		t.stale.Unlock()
		tok, err := t.token(req.Context(), stale)
		if err != nil {
			return nil, err
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	} else if t.username != "" || t.password != "" {
		req.SetBasicAuth(t.username, t.password)
	}
	if t.impersonate != "" {
		req.Header.Set("Impersonate-User", t.impersonate)
	}
	if t.impersonateUID != "" {
		req.Header.Set("Impersonate-Uid", t.impersonateUID)
	}
	for _, g := range t.impersonateGroups {
		req.Header.Add("Impersonate-Group", g)
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && t.token != nil {
		t.stale.Lock()
		t.refused = true // the next request gets a fresh token
		t.stale.Unlock()
	}
	return resp, err
}

// tokenFileRefresh is how long a token read from a file is used before the
// file is read again: client-go's period. Kubelet rotates a projected
// service account token well before it expires (at 80 % of its life, an
// hour at the least), so a minute's delay never sends an expired one.
const tokenFileRefresh = time.Minute

// tokenFile is a bearer token kept in a file.
type tokenFile struct {
	path string
	mu   sync.Mutex
	tok  string
	read time.Time
}

func (f *tokenFile) get(_ context.Context, stale bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tok != "" && !stale && time.Since(f.read) < tokenFileRefresh {
		return f.tok, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		if f.tok != "" {
			return f.tok, nil // keep the last good token while the file is being replaced
		}
		return "", fmt.Errorf("tokenFile: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("tokenFile %s is empty", f.path)
	}
	f.tok, f.read = tok, time.Now()
	return tok, nil
}
