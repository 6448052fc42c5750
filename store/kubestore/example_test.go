package kubestore_test

import (
	"context"
	"log"
	"time"

	"k8s.io/client-go/rest"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store/kubestore"
)

// A Client on the Leases of the namespace the pod runs in. (Compiled, not
// run: it needs a cluster.)
func Example() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	// client-go's default budget (5 requests/s) suits a controller, not locks.
	cfg.QPS, cfg.Burst = 100, 200
	store, err := kubestore.New(cfg, "my-namespace")
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
