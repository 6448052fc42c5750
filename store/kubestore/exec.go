package kubestore

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// execConfig is a kubeconfig user's exec credential plugin.
type execConfig struct {
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	APIVersion         string `yaml:"apiVersion"`
	InstallHint        string `yaml:"installHint"`
	ProvideClusterInfo bool   `yaml:"provideClusterInfo"`
	InteractiveMode    string `yaml:"interactiveMode"`
}

// The API versions of ExecCredential a plugin may speak.
var execAPIVersions = map[string]bool{
	"client.authentication.k8s.io/v1":      true,
	"client.authentication.k8s.io/v1beta1": true,
}

// execTimeout bounds one run of a plugin within the deadline of the request
// that needs its credential, if any: long enough for a cloud provider's
// token service, short enough that a hung plugin is an error, not a stuck
// Store.
const execTimeout = time.Minute

// execWaitDelay is how long a plugin's output is waited for after the
// plugin is killed at its deadline.
const execWaitDelay = time.Second

// execPlugin runs a credential plugin when its last credential is missing,
// expired or refused, and keeps that credential until then.
type execPlugin struct {
	cfg  *execConfig
	path string // the command, resolved against the kubeconfig's directory when relative with a '/'
	info []byte // KUBERNETES_EXEC_INFO

	mu      sync.Mutex
	tok     string
	cert    *tls.Certificate
	expires time.Time // zero: until refused
	have    bool
}

// newExecPlugin makes the plugin of cfg, resolving its command against dir;
// cluster is what the plugin is told of the cluster when it asks
// (provideClusterInfo).
func newExecPlugin(cfg *execConfig, dir string, cluster map[string]any) (*execPlugin, error) {
	if cfg.Command == "" {
		return nil, errors.New("user exec has no command")
	}
	if !execAPIVersions[cfg.APIVersion] {
		return nil, fmt.Errorf("user exec apiVersion %q: client.authentication.k8s.io/v1 or v1beta1 is supported", cfg.APIVersion)
	}
	if cfg.InteractiveMode == "Always" {
		return nil, errors.New("user exec interactiveMode Always: a lock store runs without a terminal")
	}
	path := cfg.Command
	if strings.Contains(path, string(filepath.Separator)) && !filepath.IsAbs(path) {
		path = filepath.Join(dir, path) // as client-go: relative to the kubeconfig
	}
	spec := map[string]any{"interactive": false}
	if cfg.ProvideClusterInfo {
		spec["cluster"] = cluster
	}
	info, err := json.Marshal(map[string]any{"apiVersion": cfg.APIVersion, "kind": "ExecCredential", "spec": spec})
	if err != nil {
		return nil, err
	}
	return &execPlugin{cfg: cfg, path: path, info: info}, nil
}

// token implements authTransport.token: the plugin's token, "" when it
// gives a client certificate instead.
func (p *execPlugin) token(ctx context.Context, stale bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refresh(ctx, stale); err != nil {
		return "", err
	}
	return p.tok, nil
}

// certificate implements tls.Config.GetClientCertificate.
func (p *execPlugin) certificate(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	ctx, cancel := context.WithTimeout(cri.Context(), execTimeout)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.refresh(ctx, false); err != nil {
		return nil, err
	}
	if p.cert == nil {
		return &tls.Certificate{}, nil // no certificate: the token authenticates
	}
	return p.cert, nil
}

// refresh runs the plugin unless its credential is still good; the caller
// holds p.mu.
func (p *execPlugin) refresh(ctx context.Context, stale bool) error {
	if p.have && !stale && (p.expires.IsZero() || time.Now().Before(p.expires)) {
		return nil
	}
	cmd := exec.CommandContext(ctx, p.path, p.cfg.Args...)
	cmd.Env = os.Environ()
	for _, e := range p.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(p.info))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr // a plugin's own messages are for the user, as under kubectl
	// A plugin killed at the deadline may leave children holding its
	// output open: stop waiting for them soon after.
	cmd.WaitDelay = execWaitDelay
	if err := cmd.Run(); err != nil {
		hint := ""
		if p.cfg.InstallHint != "" && errors.Is(err, exec.ErrNotFound) {
			hint = " (" + strings.TrimSpace(p.cfg.InstallHint) + ")"
		}
		return fmt.Errorf("exec credential plugin %s: %v%s", p.cfg.Command, err, hint)
	}
	var cred struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Status     *struct {
			Token                 string    `json:"token"`
			ClientCertificateData string    `json:"clientCertificateData"`
			ClientKeyData         string    `json:"clientKeyData"`
			ExpirationTimestamp   time.Time `json:"expirationTimestamp"`
		} `json:"status"`
	}
	// The output holds the credential: the messages below never quote it.
	if err := json.Unmarshal(out.Bytes(), &cred); err != nil || cred.Kind != "ExecCredential" {
		return fmt.Errorf("exec credential plugin %s: its output is not an ExecCredential", p.cfg.Command)
	}
	if cred.APIVersion != p.cfg.APIVersion {
		return fmt.Errorf("exec credential plugin %s: answered apiVersion %q, asked %q", p.cfg.Command, cred.APIVersion, p.cfg.APIVersion)
	}
	st := cred.Status
	if st == nil || st.Token == "" && st.ClientCertificateData == "" {
		return fmt.Errorf("exec credential plugin %s: its ExecCredential has neither a token nor a client certificate", p.cfg.Command)
	}
	var cert *tls.Certificate
	if st.ClientCertificateData != "" || st.ClientKeyData != "" {
		c, err := tls.X509KeyPair([]byte(st.ClientCertificateData), []byte(st.ClientKeyData))
		if err != nil {
			return fmt.Errorf("exec credential plugin %s: its client certificate and key: %v", p.cfg.Command, err)
		}
		cert = &c
	}
	p.tok, p.cert, p.expires, p.have = st.Token, cert, st.ExpirationTimestamp, true
	return nil
}
