package cli

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/kubestore"
)

// openKube makes a backend on the Kubernetes API server of the kubeconfig
// at path (its current context), whose kubestore keeps its Leases in
// namespace ("" for the context's namespace, or "default") under names that
// start with prefix. The kubeconfig's credentials never appear in messages:
// only its path, the server's URL and the namespace do.
func openKube(ctx context.Context, name, path, namespace, prefix string, timeout time.Duration) (*backend, error) {
	// LoadKubeconfig's messages name the file and the field at fault, and
	// refuse what it cannot honour (an auth-provider) rather than connect
	// without it.
	cfg, ctxNamespace, err := kubestore.LoadKubeconfig(path)
	if err != nil {
		// "kubeconfig PATH: what is wrong", as every flag's message names
		// the flag and then its value.
		return nil, usagef("%s: %s", name, strings.TrimPrefix(err.Error(), "kubestore: "))
	}
	fromContext := namespace == "" && ctxNamespace != ""
	if namespace == "" {
		namespace = cmp.Or(ctxNamespace, "default")
	}
	// New refuses a bad --kube-namespace or --kube-prefix.
	st, err := kubestore.New(cfg, namespace, kubestore.WithNamePrefix(prefix))
	if ae := (*leasehold.ArgumentError)(nil); errors.As(err, &ae) {
		switch ae.Arg {
		case "namespace":
			if fromContext {
				return nil, usagef("%s: the namespace of the kubeconfig's context: %s", name, ae.Reason)
			}
			return nil, usagef("--kube-namespace: %s (kubeconfig %s)", ae.Reason, path)
		case "WithNamePrefix":
			return nil, usagef("--kube-prefix: %s", ae.Reason)
		}
	}
	if err != nil {
		return nil, usagef("%s: %v (kubeconfig %s)", name, err, path)
	}
	b := &backend{kind: "kube", where: cfg.Server + " namespace " + namespace, timeout: timeout, store: st, kubeNamespace: namespace}
	// A refused server fails at once, naming the store and its flag, as
	// every other store's does (dialProbe); the server was checked by
	// LoadKubeconfig, and its host and port hold no credentials.
	if u, err := url.Parse(cfg.Server); err == nil && u.Host != "" {
		if !validPort(u.Port()) {
			st.Close()
			return nil, usagef("%s: the server of the kubeconfig's context has a port that is not a number from 0 to 65535 (kubeconfig %s)", name, path)
		}
		port := u.Port()
		if port == "" {
			port = map[bool]string{true: "80", false: "443"}[u.Scheme == "http"]
		}
		if err := dialProbe(ctx, name, b, []string{net.JoinHostPort(u.Hostname(), port)}); err != nil {
			st.Close()
			return nil, err
		}
	}
	b.close = func() { st.Close() }
	// A Lease lasts whole seconds, counted by each observer from its own
	// first look: the drill fits its TTL to that.
	b.leaseTTL = func(_ context.Context, ttl time.Duration) (time.Duration, error) {
		return (ttl + time.Second - 1) / time.Second * time.Second, nil
	}
	return b, nil
}
