package kubestore_test

import (
	"context"
	"log"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/kubestore"
)

// A Client on the Leases of the namespace the pod runs in, with the pod's
// service account. (Compiled, not run: it needs a cluster.) Outside a pod,
// LoadKubeconfig reads a kubeconfig; with client-go, pass
// kubestore.Config{Server: cfg.Host, Client: hc}, hc from
// rest.HTTPClientFor(cfg).
func Example() {
	cfg, namespace, err := kubestore.InCluster()
	if err != nil {
		log.Fatal(err)
	}
	store, err := kubestore.New(cfg, namespace)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // stops the release watches

	locks := leasehold.New(store)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := locks.Acquire(ctx, "job:42", 15*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	// Pass lease.Fence() with every write the lock protects.
	log.Printf("job:42 is ours, fence %d", lease.Fence())
}
