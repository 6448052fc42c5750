package cli

import (
	"context"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/leasehold/leasehold/store/kubestore"
)

// Request budget of the CLI's Kubernetes client. client-go's default (5
// requests a second, bursts of 10) would stall a drill's workers and a long
// ls; an operator's tool may ask more of an API server that serves
// controllers all day.
const (
	kubeQPS   = 200
	kubeBurst = 400
)

// openKube makes a backend on the Kubernetes API server of the kubeconfig
// at path (its current context), whose kubestore keeps its Leases in
// namespace ("" for the context's namespace, or "default") under names that
// start with prefix. The kubeconfig's credentials never appear in messages:
// only its path, the server's URL and the namespace do.
func openKube(_ context.Context, name, path, namespace, prefix string, timeout time.Duration) (*backend, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, usagef("%s: kubeconfig %s: %v", name, path, err)
	}
	if namespace == "" {
		if namespace, _, err = loader.Namespace(); err != nil || namespace == "" {
			namespace = "default"
		}
	}
	cfg.QPS, cfg.Burst = kubeQPS, kubeBurst
	// New refuses a bad --kube-namespace or --kube-prefix, or a kubeconfig
	// whose TLS material does not load.
	st, err := kubestore.New(cfg, namespace, kubestore.WithNamePrefix(prefix))
	if err != nil {
		return nil, usagef("%s: %v (kubeconfig %s)", name, err, path)
	}
	b := &backend{kind: "kube", where: cfg.Host + " namespace " + namespace, timeout: timeout, store: st, kubeNamespace: namespace}
	b.close = func() { st.Close() }
	// A Lease lasts whole seconds, counted by each observer from its own
	// first look: the drill fits its TTL to that.
	b.leaseTTL = func(_ context.Context, ttl time.Duration) (time.Duration, error) {
		return (ttl + time.Second - 1) / time.Second * time.Second, nil
	}
	return b, nil
}
